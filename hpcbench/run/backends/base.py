"""What a backend is: something that runs a list of tasks into a run dir."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from hpcbench.run.rundir import TaskStatus
from hpcbench.run.suite import TaskSpec


class Backend:
    """Runs a list of tasks into a run dir; subclasses fill in :meth:`run_tasks`."""

    name = "base"

    def check(self, options: dict[str, Any]) -> None:
        """Raise before anything is written when this backend cannot run here."""

    def run_tasks(self, tasks: list[TaskSpec], run_dir: Path, suite: str, *, jobs: int | None,
                  on_done: Callable[[TaskStatus], None], options: dict[str, Any], bar: Any) -> list[TaskStatus]:
        raise NotImplementedError
