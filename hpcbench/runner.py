"""Run a suite's tasks: each task is one notebook executed by papermill.

Per task, ``RUN_DIR/tasks/<task_id>/`` receives the executed notebook, the records
(written by the notebook through :class:`hpcbench.task.Task`), logs, and a
``status.json`` (pending, running, done or failed with the error and the cell).
A failed task does not stop the others; :func:`run_suite` returns the statuses and
the CLI's exit code says whether any failed.

Backends are registered by name (``local`` here; SLURM plugs in the same way).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from hpcbench import __version__
from hpcbench.errors import HpcbenchError
from hpcbench.experiments import EXPERIMENTS
from hpcbench.registry import Registry
from hpcbench.suite import Suite, TaskSpec

STATES = ("pending", "running", "done", "failed")
KERNEL_NAME = "python3"


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
    out = []
    for path in sorted((run_dir / "tasks").glob("*/status.json")):
        out.append(TaskStatus(**json.loads(path.read_text())))
    return out


def _now() -> str:
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
        "created": _now(), "host": socket.gethostname(), "backend": backend,
        "hpcbench_version": __version__, "python": sys.version.split()[0],
        "tasks": [t.task_id for t in suite.tasks],
    })
    write_json_atomic(run_dir / "suite.json", suite.to_dict())


# -- one task through papermill ---------------------------------------------------

def notebook_parameters(spec: TaskSpec, run_dir: Path, suite: str) -> dict[str, Any]:
    """The config fields plus the task context the notebook's parameters cell declares."""
    return {**spec.params, "run_id": run_dir.name, "suite": suite, "variant": spec.variant,
            "task_id": spec.task_id, "repetition": spec.repetition,
            "output_dir": str(task_dir(run_dir, spec.task_id).resolve())}


def execute_task(spec: TaskSpec, run_dir: Path, suite: str, *, kernel_name: str = KERNEL_NAME) -> TaskStatus:
    """Run one task's notebook with papermill and return its final status (never raises)."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    status = TaskStatus.for_task(spec)
    tdir = task_dir(run_dir, spec.task_id)
    tdir.mkdir(parents=True, exist_ok=True)
    status.state, status.started = "running", _now()
    write_status(run_dir, status)
    start = time.monotonic()
    try:
        notebook = EXPERIMENTS.get(spec.experiment).notebook_path()
        pm.execute_notebook(
            str(notebook), str(tdir / status.notebook),
            parameters=notebook_parameters(spec, run_dir, suite),
            kernel_name=kernel_name, progress_bar=False, cwd=str(tdir),
            log_output=False, report_mode=False,
        )
        status.state = "done"
    except PapermillExecutionError as exc:
        status.state = "failed"
        status.cell = exc.exec_count
        status.error = f"cell {exc.exec_count}: {exc.ename}: {exc.evalue}"
    except Exception as exc:  # a failed task must not stop the others
        status.state = "failed"
        status.error = f"{type(exc).__name__}: {exc}"
    status.finished = _now()
    status.duration_s = round(time.monotonic() - start, 3)
    logs = sorted((tdir / "logs").glob("*.log")) if (tdir / "logs").is_dir() else []
    status.log = str(logs[0]) if logs else None
    write_status(run_dir, status)
    return status


# -- backends ----------------------------------------------------------------------

class Backend:
    """Runs a list of tasks into a run dir; subclasses fill in :meth:`run_tasks`."""

    name = "base"

    def run_tasks(self, tasks: list[TaskSpec], run_dir: Path, suite: str, *, jobs: int,
                  on_done: Callable[[TaskStatus], None]) -> list[TaskStatus]:
        raise NotImplementedError


class LocalBackend(Backend):
    """Tasks run on this machine, at most ``jobs`` at a time.

    The default of one at a time is deliberate: benchmarks that share two cores
    measure each other. Raise ``--jobs`` for functional runs.
    """

    name = "local"

    def run_tasks(self, tasks, run_dir, suite, *, jobs, on_done):
        results: list[TaskStatus] = []
        lock = threading.Lock()
        with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="hpcbench-task") as pool:
            futures = [pool.submit(execute_task, t, run_dir, suite) for t in tasks]
            for fut in as_completed(futures):
                st = fut.result()
                with lock:
                    results.append(st)
                    on_done(st)
        order = {t.task_id: i for i, t in enumerate(tasks)}
        return sorted(results, key=lambda s: order[s.task_id])


BACKENDS: Registry[Backend] = Registry("backend")
BACKENDS.register("local", LocalBackend())


def check_kernel(kernel_name: str = KERNEL_NAME) -> str | None:
    """A warning when the Jupyter kernel would run another Python than this one."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        spec = KernelSpecManager().get_kernel_spec(kernel_name)
    except Exception as exc:  # no such kernel: papermill will say so per task too
        return f"Jupyter kernel {kernel_name!r} not found ({exc}); run `make setup`"
    exe = spec.argv[0]
    if exe in ("python", "python3", "{python}"):
        return None
    if Path(exe).resolve() != Path(sys.executable).resolve() and Path(exe).parent.resolve() != Path(sys.executable).parent.resolve():
        return (f"Jupyter kernel {kernel_name!r} runs {exe}, not this interpreter ({sys.executable}); "
                "notebooks may not find hpcbench. Run `make setup` to register the venv's kernel.")
    return None


def run_suite(suite: Suite, run_dir: Path, *, backend: str = "local", jobs: int = 1,
              progress: bool = True) -> list[TaskStatus]:
    """Run every task of ``suite`` into ``run_dir``; return the statuses in suite order."""
    impl = BACKENDS.get(backend)
    prepare_run_dir(run_dir, suite, backend)
    for spec in suite.tasks:
        write_status(run_dir, TaskStatus.for_task(spec))
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
        msg = f"{st.task_id}: {st.state} in {st.duration_s:.1f} s"
        if st.error:
            msg += f" -- {st.error.splitlines()[0][:200]}"
        bar.write(msg, file=sys.stderr)
        bar.set_postfix(failed=failed)
        bar.update(1)

    try:
        return impl.run_tasks(suite.tasks, run_dir, suite.name, jobs=jobs, on_done=on_done)
    finally:
        bar.close()
