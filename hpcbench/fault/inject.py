"""Real faults for the fault-tolerance tests and experiment: signals, lost nodes, bad bytes, full disks.

Nothing here is a mock: a rank is killed with a real signal, a node loses its slurmd (or its
whole process table, or its link) on the emulated cluster (:mod:`hpcbench.cluster`), a
shard gets a flipped byte on disk, a folder becomes a tiny tmpfs that really fills up.
Each injector returns what it did and when (``time.time()``), so a caller can measure
how long detection and recovery took from the moment of the fault.

Most injectors need root (signals to other users' processes, ``ip``, ``mount``); the
emulated cluster needs root anyway. Processes are found by their command line and
environment, never killed by name alone.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping

import psutil

from hpcbench.core.errors import HpcbenchError

__all__ = ["FaultError", "KilledProcess", "NodeFault", "ShardDamage", "find_ranks", "kill_one_rank",
           "kill_during_write", "node_down", "node_up", "corrupt_shard", "full_disk"]

#: What torchrun sets in every rank it starts (and not in itself).
RANK_ENV = "RANK"
#: torchrun's agent; it carries the ranks' command line too but is not a rank.
TORCHRUN_MODULE = "torch.distributed.run"
NODE_HOW = ("slurmd", "crash", "link")


class FaultError(HpcbenchError):
    """A fault could not be injected (nothing matched, no permission); names what was looked for."""


@dataclass
class KilledProcess:
    """One process that was sent a signal."""

    pid: int
    signal: str
    at: float                      #: time.time() when the signal was sent
    rank: int | None = None        #: its RANK, when torchrun started it
    node: str | None = None        #: SLURMD_NODENAME from its environment, if any
    cmdline: str = ""
    path: str | None = None        #: the file it was writing (kill_during_write)


def _wait_for(find: Callable[[], object], timeout_s: float, poll_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        found = find()
        if found:
            return found
        if time.monotonic() > deadline:
            raise FaultError(f"no {what} within {timeout_s:g} s")
        time.sleep(poll_s)


def find_ranks(match: str, env: Mapping[str, str] | None = None) -> list[psutil.Process]:
    """Live rank processes whose command line contains ``match`` and whose environment holds ``env``.

    A rank is a process torchrun started (``RANK`` in its environment), not torchrun itself.
    """
    found = []
    for p in psutil.process_iter():
        try:
            cmd = " ".join(p.cmdline())
            if match not in cmd or TORCHRUN_MODULE in cmd or p.status() == psutil.STATUS_ZOMBIE:
                continue
            penv = p.environ()
        except (psutil.Error, OSError):
            continue
        if RANK_ENV in penv and all(penv.get(k) == v for k, v in (env or {}).items()):
            found.append(p)
    return found


def _describe(p: psutil.Process, sig: signal.Signals, at: float, path: str | None = None) -> KilledProcess:
    try:
        penv, cmd = p.environ(), " ".join(p.cmdline())
    except (psutil.Error, OSError):
        penv, cmd = {}, ""
    rank = penv.get(RANK_ENV)
    return KilledProcess(p.pid, sig.name, at, int(rank) if rank and rank.isdigit() else None,
                         penv.get("SLURMD_NODENAME"), cmd, path)


def kill_one_rank(match: str, *, sig: signal.Signals = signal.SIGKILL, rank: int | None = None,
                  env: Mapping[str, str] | None = None, when: Callable[[], bool] | None = None,
                  timeout_s: float = 120.0, poll_s: float = 0.2) -> KilledProcess:
    """Wait for a rank process, then signal it (mid-step: the ranks are training by then).

    Args:
        match: text in the rank's command line, e.g. ``"hpcbench.fault.train"``.
        sig: the signal (SIGKILL: no handler runs, as with the OOM killer or a lost node).
        rank: kill this global rank (default: the highest found, so the rendezvous host's rank 0 lives).
        env: environment entries the rank must carry (e.g. a test's marker).
        when: also wait until this returns true (e.g. "a checkpoint exists") before killing.
        timeout_s, poll_s: how long and how often to look.
    Returns:
        What was killed, and when.
    """
    extra = dict(env or {})
    if rank is not None:
        extra[RANK_ENV] = str(rank)

    def pick():
        if when is not None and not when():
            return None
        ranks = find_ranks(match, extra)
        if not ranks:
            return None
        return max(ranks, key=lambda p: int(p.environ().get(RANK_ENV, "0") or 0))

    victim = _wait_for(pick, timeout_s, poll_s, f"rank process matching {match!r} {extra or ''}")
    info = _describe(victim, sig, 0.0)
    info.at = time.time()
    try:
        victim.send_signal(sig)
    except psutil.NoSuchProcess:
        raise FaultError(f"rank pid {victim.pid} ended before it could be signalled") from None
    return info


def _open_for_writing(pid: int, pattern: str) -> str | None:
    """A file ``pid`` holds open for writing whose path matches ``pattern`` (fnmatch), else None."""
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
            if not fnmatch.fnmatch(target, pattern):
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as fh:
                flags = int(fh.read().split("flags:")[1].split()[0], 8)
        except (OSError, IndexError, ValueError):
            continue
        if flags & (os.O_WRONLY | os.O_RDWR):
            return target
    return None


def kill_during_write(path_glob: str, *, match: str | None = None, sig: signal.Signals = signal.SIGKILL,
                      timeout_s: float = 120.0, poll_s: float = 0.0005) -> KilledProcess:
    """Signal a process while it has a file matching ``path_glob`` open for writing.

    Leaves a torn file behind, as a job killed in the middle of a checkpoint save does.

    Args:
        path_glob: a pattern over absolute paths, e.g. ``"/ckpt/*/model*"`` (fnmatch: ``*`` spans ``/``).
        match: only look at processes whose command line contains this (cheaper, and safer).
        sig: the signal.
        timeout_s, poll_s: how long and how often to look (writes of small files are brief).
    Returns:
        The process and the file it was writing.
    """
    candidates: list[psutil.Process] = []
    refreshed = 0.0

    def pick():
        nonlocal candidates, refreshed
        if time.monotonic() - refreshed > 0.5:  # new writers appear (a rank restarts)
            candidates = []
            for p in psutil.process_iter():
                try:
                    if p.pid != os.getpid() and (match is None or match in " ".join(p.cmdline())):
                        candidates.append(p)
                except (psutil.Error, OSError):
                    continue
            refreshed = time.monotonic()
        for p in candidates:
            path = _open_for_writing(p.pid, path_glob)
            if path:
                return p, path
        return None

    victim, path = _wait_for(pick, timeout_s, poll_s, f"process writing {path_glob!r}")
    info = _describe(victim, sig, 0.0, path)  # before the kill: a dead process has no environment
    info.at = time.time()
    try:
        os.kill(victim.pid, sig)
    except ProcessLookupError:
        raise FaultError(f"pid {victim.pid} ended before it could be signalled") from None
    return info


# -- nodes of the emulated cluster -----------------------------------------------------------------

@dataclass
class NodeFault:
    """A node taken out of the emulated cluster, and how; :func:`node_up` undoes it."""

    node: str
    how: str
    at: float
    killed: list[int] = field(default_factory=list)  #: pids killed inside the node ("crash")


def _cluster_paths(cluster, node: str):
    # The emulated cluster's own layout of its state dir (pid files, logs), so a restarted
    # slurmd is found and stopped by `hpcbench cluster down` like the others.
    from hpcbench.cluster.emulated import _layout

    layout = _layout(cluster.state_dir)
    return layout.pid_file(f"slurmd-{node}"), layout.log / f"slurmd-{node}.out"


def _scontrol(cluster, *args: str, check: bool = True):
    from hpcbench.cluster.slurm_daemons import slurm_client

    return slurm_client(["scontrol", *args], cluster.slurm_conf, timeout=30, check=check)


def node_down(cluster, node: str, *, how: str = "slurmd", notify: bool = True) -> NodeFault:
    """Take node ``node`` of a running emulated cluster out, for real.

    Args:
        cluster: the :class:`~hpcbench.cluster.ClusterInfo`.
        node: its name, e.g. ``"n2"``.
        how: ``"slurmd"`` stops its slurmd (running job steps go on; nothing new starts there);
            ``"crash"`` SIGKILLs every process inside the node (slurmd, slurmstepd, the job's
            ranks), as a power loss would; ``"link"`` takes its link down (the node goes silent).
        notify: tell slurmctld at once that the node is down (``scontrol update State=DOWN``),
            which it would otherwise conclude only after ``SlurmdTimeout`` (60 s here, 300 s by
            default): jobs on the node then end NODE_FAIL and srun reports the node failure.
    Returns:
        What was done, and when.
    """
    from hpcbench.cluster import daemons
    from hpcbench.cluster.host_commands import run_command

    if how not in NODE_HOW:
        raise FaultError(f"how={how!r}; allowed: {list(NODE_HOW)}")
    info = cluster.node(node)
    pid_file, _ = _cluster_paths(cluster, node)
    fault = NodeFault(node, how, time.time())
    if how == "slurmd":
        daemons.stop_daemon(pid_file)
    elif how == "crash":
        pids = [int(p) for p in run_command(["ip", "netns", "pids", info.netns], check=False).stdout.split()
                if p.isdigit()]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        fault.killed = pids
        daemons.stop_daemon(pid_file, timeout=2)  # reaps it if we started it; removes the pid file
    else:
        run_command(["ip", "link", "set", info.veth_host, "down"])
    if notify:
        _scontrol(cluster, "update", f"NodeName={node}", "State=DOWN", "Reason=hpcbench_fault_injection")
    return fault


def node_up(cluster, fault: NodeFault | str, *, timeout_s: float = 60.0) -> float:
    """Bring a node back (slurmd restarted, or link up) and wait until SLURM can schedule on it.

    Args:
        cluster: the :class:`~hpcbench.cluster.ClusterInfo`.
        fault: what :func:`node_down` returned, or a node name (then slurmd is (re)started and
            the link set up, whichever was wrong).
        timeout_s: how long to wait for the node to be ``idle`` (or allocated) in sinfo.
    Returns:
        Seconds until it was schedulable again.
    """
    from hpcbench.cluster import daemons, slurm_daemons
    from hpcbench.cluster.host_commands import run_command

    t0 = time.monotonic()
    node = fault.node if isinstance(fault, NodeFault) else fault
    info = cluster.node(node)
    pid_file, out_file = _cluster_paths(cluster, node)
    run_command(["ip", "link", "set", info.veth_host, "up"], check=False)
    if not daemons.is_running(pid_file):
        slurm_daemons.start_slurmd(node, info.netns, cluster.slurm_conf, cluster.hosts_file, pid_file, out_file)
    deadline = time.monotonic() + timeout_s
    resumed = False
    state = "?"
    while time.monotonic() < deadline:
        state = slurm_daemons.node_states(cluster.slurm_conf).get(node, "?")
        base = state.rstrip("*~#!%$@^-")
        if base in ("idle", "alloc", "mix") and not state.endswith("*"):
            return time.monotonic() - t0
        if not resumed and daemons.is_running(pid_file) and base in ("down", "drain", "drng", "fail", "comp"):
            # Registered again but still marked down or draining by our notify (or by
            # slurmctld's own "not responding"): return it to service as an admin would.
            if _scontrol(cluster, "update", f"NodeName={node}", "State=RESUME", check=False).returncode == 0:
                resumed = True
        time.sleep(0.3)
    raise FaultError(f"node {node} not schedulable {timeout_s:g} s after node_up (sinfo state {state!r}); "
                     f"see {out_file}")


# -- data and disks ------------------------------------------------------------------------------

@dataclass
class ShardDamage:
    path: str
    how: str
    offset: int
    bytes_before: int
    at: float


def corrupt_shard(path: str | os.PathLike, *, how: str = "flip", at: float = 0.5) -> ShardDamage:
    """Damage a data shard in place: flip one byte (``"flip"``) or cut the file (``"truncate"``).

    Args:
        path: the shard file.
        how: ``flip`` (size unchanged: only a sha256 check sees it) or ``truncate``.
        at: where, as a fraction of the file's size.
    """
    path = Path(path)
    size = path.stat().st_size
    offset = min(size - 1, max(0, int(size * at)))
    if how == "flip":
        with open(path, "r+b") as fh:
            fh.seek(offset)
            byte = fh.read(1)
            fh.seek(offset)
            fh.write(bytes([byte[0] ^ 0xFF]))
    elif how == "truncate":
        os.truncate(path, offset)
    else:
        raise FaultError(f"how={how!r}; allowed: ['flip', 'truncate']")
    return ShardDamage(str(path), how, offset, size, time.time())


@contextlib.contextmanager
def full_disk(folder: str | os.PathLike, size: str = "1M", *, fill: bool = False,
              namespace_pid: int | None = None) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` over ``folder`` for the ``with`` block: writes past it fail ENOSPC.

    What was in ``folder`` is hidden (not touched) while the tmpfs is mounted and visible
    again afterwards.

    Args:
        folder: the folder (created if needed), e.g. the checkpoint folder.
        size: the tmpfs size, in mount(8) syntax (``64k``, ``1M``).
        fill: also fill it to the last byte, so the very first write fails.
        namespace_pid: mount inside the mount namespace of this process (a node's slurmd on the
            emulated cluster, whose jobs do not see mounts made on the host after it started).
    Yields:
        The folder.
    """
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    enter = ["nsenter", "-t", str(namespace_pid), "--mount"] if namespace_pid else []

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([*enter, *argv], capture_output=True, text=True, timeout=30)

    proc = run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "hpcbench-full-disk", str(folder))
    if proc.returncode != 0:
        raise FaultError(f"cannot mount a {size} tmpfs on {folder} (needs root): {proc.stderr.strip()}")
    try:
        if fill:
            run("dd", "if=/dev/zero", f"of={folder / '.filler'}", "bs=4k")  # stops at ENOSPC, as meant
        yield folder
    finally:
        if run("umount", str(folder)).returncode != 0:
            run("umount", "-l", str(folder))  # a process still holds a file there: detach now
