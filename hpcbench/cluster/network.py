"""The emulated cluster's network: one namespace per node, veth pairs, a bridge, tc shaping.

Layout (star topology, like nodes cabled to one switch)::

    host: bridge hpcb-br0 198.18.0.1/24  (controller address; slurmctld and srun live here)
            |-- hpcb-h1 ==veth== hpcb0 in netns hpcb-n1, 198.18.0.11/24, hostname n1
            |-- hpcb-h2 ==veth== hpcb0 in netns hpcb-n2, 198.18.0.12/24, hostname n2

Every veth end is shaped on egress (``tbf`` for the rate, with a ``netem`` parent for
the delay when one is asked for), so node-to-node traffic crosses two shaped hops
(n1's ``hpcb0`` then the host's ``hpcb-h2``): its rate is ``link_rate`` and its one-way
delay ``2 x link_delay``. Traffic between ranks of one node goes to a local address,
which the kernel routes over that namespace's (unshaped) loopback.

Addresses come from 198.18.0.0/15 (RFC 2544, benchmarking), names all start with
``hpcb``, and the namespaces have no default route: traffic can reach only loopback
and the namespaces created here.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass

from hpcbench.cluster.host_commands import ClusterError, run_command
# tc's units are read in hpcbench.core.tc; parse_rate and parse_delay stay importable from here for their callers
from hpcbench.core.tc import Qdisc, format_rate, parse_delay, parse_qdiscs, parse_rate  # noqa: F401

PREFIX = "hpcb"
BRIDGE = "hpcb-br0"
#: The node-side veth has this name inside every namespace, so one GLOO_SOCKET_IFNAME fits all nodes.
NODE_IFNAME = "hpcb0"
SUBNET = ipaddress.ip_network("198.18.0.0/24")
CONTROLLER_ADDRESS = "198.18.0.1"
#: Node i (1-based) gets 198.18.0.(10 + i).
NODE_ADDRESS_OFFSET = 10

def netns_name(index: int) -> str:
    return f"{PREFIX}-n{index}"


def host_veth_name(index: int) -> str:
    return f"{PREFIX}-h{index}"


def node_address(index: int) -> str:
    return str(SUBNET.network_address + NODE_ADDRESS_OFFSET + index)


# -- inspection -----------------------------------------------------------------

def list_netns() -> list[str]:
    """Names of our network namespaces (prefix ``hpcb-``)."""
    proc = run_command(["ip", "netns", "list"], check=False)
    names = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(PREFIX + "-"))


def list_links() -> list[str]:
    """Names of our host-side links (prefix ``hpcb``)."""
    proc = run_command(["ip", "-j", "link", "show"], check=False)
    try:
        links = json.loads(proc.stdout or "[]")
    except json.JSONDecodeError:
        return []
    return sorted(link["ifname"] for link in links if link.get("ifname", "").startswith(PREFIX))


def network_owner() -> str | None:
    """The state_dir of the cluster that built the bridge (stored as the bridge's alias)."""
    proc = run_command(["ip", "-j", "link", "show", BRIDGE], check=False)
    if proc.returncode != 0:
        return None
    try:
        return (json.loads(proc.stdout)[0].get("ifalias") or None)
    except (json.JSONDecodeError, IndexError):
        return None


def check_subnet_free() -> None:
    """Refuse to build when an interface that is not ours already uses our subnet."""
    proc = run_command(["ip", "-j", "addr", "show"], check=False)
    try:
        links = json.loads(proc.stdout or "[]")
    except json.JSONDecodeError:
        return
    for link in links:
        if link.get("ifname", "").startswith(PREFIX):
            continue
        for addr in link.get("addr_info", []):
            try:
                ip = ipaddress.ip_address(addr.get("local", ""))
            except ValueError:
                continue
            if ip in SUBNET:
                raise ClusterError(f"interface {link['ifname']} already uses {ip}, inside the emulated "
                                   f"cluster's subnet {SUBNET}; remove that address first")


# -- building and removing --------------------------------------------------------

def create_network(nodes: int, owner: str) -> None:
    """Create the bridge, ``nodes`` namespaces and their veth pairs (unshaped).

    Args:
        nodes: how many node namespaces (1-based names ``hpcb-n1``...).
        owner: the cluster's state_dir, stored as the bridge's alias so that a later
            ``cluster_up`` from another state_dir can find and stop this cluster.
    """
    prefix_len = SUBNET.prefixlen
    run_command(["ip", "link", "add", BRIDGE, "type", "bridge"])
    run_command(["ip", "link", "set", BRIDGE, "alias", owner])
    run_command(["ip", "addr", "add", f"{CONTROLLER_ADDRESS}/{prefix_len}", "dev", BRIDGE])
    run_command(["ip", "link", "set", BRIDGE, "up"])
    for i in range(1, nodes + 1):
        ns, veth = netns_name(i), host_veth_name(i)
        run_command(["ip", "netns", "add", ns])
        # The peer is created directly inside the namespace, so "hpcb0" never appears on the host.
        run_command(["ip", "link", "add", veth, "type", "veth", "peer", "name", NODE_IFNAME, "netns", ns])
        run_command(["ip", "link", "set", veth, "master", BRIDGE])
        run_command(["ip", "link", "set", veth, "up"])
        run_command(["ip", "-n", ns, "addr", "add", f"{node_address(i)}/{prefix_len}", "dev", NODE_IFNAME])
        run_command(["ip", "-n", ns, "link", "set", NODE_IFNAME, "up"])
        run_command(["ip", "-n", ns, "link", "set", "lo", "up"])


def delete_network() -> None:
    """Remove every ``hpcb`` namespace and host link; quiet when there is none."""
    for ns in list_netns():
        run_command(["ip", "netns", "del", ns], check=False)
    for link in list_links():
        # Deleting one end of a veth pair deletes both; the bridge goes last in sort order anyway.
        run_command(["ip", "link", "del", link], check=False)


# -- shaping ----------------------------------------------------------------------------

@dataclass(frozen=True)
class LinkShaping:
    """Egress shaping of one veth end: a token bucket for the rate, netem for the delay."""

    rate: float
    """bits per second; tc's text for it is made in :meth:`commands`, where tc runs"""
    delay: str

    @property
    def burst_bytes(self) -> int:
        # At least 128 KiB so that a 64 KiB GSO super-packet fits in the bucket (tbf would
        # otherwise segment or drop it); at high rates 4 ms worth of traffic, so that the
        # 250 Hz kernel tick cannot starve the bucket. 128 KiB is 1 % of one second at 100mbit.
        return int(max(128 * 1024, float(self.rate) / 8 / 250))

    def commands(self, dev: str, netns: str | None) -> list[list[str]]:
        tc = ["tc"] + (["-n", netns] if netns else [])
        tbf = ["tbf", "rate", format_rate(self.rate), "burst", str(self.burst_bytes), "latency", "50ms"]
        if parse_delay(self.delay) > 0:
            return [tc + ["qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", "delay", self.delay,
                          "limit", "100000"],
                    tc + ["qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", *tbf]]
        return [tc + ["qdisc", "add", "dev", dev, "root", "handle", "10:", *tbf]]


def shape_link(dev: str, netns: str | None, shaping: LinkShaping) -> None:
    """Replace the egress qdiscs of ``dev`` (in ``netns``, or on the host) with ``shaping``."""
    tc = ["tc"] + (["-n", netns] if netns else [])
    run_command(tc + ["qdisc", "del", "dev", dev, "root"], check=False)
    for cmd in shaping.commands(dev, netns):
        proc = run_command(cmd, check=False)
        if proc.returncode != 0:
            if "netem" in cmd and "unknown" in proc.stderr.lower():
                raise ClusterError(
                    f"link_delay={shaping.delay} needs the netem qdisc, which this kernel lacks "
                    f"(CONFIG_NET_SCH_NETEM); use link_delay=0ms or a kernel with sch_netem")
            raise ClusterError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()}")


