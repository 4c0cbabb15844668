"""A signal stops a run and every process of it (no orphaned ranks); one runner per run dir.

The signal tests start the real CLI with a marker in its environment, wait until the
task's torchrun ranks run, signal the CLI, and then read the process table: no
process carrying the marker may survive (the kernel and torchrun each start their own
session, so this is exactly what used to leak).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from hpcbench.cli import main
from hpcbench.report.aggregate import load_sources
from hpcbench.run.progress import Progress
from hpcbench.run.lock import LOCK_NAME, RunDirLock, RunDirLocked
from hpcbench.run.rundir import (STALE, TaskStatus, effective_state, prepare_run_dir, read_status, set_aside_attempt,
                                 task_dir, tasks_to_resume, write_status)
from hpcbench.run.suite import parse_suite

MARKER = "HPCBENCH_TEST_MARKER"

#: A collectives task that runs for minutes, then a task that must never start.
LONG_SUITE = """\
name: signals
tasks:
  - experiment: collectives
    params: {nodes: 1, ranks_per_node: 2, ops: [all_reduce], groups: [world], min_bytes: 1K, max_bytes: 64K,
             warmup_iters: 0, iters: 100000, check: false}
  - experiment: environment
"""


def marked_processes(marker: str) -> list[psutil.Process]:
    """Live (non-zombie) processes whose environment carries ``MARKER=marker``."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(MARKER) == marker and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def _cmdline(p: psutil.Process) -> str:
    """A process's command line; "" once it has ended (a zombie or gone between listing and reading)."""
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def ranks_running(marker: str) -> bool:
    return sum("hpcbench rank" in cmd and "torch.distributed.run" not in cmd
               for cmd in map(_cmdline, marked_processes(marker))) >= 2


def start_cli(args: list[str], tmp_path: Path, marker: str) -> subprocess.Popen:
    env = {**os.environ, MARKER: marker}
    return subprocess.Popen([sys.executable, "-m", "hpcbench", *args], cwd=tmp_path, env=env,
                            stdout=open(tmp_path / "stdout.txt", "w"), stderr=open(tmp_path / "stderr.txt", "w"))


@pytest.mark.parametrize("signals,code", [
    ([signal.SIGINT], 130),
    ([signal.SIGTERM], 143),
    ([signal.SIGINT, signal.SIGINT], 130),  # the second one kills at once
], ids=["sigint", "sigterm", "sigint-twice"])
def test_signal_stops_the_run_and_every_process_of_it(tmp_path, signals, code):
    (tmp_path / "s.yaml").write_text(LONG_SUITE)
    marker = uuid.uuid4().hex
    proc = start_cli(["suite", "s.yaml", "--run-dir", "R"], tmp_path, marker)
    try:
        wait_for(lambda: ranks_running(marker), 120, "the collectives ranks to start")
        for sig in signals:
            proc.send_signal(sig)
            time.sleep(0.2)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = (tmp_path / "stdout.txt").read_text()
    err = (tmp_path / "stderr.txt").read_text()
    assert rc == code, (out, err)
    # Nothing of the run survives: kernel, torchrun and ranks are gone.
    wait_for(lambda: not marked_processes(marker), 5, "the run's processes to end (SIGKILL delivery)")
    run_dir = tmp_path / "R"
    assert not (run_dir / LOCK_NAME).exists()
    coll = read_status(task_dir(run_dir, "collectives.default.r0") / "status.json")
    env = read_status(task_dir(run_dir, "environment.default.r0") / "status.json")
    assert env.state == "pending" and env.started is None  # queued: never started
    assert not (run_dir / "attempts").exists()
    if len(signals) == 1:
        # The clean path: the running task is marked with the signal and the time, and
        # the summary names it and the resume command.
        assert coll.state == "interrupted" and coll.finished
        assert signal.Signals(signals[0]).name in coll.error
        assert "1 interrupted, 1 pending" in out
        assert "hpcbench suite resume R" in out
    else:
        assert "second signal" in err


