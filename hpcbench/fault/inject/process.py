"""Process faults: a rank killed mid-step, a writer killed mid-write, a job's running try killed.

Nothing here is a mock: each is a real signal to a real process, found by its command line and
environment (never by name alone), and each returns what it did and when (``time.time()``), so
a caller can measure how long detection and recovery took from the moment of the fault.
Signals to other users' processes need root.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import signal
import time
from dataclasses import dataclass
from typing import Callable, Mapping

import psutil

from hpcbench.dist.topology import SRUN_RANKS_ENV
from hpcbench.fault.inject.base import FaultError

#: What torchrun sets in every rank it starts (and not in itself).
RANK_ENV = "RANK"
#: A rank srun started itself (hpcbench's SLURM launcher, flagged by SRUN_RANKS_ENV) carries its rank here.
SRUN_RANK_ENV = "SLURM_PROCID"
#: torchrun's agent; it carries the ranks' command line too but is not a rank.
TORCHRUN_MODULE = "torch.distributed.run"
#: Launcher programs whose own command line holds the ranks' (torchrun's agent is told by TORCHRUN_MODULE).
LAUNCHER_NAMES = ("srun",)


@dataclass
class KilledProcess:
    """One process that was sent a signal."""

    pid: int
    signal: str
    at: float                      #: time.time() when the signal was sent
    rank: int | None = None        #: its rank, when torchrun or hpcbench's srun launch started it
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

    A rank is a process torchrun started (``RANK`` in its environment), not torchrun itself, or
    a task of hpcbench's srun launch (``HPCBENCH_SRUN_RANKS=1``, its rank in ``SLURM_PROCID``).
    """
    found = []
    for p in psutil.process_iter():
        try:
            argv = p.cmdline()
            cmd = " ".join(argv)
            if (match not in cmd or TORCHRUN_MODULE in cmd or os.path.basename(argv[0]) in LAUNCHER_NAMES
                    or p.status() == psutil.STATUS_ZOMBIE):
                continue
            penv = p.environ()
        except (psutil.Error, OSError):
            continue
        if _rank_of(penv) is not None and all(penv.get(k) == v for k, v in (env or {}).items()):
            found.append(p)
    return found


def _rank_of(penv: Mapping[str, str]) -> int | None:
    """The rank a process's starting environment gives it (torchrun's RANK, or srun's task id), else None."""
    raw = penv.get(RANK_ENV)
    if raw is None and penv.get(SRUN_RANKS_ENV) == "1":
        raw = penv.get(SRUN_RANK_ENV)
    return int(raw) if raw is not None and raw.isdigit() else None


def _describe(p: psutil.Process, sig: signal.Signals, at: float, path: str | None = None) -> KilledProcess:
    try:
        penv, cmd = p.environ(), " ".join(p.cmdline())
    except (psutil.Error, OSError):
        penv, cmd = {}, ""
    return KilledProcess(p.pid, sig.name, at, _rank_of(penv), penv.get("SLURMD_NODENAME"), cmd, path)


def kill_one_rank(match: str, *, sig: signal.Signals = signal.SIGKILL, rank: int | None = None,
                  env: Mapping[str, str] | None = None, when: Callable[[], bool] | None = None,
                  timeout_s: float = 120.0, poll_s: float = 0.2) -> KilledProcess:
    """Wait for a rank process, then signal it (mid-step: the ranks are training by then).

    Args:
        match: text in the rank's command line, e.g. ``"hpcbench train"``.
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


def kill_try_groups(parent_pid: int, sig: signal.Signals = signal.SIGKILL) -> list[int]:
    """Signal every process group of ``parent_pid``'s descendants outside its own group (a job's running try).

    A job wrapper starts each try in a process group of its own, so this strikes the try and all it
    started, and never the wrapper, as a node's failure strikes what runs on it.

    Returns:
        The process groups signalled (empty when no try was running).
    """
    return kill_process_groups(try_groups(parent_pid), sig)


def kill_process_groups(groups: list[int], sig: signal.Signals = signal.SIGKILL) -> list[int]:
    """Signal each process group of ``groups``; one that has ended meanwhile is skipped. Returns ``groups``."""
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    return groups


def try_groups(parent_pid: int, match: str | None = None) -> list[int]:
    """Process groups of ``parent_pid``'s live descendants outside its own group.

    Args:
        match: only groups holding a live process whose command line contains it. A wrapper's own
            helpers can sit in groups of their own too: GNU ``timeout`` moves itself and its command
            into a new group, so ``timeout 5 sinfo`` between two tries looks like a try to a search
            by group alone.
    """
    try:
        own = os.getpgid(parent_pid)
        children = psutil.Process(parent_pid).children(recursive=True)
    except (psutil.Error, ProcessLookupError):
        return []
    groups, matched = set(), set()
    for child in children:
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            group = os.getpgid(child.pid)
            if group == own:
                continue
            groups.add(group)
            if match is not None and match in " ".join(child.cmdline()):
                matched.add(group)
    return sorted(groups if match is None else matched)
