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
    previous = tdir / "status.json"
    if previous.is_file():  # keep what the backend wrote at submission (job id, log, attempt)
        before = read_status(previous)
        status.job_id, status.batch_log, status.attempt = before.job_id, before.batch_log, before.attempt
    status.state, status.started = "running", _now()
    status.node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    write_status(run_dir, status)
    start = time.monotonic()
    try:
        notebook = EXPERIMENTS.get(spec.experiment).notebook_path()
        pm.execute_notebook(
            str(notebook), str(tdir / status.notebook),
            parameters=notebook_parameters(spec, run_dir, suite),
            kernel_name=kernel_name, progress_bar=False, cwd=str(tdir),
            log_output=False, report_mode=False,
            # The kernel's own start-up warnings (e.g. "running over TCP without encryption"
            # on a loopback-only kernel) would drown the progress bar; cell errors still
            # reach the executed notebook and the task's status.
            extra_arguments=["--IPKernelApp.log_level=ERROR"],
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

    def check(self, options: dict[str, Any]) -> None:
        """Raise before anything is written when this backend cannot run here."""

    def run_tasks(self, tasks: list[TaskSpec], run_dir: Path, suite: str, *, jobs: int | None,
                  on_done: Callable[[TaskStatus], None], options: dict[str, Any], bar: Any) -> list[TaskStatus]:
        raise NotImplementedError


class LocalBackend(Backend):
    """Tasks run on this machine, at most ``jobs`` at a time.

    The default of one at a time is deliberate: benchmarks that share two cores
    measure each other. Raise ``--jobs`` for functional runs.
    """

    name = "local"

    def run_tasks(self, tasks, run_dir, suite, *, jobs, on_done, options, bar):
        results: list[TaskStatus] = []
        lock = threading.Lock()
        with ThreadPoolExecutor(max_workers=max(1, jobs or 1), thread_name_prefix="hpcbench-task") as pool:
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


def run_manifest_task(run_dir: Path, manifest: Path, index: int) -> TaskStatus:
    """Run task ``index`` of a JSON manifest (what a SLURM job step does)."""
    tasks = json.loads(Path(manifest).read_text())
    if not 0 <= index < len(tasks):
        raise HpcbenchError(f"{manifest}: no task {index} (it lists {len(tasks)})")
    suite = json.loads((Path(run_dir) / "run.json").read_text()).get("suite", "")
    return execute_task(TaskSpec(**tasks[index]), Path(run_dir), suite)


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


def _register_slurm() -> None:
    # Imported here, not at the top: the SLURM backend builds on this module.
    from hpcbench.slurm_backend import SlurmBackend

    BACKENDS.register("slurm", SlurmBackend())


_register_slurm()
