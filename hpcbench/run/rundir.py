"""A run directory on disk: ``run.json``, ``suite.json`` and one ``status.json`` per task.

Every backend and the report read and write task states through this module only, so
the layout of ``RUN_DIR/tasks/<task_id>/`` is defined once.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hpcbench import __version__
from hpcbench.core.errors import HpcbenchError
from hpcbench.run.suite import Suite, TaskSpec

STATES = ("pending", "running", "done", "failed")


@dataclass
class TaskStatus:
    task_id: str
    experiment: str
    variant: str
    repetition: int
    params: dict[str, Any]
    state: str = "pending"
    error: str | None = None
    cell: int | None = None
    started: str | None = None
    finished: str | None = None
    duration_s: float | None = None
    notebook: str = "notebook.ipynb"
    log: str | None = None
    node: str = field(default_factory=socket.gethostname)
    job_id: str | None = None       # the SLURM job (``123`` or ``123_4`` for array elements)
    slurm_state: str | None = None  # the last state SLURM reported
    batch_log: str | None = None    # the job's stdout/stderr file
    attempt: int = 1

    @classmethod
    def for_task(cls, spec: TaskSpec) -> "TaskStatus":
        return cls(spec.task_id, spec.experiment, spec.variant, spec.repetition, dict(spec.params))


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2, default=str)
    os.replace(tmp, path)


def task_dir(run_dir: Path, task_id: str) -> Path:
    return run_dir / "tasks" / task_id


def write_status(run_dir: Path, status: TaskStatus) -> None:
    write_json_atomic(task_dir(run_dir, status.task_id) / "status.json", asdict(status))


def read_statuses(run_dir: Path) -> list[TaskStatus]:
    return [read_status(path) for path in sorted((run_dir / "tasks").glob("*/status.json"))]


def read_status(path: Path) -> TaskStatus:
    return TaskStatus(**json.loads(Path(path).read_text()))


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_run_dir(out: Path, suite: str) -> Path:
    """``OUT/<suite>-<UTC timestamp>``, never an existing folder."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = out / f"{suite}-{stamp}"
    n = 1
    while path.exists():
        n += 1
        path = out / f"{suite}-{stamp}-{n}"
    return path


def prepare_run_dir(run_dir: Path, suite: Suite, backend: str) -> None:
    """Create the run folder and its ``run.json``; refuse to reuse a non-empty one."""
    if run_dir.exists() and any(run_dir.iterdir()):
        raise HpcbenchError(f"run dir {run_dir} already exists and is not empty; "
                            "choose another --run-dir (nothing already written is overwritten)")
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / "run.json", {
        "run_id": run_dir.name, "suite": suite.name, "suite_source": suite.source,
        "created": now(), "host": socket.gethostname(), "backend": backend,
        "hpcbench_version": __version__, "python": sys.version.split()[0],
        "tasks": [t.task_id for t in suite.tasks],
    })
    write_json_atomic(run_dir / "suite.json", suite.to_dict())


def tasks_to_resume(run_dir: Path, suite: Suite) -> list[TaskSpec]:
    """The tasks of a run that are not done: failed, never finished, or missing."""
    done = {s.task_id for s in read_statuses(run_dir) if s.state == "done"}
    return [t for t in suite.tasks if t.task_id not in done]


def set_aside_attempt(run_dir: Path, task_id: str) -> int:
    """Move a task's previous attempt to ``RUN_DIR/attempts/<task>/<k>``; return the next attempt number.

    Nothing already written is lost, and the report reads only ``tasks/``, so a
    superseded attempt's partial records are kept as evidence, not counted.
    """
    tdir = task_dir(run_dir, task_id)
    attempt = 1
    if (tdir / "status.json").is_file():
        attempt = read_status(tdir / "status.json").attempt
    if tdir.exists():
        dest = run_dir / "attempts" / task_id / str(attempt)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tdir, dest)
    return attempt + 1


def load_run(run_dir: Path) -> tuple[Suite, dict[str, Any]]:
    """The suite and ``run.json`` of an existing run dir."""
    run_dir = Path(run_dir)
    try:
        info = json.loads((run_dir / "run.json").read_text())
        data = json.loads((run_dir / "suite.json").read_text())
    except FileNotFoundError as exc:
        raise HpcbenchError(f"{run_dir} is not an hpcbench run dir ({exc.filename} is missing)") from None
    except json.JSONDecodeError as exc:
        raise HpcbenchError(f"{run_dir}: run.json or suite.json is not valid JSON ({exc})") from None
    tasks = [TaskSpec(**t) for t in data["tasks"]]
    return Suite(name=data["name"], description=data.get("description", ""), tasks=tasks,
                 source=data.get("source", "")), info
