"""The report's dask workers as SLURM jobs (dask-jobqueue's ``SLURMCluster``).

    hpcbench report RUN_DIR --dask-slurm --dask-slurm-jobs 4 --partition cpu --account proj

The scheduler runs in the ``hpcbench report`` process (on the login node); each SLURM
job runs one dask worker with ``cores`` threads, started by the Python that runs
hpcbench (``sys.executable``: the venv, where hpcbench is importable), and connects
back to the scheduler. The aggregation (:mod:`hpcbench.report.aggregate`) then reads
the records files on the compute nodes, so the run directories and the log directory
must be on a file system the nodes share.

Networking: the workers reach the scheduler at the address of ``scheduler_interface``
and listen on ``interface``. On the emulated cluster (:mod:`hpcbench.cluster`) the
nodes are network namespaces that reach the host only through the bridge, so when the
bridge exists and no interface is given, the scheduler listens on the bridge
(``hpcb-br0``, 198.18.0.1) and the workers on their ``hpcb0``.

Reference: https://jobqueue.dask.org/en/latest/generated/dask_jobqueue.SLURMCluster.html
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from hpcbench.core.config import ByteSize, Config, param
from hpcbench.core.errors import HpcbenchError

#: The SLURM job name of every worker job (``squeue -n hpcbench-dask`` finds them).
JOB_NAME = "hpcbench-dask"
#: sbatch's --time when none is given: an aggregation takes minutes; a short limit schedules sooner.
DEFAULT_WALLTIME = "00:30:00"
#: Seconds every SLURM client call (sbatch --test-only, squeue) may take.
CLIENT_TIMEOUT_S = 30


@dataclass
class DaskSlurmConfig(Config):
    """How the report's dask workers are started as SLURM jobs."""

    config_name = "dask_slurm"

    jobs: int = param(2, "SLURM jobs to submit, one dask worker each", min=1, max=4096)
    cores: int = param(1, "CPUs per job (--cpus-per-task), the worker's threads; reading Parquet "
                          "releases the GIL, so more threads overlap reads", min=1, max=1024)
    memory: ByteSize = param("2G", "memory per job (--mem) and the worker's memory limit; the "
                                   "aggregation holds one partition of records per thread")
    interface: str = param("", "network interface the workers listen on (ib0, eth0...); '' = dask's "
                               "choice, or hpcb0 on the emulated cluster")
    scheduler_interface: str = param("", "interface the scheduler listens on, in this process, that "
                                         "the nodes can reach; '' = `interface`, or hpcb-br0 on the "
                                         "emulated cluster")
    sbatch_options: dict = param({}, "site options as the suite's SLURM backend takes them: partition, "
                                     "account, time (default 00:30:00), gres, qos, constraint, and "
                                     "sbatch_args (a list of '--option=value')")
    python: str = param("", "the Python the jobs run on the nodes; '' = this one (sys.executable)")
    log_directory: str = param("", "folder for the jobs' .out/.err logs, on a file system the nodes "
                                   "see; '' = dask-slurm/ in the report folder")
    start_timeout_s: float = param(180.0, "seconds to wait for every worker to connect before giving "
                                          "up with the jobs' ids, states and logs", min=1)

    def validate(self) -> None:
        try:
            directive_lines(self.sbatch_options)
        except HpcbenchError as exc:
            raise self._error("sbatch_options", str(exc)) from None


def directive_lines(options: dict[str, Any]) -> list[str]:
    """The extra ``#SBATCH`` options (without the prefix), checked as the suite backend checks them.

    ``time`` is left out: it becomes the jobs' walltime (see :func:`cluster_kwargs`).
    """
    from hpcbench.run.backends.slurm import sbatch_directives

    rest = {k: v for k, v in options.items() if k != "time"}
    unknown = sorted(set(rest) - {"partition", "account", "gres", "cpus_per_task", "qos", "constraint",
                                  "sbatch_args"})
    if unknown:
        raise HpcbenchError(f"unknown sbatch option(s) {unknown}")
    if "cpus_per_task" in rest:
        raise HpcbenchError("cpus_per_task is set by `cores`")
    text = sbatch_directives(rest)
    lines = [line.removeprefix("#SBATCH ") for line in text.splitlines() if line.strip()]
    if options.get("time") not in (None, ""):
        sbatch_directives({"time": options["time"]})  # the same character check
    return lines


def emulated_interfaces() -> tuple[str, str] | None:
    """``(scheduler_interface, worker_interface)`` of the emulated cluster when its bridge is here."""
    from hpcbench.cluster import network

    if (Path("/sys/class/net") / network.BRIDGE).exists():
        return network.BRIDGE, network.NODE_IFNAME
    return None


def cluster_kwargs(config: DaskSlurmConfig, log_directory: str | Path) -> dict[str, Any]:
    """The keyword arguments of ``SLURMCluster`` for ``config``.

    Args:
        config: the workers' settings.
        log_directory: where the jobs write ``JOB_NAME-<id>.out/.err`` (created by dask-jobqueue).
    """
    interface, scheduler_interface = config.interface or None, config.scheduler_interface or None
    emulated = emulated_interfaces() if not (interface or scheduler_interface) else None
    if emulated:
        scheduler_interface, interface = emulated
    scheduler_options: dict[str, Any] = {"dashboard_address": None}
    if scheduler_interface:
        scheduler_options["interface"] = scheduler_interface
    return {
        "cores": config.cores,
        "processes": 1,
        "memory": int(config.memory),
        "walltime": str(config.sbatch_options.get("time") or DEFAULT_WALLTIME),
        "job_extra_directives": directive_lines(config.sbatch_options),
        "interface": interface,
        "scheduler_options": scheduler_options,
        "python": config.python or sys.executable,
        "job_name": JOB_NAME,
        "log_directory": str(log_directory),
    }


