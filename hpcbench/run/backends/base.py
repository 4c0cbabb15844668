"""What a backend is: something that runs a list of tasks into a run dir."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcbench.run.interrupt import Stop
from hpcbench.run.progress import Progress
from hpcbench.run.rundir import TaskStatus
from hpcbench.run.suite import TaskSpec


@dataclass
class RunContext:
    """Everything a backend needs besides the tasks: where, how many at once, and the
    two channels back to the runner (the progress display and the stop flag)."""

    run_dir: Path
    suite: str
    jobs: int | None
    options: dict[str, Any]
    stop: Stop
    progress: Progress


class Backend:
    """Runs a list of tasks into a run dir; subclasses fill in :meth:`run_tasks`.

    Contract: every task handed in ends in the returned list with a final state
    (done, failed, interrupted), except tasks never started because a stop was
    requested, which stay ``pending`` and are left out. While ``ctx.stop`` is
    requested a backend starts nothing new and ends what it started.
    """

    name = "base"
    #: Whether ``--retries`` can resubmit a task whose job failed (:mod:`hpcbench.fault.retry`).
    retries_supported = False

    def check(self, options: dict[str, Any]) -> None:
        """Raise before anything is written when this backend cannot run here."""

    def run_tasks(self, tasks: list[TaskSpec], ctx: RunContext) -> list[TaskStatus]:
        raise NotImplementedError

    def live_tasks(self, statuses: list[TaskStatus]) -> dict[str, str]:
        """``{task_id: state}`` of tasks still alive outside this process (e.g. queued
        SLURM jobs), which ``suite resume`` must not start again. None locally: the run
        dir's lock already says whether a local runner is alive."""
        return {}
