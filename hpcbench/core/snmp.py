"""``/proc/net/snmp``'s text: the kernel's per-protocol counters of one network namespace.

The monitor's TCP source (:mod:`hpcbench.monitor.sources.tcp`) and the link faults
(:mod:`hpcbench.fault.inject.link`) both read TCP's segment counters here. The file belongs to
the network namespace of the process that reads it: on the emulated cluster each node's
namespace has its own, so the faults read a node's by running ``cat`` inside it and parse the
text with :func:`parse_snmp`.
"""

from __future__ import annotations

from pathlib import Path

#: Where this process's namespace shows its counters.
SNMP_PATH = "/proc/net/snmp"
#: The TCP counters both readers need. Linux counts ``OutSegs`` without retransmitted segments
#: (RFC 1213 tcpOutSegs), so RetransSegs / OutSegs is retransmitted per newly sent segment.
TCP_SEGMENTS = ("OutSegs", "RetransSegs")


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


def read_snmp(path: str | Path = SNMP_PATH) -> dict[str, dict[str, float]]:
    """:func:`parse_snmp` of the file at ``path``."""
    return parse_snmp(Path(path).read_text())


def tcp_segments(tables: dict[str, dict[str, float]]) -> dict[str, float] | None:
    """``{"OutSegs": ..., "RetransSegs": ...}`` from parsed tables, or None when either is missing."""
    tcp = tables.get("Tcp", {})
    if not all(name in tcp for name in TCP_SEGMENTS):
        return None
    return {name: tcp[name] for name in TCP_SEGMENTS}