@contextlib.contextmanager
def slurm_dask_client(config: DaskSlurmConfig, *, progress: Callable[[str], None] = print) -> Iterator[Any]:
    """A ``distributed.Client`` whose workers run in ``config.jobs`` SLURM jobs; the jobs end on exit.

    Args:
        config: the workers' settings (``log_directory`` '' means ``./dask-slurm``).
        progress: receives short progress lines (the job ids, then the workers' hosts).

    Yields:
        The client, once every worker has connected.

    Raises:
        HpcbenchError: dask-jobqueue is missing, SLURM refuses the job script (its answer
            is quoted), or the workers do not all connect within ``start_timeout_s`` (the
            message names each job, its SLURM state and its log files).
    """
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise HpcbenchError("--dask-slurm needs dask-jobqueue (pip install dask-jobqueue)") from None
    from distributed import Client

    log_dir = Path(config.log_directory or "dask-slurm").resolve()
    log_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Port .* is already in use", category=UserWarning)
        try:
            cluster = SLURMCluster(**cluster_kwargs(config, log_dir))
        except (OSError, ValueError) as exc:
            raise HpcbenchError(f"cannot start the dask scheduler for the SLURM workers "
                                f"(scheduler_interface={config.scheduler_interface!r}, "
                                f"interface={config.interface!r}): {exc}") from None
    try:
        _check_job_script(cluster.job_script(), log_dir)
        with Client(cluster, set_as_default=False) as client:
            cluster.scale(jobs=config.jobs)
            progress(f"report: {config.jobs} SLURM job(s) asked for dask workers; scheduler at "
                     f"{cluster.scheduler_address}, logs in {log_dir}")
            try:
                client.wait_for_workers(config.jobs, timeout=config.start_timeout_s)
            except (TimeoutError, OSError):
                raise HpcbenchError(_not_started(cluster, client, config, log_dir)) from None
            hosts = sorted(set(client.run(socket.gethostname).values()))
            progress(f"report: {config.jobs} dask worker(s) up in SLURM job(s) "
                     f"{', '.join(_job_ids(cluster))} on {', '.join(hosts)}")
            yield client
    finally:
        cluster.close()


def _check_job_script(script: str, log_dir: Path) -> None:
    """``sbatch --test-only``: a bad partition or account fails now, with SLURM's words."""
    with tempfile.NamedTemporaryFile("w", suffix=".sbatch", prefix="check-", dir=log_dir, delete=False) as f:
        f.write(script)
    path = Path(f.name)
    try:
        proc = subprocess.run(["sbatch", "--test-only", str(path)], capture_output=True, text=True,
                              timeout=CLIENT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise HpcbenchError("--dask-slurm needs the SLURM client commands (sbatch not found)") from None
    except subprocess.TimeoutExpired:
        raise HpcbenchError(f"`sbatch --test-only` did not answer within {CLIENT_TIMEOUT_S} s: "
                            "is slurmctld up and SLURM_CONF right?") from None
    finally:
        path.unlink(missing_ok=True)
    if proc.returncode != 0:
        raise HpcbenchError(f"SLURM refuses the dask worker job: {(proc.stderr or proc.stdout).strip()}\n"
                            f"--- job script ---\n{script}")


def _job_ids(cluster) -> list[str]:
    return sorted((str(job.job_id) for job in cluster.workers.values() if getattr(job, "job_id", None)),
                  key=lambda j: (len(j), j))


def _not_started(cluster, client, config: DaskSlurmConfig, log_dir: Path) -> str:
    connected = len(client.scheduler_info().get("workers", {}))
    ids = _job_ids(cluster)
    lines = [f"{connected} of {config.jobs} dask worker(s) connected within {config.start_timeout_s:g} s "
             f"(scheduler {cluster.scheduler_address})"]
    if not ids:
        lines.append("no SLURM job was submitted (sbatch failed; see the messages above)")
    states = _squeue_states(ids)
    for job_id in ids:
        state = states.get(job_id, "no longer queued")
        logs = [log_dir / f"{JOB_NAME}-{job_id}.{ext}" for ext in ("out", "err")]
        lines.append(f"SLURM job {job_id}: {state}; logs {logs[0]} {logs[1]}")
        tail = _tail(logs[1])
        if tail:
            lines.append("  " + "\n  ".join(tail))
    return "\n".join(lines)


def _squeue_states(job_ids: list[str]) -> dict[str, str]:
    if not job_ids:
        return {}
    try:
        proc = subprocess.run(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i|%T|%R"], capture_output=True,
                              text=True, timeout=CLIENT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    states = {}
    for line in proc.stdout.splitlines():
        job_id, _, rest = line.partition("|")
        state, _, reason = rest.partition("|")
        # %R: "(Reason)" while pending, the node list once running.
        states[job_id.strip()] = (f"{state} {reason}" if reason.startswith("(") else
                                  f"{state} on {reason}" if reason else state)
    return states


def _tail(path: Path, lines: int = 5) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []

