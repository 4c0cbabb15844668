"""Link faults on one node of the emulated cluster: a rate cut, a lossy queue, a flapping link.

* :class:`DegradedLink` replaces the root qdisc of both ends of the node's veth pair (the node
  side ``hpcb0`` in its namespace, the host side ``hpcb-hN`` on the bridge, as
  :func:`hpcbench.cluster.network.shape_all_links` shapes them) with a ``tbf`` at a lower rate;
  with ``queue_bytes`` the token bucket's queue holds only that many bytes, so bursts are
  dropped (tc's own drop counter is read back) and TCP retransmits. Undo puts the cluster's own
  shaping back.
* :class:`LinkFlap` takes the bridge-side end down for ``down_s`` every ``period_s``.

Both count the node's TCP segments sent and retransmitted while they were on, from the node's
own ``/proc/net/snmp`` (:mod:`hpcbench.core.snmp`). Needs root (tc, ip, nsenter).
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass

from hpcbench.cluster import network
from hpcbench.cluster.host_commands import ClusterError
from hpcbench.cluster.locate import cluster_of, host_netns_of
from hpcbench.cluster.network import in_netns
from hpcbench.core.config import BitRate
from hpcbench.core.snmp import SNMP_PATH, parse_snmp
from hpcbench.core.tc import format_rate
from hpcbench.core.tc import parse_qdiscs, qdisc_of_kind
from hpcbench.fault.inject.base import (FAULT_KINDS, FaultKind, FaultLog, FaultSite, NodeFault, NodeFaultError,
                                        run_tool)

#: tbf needs a bucket of at least one MTU-sized packet plus headers, or it drops everything.
MIN_BURST_BYTES = 1600

NO_CLUSTER = ("no emulated cluster (SLURM_CONF's folder holds no cluster.json): the nodes share one loopback, there "
              "is no node link to degrade")


def tcp_counters(netns: str | None = None) -> dict[str, float]:
    """The ``Tcp:`` counters of ``/proc/net/snmp`` in the namespace at ``netns`` (a path; None: this one).

    Returns:
        ``{"OutSegs": ..., "RetransSegs": ..., ...}``: every numeric field of the Tcp lines.
    """
    if netns is None:
        with open(SNMP_PATH) as fh:
            text = fh.read()
    else:
        text = run_tool(in_netns(netns, ["cat", SNMP_PATH])).stdout
    counters = parse_snmp(text).get("Tcp")
    if not counters:
        raise NodeFaultError(f"{SNMP_PATH} in {netns or 'this namespace'} has no Tcp counters")
    return counters


@dataclass(frozen=True)
class NodeLink:
    """Both ends of one node's link, each as (network namespace path, device)."""

    node: str
    node_netns: str
    """``/run/netns/hpcb-nX``: the node's namespace, holding ``hpcb0``"""
    host_veth: str
    """``hpcb-hX``: the bridge-side end, in the host's namespace"""
    shaping: network.LinkShaping
    """how the cluster shapes every link (put back on exit)"""
    host_netns: str
    """the host's namespace, where the bridge lives: ``/proc/<slurmctld>/ns/net``"""
    node_dev: str = network.NODE_IFNAME

    def ends(self) -> list[tuple[str, str, str]]:
        """(which end, namespace path, device), node side first."""
        return [("node side", self.node_netns, self.node_dev), ("host side", self.host_netns, self.host_veth)]


def node_link(cluster, node: str) -> NodeLink:
    """The link of ``node`` (e.g. ``"n2"``) in ``cluster`` (a :class:`~hpcbench.cluster.ClusterInfo`)."""
    try:
        info = cluster.node(node)
        host = host_netns_of(cluster)
    except ClusterError as exc:
        raise NodeFaultError(str(exc)) from None
    return NodeLink(node=node, node_netns=network.netns_path(info.netns), host_veth=info.veth_host,
                    shaping=network.LinkShaping(cluster.spec.link_rate, cluster.spec.link_delay),
                    host_netns=host, node_dev=info.veth_node)


class _CountsSegments:
    """The node's TCP segments sent and retransmitted while the fault was on (its namespace's counters)."""

    link: NodeLink
    log: FaultLog

    def _count_segments(self, when: str, *, required: bool = True) -> None:
        """Store the node's OutSegs and RetransSegs as ``<when>_OutSegs``...; ``required`` False: skip if unreadable."""
        try:
            c = tcp_counters(self.link.node_netns)
        except NodeFaultError:
            if required:
                raise
            return
        for name in ("OutSegs", "RetransSegs"):
            self.log.counters[f"{when}_{name}"] = c.get(name, 0.0)

    @property
    def retransmitted(self) -> float | None:
        """Segments the node retransmitted while the fault was on (None before it was undone)."""
        c = self.log.counters
        return c["after_RetransSegs"] - c["before_RetransSegs"] if "after_RetransSegs" in c else None

    @property
    def sent(self) -> float | None:
        """Segments the node sent (retransmissions not counted) while the fault was on."""
        c = self.log.counters
        return c["after_OutSegs"] - c["before_OutSegs"] if "after_OutSegs" in c else None


class DegradedLink(_CountsSegments, NodeFault):
    """A slower link on one node, and with ``queue_bytes`` a queue so short that bursts are dropped.

    Args:
        link: the node's link (:func:`node_link`).
        rate: the degraded rate, in tc syntax (``20mbit``).
        queue_bytes: the tbf queue (``limit``) in bytes; ``None`` keeps tbf's usual 50 ms of
            queue at the new rate, so nothing but the rate changes. A few packets' worth
            (e.g. 3000) makes the bucket drop every burst it cannot send at once.
        burst_bytes: the token bucket's size; ``None``: the cluster's rule
            (:attr:`~hpcbench.cluster.network.LinkShaping.burst_bytes`) at the new rate, or, with
            ``queue_bytes``, ``max(queue_bytes, 1600)`` so that bursts cannot hide in the bucket.
    """

    kind = "degraded_link"

    def __init__(self, link: NodeLink, rate: float | str, *, queue_bytes: int | None = None,
                 burst_bytes: int | None = None) -> None:
        super().__init__(link.node)
        try:
            rate = BitRate(rate)  # a typo fails here, not half-way through the tc commands
        except ValueError as exc:
            raise NodeFaultError(f"rate: {exc}") from None
        if queue_bytes is not None and queue_bytes < 1:
            raise NodeFaultError(f"queue_bytes={queue_bytes}: give >= 1 byte, or None for the usual queue")
        self.link, self.rate, self.queue_bytes = link, rate, queue_bytes
        if burst_bytes is None:
            burst_bytes = (max(queue_bytes, MIN_BURST_BYTES) if queue_bytes is not None
                           else network.LinkShaping(rate, "0ms").burst_bytes)
        self.burst_bytes = max(int(burst_bytes), MIN_BURST_BYTES)
        self.log.kind = "lossy_link" if queue_bytes is not None else "slow_link"
        self._changed: list[tuple[str, str, str]] = []

    def tbf(self) -> list[str]:
        """The tbf arguments of the degraded link."""
        queue = ["limit", str(self.queue_bytes)] if self.queue_bytes is not None else ["latency", "50ms"]
        return ["tbf", "rate", format_rate(self.rate), "burst", str(self.burst_bytes), *queue]

    def _tbf_of(self, ns: str, dev: str, *, stats: bool = False):
        """The tbf tc shows on ``dev`` now (None when there is none)."""
        argv = ["tc", *(["-s"] if stats else []), "qdisc", "show", "dev", dev]
        return qdisc_of_kind(parse_qdiscs(run_tool(in_netns(ns, argv)).stdout), "tbf")

    def _apply(self) -> None:
        self._count_segments("before")
        for end, ns, dev in self.link.ends():
            run_tool(in_netns(ns, ["tc", "qdisc", "del", "dev", dev, "root"]), check=False)
            self._changed.append((end, ns, dev))  # from here on, undo must reshape it
            run_tool(in_netns(ns, ["tc", "qdisc", "add", "dev", dev, "root", "handle", "10:", *self.tbf()]))
            self.log.actions.append(f"{end} {dev}: tc qdisc root tbf " + " ".join(self.tbf()[1:]))
            shown = self._tbf_of(ns, dev)  # what the kernel took, in tc's words
            # tc rounds what it prints (the kernel keeps bytes/s): 1 % is a rounding, more a different rate
            if shown is None or abs(shown.rate_bps / self.rate - 1) > 0.01:
                raise NodeFaultError(f"{end} {dev}: tc shows {shown.text if shown else 'no tbf'} after setting "
                                     f"tbf rate {self.rate}")

    def _undo(self) -> None:
        errors = []
        dropped = 0.0
        for end, ns, dev in self._changed:
            try:
                shown = self._tbf_of(ns, dev, stats=True)
                dropped += float(shown.dropped or 0) if shown is not None else 0.0
            except NodeFaultError:
                pass  # the count is a bonus; the restore below is what matters
            run_tool(in_netns(ns, ["tc", "qdisc", "del", "dev", dev, "root"]), check=False)
            for cmd in self.link.shaping.commands(dev, None):
                proc = run_tool(in_netns(ns, cmd), check=False)
                if proc.returncode != 0:
                    errors.append(f"{end} {dev}: `{' '.join(cmd)}`: {proc.stderr.strip()}")
            self.log.actions.append(f"{end} {dev}: restored rate {BitRate(self.link.shaping.rate)}, "
                                    f"delay {self.link.shaping.delay}")
        if self._changed:
            self.log.counters["tbf_dropped"] = dropped
        self._changed.clear()
        self._count_segments("after", required=False)
        if errors:
            raise NodeFaultError("the link could not be restored: " + "; ".join(errors))


class LinkFlap(_CountsSegments, NodeFault):
    """A flapping link, a transient fault: the node's link goes down for ``down_s`` every ``period_s``.

    The bridge-side end of the node's veth (``ip link set hpcb-hN down``, then ``up``, in the
    host's namespace) as a flapping cable, transceiver or switch port does: the node's packets
    are lost while it is down and TCP resends them after its retransmission timeout once it is
    back, so the steps that straddle a flap take seconds longer and the others do not.
    :func:`hpcbench.fault.inject.node.node_down` with ``how="link"`` takes a node out for good;
    this brings it back each time, from a thread of the process that applies it.

    Args:
        link: the node's link (:func:`node_link`).
        down_s: seconds each flap keeps the link down.
        period_s: seconds from one flap's start to the next (> ``down_s``).
        first_after_s: seconds from the apply to the first flap.
    """

    kind = "link_flap"

    def __init__(self, link: NodeLink, *, down_s: float, period_s: float, first_after_s: float = 0.0) -> None:
        super().__init__(link.node)
        if not 0 < down_s < period_s or first_after_s < 0:
            raise NodeFaultError(f"down_s={down_s}, period_s={period_s}, first_after_s={first_after_s}: give "
                                 f"0 < down_s < period_s and first_after_s >= 0")
        self.link, self.down_s, self.period_s, self.first_after_s = link, float(down_s), float(period_s), first_after_s
        self.flaps: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: str | None = None

    def _ip_link(self, state: str) -> subprocess.CompletedProcess:
        return run_tool(in_netns(self.link.host_netns, ["ip", "link", "set", self.link.host_veth, state]))

    def _flapping(self) -> None:
        stop = self._stop
        if stop.wait(self.first_after_s):
            return
        while True:
            start = time.time()
            try:
                self._ip_link("down")
            except NodeFaultError as exc:
                self._error = str(exc)
                return
            try:
                stop.wait(self.down_s)
            finally:
                try:
                    self._ip_link("up")
                except NodeFaultError as exc:
                    self._error = str(exc)
                self.flaps.append((start, time.time()))
            if stop.wait(max(0.0, self.period_s - (time.time() - start))):
                return

    def _apply(self) -> None:
        # a missing namespace or tool fails here, before any flap, with the command's error
        run_tool(in_netns(self.link.host_netns, ["ip", "link", "show", self.link.host_veth]))
        self._count_segments("before")
        self._stop.clear()
        self._thread = threading.Thread(target=self._flapping, name=f"link-flap-{self.link.node}", daemon=True)
        self._thread.start()
        self.log.actions.append(f"host side {self.link.host_veth}: down for {self.down_s:g} s every "
                                f"{self.period_s:g} s, first after {self.first_after_s:g} s")

    def _undo(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.down_s + 30)
        self._thread = None
        self._ip_link("up")  # whatever the thread managed: the link ends up
        self.log.actions.append(f"host side {self.link.host_veth}: up; {len(self.flaps)} flap(s): "
                                + ", ".join(f"{b - a:.2f} s down" for a, b in self.flaps))
        self.log.counters["flaps"] = float(len(self.flaps))
        self.log.counters["down_s"] = float(sum(b - a for a, b in self.flaps))
        self._count_segments("after", required=False)
        if self._error:
            raise NodeFaultError(f"the link flap failed: {self._error}")


# -- the kinds, built from a site ---------------------------------------------------------------------

def _site_link(site: FaultSite) -> NodeLink | str:
    """The faulty node's link, or why there is none here."""
    cluster = cluster_of()
    if cluster is None:
        return NO_CLUSTER
    return node_link(cluster, site.node)


def _degraded(site: FaultSite, *, lossy: bool) -> DegradedLink | str:
    link = _site_link(site)
    if isinstance(link, str):
        return link
    s = site.settings
    return DegradedLink(link, s.slow_link_rate, queue_bytes=s.lossy_queue_bytes if lossy else None)


def _flap(site: FaultSite) -> LinkFlap | str:
    link = _site_link(site)
    if isinstance(link, str):
        return link
    s = site.settings
    # half a period first: with the default 8 s phase and 4 s period, both flaps land in the timed steps
    return LinkFlap(link, down_s=s.flap_down_s, period_s=s.flap_period_s, first_after_s=s.flap_period_s / 2)


for _kind in (
    FaultKind("slow_link", "tbf at slow_link_rate on both ends of the node's veth",
              lambda s: _degraded(s, lossy=False), needs_cluster=True, reads=("slow_link_rate",)),
    FaultKind("lossy_link", "tbf at slow_link_rate with a lossy_queue_bytes queue: bursts are dropped, TCP retransmits",
              lambda s: _degraded(s, lossy=True), needs_cluster=True, reads=("slow_link_rate", "lossy_queue_bytes")),
    FaultKind("link_flap", "the node's link down for flap_down_s every flap_period_s (bridge side of its veth)",
              _flap, needs_cluster=True, reads=("flap_down_s", "flap_period_s")),
):
    FAULT_KINDS.register(_kind.name, _kind)
