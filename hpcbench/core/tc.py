"""tc(8)'s text: rates, delays and sizes as tc writes them, and the qdisc listings of ``tc [-s] qdisc show``.

Pure parsers: the commands run where their namespace is (:func:`hpcbench.cluster.network.read_qdiscs`),
and everyone who reads tc's output (the cluster's link shaping, the link faults, the tests) reads it
here, so tc's spelling (``50Mbit``, ``128Kb``, ``lat 0us``) is decoded once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)([kmgt]?)(i?)(bit|bps)$", re.IGNORECASE)
_DELAY_RE = re.compile(r"^(\d+(?:\.\d+)?)(s|sec|secs|ms|msec|msecs|us|usec|usecs)$", re.IGNORECASE)
_DELAY_FACTOR = {"s": 1.0, "sec": 1.0, "secs": 1.0, "ms": 1e-3, "msec": 1e-3, "msecs": 1e-3,
                 "us": 1e-6, "usec": 1e-6, "usecs": 1e-6}
# tc prints sizes with binary prefixes and a "b" for bytes (iproute2's sprint_size: 32000b, 128Kb, 1Mb)
_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)([kmg]?)b$", re.IGNORECASE)
_SENT_RE = re.compile(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+), overlimits (\d+) requeues (\d+)\)")
_BACKLOG_RE = re.compile(r"backlog (\S+) (\d+)p")


def parse_rate(text: str) -> float:
    """A tc rate (``"200mbit"``, ``"1gbit"``, ``"10mbps"``, tc's own ``"50Mbit"``) in bits per second.

    Units follow tc(8): ``bit`` is bits and ``bps`` is *bytes* per second; ``k/m/g/t``
    are powers of 1000, ``ki/mi/gi/ti`` of 1024. A bare number (tc reads bytes/s) is
    refused because it is too easy to misread. Raises ``ValueError`` when unreadable.
    """
    m = _RATE_RE.match(str(text).strip())
    if not m:
        raise ValueError(f"{text!r} is not a tc rate (use e.g. 100mbit, 1gbit, 10gbit)")
    number, prefix, binary, unit = m.groups()
    if binary and not prefix:
        raise ValueError(f"{text!r} is not a tc rate (use e.g. 100mbit, 1gbit, 10gbit)")
    power = " kmgt".index(prefix.lower() or " ")
    factor = 1024 ** power if binary else 1000 ** power
    return float(number) * factor * (8 if unit.lower() == "bps" else 1)


def format_rate(bps: float) -> str:
    """``bps`` (bits per second) as tc's text, in whole kbit/s; :func:`parse_rate` reads it back. Made only
    where a tc command line is built: everywhere else a rate is a number of bits per second."""
    return f"{max(1, int(round(float(bps) / 1e3)))}kbit"


def parse_delay(text: str) -> float:
    """A tc time (``"0.1ms"``, ``"2ms"``, ``"0ms"``, ``"50us"``) in seconds; ``ValueError`` if unreadable."""
    m = _DELAY_RE.match(str(text).strip())
    if not m:
        raise ValueError(f"{text!r} is not a tc delay (use e.g. 0ms, 0.1ms, 50us)")
    return float(m.group(1)) * _DELAY_FACTOR[m.group(2).lower()]


def parse_size(text: str) -> int:
    """A size as tc prints it (``"32000b"``, ``"128Kb"``, ``"1Mb"``: powers of 1024) in bytes."""
    m = _SIZE_RE.match(str(text).strip())
    if not m:
        raise ValueError(f"{text!r} is not a tc size (e.g. 32000b, 128Kb)")
    return int(round(float(m.group(1)) * 1024 ** " kmg".index(m.group(2).lower() or " ")))


@dataclass
class Qdisc:
    """One qdisc of a ``tc [-s] qdisc show`` listing; the statistics are None without ``-s``."""

    kind: str
    """``tbf``, ``netem``, ``noqueue``..."""
    handle: str
    """``10:``"""
    parent: str
    """``root`` or the parent class (``1:1``)"""
    dev: str | None = None
    """the device, when the listing covers several (``tc qdisc show`` without ``dev``)"""
    options: dict[str, str] = field(default_factory=dict)
    """every ``key value`` pair after the parent (``rate``, ``burst``, ``lat``, ``limit``, ``delay``...)"""
    text: str = ""
    """the qdisc's own line, as tc wrote it"""
    sent_bytes: int | None = None
    sent_packets: int | None = None
    dropped: int | None = None
    overlimits: int | None = None
    requeues: int | None = None
    backlog_packets: int | None = None

    @property
    def rate_bps(self) -> float | None:
        """The shaped rate (tbf), bits per second."""
        return parse_rate(self.options["rate"]) if "rate" in self.options else None

    @property
    def burst_bytes(self) -> int | None:
        return parse_size(self.options["burst"]) if "burst" in self.options else None

    @property
    def delay_s(self) -> float | None:
        """netem's added delay, seconds."""
        return parse_delay(self.options["delay"]) if "delay" in self.options else None


def parse_qdiscs(text: str) -> list[Qdisc]:
    """The qdiscs of ``tc qdisc show`` or ``tc -s qdisc show`` output, in tc's order.

    Each ``qdisc KIND HANDLE [dev DEV] root|parent P [refcnt N] key value...`` line starts one;
    with ``-s`` the indented ``Sent ... (dropped ...)`` and ``backlog`` lines below it fill in its
    counters. Options that are lone flags (``ecn``) are kept with an empty value.
    """
    found: list[Qdisc] = []
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 3 and words[0] == "qdisc":
            q = Qdisc(kind=words[1], handle=words[2], parent="", text=line.strip())
            rest = words[3:]
            i = 0
            while i < len(rest):
                word = rest[i]
                if word == "dev" and i + 1 < len(rest):
                    q.dev = rest[i + 1]
                    i += 2
                elif word == "root":
                    q.parent = "root"
                    i += 1
                elif word in ("parent", "refcnt") and i + 1 < len(rest):
                    if word == "parent":
                        q.parent = rest[i + 1]
                    i += 2
                elif i + 1 < len(rest) and not rest[i + 1][0].isalpha():
                    q.options[word] = rest[i + 1]  # a value starts with a digit (rate 50Mbit, lat 0us)
                    i += 2
                else:
                    q.options[word] = ""
                    i += 1
            found.append(q)
        elif found and (m := _SENT_RE.search(line)):
            q = found[-1]
            q.sent_bytes, q.sent_packets, q.dropped, q.overlimits, q.requeues = (int(g) for g in m.groups())
        elif found and (m := _BACKLOG_RE.search(line)):
            found[-1].backlog_packets = int(m.group(2))
    return found


def qdisc_of_kind(qdiscs: list[Qdisc], kind: str) -> Qdisc | None:
    """The first qdisc of ``kind`` (``tbf``: the one that sets the rate), or None."""
    return next((q for q in qdiscs if q.kind == kind), None)
