"""Run a suite's tasks: each task is one notebook executed by papermill.

Per task, ``RUN_DIR/tasks/<task_id>/`` receives the executed notebook, the records
(written by the notebook through :class:`hpcbench.run.task.Task`), logs, and a
``status.json`` (pending, running, done, failed with the error and the cell, or
interrupted). A failed task does not stop the others; :func:`run_suite` returns the
statuses and the CLI's exit code says whether any failed. A signal stops the whole
run cleanly (:mod:`hpcbench.run.interrupt`) and raises :class:`RunInterrupted`; a
run dir is used by one runner at a time (:mod:`hpcbench.run.lock`).

Backends live in :mod:`hpcbench.run.backends`; run-dir I/O in :mod:`hpcbench.run.rundir`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from hpcbench.core.errors import HpcbenchError
from hpcbench.dist.binding import BIND_ENV
from hpcbench.run.backends import BACKENDS
from hpcbench.run.backends.base import RunContext
from hpcbench.run.execute import check_kernel
from hpcbench.run.interrupt import RunInterrupted, SignalGuard
from hpcbench.run.limits import check_limits
from hpcbench.run.lock import LOCK_NAME, Holder, RunDirLock, read_holder
from hpcbench.run.progress import Progress
from hpcbench.run.rundir import (STALE, TaskStatus, effective_state, load_run, prepare_run_dir, read_status, read_statuses, set_aside_attempt,
                                 task_dir, tasks_to_resume, write_status)
from hpcbench.run.suite import Suite


def retry_options(backend: str, options: dict[str, Any] | None, retries: int) -> dict[str, Any] | None:
    """``options`` carrying ``retries`` for a backend that resubmits failed jobs.

    Raises:
        HpcbenchError: ``retries`` below 0, or above 0 with a backend that runs each task once.
    """
    impl = BACKENDS.get(backend)
    if not retries:
        return options
    from hpcbench.fault.retry import MAX_TRIES

    if not 0 <= retries < MAX_TRIES:
        raise HpcbenchError(f"--retries {retries}: between 0 and {MAX_TRIES - 1}")
    if not impl.retries_supported:
        raise HpcbenchError(f"--retries {retries}: only the SLURM backend resubmits failed jobs (use --backend slurm); "
                            f"the {backend} backend runs each task once")
    return {**(options or {}), "retries": retries}


def resume_suite(run_dir: Path, *, backend: str | None = None, jobs: int | None = None,
                 progress: bool = True, options: dict[str, Any] | None = None,
                 oversubscribe: bool = False, retries: int = 0) -> list[TaskStatus]:
    """Rerun only the failed, interrupted or missing tasks of ``run_dir``, each as a new attempt.

    Holds the run dir's lock (a second runner on a live run dir is refused), and
    leaves alone tasks whose SLURM jobs are still queued or running. The tasks to rerun
    pass the limits of :mod:`hpcbench.run.limits` first (``oversubscribe``, or the suite's own).
    ``retries`` as for :func:`run_suite`.
    """
    run_dir = Path(run_dir)
    suite, info = load_run(run_dir)
    backend = backend or info.get("backend", "local")
    impl = BACKENDS.get(backend)
    options = retry_options(backend, options, retries)
    with RunDirLock(run_dir):
        todo = tasks_to_resume(run_dir, suite)
        live = impl.live_tasks([s for s in read_statuses(run_dir) if s.task_id in {t.task_id for t in todo}])
        for task_id, state in sorted(live.items()):
            print(f"{task_id}: its SLURM job is still {state}; not submitted again", file=sys.stderr)
        todo = [t for t in todo if t.task_id not in live]
        if not todo:
            print(f"{run_dir}: no task to resume (every task is done{' or still queued' if live else ''})",
                  file=sys.stderr)
            return []
        todo_suite = Suite(suite.name, suite.description, todo, suite.source, suite.oversubscribe)
        check_limits(todo_suite, backend, options, oversubscribe=oversubscribe)  # before any attempt is moved
        for spec in todo:
            attempt = set_aside_attempt(run_dir, spec.task_id)
            status = TaskStatus.for_task(spec)
            status.attempt = attempt
            write_status(run_dir, status)
        return _run_tasks(todo_suite, run_dir,
                          backend=backend, jobs=jobs, progress=progress, options=options)


def run_suite(suite: Suite, run_dir: Path, *, backend: str = "local", jobs: int | None = None,
              progress: bool = True, options: dict[str, Any] | None = None,
              oversubscribe: bool = False, retries: int = 0) -> list[TaskStatus]:
    """Run every task of ``suite`` into ``run_dir``; return the statuses in suite order.

    Args:
        jobs: tasks at once (local default 1; SLURM: the array's ``%M``, default no cap).
        options: backend options (SLURM: partition, account, time, ...).
        oversubscribe: run locally even with more ranks than cores (as ``suite.oversubscribe``).
        retries: resubmit a task whose job failed (node lost, rank killed) up to this many times,
            repairing data and checkpoints first (SLURM backend only; :mod:`hpcbench.fault.retry`).

    Raises:
        LimitError: a task exceeds the cores or memory it would get (:mod:`hpcbench.run.limits`);
            nothing is written.
        HpcbenchError: ``retries`` with a backend that cannot resubmit; nothing is written.
    """
    impl = BACKENDS.get(backend)
    options = retry_options(backend, options, retries)
    impl.check(options or {})
    check_limits(suite, backend, options, oversubscribe=oversubscribe)
    prepare_run_dir(run_dir, suite, backend)
    with RunDirLock(run_dir):
        for spec in suite.tasks:
            write_status(run_dir, TaskStatus.for_task(spec))
        return _run_tasks(suite, run_dir, backend=backend, jobs=jobs, progress=progress, options=options)


def _run_tasks(suite: Suite, run_dir: Path, *, backend: str, jobs: int | None, progress: bool,
               options: dict[str, Any] | None) -> list[TaskStatus]:
    """Run ``suite.tasks`` on ``backend`` under the signal guard (caller holds the lock).

    Raises:
        RunInterrupted: after a SIGINT/SIGTERM/SIGUSR1 stopped the run cleanly; it
            carries the statuses of every task of ``suite`` as they ended.
    """
    impl = BACKENDS.get(backend)
    shown_dir = run_dir
    warning = check_kernel()
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    # Absolute: papermill changes the process's working directory while a notebook runs,
    # and the other threads (progress, other tasks) must not follow it.
    run_dir = Path(run_dir).absolute()
    display = Progress(run_dir, len(suite.tasks), f"suite {suite.name}", enabled=progress)
    try:
        with SignalGuard() as stop, _binding(suite.bind):
            statuses = impl.run_tasks(suite.tasks, RunContext(run_dir, suite.name, jobs, options or {}, stop,
                                                              display))
    finally:
        display.close()
    if stop.requested:
        ended = {s.task_id: s for s in statuses}
        # Tasks never started keep their pending status file: resume runs them.
        every = [ended.get(t.task_id) or read_status(task_dir(run_dir, t.task_id) / "status.json")
                 for t in suite.tasks]
        raise RunInterrupted(stop.signum, every, shown_dir)
    return statuses


@contextlib.contextmanager
def _binding(mode: str | None) -> Iterator[None]:
    """$HPCBENCH_BIND set to the suite's ``bind`` while its tasks run: local tasks inherit it, and sbatch
    passes this environment on to the jobs, so each rank binds by the node's plan. None leaves it as it is."""
    if mode is None:
        yield
        return
    saved = os.environ.get(BIND_ENV)
    os.environ[BIND_ENV] = mode
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(BIND_ENV, None)
        else:
            os.environ[BIND_ENV] = saved


@dataclass
class RunState:
    suite: str
    backend: str
    holder: Holder | None  # the live runner holding the run dir's lock, if any
    tasks: list[tuple[TaskStatus, str, str | None]]  # (status file, state shown, why it differs)


def run_state(run_dir: Path) -> RunState:
    """Each task's state as it really is: a ``running`` task whose process is gone on this
    host, or whose SLURM job has left the queue, is shown ``stale`` with the reason."""
    run_dir = Path(run_dir)
    suite, info = load_run(run_dir)
    backend = info.get("backend", "local")
    statuses = {s.task_id: s for s in read_statuses(run_dir)}
    holder = read_holder(run_dir / LOCK_NAME)
    if holder is not None and holder.alive() is False:
        holder = None
    live = BACKENDS.get(backend).live_tasks(list(statuses.values())) if backend in BACKENDS else {}
    rows = []
    for spec in suite.tasks:
        st = statuses.get(spec.task_id) or TaskStatus.for_task(spec)
        shown, why = effective_state(st)
        if shown == "running" and st.job_id and backend == "slurm" and st.task_id not in live \
                and shutil.which("squeue"):
            shown, why = STALE, f"status says running, but SLURM job {st.job_id} is no longer queued or running"
        rows.append((st, shown, why))
    return RunState(suite.name, backend, holder, rows)
