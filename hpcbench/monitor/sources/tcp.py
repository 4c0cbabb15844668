"""TCP retransmissions from ``/proc/net/snmp``: the Ethernet stand-in for the IB rate.

``tcp_retransmission_rate`` = delta ``RetransSegs`` / delta ``OutSegs`` over the interval.
Linux counts ``OutSegs`` without retransmitted segments (RFC 1213 tcpOutSegs), so this is
retransmitted per newly sent segment (the file is read by :mod:`hpcbench.core.snmp`,
which the link faults share). The file belongs to the network namespace of the
process that reads it: on the emulated cluster each node's namespace has its own, so a
degraded link on one node shows on that node only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

from hpcbench.core.snmp import read_snmp, tcp_segments
from hpcbench.monitor.sources.base import Sample, Source


class TcpSource(Source):
    """TCP counters of this network namespace.

    Args:
        root: the procfs root (default ``/proc``); reads ``<root>/net/snmp``.
    """

    name = "tcp"
    metrics = ("tcp_retransmission_rate", "tcp_out_segs_per_s")

    def __init__(self, *, root: str | Path = "/proc", clock: Callable[[], float] | None = None):
        super().__init__(clock=clock)
        self.path = Path(root) / "net" / "snmp"

    def available(self) -> str | None:
        try:
            segments = tcp_segments(read_snmp(self.path))
        except OSError as exc:
            return f"cannot read {self.path}: {exc.strerror}"
        if segments is None:
            return f"{self.path} has no Tcp OutSegs/RetransSegs"
        return None

    def _read(self) -> Iterable[Sample]:
        segments = tcp_segments(read_snmp(self.path))
        if segments is None:
            return
        got = self._deltas(("tcp",), segments, self.clock())
        if got is None:
            return
        d, dt = got
        yield Sample("tcp_out_segs_per_s", d["OutSegs"] / dt, "1/s", {})
        if d["OutSegs"] > 0:  # nothing sent: the rate is undefined, not 0
            yield Sample("tcp_retransmission_rate", d["RetransSegs"] / d["OutSegs"], "fraction", {})


SOURCE = TcpSource
