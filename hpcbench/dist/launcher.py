"""Driver side: start worker ranks and wait for their records.

Locally the workers run under ``torchrun --standalone`` (one node, a free port
chosen by torchrun); an emulated multi-node layout sets
``HPCBENCH_EMULATED_NODES`` so that each rank's :class:`Topology` splits the
local ranks into pretend nodes. Inside a SLURM allocation with enough nodes every
rank is a task of one ``srun`` step (:func:`plan_slurm`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hpcbench.core.config import Config
from hpcbench.dist.binding import bind_mode, srun_gpu_binding
from hpcbench.dist.topology import EMULATED_NODES_ENV, SRUN_RANKS_ENV
from hpcbench.core.errors import ConfigError, LaunchError
from hpcbench.core.registry import Registry
from hpcbench.core.results import RecordContext, find_record_files

#: Lines a worker prints with this prefix are echoed by the driver as progress.
PROGRESS_PREFIX = "[hpcbench progress]"
#: The task's progress lines, in its output dir; the suite runner tails it
#: (:mod:`hpcbench.run.progress`) to show live progress on the command line.
PROGRESS_FILE = "progress.log"
BACKENDS = ("auto", "gloo", "nccl")


@dataclass
class LaunchResult:
    """What a finished launch left behind."""

    records: list[Path]
    log_path: Path
    wall_s: float
    world_size: int


def _qualname(obj: Callable | type) -> str:
    """``module:name`` that a worker process can import.

    A script run with ``python -m pkg.mod`` defines its objects in ``__main__``;
    the worker must import ``pkg.mod`` instead.
    """
    module = obj.__module__
    if module == "__main__":
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        if spec is None:
            raise ConfigError(f"{obj.__qualname__} is defined in a script; workers can only import "
                              "functions from modules (run it with python -m)", field="entry")
        module = spec.name
    return f"{module}:{obj.__qualname__}"


@dataclass
class LaunchPlan:
    """The command that starts every rank, its environment, and a line for people."""

    cmd: list[str]
    env: dict[str, str]
    description: str


def _worker_argv(spec_path: Path) -> list[str]:
    return ["-m", "hpcbench", "rank", str(spec_path)]


def plan_local(*, nodes: int, ranks_per_node: int, spec_path: Path, tag: str,
               env: dict[str, str], bind: str = "none") -> LaunchPlan:
    """All ranks on this machine under ``torchrun --standalone``; ``nodes > 1`` is emulated.

    ``bind`` changes nothing here: torchrun's ranks bind themselves, and see every GPU of the node.
    """
    world = nodes * ranks_per_node
    env = dict(env)
    env.pop(EMULATED_NODES_ENV, None)
    env.pop(SRUN_RANKS_ENV, None)  # torchrun numbers these ranks, not srun
    if nodes > 1:
        env[EMULATED_NODES_ENV] = str(nodes)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
           "--nproc-per-node", str(world), *_worker_argv(spec_path)]
    layout = f"{nodes} emulated node(s) x {ranks_per_node} rank(s)" if nodes > 1 else f"{world} rank(s)"
    return LaunchPlan(cmd, env, f"{layout} with torchrun --standalone")


def slurm_hostnames(nodelist: str, env: dict[str, str]) -> list[str]:
    """Expand a SLURM node list (``n[1-2]``) with ``scontrol show hostnames``."""
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                             env=env, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise LaunchError(f"cannot expand SLURM_JOB_NODELIST={nodelist!r} with scontrol: {exc}") from None
    return out.split()


#: The rendezvous store's ports: below Linux's default ephemeral range (32768-60999), so that no outgoing
#: connection of the first node (gloo's, slurmd's) can already hold the port the store must bind.
RENDEZVOUS_PORTS = range(29500, 32500)


def rendezvous_port(job_id: str, tag: str) -> int:
    """A port for rank 0's TCP store, stable within a job and unlikely to collide:
    two launches in one job (different tags) or two jobs sharing a node get different ones."""
    import zlib

    return RENDEZVOUS_PORTS[zlib.crc32(f"{job_id}/{tag}".encode()) % len(RENDEZVOUS_PORTS)]


#: How long rank 0 waits for every rank to reach its store, and a rank for the store to answer (60 s by default).
RENDEZVOUS_TIMEOUT_ENV = "HPCBENCH_RDZV_TIMEOUT_S"

#: What a rank prints when it cannot create or reach rank 0's store (before any measured work).
RENDEZVOUS_FAILURE = "[hpcbench rendezvous failed]"


def plan_slurm(*, nodes: int, ranks_per_node: int, spec_path: Path, tag: str,
               env: dict[str, str], bind: str = "none") -> LaunchPlan:
    """Every rank a task of one ``srun`` step; rank 0 hosts the TCP store the others join.

    No torchrun agent sits between srun and the ranks: an agent per node imports torch (~2.4 s of
    CPU) and polls its c10d rendezvous once a second, which cost ~3 s of every 2-node launch on the
    emulated cluster (8.1-8.9 s against 5.2-6.0 s for a launch that only meets and leaves). srun
    already numbers the tasks (``SLURM_PROCID``, ``SLURM_LOCALID``) and ends them all when one fails
    (``--kill-on-bad-exit``), instead of leaving the others blocked in a collective until the timeout.
    ``--cpu-bind=none`` leaves the ranks where the OS puts them, as under torchrun: a binding is the
    affinity plan's to apply (``bind: plan``), inside each rank. ``--overcommit`` lets a layout put more
    ranks on a node than it has CPUs, as torchrun did; the local backend refuses that for verdict runs.
    Under ``bind="plan"`` in a job that holds GPUs, srun also gives each task the plan's GPU
    (:func:`hpcbench.dist.binding.srun_gpu_binding`): the one device SLURM binds is the rank's ``cuda:0``.
    """
    wait = env.get(RENDEZVOUS_TIMEOUT_ENV, "60")  # checked first: a typo fails before any srun
    if not wait.isdigit() or int(wait) < 1:
        raise LaunchError(f"{RENDEZVOUS_TIMEOUT_ENV}={wait!r}: expected a whole number of seconds >= 1")
    hosts = slurm_hostnames(env["SLURM_JOB_NODELIST"], env)[:nodes]
    if len(hosts) < nodes:
        raise LaunchError(f"the allocation has {len(hosts)} node(s); the task needs {nodes}")
    port = rendezvous_port(env.get("SLURM_JOB_ID", "0"), tag)
    gpus = srun_gpu_binding(ranks_per_node, env) if bind == "plan" else []
    cmd = ["srun", "--kill-on-bad-exit=1", f"--nodes={nodes}", f"--ntasks={nodes * ranks_per_node}",
           f"--ntasks-per-node={ranks_per_node}", "--distribution=block", "--cpu-bind=none", "--overcommit", *gpus,
           f"--nodelist={','.join(hosts)}", sys.executable, "-u", *_worker_argv(spec_path)]
    env = dict(env)
    env.pop(EMULATED_NODES_ENV, None)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(name, None)  # the ranks take theirs from srun, never from the driver's environment
    env.update({SRUN_RANKS_ENV: "1", "MASTER_ADDR": hosts[0], "MASTER_PORT": str(port), RENDEZVOUS_TIMEOUT_ENV: wait})
    return LaunchPlan(cmd, env, f"{nodes} node(s) x {ranks_per_node} rank(s) with srun "
                                f"(store {hosts[0]}:{port}, nodes {','.join(hosts)}"
                                + (f", GPUs {gpus[-1].split(':', 1)[1]} by the plan" if gpus else "") + ")")


LAUNCHERS: Registry[Callable[..., LaunchPlan]] = Registry("launcher")
LAUNCHERS.register("local", plan_local)
LAUNCHERS.register("slurm", plan_slurm)
LAUNCHER_ENV = "HPCBENCH_LAUNCHER"


def choose_launcher(nodes: int, env: dict[str, str]) -> str:
    """``$HPCBENCH_LAUNCHER`` if set; ``slurm`` inside an allocation with enough nodes; else ``local``.

    A multi-node task inside a one-node allocation (an array task) runs emulated on
    that node, which keeps the layout's process groups without claiming other nodes.
    """
    forced = env.get(LAUNCHER_ENV)
    if forced:
        LAUNCHERS.get(forced)
        return forced
    allocated = int(env.get("SLURM_JOB_NUM_NODES", "0") or 0)
    if env.get("SLURM_JOB_ID") and env.get("SLURM_JOB_NODELIST") and nodes > 1 and allocated >= nodes:
        return "slurm"
    return "local"


def launch(entry: Callable, config: Config, *, nodes: int, ranks_per_node: int,
           context: RecordContext, out_dir: str | os.PathLike, tag: str | None = None,
           backend: str = "auto", timeout_s: float = 1800.0, bind: str | None = None,
           echo: Callable[[str], None] | None = print) -> LaunchResult:
    """Run ``entry(config, topology, writer)`` on ``nodes x ranks_per_node`` ranks.

    Args:
        entry: a module-level function ``(config, topology, writer) -> None``.
        config: the experiment's validated config; it travels as JSON.
        nodes, ranks_per_node: the layout; ``nodes > 1`` on one machine is emulated.
        context: identity columns for the records (run, task, variant...).
        out_dir: the task's directory; records go to ``out_dir/records``, the
            workers' combined output to ``out_dir/logs/<tag>.log``.
        tag: names this launch's files (default: the experiment name).
        backend: ``auto`` (NCCL when every local rank has a GPU, else gloo), ``gloo`` or ``nccl``.
        timeout_s: the whole launch is killed after this many seconds.
        bind: ``none`` (ranks run where the OS puts them) or ``plan`` (each rank binds to its
            cores, memory node and GPU from the machine's affinity plan, see
            :mod:`hpcbench.dist.binding`); default ``$HPCBENCH_BIND``, else ``none``. Either way
            each rank records the binding it really had.
        echo: where progress lines go (``None`` for silence).

    Returns:
        The per-rank records files, the log path and the wall time.

    Raises:
        LaunchError: when any rank fails or the launch times out; carries the log tail.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"{backend!r} is not one of {list(BACKENDS)}", field="backend")
    if nodes < 1 or ranks_per_node < 1:
        raise ConfigError("nodes and ranks_per_node must be >= 1", field="nodes")
    bind = bind_mode(bind)
    out_dir = Path(out_dir)
    tag = tag or context.experiment or "launch"
    records_dir = out_dir / "records"
    log_dir = out_dir / "logs"
    records_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "entry": _qualname(entry),
        "config_class": _qualname(type(config)),
        "config": config.to_dict(),
        "context": json.loads(context.to_json()),
        "records_dir": str(records_dir.resolve()),
        "tag": tag,
        "backend": backend,
        "bind": bind,
    }
    spec_path = log_dir / f"{tag}.spec.json"
    spec_path.write_text(json.dumps(spec, indent=2))
    log_path = log_dir / f"{tag}.log"
    world = nodes * ranks_per_node
    env = dict(os.environ)
    # One thread per rank: with several ranks per core, OpenMP spinning in each
    # rank would measure the scheduler, not the collective.
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(config.worker_env())
    how = choose_launcher(nodes, env)
    plan = LAUNCHERS.get(how)(nodes=nodes, ranks_per_node=ranks_per_node, spec_path=spec_path.resolve(),
                              tag=tag, env=env, bind=bind)
    if echo:
        bound = ", ranks bound by the affinity plan" if bind == "plan" else ""
        echo(f"launching {tag}: {plan.description}{bound}; log: {log_path}")
    start = time.monotonic()
    log_path.write_bytes(b"")
    seen = 0
    rc, seen = _run_plan(plan, log_path, seen, start, timeout_s, tag, echo, out_dir)
    if rc != 0 and how == "slurm" and _rendezvous_failed(log_path, records_dir, tag):
        # The nodes never met, so no rank ran and nothing was measured: one more try, on another port
        # (the store's port may be held on the first node), costs a minute instead of the task.
        plan = LAUNCHERS.get(how)(nodes=nodes, ranks_per_node=ranks_per_node, spec_path=spec_path.resolve(),
                                  tag=f"{tag}.retry", env=env, bind=bind)
        note = f"[hpcbench] {tag}: the rendezvous failed before any rank started; retrying once: {plan.description}"
        with open(log_path, "a") as fh:
            fh.write(note + "\n")
        if echo:
            echo(note)
        rc, seen = _run_plan(plan, log_path, seen, start, timeout_s, tag, echo, out_dir)
    wall = time.monotonic() - start
    if rc != 0:
        starter = "srun" if how == "slurm" else "torchrun"
        raise LaunchError(f"{tag}: worker ranks failed ({starter} exit code {rc})", log_path=str(log_path),
                          tail=_tail(log_path))
    records = [p for p in find_record_files(records_dir) if p.name.startswith(f"{tag}-rank")]
    if len(records) != world:
        raise LaunchError(f"{tag}: expected {world} records files, found {len(records)}",
                          log_path=str(log_path), tail=_tail(log_path))
    if echo:
        echo(f"{tag}: {world} ranks finished in {wall:.1f} s")
    return LaunchResult(records=records, log_path=log_path, wall_s=wall, world_size=world)


