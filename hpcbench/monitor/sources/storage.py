"""Storage latency: the loader's own reads, the block devices, and Lustre where mounted.

* ``storage_read_p99``: P99 of the per-read latencies the data loader reported during the
  interval, through a :class:`ReadLatencyFeed` (the guide's "storage latency P99", C6).
  This is the latency training actually waits for, whatever the file system.
* ``disk_read_await`` per disk: delta "time spent reading (ms)" / delta "reads completed"
  from ``/proc/diskstats`` (fields 4 and 7, Documentation/admin-guide/iostats.rst), the
  mean (not P99: the kernel keeps no distribution) device time per read, as ``iostat``'s
  r_await.
* ``lustre_read_mean_latency`` per Lustre client mount, from ``llite/*/stats`` lines
  ``read N samples [usecs] min max sum ...`` under ``/proc/fs/lustre`` or
  ``/sys/kernel/debug/lustre``: a mean, since Lustre keeps min/max/sum only.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path
from typing import Callable, Iterable, Sequence

from hpcbench.core.metrics import percentile
from hpcbench.monitor.sources.base import Sample, Source

_RECORD = struct.Struct("<d")
_PARTITION = re.compile(r"p?\d+$")
_VIRTUAL_DISKS = ("loop", "ram", "zram", "fd", "sr")
LUSTRE_ROOTS = ("/proc/fs/lustre", "/sys/kernel/debug/lustre")


class ReadLatencyFeed:
    """A file of read latencies that loader processes append to and the sampler drains.

    Each :meth:`record_read` is one ``O_APPEND`` write of 8 bytes (a little-endian
    double, seconds), atomic between processes on a local file system, so DataLoader
    workers, ranks and the sampler can share one feed without locks. The object pickles
    to its path only, so it can be handed to worker processes.

    Args:
        path: the feed file (created on first write, with its folder); put it on local disk, next to
            the sampler's records.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._fd: int | None = None
        self._pid: int | None = None
        self._offset = 0

    def record_read(self, seconds: float) -> None:
        """Report one read that took ``seconds`` (call it right after the read returns)."""
        if self._fd is None or self._pid != os.getpid():  # a forked worker opens its own descriptor
            # The feed's name often comes from a node name, and an emulated node's ("host/node0") holds a
            # slash: its folder may not exist yet. Every writer makes it, so no caller has to know.
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._pid = os.getpid()
        os.write(self._fd, _RECORD.pack(float(seconds)))

    def read_new(self) -> list[float]:
        """The latencies appended since the previous call (reader side)."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        whole = len(data) - len(data) % _RECORD.size
        self._offset += whole
        return [v for (v,) in _RECORD.iter_unpack(data[:whole])]

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"ReadLatencyFeed({str(self.path)!r})"


def read_diskstats(path: str | Path) -> dict[str, dict[str, float]]:
    """``/proc/diskstats`` as ``{disk: {"reads": completed, "read_ms": time reading}}``."""
    out = {}
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if len(parts) >= 7:
            out[parts[2]] = {"reads": float(parts[3]), "read_ms": float(parts[6])}
    return out


def whole_disks(names: Sequence[str]) -> list[str]:
    """``names`` without virtual devices (loop, zram...) and partitions (vda1, nvme0n1p2)."""
    real = [n for n in names if not n.startswith(_VIRTUAL_DISKS)]
    return [n for n in real
            if not any(n != other and n.startswith(other) and _PARTITION.fullmatch(n[len(other):])
                       for other in real)]


def read_lustre_read_latency(stats: str | Path) -> tuple[float, float] | None:
    """``(count, sum in µs)`` of the ``read ... [usecs]`` line of one llite stats file, if any."""
    for line in Path(stats).read_text().splitlines():
        parts = line.split()
        # read  <count> samples [usecs] <min> <max> <sum> [<sumsq>]
        if len(parts) >= 7 and parts[0] == "read" and parts[3] == "[usecs]":
            return float(parts[1]), float(parts[6])
    return None


class StorageSource(Source):
    """Loader read latencies, block-device read times and Lustre client latencies.

    Args:
        feed: the loader's :class:`ReadLatencyFeed` (or its path); without one,
            ``storage_read_p99`` is absent with the reason.
        root: the procfs root (default ``/proc``); reads ``<root>/diskstats``.
        disks: disks to report (default: every whole, non-virtual disk).
        lustre_roots: where Lustre client stats may be (``llite/*/stats`` below them).
    """

    name = "storage"
    metrics = ("storage_read_p99", "storage_read_count", "disk_read_await", "disk_reads_per_s",
               "lustre_read_mean_latency")

    def __init__(self, *, feed: ReadLatencyFeed | str | os.PathLike | None = None, root: str | Path = "/proc",
                 disks: Sequence[str] | None = None, lustre_roots: Sequence[str | Path] = LUSTRE_ROOTS,
                 clock: Callable[[], float] | None = None):
        super().__init__(clock=clock)
        self.feed = feed if isinstance(feed, ReadLatencyFeed) or feed is None else ReadLatencyFeed(feed)
        self.diskstats = Path(root) / "diskstats"
        self.disks = list(disks) if disks is not None else None
        self.lustre_roots = [Path(p) for p in lustre_roots]

    def lustre_stats(self) -> list[Path]:
        return sorted(s for r in self.lustre_roots if r.is_dir() for s in r.glob("llite/*/stats"))

    def available(self) -> str | None:
        if self.feed is None:
            self.absent_metrics["storage_read_p99"] = "no ReadLatencyFeed: the data loader does not report its reads"
        if not self.lustre_stats():
            self.absent_metrics["lustre_read_mean_latency"] = (
                "no Lustre client here (no llite stats under " + " or ".join(map(str, self.lustre_roots)) + ")")
        if not self.diskstats.exists():
            self.absent_metrics["disk_read_await"] = f"{self.diskstats} does not exist"
        if self.feed is None and not self.diskstats.exists() and not self.lustre_stats():
            return "no storage counters: no read feed, no diskstats, no Lustre client"
        return None

    def _read(self) -> Iterable[Sample]:
        now = self.clock()
        if self.feed is not None:
            latencies = self.feed.read_new()
            yield Sample("storage_read_count", float(len(latencies)), "1", {})
            if latencies:
                yield Sample("storage_read_p99", percentile(latencies, 99), "s", {})
        if self.diskstats.exists():
            stats = read_diskstats(self.diskstats)
            for disk in self.disks if self.disks is not None else whole_disks(list(stats)):
                if disk not in stats:
                    continue
                got = self._deltas(("disk", disk), stats[disk], now)
                if got is None:
                    continue
                d, dt = got
                labels = {"disk": disk}
                yield Sample("disk_reads_per_s", d["reads"] / dt, "1/s", labels)
                if d["reads"] > 0:  # no reads: await undefined, no row
                    yield Sample("disk_read_await", d["read_ms"] / 1e3 / d["reads"], "s", labels)
        for stats_file in self.lustre_stats():
            found = read_lustre_read_latency(stats_file)
            if found is None:
                continue
            fs = stats_file.parent.name
            got = self._deltas(("lustre", fs), {"count": found[0], "usecs": found[1]}, now)
            if got is not None and got[0]["count"] > 0:
                d = got[0]
                yield Sample("lustre_read_mean_latency", d["usecs"] / 1e6 / d["count"], "s", {"fs": fs})


SOURCE = StorageSource