def shape_all_links(nodes: int, shaping: LinkShaping) -> None:
    """Shape both ends of every node's veth pair."""
    for i in range(1, nodes + 1):
        shape_link(host_veth_name(i), None, shaping)
        shape_link(NODE_IFNAME, netns_name(i), shaping)


def shaping_report(nodes: int) -> str:
    """``tc qdisc show`` of both ends of every node link, one block per node."""
    lines = []
    for i in range(1, nodes + 1):
        for side, dev, ns in (("host side", host_veth_name(i), None), ("node side", NODE_IFNAME, netns_name(i))):
            try:
                text = qdisc_text(dev, netns=netns_path(ns) if ns else None)
            except ClusterError as exc:
                text = str(exc)
            lines.append(f"  n{i} {side} {dev}: " + _one_line(text))
    return "\n".join(lines)


def in_netns(netns: str, argv: list[str] | tuple[str, ...]) -> list[str]:
    """``argv`` run inside the network namespace at ``netns`` (``/run/netns/NS``, ``/proc/PID/ns/net``)."""
    return ["nsenter", f"--net={netns}", *argv]


def netns_path(name: str) -> str:
    """The bind mount ``ip netns add`` made for the namespace ``name``."""
    return f"/run/netns/{name}"


def qdisc_text(dev: str, *, netns: str | None = None, stats: bool = False) -> str:
    """``tc [-s] qdisc show dev DEV``'s text, inside the namespace at ``netns`` (a path; None: this one).

    Raises:
        ClusterError: tc failed (no such device or namespace); the message quotes its error.
    """
    argv = ["tc", *(["-s"] if stats else []), "qdisc", "show", "dev", dev]
    return run_command(in_netns(netns, argv) if netns else argv).stdout


def read_qdiscs(dev: str, *, netns: str | None = None, stats: bool = False) -> list[Qdisc]:
    """The qdiscs of ``dev`` (parsed by :func:`hpcbench.core.tc.parse_qdiscs`); ``stats``: with their counters."""
    return parse_qdiscs(qdisc_text(dev, netns=netns, stats=stats))


def _one_line(text: str) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()) or "(none)"
