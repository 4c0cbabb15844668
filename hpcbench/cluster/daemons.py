"""Start daemons in the foreground and stop exactly those, by pid file.

Each daemon is started with its "do not fork" flag, so the pid ``Popen`` returns is
the daemon itself (``nsenter``, ``unshare`` and ``sh -c 'exec ...'`` all exec in place).
The pid file holds ``PID START_TICKS``: the start time from ``/proc/PID/stat`` guards
against signalling an unrelated process that reused the pid. Nothing is ever found or
killed by name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Mapping, Sequence

from hpcbench.cluster.host_commands import ClusterError


def _start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks), None if gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; fields after the last ')' are fixed.
    rest = stat.rsplit(")", 1)[1].split()
    if rest[0] in ("Z", "X"):
        return None
    return int(rest[19])


def start_daemon(argv: Sequence[str], *, pid_file: Path, log_file: Path, env: Mapping[str, str] | None = None,
                 user: str | None = None) -> int:
    """Start ``argv`` detached (own session), log stdout/stderr, record its pid.

    Args:
        argv: the daemon's command line, with its foreground flag.
        pid_file: where ``PID START_TICKS`` is written.
        log_file: receives the daemon's stdout and stderr (opened before dropping privileges).
        env: its environment (default: inherit).
        user: run as this user (and its group, no supplementary groups).
    Returns:
        The daemon's pid.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        try:
            proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, env=dict(env) if env is not None else None,
                                    user=user, group=user, extra_groups=[] if user else None)
        except FileNotFoundError:
            raise ClusterError(f"{argv[0]} is not installed") from None
    ticks = _start_ticks(proc.pid)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{proc.pid} {ticks or 0}\n")
    return proc.pid


def read_pid_file(pid_file: Path) -> tuple[int, int] | None:
    try:
        pid, ticks = pid_file.read_text().split()[:2]
        return int(pid), int(ticks)
    except (OSError, ValueError):
        return None


def process_alive(record: tuple[int, int]) -> bool:
    """Whether ``(pid, start_ticks)`` (as read from a pid file) is still that live process."""
    _reap(record[0])
    return _start_ticks(record[0]) == record[1]


def is_running(pid_file: Path) -> bool:
    """Whether the process recorded in ``pid_file`` is still the one we started and alive."""
    record = read_pid_file(pid_file)
    return record is not None and process_alive(record)


def stop_daemon(pid_file: Path, *, timeout: float = 10) -> bool:
    """SIGTERM the recorded process, SIGKILL it after ``timeout``; remove the pid file.

    Returns:
        True when a live process was signalled.
    """
    record = read_pid_file(pid_file)
    signalled = False
    if record is not None and is_running(pid_file):
        signalled = _terminate([record[0]], timeout)
    pid_file.unlink(missing_ok=True)
    return signalled


def terminate_pids(pids: Sequence[int], *, timeout: float = 5) -> bool:
    """SIGTERM then SIGKILL the given pids (used for processes left inside our namespaces)."""
    return _terminate(list(pids), timeout)


def _terminate(pids: list[int], timeout: float) -> bool:
    ticks = {pid: _start_ticks(pid) for pid in pids}
    live = [pid for pid, t in ticks.items() if t is not None]
    for pid in live:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = [pid for pid in live if _reap(pid) or _start_ticks(pid) == ticks[pid]]
        if not live:
            return True
        time.sleep(0.05)
    for pid in live:
        if _start_ticks(pid) == ticks[pid]:
            _signal(pid, signal.SIGKILL)
    time.sleep(0.1)
    for pid in live:
        _reap(pid)
    return True


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> bool:
    """Collect a zombie child of this process (daemons we started); always False."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    return False
