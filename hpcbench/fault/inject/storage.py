"""Storage faults: reads throttled at the block layer, a disk that fills up.

* :class:`SlowStorage` — cgroup v1 ``blkio.throttle.read_bps_device`` / ``read_iops_device``
  for the disk holding the data set, on a new blkio cgroup that the node's rank processes are
  moved into (and moved back out of). Only reads that reach the disk are throttled: the reader
  must evict its file from the page cache (``posix_fadvise(DONTNEED)``) or read with O_DIRECT.
* :func:`full_disk` — a tiny tmpfs over a folder for a ``with`` block: writes past it fail ENOSPC.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterable, Iterator

from hpcbench.fault.inject.base import FAULT_KINDS, FaultError, FaultKind, FaultSite, NodeFault, NodeFaultError
from hpcbench.fault.inject.cgroups import move_back, move_in, remove_cgroup

#: Where cgroup v1 mounts the blkio controller.
BLKIO_ROOT = Path("/sys/fs/cgroup/blkio")
#: Prefix of every cgroup made here (removed again on exit).
CGROUP_PREFIX = "hpcbench-slow-storage"


def block_device_of(path: str | os.PathLike) -> str:
    """``MAJ:MIN`` of the whole disk holding ``path`` (a partition's parent disk), for blkio's throttles.

    Raises:
        NodeFaultError: the file system has no block device (tmpfs, overlay, NFS...): nothing
            a block-layer throttle could slow down.
    """
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    sysdev = Path(f"/sys/dev/block/{major}:{minor}")
    if not sysdev.exists():
        raise NodeFaultError(f"{path} is on device {major}:{minor}, which is no block device (tmpfs, overlay or a "
                             f"network file system): a block-layer read throttle cannot slow it down")
    real = sysdev.resolve()
    if (real / "partition").exists():  # throttles act on the disk's request queue
        return (real.parent / "dev").read_text().strip()
    return f"{major}:{minor}"


def storage_throttle_problem(path: str | os.PathLike) -> str | None:
    """None when :class:`SlowStorage` can work on ``path`` here, else exactly why not."""
    if not (BLKIO_ROOT / "blkio.throttle.read_bps_device").exists():
        return (f"no cgroup v1 blkio controller with throttles at {BLKIO_ROOT} (a cgroup v2-only host would need "
                f"io.max instead)")
    if os.geteuid() != 0:
        return "creating a blkio cgroup and moving processes into it needs root"
    try:
        block_device_of(path)
    except (NodeFaultError, OSError) as exc:
        return str(exc)
    return None


class SlowStorage(NodeFault):
    """Reads from the disk holding ``path`` throttled for the processes ``pids`` (a node's ranks).

    Args:
        node: the node's name, for the log.
        pids: the processes to throttle (each moves with all its threads).
        path: a file on the disk to throttle (the data set).
        read_bps: bytes per second of reads from that disk, for those processes.
        read_iops: read requests per second (``None``: not limited).
    """

    kind = "slow_storage"

    def __init__(self, node: str, pids: Iterable[int], path: str | os.PathLike, *, read_bps: int,
                 read_iops: int | None = None) -> None:
        super().__init__(node)
        self.pids = sorted(set(int(p) for p in pids))
        if not self.pids:
            raise NodeFaultError("no process to throttle")
        if read_bps < 1 or (read_iops is not None and read_iops < 1):
            raise NodeFaultError(f"read_bps={read_bps}, read_iops={read_iops}: give limits >= 1")
        problem = storage_throttle_problem(path)
        if problem:
            raise NodeFaultError(f"cannot throttle reads of {path}: {problem}")
        self.path, self.read_bps, self.read_iops = Path(path), int(read_bps), read_iops
        self.device = block_device_of(path)
        self.cgroup = BLKIO_ROOT / f"{CGROUP_PREFIX}-{node.replace('/', '_')}-{os.getpid()}"
        self._origin: dict[int, str] = {}

    def _apply(self) -> None:
        self.cgroup.mkdir()
        self.log.actions.append(f"created blkio cgroup {self.cgroup}")
        (self.cgroup / "blkio.throttle.read_bps_device").write_text(f"{self.device} {self.read_bps}\n")
        self.log.actions.append(f"blkio.throttle.read_bps_device = {self.device} {self.read_bps}")
        if self.read_iops is not None:
            (self.cgroup / "blkio.throttle.read_iops_device").write_text(f"{self.device} {self.read_iops}\n")
            self.log.actions.append(f"blkio.throttle.read_iops_device = {self.device} {self.read_iops}")
        move_in(self.cgroup, self.pids, "blkio", self._origin, self.log)

    def _undo(self) -> None:
        move_back(self._origin, BLKIO_ROOT, "blkio", self.log)
        stats = self.cgroup / "blkio.throttle.io_service_bytes"
        if stats.exists():
            for line in stats.read_text().splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[0] == self.device and parts[1] == "Read":
                    self.log.counters["read_bytes"] = float(parts[2])
        remove_cgroup(self.cgroup, BLKIO_ROOT, self.log)


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


def _slow_storage(site: FaultSite) -> SlowStorage | str:
    shards = sorted(site.data.glob("*.h5"))
    if not shards:
        return f"no data shard under {site.data} to find the disk of"
    s = site.settings
    # SlowStorage names its cgroup after the node: an emulated node's name ("host/node1") holds a slash
    return SlowStorage(site.node, site.pids, shards[0], read_bps=s.storage_read_bps, read_iops=s.storage_read_iops)


FAULT_KINDS.register("slow_storage", FaultKind(
    "slow_storage", "cgroup-v1 blkio read throttle on the disk holding the data set, for the node's ranks",
    _slow_storage, reads=("storage_read_bps", "storage_read_iops")))
