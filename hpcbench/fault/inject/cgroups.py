"""cgroup v1 moves for the faults that limit a node's processes (blkio throttles, CPU quotas).

A fault makes its own cgroup under the controller's root, moves the node's processes into it
with all their threads (``cgroup.procs``), and on undo moves them back to where they were and
removes the cgroup, also when a process has exited meanwhile.
"""

from __future__ import annotations

from pathlib import Path

from hpcbench.fault.inject.base import FaultLog, NodeFaultError


def cgroup_v1_of(pid: int, controller: str) -> str:
    """The cgroup (v1) of ``pid`` for ``controller`` (``"cpu"``, ``"blkio"``), e.g. ``/`` or ``/slurm/job_3``."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    raise NodeFaultError(f"process {pid} is in no {controller} cgroup (/proc/{pid}/cgroup): this kernel mounts no "
                         f"cgroup v1 {controller} controller")


def blkio_cgroup_of(pid: int) -> str:
    """The blkio cgroup (v1) of ``pid``, e.g. ``/`` or ``/slurm/job_3``."""
    return cgroup_v1_of(pid, "blkio")


def move_in(cgroup: Path, pids: list[int], controller: str, origin: dict[int, str], log: FaultLog) -> None:
    """Move each of ``pids`` into ``cgroup``, noting where it was in ``origin`` (for :func:`move_back`)."""
    for pid in pids:
        origin[pid] = cgroup_v1_of(pid, controller)
        (cgroup / "cgroup.procs").write_text(f"{pid}\n")
        log.actions.append(f"moved pid {pid} from {controller}:{origin[pid]} into it")


def move_back(origin: dict[int, str], root: Path, controller: str, log: FaultLog) -> None:
    """Move each pid of ``origin`` back into its cgroup (``root``/path), logging it; ``origin`` is emptied.

    A process that has exited meanwhile is noted, not an error.
    """
    for pid, path in list(origin.items()):
        try:
            (root / path.lstrip("/") / "cgroup.procs").write_text(f"{pid}\n")
            log.actions.append(f"moved pid {pid} back to {controller}:{path}")
        except ProcessLookupError:
            log.actions.append(f"pid {pid} had exited")
        except OSError as exc:
            if exc.errno != 3:  # ESRCH: gone
                raise
    origin.clear()


def remove_cgroup(cgroup: Path, root: Path, log: FaultLog) -> None:
    """Remove ``cgroup`` if it exists, first moving any process still in it to ``root``."""
    if not cgroup.exists():
        return
    # Threads a moved process started while inside stay there: move any leftover out first.
    for pid in (cgroup / "cgroup.procs").read_text().split():
        try:
            (root / "cgroup.procs").write_text(f"{pid}\n")
        except OSError:
            pass
    cgroup.rmdir()
    log.actions.append(f"removed {cgroup}")
