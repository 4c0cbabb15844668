"""`hpcbench report --dask-slurm`: the aggregation's dask workers as SLURM jobs (dask-jobqueue).

On the emulated cluster the two worker jobs land on n1 and n2 (``--exclusive``), reach
the scheduler in the test process over the host bridge, and the report they compute is
the report a LocalCluster computes, byte for byte but for its timestamp. Workers that
never start end in an error naming their jobs, states and logs; a job SLURM refuses
fails at once with SLURM's words. Every job is gone afterwards.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from hpcbench.cli import main
from hpcbench.core.errors import ConfigError, HpcbenchError
from hpcbench.core.metrics import busbw
from hpcbench.core.results import RecordContext, RecordWriter
from hpcbench.report import build_report
from hpcbench.report.dask_slurm import JOB_NAME, DaskSlurmConfig, cluster_kwargs, slurm_dask_client

TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC")


def make_run(root, run_id: str, scale: float) -> object:
    """A small run dir: collectives samples on two nodes over two repetitions, a text row,
    an environment inventory and a failed task (as tests/test_report.py builds them)."""
    run = root / run_id
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": run_id, "suite": "smoke", "created": "2025-01-01T00:00:00Z",
                                              "host": "login", "backend": "slurm", "hpcbench_version": "0.1.0"}))
    for rep in (0, 1):
        task = run / "tasks" / f"collectives.base.r{rep}"
        task.mkdir(parents=True)
        (task / "status.json").write_text(json.dumps({
            "task_id": task.name, "experiment": "collectives", "variant": "base", "repetition": rep,
            "state": "done", "error": None, "duration_s": 5.0, "notebook": None}))
        ctx = RecordContext(run_id=run_id, suite="smoke", experiment="collectives", variant="base",
                            task_id=task.name, repetition=rep, params={"iters": 3})
        for rank, node in enumerate(("n1", "n2")):
            with RecordWriter(task / "records" / f"rank{rank}.parquet",
                              ctx.for_rank(node=node, rank=rank, world_size=2)) as w:
                for size in (1024, 4096):
                    labels = {"op": "all_reduce", "size_bytes": size, "group": "world", "group_index": 0,
                              "group_ranks": 2, "dtype": "float32"}
                    for step, ms in enumerate((1.0, 2.0, 3.0)):
                        t = ms * 1e-3 * size / 1024 * scale * (1 + rep + rank)
                        w.add("time", t, "s", step=step, labels=labels)
                        w.add("busbw", busbw("all_reduce", size, t, 2), "GB/s", step=step, labels=labels)
                    w.add("correct", 1.0, "bool", labels=labels)
                w.add("busbw", None, "GB/s", labels={"op": "all_reduce", "group": "inter"},
                      text="not applicable: one rank per node")
    env = run / "tasks" / "environment.default.r0"
    with RecordWriter(env / "records" / "n1.parquet",
                      RecordContext(run_id=run_id, suite="smoke", experiment="environment", task_id=env.name,
                                    node="n1")) as w:
        w.add("torch.version", None, "", text=f"2.14.1+{run_id}", labels={"category": "torch", "source": "torch"})
        w.add("cpu.logical_cpus", 2, "count", text="2", labels={"category": "cpu", "source": "/proc/cpuinfo"})
    failed = run / "tasks" / "collectives.broken.r0"
    failed.mkdir(parents=True)
    (failed / "status.json").write_text(json.dumps({
        "task_id": failed.name, "experiment": "collectives", "variant": "broken", "repetition": 0,
        "state": "failed", "error": "killed by SLURM (TIMEOUT)", "duration_s": 1.0, "notebook": None}))
    return run


@pytest.fixture
def slurm_env(emulated_cluster, monkeypatch):
    for key, value in emulated_cluster.env().items():
        monkeypatch.setenv(key, value)
    return emulated_cluster


def _queued(job_ids: list[str] | None = None) -> list[str]:
    """Our worker jobs still pending or running (all of them, or those of ``job_ids``)."""
    argv = ["squeue", "-h", "-n", JOB_NAME, "-o", "%i"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    ids = proc.stdout.split()
    return [i for i in ids if job_ids is None or i in job_ids]


def _wait_gone(timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while _queued() and time.monotonic() < deadline:
        time.sleep(0.5)
    return _queued()


def test_cluster_kwargs_and_job_script():
    """No SLURM needed: the job script runs this venv's python, with the site options as #SBATCH lines."""
    from dask_jobqueue.slurm import SLURMJob

    config = DaskSlurmConfig(jobs=3, cores=2, memory="3G", interface="ib0", scheduler_interface="eth0",
                             sbatch_options={"partition": "cpu", "account": "proj", "time": "00:10:00",
                                             "sbatch_args": ["--exclusive"]})
    kwargs = cluster_kwargs(config, "/shared/logs")
    assert kwargs["python"] == sys.executable
    assert kwargs["scheduler_options"] == {"dashboard_address": None, "interface": "eth0"}
    assert kwargs["walltime"] == "00:10:00"
    assert kwargs["job_extra_directives"] == ["--partition=cpu", "--account=proj", "--exclusive"]
    job_kwargs = {k: v for k, v in kwargs.items() if k != "scheduler_options"}
    script = SLURMJob(scheduler="tcp://192.0.2.1:8786", name="w", **job_kwargs).job_script()
    for line in ("#SBATCH -J hpcbench-dask", "#SBATCH --cpus-per-task=2", "#SBATCH --mem=3G",
                 "#SBATCH -t 00:10:00", "#SBATCH --partition=cpu", "#SBATCH --exclusive",
                 "#SBATCH -o /shared/logs/hpcbench-dask-%J.out"):
        assert line in script.splitlines(), (line, script)
    assert f"{sys.executable} -m distributed.cli.dask_worker tcp://192.0.2.1:8786" in script
    assert "--interface ib0" in script

    with pytest.raises(ConfigError, match="sbatch_options.*partition"):
        DaskSlurmConfig(sbatch_options={"partition": "a; rm -rf /"})
    with pytest.raises(ConfigError, match="sbatch_options.*unknown"):
        DaskSlurmConfig(sbatch_options={"nodes": 4})
    with pytest.raises(ConfigError, match="jobs"):
        DaskSlurmConfig(jobs=0)


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_report_on_slurm_workers_equals_local(slurm_env, tmp_path, capsys):
    runs = [make_run(tmp_path / "runs", "cluster-a", 1.0), make_run(tmp_path / "runs", "cluster-b", 0.5)]
    local = build_report(runs, tmp_path / "local", progress=lambda line: None)

    assert main(["report", *map(str, runs), "--out", str(tmp_path / "slurm"), "--dask-slurm",
                 "--dask-slurm-jobs", "2", "--dask-slurm-timeout", "90", "--sbatch-arg=--exclusive"]) == 0
    out = capsys.readouterr().out
    # Both jobs started, one per node (--exclusive), and their workers did the work.
    up = re.search(r"2 dask worker\(s\) up in SLURM job\(s\) (\d+), (\d+) on (.+)$", out, re.MULTILINE)
    assert up, out
    assert up.group(3) == "n1, n2"
    job_ids = [up.group(1), up.group(2)]
    for job_id in job_ids:
        # Beside the report, never in it: publishing the report must not publish them.
        assert (tmp_path / ".slurm.dask-slurm" / f"{JOB_NAME}-{job_id}.err").is_file()

    remote = tmp_path / "slurm" / "index.html"
    assert TIMESTAMP.sub("T", remote.read_text()) == TIMESTAMP.sub("T", local.read_text())
    html = remote.read_text()
    assert "cluster-a" in html and "cluster-b" in html and "killed by SLURM (TIMEOUT)" in html
    assert not _wait_gone(), "the worker jobs outlived the report"


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_workers_that_never_start_are_named_and_cancelled(slurm_env, tmp_path):
    # A job SLURM refuses fails before any waiting, in SLURM's words.
    refused = DaskSlurmConfig(jobs=1, sbatch_options={"partition": "nosuch"}, log_directory=str(tmp_path))
    with pytest.raises(HpcbenchError, match="(?i)SLURM refuses.*invalid partition"):
        with slurm_dask_client(refused, progress=lambda line: None):
            pass
    assert not _queued()

    # A job that stays pending: the error names it, its state and its logs, then it is cancelled.
    pending = DaskSlurmConfig(jobs=1, sbatch_options={"sbatch_args": ["--begin=now+1hour"]},
                              start_timeout_s=3, log_directory=str(tmp_path))
    with pytest.raises(HpcbenchError) as info:
        with slurm_dask_client(pending, progress=lambda line: None):
            pass
    message = str(info.value)
    assert "0 of 1 dask worker(s) connected within 3 s" in message, message
    job = re.search(r"SLURM job (\d+): PENDING \(BeginTime\); logs (\S+) (\S+)", message)
    assert job, message
    assert job.group(2) == str(tmp_path / f"{JOB_NAME}-{job.group(1)}.out")
    assert not _wait_gone(), "the pending worker job was not cancelled"
