"""One process at a time per run dir: ``RUN_DIR/.hpcbench.lock`` names its holder.

Two runners on one run dir (``suite resume`` while the first run is live) move each
other's task folders and run tasks twice into one folder. The lock is a file created
with ``O_EXCL`` holding the holder's host, pid and process start time, so that

* a live holder is named in the refusal (host, pid, command, since when);
* a stale lock (same host, pid gone or reused by another process) is taken over,
  with a message; only one of two racing takers wins (the stale file is renamed away
  first, and ``rename`` succeeds once);
* a lock held on another host is never guessed stale: the message says how to break it.

A file, not ``flock``: run dirs live on shared file systems (NFS, Lustre) where
``flock`` is not reliable across clients, and a file survives to say who held it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil

from hpcbench.core.errors import HpcbenchError

LOCK_NAME = ".hpcbench.lock"
#: Locks this process holds, so that a hard exit (a second signal) still removes them.
_HELD: set["RunDirLock"] = set()


class RunDirLocked(HpcbenchError):
    """Another live process holds the run dir."""


@dataclass
class Holder:
    host: str
    pid: int
    started: float  # the process's start time (psutil create_time), to detect a reused pid
    since: str
    command: str

    @classmethod
    def me(cls) -> "Holder":
        from hpcbench.run.rundir import now

        return cls(socket.gethostname(), os.getpid(), psutil.Process().create_time(), now(),
                   " ".join(sys.argv)[:300])

    def alive(self) -> bool | None:
        """True/False on this host; None when the holder is on another host (unknowable here)."""
        if self.host != socket.gethostname():
            return None
        try:
            return abs(psutil.Process(self.pid).create_time() - self.started) < 1.0
        except psutil.Error:
            return False

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host} since {self.since} ({self.command})"


def read_holder(path: Path) -> Holder | None:
    try:
        return Holder(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise RunDirLocked(f"{path} exists but is not a readable lock ({exc}); if no hpcbench process "
                           f"uses this run dir, remove the file and retry") from None


class RunDirLock:
    """``with RunDirLock(run_dir):`` hold the run dir; raises :class:`RunDirLocked` if held."""

    def __init__(self, run_dir: Path):
        # Absolute: papermill changes the process's working directory while a notebook runs.
        self.path = Path(run_dir).absolute() / LOCK_NAME
        self.holder = Holder.me()
        self.held = False

    def acquire(self) -> None:
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            except FileExistsError:
                self._handle_existing()
                continue
            except OSError as exc:
                raise HpcbenchError(f"cannot create the lock {self.path}: {exc.strerror}") from None
            with os.fdopen(fd, "w") as fh:
                json.dump(self.holder.__dict__, fh)
            self.held = True
            _HELD.add(self)
            return
        raise RunDirLocked(f"could not take the lock {self.path}: other processes keep taking it")

    def _handle_existing(self) -> None:
        holder = read_holder(self.path)
        if holder is None:
            return  # released meanwhile: retry
        alive = holder.alive()
        if alive is None:
            raise RunDirLocked(f"{self.path.parent} is in use by {holder.describe()}; wait for it to end, "
                               f"or, if that process is gone, remove {self.path}")
        if alive:
            raise RunDirLocked(f"{self.path.parent} is in use by {holder.describe()}; "
                               "wait for it to end or stop it (Ctrl-C / kill -TERM)")
        stale = self.path.with_name(f"{LOCK_NAME}.stale-{holder.pid}-{os.getpid()}")
        try:
            os.rename(self.path, stale)  # only one racing taker succeeds
        except FileNotFoundError:
            return
        print(f"hpcbench: took over a stale lock of {self.path.parent} (holder {holder.describe()} "
              "is not running)", file=sys.stderr)
        stale.unlink(missing_ok=True)

    def release(self) -> None:
        if not self.held:
            return
        holder = read_holder(self.path)
        if holder is not None and holder.pid == self.holder.pid and holder.host == self.holder.host:
            self.path.unlink(missing_ok=True)
        self.held = False
        _HELD.discard(self)

    def __enter__(self) -> "RunDirLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def release_all() -> None:
    """Release every lock this process holds (before ``os._exit``, which skips ``with`` blocks)."""
    for lock in list(_HELD):
        try:
            lock.release()
        except HpcbenchError:
            pass
