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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hpcbench import __version__
from hpcbench.core.errors import HpcbenchError
from hpcbench.run.suite import Suite, TaskSpec

#: ``interrupted``: stopped by a signal (see :mod:`hpcbench.run.interrupt`); like
#: ``failed`` it never counts, and ``suite resume`` runs it again.
STATES = ("pending", "running", "done", "failed", "interrupted")
#: A ``running`` task whose process is known to be gone (the runner was SIGKILLed, the
#: node rebooted) is shown as ``stale``; the file itself is left as the evidence.
STALE = "stale"


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
    #: Earlier tries resubmitted by ``--retries`` (SLURM backend): attempt, job, state, reason, repair.
    tries: list[dict[str, Any]] = field(default_factory=list)
    host: str | None = None         # the host whose process table holds ``pid``
    pid: int | None = None          # the process executing the task while it runs
    pid_started: float | None = None  # that process's start time, so a reused pid is not taken for it

    @classmethod
    def for_task(cls, spec: TaskSpec) -> "TaskStatus":
        return cls(spec.task_id, spec.experiment, spec.variant, spec.repetition, dict(spec.params))


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` in one rename, mode ``0o666 & ~umask``."""
    # Imported here: this function is the only user in this module.
    from hpcbench.core.atomic import atomic_write

    with atomic_write(path, "w") as fh:
        json.dump(data, fh, indent=2, default=str)


def task_dir(run_dir: Path, task_id: str) -> Path:
    return run_dir / "tasks" / task_id


def write_status(run_dir: Path, status: TaskStatus) -> None:
    write_json_atomic(task_dir(run_dir, status.task_id) / "status.json", asdict(status))


def read_statuses(run_dir: Path) -> list[TaskStatus]:
    return [read_status(path) for path in sorted((run_dir / "tasks").glob("*/status.json"))]


def read_status(path: Path) -> TaskStatus:
    return TaskStatus(**json.loads(Path(path).read_text()))


def effective_state(status: TaskStatus) -> tuple[str, str | None]:
    """The state to show, and why when it differs from the file's: a ``running`` task
    whose process is gone on this host is ``stale``. On another host it cannot be
    told from here (None reason, state unchanged); the SLURM backend asks squeue."""
    if status.state != "running" or not status.pid or status.host != socket.gethostname():
        return status.state, None
    import psutil

    try:
        started = psutil.Process(status.pid).create_time()
        if status.pid_started is None or abs(started - status.pid_started) < 1.0:
            return status.state, None
    except psutil.Error:
        pass
    return STALE, (f"status says running, but its process (pid {status.pid} on {status.host}) is gone: "
                   "the runner was killed; `hpcbench suite resume` reruns it")


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


def check_run_dir(run_dir: Path, given: str) -> None:
    """Refuse, before any work, a run dir that is a file, non-empty, or cannot be created.

    ``given`` is the option as typed (``--out results``), for the message. Creation is
    probed by creating the folders and removing them again, so a refusal that comes
    later (the backend's) leaves nothing behind; ``prepare_run_dir`` creates them for real.
    """
    if run_dir.exists():
        if not run_dir.is_dir():
            raise HpcbenchError(f"{given}: {run_dir} is a file, not a folder")
        if any(run_dir.iterdir()):
            raise HpcbenchError(f"{given}: run dir {run_dir} already exists and is not empty; choose another")
        return
    missing = [run_dir]
    while not missing[-1].parent.exists():  # false too below a file: the loop stops at that file
        missing.append(missing[-1].parent)
    if not missing[-1].parent.is_dir():
        raise HpcbenchError(f"{given}: {missing[-1].parent} is a file, not a folder")
    try:
        run_dir.mkdir(parents=True)
    except OSError as exc:
        raise HpcbenchError(f"{given}: cannot create {run_dir} ({exc.strerror or exc})") from None
    for folder in missing:  # deepest first
        folder.rmdir()


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


def extend_run(run_dir: Path, extra: list[TaskSpec]) -> None:
    """Add ``extra`` tasks to an existing run: listed in ``suite.json`` and ``run.json``, each ``pending``.

    A resume (:func:`hpcbench.run.runner.resume_suite`) then runs them like any task not yet done. Tasks
    already listed are refused: nothing already written is replaced.

    Raises:
        HpcbenchError: a task id the run already lists.
    """
    suite, info = load_run(run_dir)
    have = {t.task_id for t in suite.tasks}
    clash = sorted(t.task_id for t in extra if t.task_id in have)
    if clash:
        raise HpcbenchError(f"{run_dir}: tasks {clash} are already in the run; nothing added")
    grown = Suite(suite.name, suite.description, [*suite.tasks, *extra], suite.source, suite.oversubscribe)
    write_json_atomic(run_dir / "suite.json", grown.to_dict())
    write_json_atomic(run_dir / "run.json", {**info, "tasks": [t.task_id for t in grown.tasks]})
    for spec in extra:
        write_status(run_dir, TaskStatus.for_task(spec))


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
        before = read_status(tdir / "status.json")
        attempt = before.attempt
        if before.state == "pending" and before.started is None and \
                [p.name for p in tdir.iterdir()] == ["status.json"]:
            return attempt  # never started: nothing to keep, the same attempt runs it
    if tdir.exists():
        dest = run_dir / "attempts" / task_id / str(attempt)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tdir, dest)
    return attempt + 1


def load_run(run_dir: Path) -> tuple[Suite, dict[str, Any]]:
    """The suite and ``run.json`` of an existing run dir.

    ``suite.json`` is validated like a suite file (:func:`~hpcbench.run.suite.suite_from_dict`):
    ``suite resume`` runs what it lists, and it may have been edited by hand.

    Raises:
        HpcbenchError: naming the run dir or the file (and the entry) at fault.
    """
    from hpcbench.run.suite import suite_from_dict  # only this function needs it

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        what = "is a file" if run_dir.exists() else "does not exist"
        raise HpcbenchError(f"{run_dir} {what}; expected a run dir written by `hpcbench run` or `hpcbench suite`")
    docs = {}
    for name in ("run.json", "suite.json"):
        path = run_dir / name
        try:
            docs[name] = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise HpcbenchError(f"{run_dir} is not an hpcbench run dir ({path} is missing)") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise HpcbenchError(f"{path}: not readable JSON ({exc})") from None
    info = docs["run.json"]
    if not isinstance(info, dict):
        raise HpcbenchError(f"{run_dir / 'run.json'}: not a JSON object")
    return suite_from_dict(docs["suite.json"], str(run_dir / "suite.json")), info
