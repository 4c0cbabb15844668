"""InfiniBand port counters from sysfs: traffic, back-pressure, errors, retransmissions.

Read per port from ``/sys/class/infiniband/<device>/ports/<port>/``:

* ``counters/`` (IBTA PortCounters, the extended 64-bit ones on mlx5):
  ``port_xmit_data`` / ``port_rcv_data`` count 4-byte words, so x 4 gives bytes
  (``ib_xmit_bytes_per_s``, ``ib_rcv_bytes_per_s``); ``port_xmit_wait`` counts ticks in
  which the port had data but no credits to send it.
* ``hw_counters/`` (mlx5 RDMA transport counters, present on ConnectX with the mlx5_ib driver).

Definitions (the guide names "IB retransmission rate < 0.1 %" without a formula, C6):

``ib_retransmission_rate`` = delta (``local_ack_timeout_err`` + ``packet_seq_err`` +
``implied_nak_seq_err`` + ``rnr_nak_retry_err``) / delta ``port_xmit_packets``.
These four are the *requester-side* events after which this HCA resends reliable-connected
(RC) packets: an ACK timer expired, a NAK-sequence-error came back, a later ACK implied a
lost read response, a receiver-not-ready NAK arrived. The driver documents each as counted
"while the QP retry limit was not exceeded", i.e. the retry happened; an exceeded limit
is a failed QP, not a retransmission. Go-back-N may resend several packets per event, so
this is the rate of retransmission *events* per packet sent, a lower bound on the share of
resent packets; ``port_xmit_packets`` also counts ACKs and non-RC traffic, which lowers it
slightly. It is what this node's own counters can say about its own sends.

``ib_peer_retransmission_rate`` = delta (``out_of_sequence`` + ``duplicate_request``) /
delta ``port_rcv_packets``: the *responder-side* trace of the peers' retransmissions
(packets that arrived out of order, requests that arrived twice). Kept apart because,
summed over nodes, it would count the same retransmission twice.

``ib_xmit_wait_share`` = delta ``port_xmit_wait`` / (delta ``port_xmit_wait`` + delta
``port_xmit_data``): 0 without back-pressure, near 1 when the port mostly waits for
credits (congestion downstream). Ticks and 4-byte words are both port-clock units on
mlx5, so read it as a congestion indicator, not an exact share of time.

``ib_errors_per_s``: the sum of the port error counters in :data:`ERROR_COUNTERS` per second.

References: IBTA spec vol. 1, PortCounters / PortCountersExtended; NVIDIA, "Understanding
mlx5 Linux Counters and Status Parameters" (hw_counters descriptions).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

from hpcbench.monitor.sources.base import Sample, Source

REQUESTER_RETRANSMISSION_COUNTERS = ("local_ack_timeout_err", "packet_seq_err", "implied_nak_seq_err",
                                     "rnr_nak_retry_err")
RESPONDER_RETRANSMISSION_COUNTERS = ("out_of_sequence", "duplicate_request")
ERROR_COUNTERS = ("symbol_error", "port_rcv_errors", "port_rcv_remote_physical_errors",
                  "port_rcv_switch_relay_errors", "port_xmit_discards", "port_xmit_constraint_errors",
                  "port_rcv_constraint_errors", "local_link_integrity_errors",
                  "excessive_buffer_overrun_errors", "link_error_recovery", "link_downed")
TRAFFIC_COUNTERS = ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets", "port_xmit_wait")
IB_DATA_WORD_BYTES = 4  # IBTA: PortXmitData/PortRcvData count octets divided by 4


class InfinibandSource(Source):
    """Counters of every active port under ``root``.

    Args:
        root: the folder holding the devices (default ``/sys/class/infiniband``); tests
            point it at ``tests/fixtures/monitor/ib_sysfs/...``.
    """

    name = "infiniband"
    metrics = ("ib_xmit_bytes_per_s", "ib_rcv_bytes_per_s", "ib_xmit_wait_share", "ib_errors_per_s",
               "ib_retransmission_rate", "ib_peer_retransmission_rate")

    def __init__(self, *, root: str | Path = "/sys/class/infiniband", clock: Callable[[], float] | None = None):
        super().__init__(clock=clock)
        self.root = Path(root)

    def ports(self) -> list[Path]:
        """The port folders whose state is ACTIVE (or unknown)."""
        if not self.root.is_dir():
            return []
        found = []
        for port in sorted(self.root.glob("*/ports/*")):
            state = _read_text(port / "state")
            if state is None or "ACTIVE" in state:
                found.append(port)
        return found

    def available(self) -> str | None:
        if not self.root.is_dir():
            return f"no InfiniBand: {self.root} does not exist (no HCA or no ib driver)"
        ports = self.ports()
        if not ports:
            return f"no active InfiniBand port under {self.root}"
        if not any((p / "hw_counters").is_dir() for p in ports):
            self.absent_metrics["ib_retransmission_rate"] = self.absent_metrics["ib_peer_retransmission_rate"] = (
                "no hw_counters under the ports (not an mlx5 HCA, or the driver does not expose them)")
        return None

    def _read(self) -> Iterable[Sample]:
        now = self.clock()
        for port in self.ports():
            device, number = port.parent.parent.name, port.name
            labels = {"device": device, "port": number}
            counters = _read_counters(port / "counters", TRAFFIC_COUNTERS + ERROR_COUNTERS)
            counters.update(_read_counters(port / "hw_counters",
                                           REQUESTER_RETRANSMISSION_COUNTERS + RESPONDER_RETRANSMISSION_COUNTERS))
            got = self._deltas((device, number), counters, now)
            if got is None:
                continue
            d, dt = got
            yield from _port_samples(d, dt, labels)


def _port_samples(d: dict[str, float], dt: float, labels: dict[str, str]) -> Iterable[Sample]:
    if "port_xmit_data" in d:
        yield Sample("ib_xmit_bytes_per_s", d["port_xmit_data"] * IB_DATA_WORD_BYTES / dt, "B/s", labels)
    if "port_rcv_data" in d:
        yield Sample("ib_rcv_bytes_per_s", d["port_rcv_data"] * IB_DATA_WORD_BYTES / dt, "B/s", labels)
    if "port_xmit_wait" in d and "port_xmit_data" in d:
        busy = d["port_xmit_wait"] + d["port_xmit_data"]
        if busy > 0:
            yield Sample("ib_xmit_wait_share", d["port_xmit_wait"] / busy, "fraction", labels)
    errors = [d[c] for c in ERROR_COUNTERS if c in d]
    if errors:
        yield Sample("ib_errors_per_s", sum(errors) / dt, "1/s", labels)
    # No packets sent (or received) in the interval: the rate is undefined, so no row.
    requester = [d[c] for c in REQUESTER_RETRANSMISSION_COUNTERS if c in d]
    if requester and d.get("port_xmit_packets", 0) > 0:
        yield Sample("ib_retransmission_rate", sum(requester) / d["port_xmit_packets"], "fraction", labels)
    responder = [d[c] for c in RESPONDER_RETRANSMISSION_COUNTERS if c in d]
    if responder and d.get("port_rcv_packets", 0) > 0:
        yield Sample("ib_peer_retransmission_rate", sum(responder) / d["port_rcv_packets"], "fraction", labels)


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _read_counters(folder: Path, names: Iterable[str]) -> dict[str, float]:
    out = {}
    for name in names:
        text = _read_text(folder / name)
        if text is None:
            continue
        try:
            out[name] = float(text.split()[0])
        except (ValueError, IndexError):
            continue
    return out


SOURCE = InfinibandSource
