"""Suites: parsing and validation errors, and the local backend running tasks into a run dir."""

import json
import subprocess
import sys

import pytest

from hpcbench.core.errors import SuiteError
from hpcbench.run.rundir import read_statuses
from hpcbench.run.runner import run_suite
from conftest import broken_notebooks
from hpcbench.run.suite import load_suite, parse_suite, shipped_suites


def test_demo_suite_is_shipped_and_expands():
    assert "demo" in shipped_suites()
    suite = load_suite("demo")
    ids = [t.task_id for t in suite.tasks]
    assert ids[0] == "environment.default.r0"
    assert "collectives.two_nodes_2x2.r1" in ids
    spec = next(t for t in suite.tasks if t.task_id == "collectives.two_nodes_2x2.r0")
    assert spec.params["nodes"] == 2 and spec.params["max_bytes"] == 4 << 20  # "4M" resolved


@pytest.mark.parametrize("data,needle", [
    ({"tasks": [{"experiment": "nosuch"}]}, "unknown experiment 'nosuch'; registered: advisor, affinity, batch_scaling, collectives"),
    ({"tasks": [{"experiment": "collectives", "params": {"itres": 3}}]}, "variant 'default': CollectivesConfig: unknown parameter(s) ['itres']"),
    ({"tasks": [{"experiment": "collectives", "variants": {"x": {"iters": 0}}}]}, "variant 'x': CollectivesConfig.iters: 0 is out of range"),
    ({"tasks": [{"experiment": "collectives", "variants": {"a b": {}}}]}, "variant name 'a b'"),
    ({"tasks": [{"experiment": "environment"}, {"experiment": "environment"}]}, "appears twice"),
    ({"tasks": []}, "non-empty list"),
    ({"tasks": [{"experiment": "environment", "repeat": 0}]}, "repeat: 0 must be an integer >= 1"),
    ({"task": []}, "unknown key(s) ['task']"),
])
def test_bad_suites_name_the_entry(data, needle):
    with pytest.raises(SuiteError) as exc:
        parse_suite(data, "my.yaml")
    assert needle in str(exc.value) and "my.yaml" in str(exc.value)


def test_missing_suite_file_and_unknown_name(tmp_path):
    with pytest.raises(SuiteError, match="does not exist"):
        load_suite(tmp_path / "nope.yaml")
    with pytest.raises(SuiteError, match="shipped suites"):
        load_suite("nosuchsuite")
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks: [unclosed")
    with pytest.raises(SuiteError, match="bad.yaml: not valid YAML"):
        load_suite(bad)


def test_failed_task_does_not_stop_others(tmp_path, monkeypatch):
    # The nccl task fails for real on a machine without GPUs; the other one must still run. The limits
    # refuse an NCCL task where the driver lists no GPU before anything starts; here they are told of
    # two (a node whose driver lists GPUs CUDA cannot use, or a SLURM node the limits cannot see into),
    # so the task gets as far as NCCL's own failure.
    from hpcbench.run import limits

    monkeypatch.setattr(limits, "cuda_devices", lambda root=limits.GPU_SOURCE: 2)
    suite = parse_suite({"name": "mixed", "tasks": [{
        "experiment": "collectives",
        "params": {"ops": "all_reduce", "groups": "world", "max_bytes": "1K", "iters": 1, "warmup_iters": 0},
        "variants": {"nccl_on_cpu": {"backend": "nccl"}, "gloo": {"backend": "gloo"}},
    }]})
    run_dir = tmp_path / "run"
    statuses = run_suite(suite, run_dir, jobs=2, progress=False)
    by_id = {s.task_id: s for s in statuses}
    assert by_id["collectives.gloo.r0"].state == "done"
    # The workers' progress lines reach the task's progress.log, which the command line tails.
    progress = (run_dir / "tasks" / "collectives.gloo.r0" / "progress.log").read_text()
    assert "all_reduce done" in progress
    bad = by_id["collectives.nccl_on_cpu.r0"]
    assert bad.state == "failed" and bad.cell is not None and "LaunchError" in bad.error
    assert (run_dir / "tasks" / bad.task_id / "notebook.ipynb").is_file()
    assert {s.state for s in read_statuses(run_dir)} == {"done", "failed"}
    run = json.loads((run_dir / "run.json").read_text())
    assert run["suite"] == "mixed" and len(run["tasks"]) == 2
    # nothing already written is lost: the same run dir is refused
    with pytest.raises(Exception, match="already exists"):
        run_suite(suite, run_dir, progress=False)


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "hpcbench", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_cli_bad_input_exits_2_with_a_message(tmp_path):
    r = _cli("run", "collectives", "-p", "itres=3", cwd=tmp_path)
    assert r.returncode == 2 and "unknown parameter(s) ['itres']" in r.stderr and "iters" in r.stderr
    r = _cli("run", "nosuch", cwd=tmp_path)
    assert r.returncode == 2 and "unknown experiment 'nosuch'; registered: advisor, affinity, batch_scaling, collectives" in r.stderr
    r = _cli("run", "collectives", "-p", "max_bytes=lots", cwd=tmp_path)
    assert r.returncode == 2 and "CollectivesConfig.max_bytes" in r.stderr
    r = _cli("report", str(tmp_path / "missing-run"), cwd=tmp_path)
    assert r.returncode == 2 and "missing-run" in r.stderr
    assert not (tmp_path / "results").exists()  # nothing started


def test_cli_list_and_params(tmp_path):
    r = _cli("list", cwd=tmp_path)
    assert r.returncode == 0 and "collectives" in r.stdout and "demo" in r.stdout
    r = _cli("params", "collectives", cwd=tmp_path)
    assert r.returncode == 0 and "step_factor = 4" in r.stdout


def test_cli_run_one_task(tmp_path):
    r = _cli("run", "collectives", "-p", "ops=all_reduce", "-p", "groups=world", "-p", "max_bytes=1K",
             "-p", "iters=2", "--run-dir", str(tmp_path / "run"), "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (st,) = read_statuses(tmp_path / "run")
    assert st.state == "done" and st.params["iters"] == 2


def test_resume_reruns_only_failed_tasks(tmp_path, monkeypatch):
    from hpcbench.run.runner import resume_suite

    suite = parse_suite({"name": "r", "tasks": [
        {"experiment": "environment", "params": {"include_commands": False}},
        {"experiment": "collectives", "params": {"ops": "all_reduce", "groups": "world", "max_bytes": "1K",
                                                 "iters": 1}},
    ]})
    run_dir = tmp_path / "run"
    monkeypatch.setenv("HPCBENCH_NOTEBOOKS", str(broken_notebooks(tmp_path, "00_environment.ipynb")))
    first = {s.task_id: s for s in run_suite(suite, run_dir, progress=False)}
    assert first["environment.default.r0"].state == "failed"
    assert "injected failure" in first["environment.default.r0"].error
    assert first["collectives.default.r0"].state == "done"
    done_before = (run_dir / "tasks" / "collectives.default.r0" / "status.json").read_text()

    monkeypatch.delenv("HPCBENCH_NOTEBOOKS")
    again = resume_suite(run_dir, progress=False)
    assert [s.task_id for s in again] == ["environment.default.r0"]
    assert again[0].state == "done" and again[0].attempt == 2
    # the done task was not touched; the failed attempt was kept aside, not lost
    assert (run_dir / "tasks" / "collectives.default.r0" / "status.json").read_text() == done_before
    kept = run_dir / "attempts" / "environment.default.r0" / "1" / "notebook.ipynb"
    assert kept.is_file()
    assert resume_suite(run_dir, progress=False) == []
