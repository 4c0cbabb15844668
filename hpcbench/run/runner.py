"""Run a suite's tasks: each task is one notebook executed by papermill.

Per task, ``RUN_DIR/tasks/<task_id>/`` receives the executed notebook, the records
(written by the notebook through :class:`hpcbench.run.task.Task`), logs, and a
``status.json`` (pending, running, done or failed with the error and the cell).
A failed task does not stop the others; :func:`run_suite` returns the statuses and
the CLI's exit code says whether any failed.

Backends live in :mod:`hpcbench.run.backends`; run-dir I/O in :mod:`hpcbench.run.rundir`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hpcbench.run.backends import BACKENDS
from hpcbench.run.execute import check_kernel
from hpcbench.run.rundir import TaskStatus, load_run, prepare_run_dir, set_aside_attempt, tasks_to_resume, write_status
from hpcbench.run.suite import Suite


def resume_suite(run_dir: Path, *, backend: str | None = None, jobs: int | None = None,
                 progress: bool = True, options: dict[str, Any] | None = None) -> list[TaskStatus]:
    """Rerun only the failed or missing tasks of ``run_dir``, each as a new attempt."""
    suite, info = load_run(run_dir)
    todo = tasks_to_resume(run_dir, suite)
    if not todo:
        print(f"{run_dir}: every task is done; nothing to resume", file=sys.stderr)
        return []
    for spec in todo:
        attempt = set_aside_attempt(run_dir, spec.task_id)
        status = TaskStatus.for_task(spec)
        status.attempt = attempt
        write_status(run_dir, status)
    return _run_tasks(Suite(suite.name, suite.description, todo, suite.source), run_dir,
                      backend=backend or info.get("backend", "local"), jobs=jobs, progress=progress,
                      options=options)


def run_suite(suite: Suite, run_dir: Path, *, backend: str = "local", jobs: int | None = None,
              progress: bool = True, options: dict[str, Any] | None = None) -> list[TaskStatus]:
    """Run every task of ``suite`` into ``run_dir``; return the statuses in suite order.

    Args:
        jobs: tasks at once (local default 1; SLURM: the array's ``%M``, default no cap).
        options: backend options (SLURM: partition, account, time, ...).
    """
    impl = BACKENDS.get(backend)
    impl.check(options or {})
    prepare_run_dir(run_dir, suite, backend)
    for spec in suite.tasks:
        write_status(run_dir, TaskStatus.for_task(spec))
    return _run_tasks(suite, run_dir, backend=backend, jobs=jobs, progress=progress, options=options)


def _run_tasks(suite: Suite, run_dir: Path, *, backend: str, jobs: int | None, progress: bool,
               options: dict[str, Any] | None) -> list[TaskStatus]:
    impl = BACKENDS.get(backend)
    warning = check_kernel()
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    from tqdm.auto import tqdm

    bar = tqdm(total=len(suite.tasks), desc=f"suite {suite.name}", unit="task", disable=not progress,
               file=sys.stderr)
    failed = 0

    def on_done(st: TaskStatus) -> None:
        nonlocal failed
        failed += st.state == "failed"
        took = f" in {st.duration_s:.1f} s" if st.duration_s is not None else ""
        msg = f"{st.task_id}: {st.state}{took}"
        if st.error:
            msg += f" -- {st.error.splitlines()[0][:200]}"
        bar.write(msg, file=sys.stderr)
        bar.set_postfix(failed=failed)
        bar.update(1)

    try:
        return impl.run_tasks(suite.tasks, run_dir, suite.name, jobs=jobs, on_done=on_done,
                              options=options or {}, bar=bar)
    finally:
        bar.close()
