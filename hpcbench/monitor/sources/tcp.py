"""TCP retransmissions from ``/proc/net/snmp``: the Ethernet stand-in for the IB rate.

``tcp_retransmission_rate`` = delta ``RetransSegs`` / delta ``OutSegs`` over the interval.
Linux counts ``OutSegs`` without retransmitted segments (RFC 1213 tcpOutSegs), so this is
retransmitted per newly sent segment. The file belongs to the network namespace of the
process that reads it: on the emulated cluster each node's namespace has its own, so a
degraded link on one node shows on that node only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

from hpcbench.monitor.sources import Sample, Source


def parse_snmp(text: str) -> dict[str, dict[str, float]]:
    """``/proc/net/snmp``'s text as ``{"Tcp": {"OutSegs": ..., ...}, "Udp": {...}}`` (header line, value line)."""
    tables: dict[str, dict[str, float]] = {}
    header: dict[str, list[str]] = {}
    for line in text.splitlines():
        proto, _, rest = line.partition(":")
        fields = rest.split()
        if proto not in header:
            header[proto] = fields
            continue
        values = {}
        for key, value in zip(header[proto], fields):
            try:
                values[key] = float(value)
            except ValueError:
                continue
        tables[proto] = values
    return tables


def read_snmp(path: str | Path) -> dict[str, dict[str, float]]:
    """:func:`parse_snmp` of the file at ``path``."""
    return parse_snmp(Path(path).read_text())


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
            tcp = read_snmp(self.path).get("Tcp", {})
        except OSError as exc:
            return f"cannot read {self.path}: {exc.strerror}"
        if "OutSegs" not in tcp or "RetransSegs" not in tcp:
            return f"{self.path} has no Tcp OutSegs/RetransSegs"
        return None

    def _read(self) -> Iterable[Sample]:
        tcp = read_snmp(self.path)["Tcp"]
        got = self._deltas(("tcp",), {"OutSegs": tcp["OutSegs"], "RetransSegs": tcp["RetransSegs"]}, self.clock())
        if got is None:
            return
        d, dt = got
        yield Sample("tcp_out_segs_per_s", d["OutSegs"] / dt, "1/s", {})
        if d["OutSegs"] > 0:  # nothing sent: the rate is undefined, not 0
            yield Sample("tcp_retransmission_rate", d["RetransSegs"] / d["OutSegs"], "fraction", {})


SOURCE = TcpSource