def test_status_shows_a_task_whose_runner_died_as_stale(tmp_path, capsys):
    suite = parse_suite({"name": "s", "tasks": [{"experiment": "environment"}]})
    run_dir = tmp_path / "R"
    prepare_run_dir(run_dir, suite, "local")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    st = TaskStatus.for_task(suite.tasks[0])
    st.state, st.started, st.host, st.pid, st.pid_started = "running", "x", socket.gethostname(), dead.pid, 1.0
    write_status(run_dir, st)
    assert effective_state(st)[0] == STALE
    assert main(["status", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "stale" in out and f"pid {dead.pid}" in out
    # The report lists it with the failed tasks, with the reason, not as running forever.
    (source,) = load_sources([run_dir], warn=lambda msg: None)
    (task,) = source.tasks
    assert task.state == STALE and f"pid {dead.pid}" in task.error
    # A live one is not stale.
    st.pid, st.pid_started = os.getpid(), psutil.Process().create_time()
    assert effective_state(st) == ("running", None)


def test_lock_refuses_a_second_runner_and_takes_over_a_stale_one(tmp_path, capsys):
    suite = parse_suite({"name": "s", "tasks": [{"experiment": "environment"}]})
    run_dir = tmp_path / "R"
    prepare_run_dir(run_dir, suite, "local")
    with RunDirLock(run_dir):
        holder = json.loads((run_dir / LOCK_NAME).read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        # `suite resume` while the run is live: refused, naming the holder; nothing moved.
        assert main(["suite", "resume", str(run_dir)]) == 2
        assert f"pid {os.getpid()} on {socket.gethostname()}" in capsys.readouterr().err
        assert not (run_dir / "attempts").exists()
        with pytest.raises(RunDirLocked):
            RunDirLock(run_dir).acquire()
    assert not (run_dir / LOCK_NAME).exists()

    # A lock left by a killed runner (its pid is gone) is stale: taken over, with a message.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run_dir / LOCK_NAME).write_text(json.dumps({"host": socket.gethostname(), "pid": dead.pid, "started": 1.0,
                                                 "since": "then", "command": "hpcbench suite x"}))
    with RunDirLock(run_dir) as lock:
        assert lock.held
    assert "stale lock" in capsys.readouterr().err

    # Held on another host: never guessed stale.
    (run_dir / LOCK_NAME).write_text(json.dumps({"host": "elsewhere", "pid": 1, "started": 1.0,
                                                 "since": "then", "command": "hpcbench suite x"}))
    with pytest.raises(RunDirLocked, match="pid 1 on elsewhere"):
        RunDirLock(run_dir).acquire()


def test_resume_reruns_interrupted_and_never_started_without_empty_attempts(tmp_path):
    suite = parse_suite({"name": "s", "tasks": [{"experiment": "environment"},
                                                {"experiment": "collectives", "params": {"iters": 1}}]})
    run_dir = tmp_path / "R"
    prepare_run_dir(run_dir, suite, "local")
    first, second = suite.tasks
    st = TaskStatus.for_task(first)
    st.state, st.started = "interrupted", "x"
    write_status(run_dir, st)
    (task_dir(run_dir, first.task_id) / "notebook.ipynb").write_text("{}")
    write_status(run_dir, TaskStatus.for_task(second))  # pending, never started
    assert [t.task_id for t in tasks_to_resume(run_dir, suite)] == [first.task_id, second.task_id]
    assert set_aside_attempt(run_dir, first.task_id) == 2
    assert (run_dir / "attempts" / first.task_id / "1" / "notebook.ipynb").is_file()
    # The never-started task keeps its attempt number and leaves no empty attempts folder.
    assert set_aside_attempt(run_dir, second.task_id) == 1
    assert not (run_dir / "attempts" / second.task_id).exists()


def test_progress_is_plain_lines_when_not_a_terminal(tmp_path, monkeypatch):
    # SLURM logs and pipes get one time-stamped line per event, never a \r redraw.
    import io

    import hpcbench.run.progress as progress_mod

    stream = io.StringIO()
    display = Progress(tmp_path, 2, "suite s", stream=stream)  # StringIO is not a terminal
    assert display._bar is None
    tdir = task_dir(tmp_path, "t.default.r0")
    tdir.mkdir(parents=True)
    display.started("t.default.r0")
    (tdir / "progress.log").write_text("all_reduce done (5 sizes)\nhalf a li")
    display.tick(["t.default.r0"])
    display.tick(["t.default.r0"])  # nothing new: nothing printed twice
    monkeypatch.setattr(progress_mod, "HEARTBEAT_S", 0.0)
    display.tick(["t.default.r0"])
    st = TaskStatus(task_id="t.default.r0", experiment="t", variant="default", repetition=0, params={},
                    state="done", duration_s=1.5)
    display.done(st)
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert [ln.split("] ", 1)[1] for ln in lines] == [
        "t.default.r0: started", "t.default.r0: all_reduce done (5 sizes)",
        "0/2 tasks finished; running: t.default.r0", "t.default.r0: done in 1.5 s  [1/2 tasks]"]
