"""What hpcbench leaves on disk: file modes under a umask, report folders, interactive results.

Results must be readable (or not) as the user's umask says, reports must swap in whole, and
hand runs must not pile up. Run dirs are built with RecordWriter and the run dir module, not by
running notebooks. Two tests build a full report (a LocalCluster each, a few seconds);
the refusals are checked with the dask client replaced by one that fails the test if used.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from hpcbench.cli import main
from hpcbench.core import atomic
from hpcbench.core.errors import ConfigError
from hpcbench.core.results import RecordContext, RecordWriter, find_record_files
from hpcbench.report import build_report
from hpcbench.report import html as report_html
from hpcbench.report.publish import REPORT_JSON, write_report_manifest
from hpcbench.run.rundir import TaskStatus, write_status
from hpcbench.run.suite import TaskSpec
from hpcbench.run.task import CONTEXT_DEFAULTS, RESULTS_ENV, Task, interactive_dir, results_root

from conftest import REPO


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@contextlib.contextmanager
def _umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def make_run(root: Path, name: str, *, records: bool = True) -> Path:
    """A run dir with one done task, its status written by the run dir module."""
    run = root / name
    # An experiment without a summary of its own: the report's generic table.
    spec = TaskSpec(experiment="dataloader", variant="base", repetition=0, params={"workers": 2},
                    task_id="dataloader.base.r0")
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": name, "suite": "outputs", "host": "h"}))
    status = TaskStatus.for_task(spec)
    status.state = "done" if records else "running"
    write_status(run, status)
    if records:
        ctx = RecordContext(run_id=name, suite="outputs", experiment="dataloader", variant="base",
                            task_id=spec.task_id, node="n1")
        with RecordWriter(run / "tasks" / spec.task_id / "records" / "rank0.parquet", ctx) as w:
            for step, value in enumerate((10.0, 20.0)):
                w.add("samples_per_s", value, "1/s", step=step, labels={"workers": 2})
    return run


@pytest.fixture
def no_dask(monkeypatch):
    """Any dask cluster started from here on fails the test: refusals come before the work."""
    @contextlib.contextmanager
    def forbidden(*args, **kwargs):
        pytest.fail("a dask cluster was started before the input was refused")
        yield

    monkeypatch.setattr(report_html, "_dask_client", forbidden)


# -- 7: modes follow the umask ----------------------------------------------------

@pytest.mark.parametrize("mask, expected", [(0o002, 0o664), (0o022, 0o644)])
def test_written_files_follow_the_umask(tmp_path, mask, expected):
    with _umask(mask):
        run = make_run(tmp_path, "run")
        write_report_manifest(tmp_path / "report", {"schema": 1, "title": "t", "runs": []})
    record = run / "tasks" / "dataloader.base.r0" / "records" / "rank0.parquet"
    status = run / "tasks" / "dataloader.base.r0" / "status.json"
    for path in (record, status, tmp_path / "report" / REPORT_JSON):
        assert _mode(path) == expected, path
    assert not [p for p in tmp_path.rglob(".*") if p.is_file()]  # no temporary file left


def test_umask_is_read_without_proc_too(tmp_path, monkeypatch):
    """The fallback sets and restores the umask, once per process."""
    monkeypatch.setattr(atomic, "PROC_STATUS", tmp_path / "no-such-status")
    monkeypatch.setattr(atomic, "_fallback_umask", None)
    with _umask(0o027):
        assert atomic.current_umask() == 0o027
        assert atomic.file_mode() == 0o640
        assert os.umask(0o027) == 0o027  # left as it was


# -- 8: report refusals, duplicates, the folder swapped in whole -------------------

def test_empty_folder_is_refused_with_exit_2(tmp_path, no_dask, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"run directory {empty}: not an hpcbench run directory" in err and "nothing to report" in err
    assert not (tmp_path / "out").exists()
    (empty / "run.json").write_text(json.dumps({"run_id": "x"}))
    assert main(["report", str(empty), "--out", str(tmp_path / "out")]) == 2
    assert "a run directory without any task" in capsys.readouterr().err


def test_out_that_is_a_file_or_a_foreign_folder_is_refused(tmp_path, no_dask, capsys):
    run = make_run(tmp_path, "run")
    a_file = tmp_path / "index.html"
    a_file.write_text("mine")
    assert main(["report", str(run), "--out", str(a_file)]) == 2
    assert f"report folder {a_file} is a file" in capsys.readouterr().err
    foreign = tmp_path / "thesis"
    foreign.mkdir()
    (foreign / "index.html").write_text("my thesis")
    assert main(["report", str(run), "--out", str(foreign)]) == 2
    assert f"report folder {foreign} is not empty and holds no report.json" in capsys.readouterr().err
    assert [p.name for p in foreign.iterdir()] == ["index.html"] and a_file.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.html", "run", "thesis"]  # no hidden leftovers


def test_same_run_dir_twice_is_counted_once_and_files_follow_the_umask(tmp_path, monkeypatch):
    """``R`` and ``./R/``: one source, with a warning. Also the modes of a report under umask 002."""
    make_run(tmp_path, "R")
    monkeypatch.chdir(tmp_path)
    warnings, progress = [], []
    with _umask(0o002):
        index = build_report(["R", "./R/"], "out", warn=warnings.append, progress=progress.append)
    assert [w for w in warnings if "counted once" in w] == [
        f"run directory ./R/ is R again (both are {tmp_path.resolve() / 'R'}); it is counted once"]
    assert "loading 1 records files in 1 partition(s) from 1 source(s)" in progress[0]
    manifest = json.loads((tmp_path / "out" / REPORT_JSON).read_text())
    assert [r["label"] for r in manifest["runs"]] == ["R"]
    assert _mode(index) == _mode(tmp_path / "out" / REPORT_JSON) == 0o664
    assert _mode(tmp_path / "out") == 0o775


def test_report_folder_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    """A failing rebuild leaves the previous report; a good one replaces it (and warns: no records)."""
    out = tmp_path / "reports" / "R"
    out.mkdir(parents=True)
    (out / "index.html").write_text("previous report")
    (out / REPORT_JSON).write_text(json.dumps({"schema": 1, "title": "previous", "runs": []}))
    (out / "stale.png").write_text("from the previous report")
    run = make_run(tmp_path, "R", records=False)

    @contextlib.contextmanager
    def no_cluster(*args, **kwargs):
        yield None

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(report_html, "_dask_client", no_cluster)
        m.setattr(report_html, "aggregate", interrupted)
        with pytest.raises(KeyboardInterrupt):
            build_report([run], out, warn=lambda _: None, progress=lambda _: None)
    assert (out / "index.html").read_text() == "previous report"
    assert sorted(p.name for p in out.parent.iterdir()) == ["R"]  # the hidden build folder is gone

    warnings = []
    index = build_report([run], out, warn=warnings.append, progress=lambda _: None)
    assert warnings == [f"run directory {run}: none of its 1 task(s) has records to report yet (1 running); "
                        "the report shows their states only"]
    assert index == out / "index.html" and "previous report" not in index.read_text()
    assert sorted(p.name for p in out.iterdir()) == ["index.html", REPORT_JSON]
    assert sorted(p.name for p in out.parent.iterdir()) == ["R"]


# -- 9: interactive results ---------------------------------------------------------

def test_interactive_results_go_to_the_repository_and_are_replaced_per_run(tmp_path, monkeypatch):
    from hpcbench.experiments import EXPERIMENTS

    monkeypatch.chdir(tmp_path)  # a notebook's kernel runs in notebooks/: not where results go
    monkeypatch.delenv(RESULTS_ENV, raising=False)
    assert results_root() == REPO / "results"
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path / "shared-results"))
    exp = EXPERIMENTS.get("environment")
    first = Task.create(exp, {}, dict(CONTEXT_DEFAULTS))
    assert first.out_dir == tmp_path / "shared-results" / "interactive" / "environment.default"
    # The last run had 4 ranks; this one has 2 and must find only its own files.
    for rank in range(4):
        with RecordWriter(first.records_dir / f"collectives-rank{rank}.parquet", first.context) as w:
            w.add("x", 1.0, "")
    second = Task.create(exp, {}, dict(CONTEXT_DEFAULTS))
    assert [p.name for p in find_record_files(second.records_dir)] == ["facts-driver.parquet"]
    assert not (tmp_path / "results").exists()


def test_suite_task_folders_are_never_emptied(tmp_path):
    from hpcbench.experiments import EXPERIMENTS

    out = tmp_path / "run" / "tasks" / "environment.default.r0"
    earlier = out / "records" / "environment-rank0.parquet"
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b"written by this task's worker")
    Task.create(EXPERIMENTS.get("environment"), {}, {**CONTEXT_DEFAULTS, "output_dir": str(out)})
    assert earlier.read_bytes() == b"written by this task's worker"


@pytest.mark.parametrize("task_id", ["../x", "a/b", ".."])
def test_interactive_task_id_must_stay_inside_interactive(task_id, tmp_path, monkeypatch):
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path))
    with pytest.raises(ConfigError, match="task_id"):
        interactive_dir(task_id)


def test_old_notebook_results_are_ignored_by_git():
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    for path in ("notebooks/results/interactive/x/records/a.parquet", "results/interactive/x/config.json"):
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO).returncode == 0, path
