"""One task through papermill: the executed notebook, its records and its final status."""

from __future__ import annotations

import copy
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from hpcbench.core.errors import HpcbenchError
from hpcbench.experiments import EXPERIMENTS
from hpcbench.run.interrupt import RunInterrupted, SignalGuard, Stop, quiet_shutdown_kernel_manager
from hpcbench.run.rundir import TaskStatus, now, read_status, task_dir, write_status
from hpcbench.run.suite import TaskSpec

# Its own name, not python3: a notebook that asks for it never silently gets some other
# Python (a JupyterHub's, ~/.local's) that cannot import hpcbench. `make setup` registers it.
KERNEL_NAME = "hpcbench"
KERNEL_DISPLAY_NAME = "hpcbench (Python 3)"


#: An optional IRI checker of jsonschema's that this process does without (see :func:`import_papermill`).
SKIPPED_FORMAT_CHECKER = "rfc3987_syntax"


def import_papermill():
    """papermill, imported without jsonschema's ``iri`` format checker: 1.5 s less per task start.

    papermill imports nbformat, which validates notebooks with jsonschema; jsonschema's format module
    imports every optional format checker that is installed, and rfc3987-syntax (installed with
    JupyterLab: jupyter-events asks for ``jsonschema[format-nongpl]``) compiles ~35 Earley grammars when
    it is imported: 1.5 s of CPU on this project's 2-core VM, in every task and every SLURM job
    (python-jsonschema/jsonschema#1428). No notebook schema uses the ``iri`` formats, so before
    jsonschema is first imported the checker's module is marked absent, which jsonschema treats as
    not installed. Where jsonschema was imported already, nothing changes.
    """
    if "jsonschema" not in sys.modules:
        sys.modules.setdefault(SKIPPED_FORMAT_CHECKER, None)  # None: "import rfc3987_syntax" raises ImportError
    import papermill

    return papermill


def notebook_parameters(spec: TaskSpec, run_dir: Path, suite: str) -> dict[str, Any]:
    """The config fields plus the task context the notebook's parameters cell declares."""
    return {**spec.params, "run_id": run_dir.name, "suite": suite, "variant": spec.variant,
            "task_id": spec.task_id, "repetition": spec.repetition,
            "output_dir": str(task_dir(run_dir, spec.task_id).resolve())}


def execute_task(spec: TaskSpec, run_dir: Path, suite: str, *, kernel_name: str = KERNEL_NAME,
                 stop: Stop | None = None) -> TaskStatus:
    """Run one task's notebook with papermill and return its final status (never raises).

    When ``stop`` was requested while the notebook ran (its kernel and ranks were
    terminated by :class:`~hpcbench.run.interrupt.SignalGuard`), the task ends
    ``interrupted``, not ``failed``: it says nothing about the task itself.
    """
    pm = import_papermill()
    from papermill.exceptions import PapermillExecutionError

    status = TaskStatus.for_task(spec)
    tdir = task_dir(run_dir, spec.task_id)
    tdir.mkdir(parents=True, exist_ok=True)
    previous = tdir / "status.json"
    if previous.is_file():  # keep what the backend wrote at submission (job id, log, attempt)
        before = read_status(previous)
        status.job_id, status.batch_log, status.attempt = before.job_id, before.batch_log, before.attempt
        status.tries = before.tries
    status.state, status.started = "running", now()
    status.node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    # Who runs it, so `hpcbench status` and the report can tell a live task from a stale one.
    status.host, status.pid = socket.gethostname(), os.getpid()
    status.pid_started = psutil.Process().create_time()
    write_status(run_dir, status)
    start = time.monotonic()

    def record_interrupted() -> None:
        stopped = copy.copy(status)
        stopped.state, stopped.error, stopped.finished = "interrupted", stop.reason(), now()
        stopped.duration_s = round(time.monotonic() - start, 3)
        write_status(run_dir, stopped)

    if stop is not None:
        stop.on_stopped.append(record_interrupted)
    try:
        notebook = EXPERIMENTS.get(spec.experiment).notebook_path()
        pm.execute_notebook(
            str(notebook), str(tdir / status.notebook),
            parameters=notebook_parameters(spec, run_dir, suite),
            kernel_name=kernel_name, progress_bar=False, cwd=str(tdir),
            log_output=False, report_mode=False,
            # No SIGINT into the kernel's last moments at shutdown: it printed
            # "KeyboardInterrupt caught in kernel" on the user's terminal.
            kernel_manager_class=quiet_shutdown_kernel_manager(),
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
    if stop is not None:
        stop.on_stopped.remove(record_interrupted)
    if stop is not None and stop.requested and status.state != "done":
        status.state, status.cell = "interrupted", None
        status.error = stop.reason()  # the kernel died of the stop, not of the task
    status.finished = now()
    status.duration_s = round(time.monotonic() - start, 3)
    logs = sorted((tdir / "logs").glob("*.log")) if (tdir / "logs").is_dir() else []
    status.log = str(logs[0]) if logs else None
    write_status(run_dir, status)
    return status


def run_manifest_task(run_dir: Path, manifest: Path, index: int) -> TaskStatus:
    """Run task ``index`` of a JSON manifest (what a SLURM job step does)."""
    tasks = json.loads(Path(manifest).read_text())
    if not 0 <= index < len(tasks):
        raise HpcbenchError(f"{manifest}: no task {index} (it lists {len(tasks)})")
    suite = json.loads((Path(run_dir) / "run.json").read_text()).get("suite", "")
    # SLURM signals this process (scancel, the time limit, `--signal=B:TERM@120`): the
    # guard ends the kernel and the ranks and the task is recorded as interrupted.
    with SignalGuard() as stop:
        status = execute_task(TaskSpec(**tasks[index]), Path(run_dir), suite, stop=stop)
    if stop.requested:
        raise RunInterrupted(stop.signum, [status])
    return status


def check_kernel(kernel_name: str = KERNEL_NAME) -> str | None:
    """A warning when the Jupyter kernel would run another Python than this one."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        spec = KernelSpecManager().get_kernel_spec(kernel_name)
    except Exception as exc:  # no such kernel: papermill will say so per task too
        return (f"Jupyter kernel {kernel_name!r} not found ({exc}); run `make setup`, or register this "
                f"interpreter's: {sys.executable} -m ipykernel install --sys-prefix --name {kernel_name}")
    exe = spec.argv[0]
    if exe in ("python", "python3", "{python}"):
        return None
    if Path(exe).resolve() != Path(sys.executable).resolve() and Path(exe).parent.resolve() != Path(sys.executable).parent.resolve():
        return (f"Jupyter kernel {kernel_name!r} runs {exe}, not this interpreter ({sys.executable}); "
                "notebooks may not find hpcbench. Run `make setup` to register the venv's kernel.")
    return None