def _run_plan(plan: LaunchPlan, log_path: Path, seen: int, start: float, timeout_s: float, tag: str,
              echo: Callable[[str], None] | None, out_dir: Path) -> tuple[int, int]:
    """Run ``plan`` to its end, appending to the log and echoing progress: (exit code, log bytes read)."""
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(plan.cmd, stdout=log, stderr=subprocess.STDOUT, env=plan.env,
                                start_new_session=True)
        try:
            while True:
                try:
                    rc = proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    pass
                seen = _echo_progress(log_path, seen, echo, out_dir / PROGRESS_FILE)
                if time.monotonic() - start > timeout_s:
                    _kill_group(proc)
                    raise LaunchError(f"{tag}: timed out after {timeout_s:.0f} s", log_path=str(log_path),
                                      tail=_tail(log_path))
        except BaseException:
            _kill_group(proc)
            raise
    return rc, _echo_progress(log_path, seen, echo, out_dir / PROGRESS_FILE)


def _rendezvous_failed(log_path: Path, records_dir: Path, tag: str) -> bool:
    """Whether the launch died meeting at rank 0's store: a rank said so and no rank left records."""
    try:
        failed = RENDEZVOUS_FAILURE in log_path.read_text(errors="replace")
    except OSError:
        return False
    return failed and not any(p.name.startswith(f"{tag}-rank") for p in find_record_files(records_dir))


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _echo_progress(log_path: Path, seen: int, echo: Callable[[str], None] | None,
                   sink: Path | None = None) -> int:
    """Print new progress lines of the log (and append them to ``sink``); return the bytes read."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(seen)
            chunk = fh.read()
    except FileNotFoundError:
        return seen
    end = chunk.rfind(b"\n") + 1  # only whole lines
    lines = [line[line.find(PROGRESS_PREFIX) + len(PROGRESS_PREFIX):].strip()
             for line in chunk[:end].decode(errors="replace").splitlines() if PROGRESS_PREFIX in line]
    if echo:
        for line in lines:
            echo(line)
    if sink is not None and lines:
        try:
            with open(sink, "a") as fh:
                fh.write("".join(f"{line}\n" for line in lines))
        except OSError:
            pass  # progress is a courtesy; it never fails a launch
    return seen + end


#: The worker prints this before a failing rank's traceback (see worker.main).
FAILURE_MARKER = "[hpcbench rank failure]"


def _tail(path: Path, lines: int = 40) -> str:
    """The first failing rank's traceback when the log has one, else the last lines.

    torchrun and srun end a failed run with their own lines, which would push the
    traceback that says what went wrong out of a plain tail.
    """
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return ""
    for i, line in enumerate(text):
        if FAILURE_MARKER in line:
            block = [line]
            for nxt in text[i + 1:i + lines]:
                if FAILURE_MARKER in nxt:
                    break
                block.append(nxt)
            return "\n".join(block)
    return "\n".join(text[-lines:])
