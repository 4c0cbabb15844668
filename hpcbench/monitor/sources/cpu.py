"""CPU utilisation and steal from ``/proc/stat`` deltas.

The ``cpu`` line holds cumulative jiffies: user nice system idle iowait irq softirq steal
guest guest_nice. ``guest`` time is already inside ``user`` (proc(5)), so the total is the
first eight fields. ``cpu_utilization`` = 1 - delta (idle + iowait) / delta total: waiting
for I/O is idle CPU. ``cpu_steal`` = delta steal / delta total, the hypervisor's share
(non-zero on busy VMs, where it quietly slows every rank on the node).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

from hpcbench.monitor.sources.base import Sample, Source

_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def read_cpu_times(path: str | Path) -> dict[str, float]:
    """The aggregate ``cpu`` line of ``/proc/stat`` as ``{field: jiffies}``."""
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            return {name: float(v) for name, v in zip(_FIELDS, parts[1:])}
    raise ValueError(f"{path}: no aggregate 'cpu' line")


class CpuSource(Source):
    """Node-wide CPU time shares.

    Args:
        root: the procfs root (default ``/proc``); reads ``<root>/stat``.
    """

    name = "cpu"
    metrics = ("cpu_utilization", "cpu_steal")

    def __init__(self, *, root: str | Path = "/proc", clock: Callable[[], float] | None = None):
        super().__init__(clock=clock)
        self.path = Path(root) / "stat"

    def available(self) -> str | None:
        try:
            read_cpu_times(self.path)
        except (OSError, ValueError) as exc:
            return f"cannot read CPU times: {exc}"
        return None

    def _read(self) -> Iterable[Sample]:
        got = self._deltas(("cpu",), read_cpu_times(self.path), self.clock())
        if got is None:
            return
        d, _ = got
        total = sum(d.values())
        if total <= 0:
            return
        labels = {"cpu": "all"}
        yield Sample("cpu_utilization", 1.0 - (d["idle"] + d.get("iowait", 0.0)) / total, "fraction", labels)
        if "steal" in d:
            yield Sample("cpu_steal", d["steal"] / total, "fraction", labels)


SOURCE = CpuSource
