"""The node faults of :mod:`hpcbench.fault.inject`, applied for real and undone.

A lossy link on n2 of the emulated cluster makes a real TCP transfer retransmit (counted in n2's
/proc/net/snmp) and is put back to the cluster's shaping; a blkio throttle slows a real process's
page-cache-evicted reads; busy processes land on the CPUs a process may use and are gone
afterwards; a fault that fails half-way, or whose body raises, leaves nothing behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster_fixtures import require_cluster_prerequisites
from conftest import missing
from hpcbench.affinity.applied import allowed_cpus
from hpcbench.cluster import network
from hpcbench.core.tc import Qdisc, parse_qdiscs
from hpcbench.fault.inject.cgroups import blkio_cgroup_of
from hpcbench.fault.inject.cpu import CpuContention
from hpcbench.fault.inject.link import DegradedLink, node_link, tcp_counters
from hpcbench.fault.inject.base import NodeFaultError
from hpcbench.fault.inject.storage import (BLKIO_ROOT, CGROUP_PREFIX, SlowStorage, block_device_of,
                                           storage_throttle_problem)

#: Bytes sent node to node through the degraded link (1 MB at 20 mbit/s: ~0.4 s; at 50 mbit/s ~0.17 s).
TRANSFER_BYTES = 1 << 20

_SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0
while True:
    b = c.recv(1 << 16)
    if not b: break
    n += len(b)
print(n, flush=True)
"""
_CLIENT = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
t = time.perf_counter(); c.sendall(b"x" * int(sys.argv[3])); c.shutdown(socket.SHUT_WR); c.recv(1)
print(time.perf_counter() - t)
"""


def need_root() -> None:
    if os.geteuid() != 0:
        missing("node faults need root (tc, nsenter, the blkio cgroup tree)")


def transfer(cluster, nbytes: int, port: int) -> float:
    """Seconds to send ``nbytes`` from n2 to n1 over TCP (server in n1's namespace, client in n2's)."""
    n1, n2 = cluster.node("n1"), cluster.node("n2")
    server = subprocess.Popen(["nsenter", f"--net=/run/netns/{n1.netns}", sys.executable, "-c", _SERVER,
                               n1.address, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        out = subprocess.run(["nsenter", f"--net=/run/netns/{n2.netns}", sys.executable, "-c", _CLIENT,
                              n1.address, str(port), str(nbytes)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert int(server.stdout.readline()) == nbytes
        return float(out.stdout)
    finally:
        server.kill()
        server.wait()


def qdiscs(cluster, node: str) -> list[Qdisc]:
    """The qdiscs of both ends of ``node``'s link, host side first (the cluster's own reader)."""
    n = cluster.node(node)
    return network.read_qdiscs(n.veth_host) + network.read_qdiscs(n.veth_node, netns=network.netns_path(n.netns))


def test_lossy_link_retransmits_and_is_restored(emulated_cluster):
    require_cluster_prerequisites()
    before = qdiscs(emulated_cluster, "n2")
    link = node_link(emulated_cluster, "n2")
    with DegradedLink(link, "50mbit", queue_bytes=32000) as fault:
        shaped = qdiscs(emulated_cluster, "n2")
        seconds = transfer(emulated_cluster, TRANSFER_BYTES, 29731)
    # tc shows the queue as latency beyond the bucket: none, so whatever the bucket cannot take is dropped
    tbfs = [q for q in shaped if q.kind == "tbf"]
    assert [(q.rate_bps, q.burst_bytes, q.options["lat"]) for q in tbfs] == [(50e6, 32000, "0us")] * 2, shaped
    # the transfer crossed the cut link (1 MB at 50 mbit/s >= 0.17 s) and the short queue dropped segments
    assert seconds >= TRANSFER_BYTES * 8 / 50e6 * 0.9
    assert fault.retransmitted > 0 and fault.sent > 0
    assert fault.log.counters["tbf_dropped"] > 0  # tc's own count of what the short queue dropped
    assert fault.log.undone and "restored rate 1 Gbit/s" in fault.log.describe()
    assert qdiscs(emulated_cluster, "n2") == before
    # the counters the fault read are n2's own: n1's namespace saw the transfer too, the host none of it
    assert tcp_counters(link.node_netns)["RetransSegs"] >= fault.log.counters["after_RetransSegs"]


def test_slow_link_only_cuts_the_rate_and_undoes_itself_when_the_body_raises(emulated_cluster):
    require_cluster_prerequisites()
    before = qdiscs(emulated_cluster, "n2")
    fast = transfer(emulated_cluster, TRANSFER_BYTES, 29732)
    with pytest.raises(RuntimeError, match="body failed"):
        with DegradedLink(node_link(emulated_cluster, "n2"), "20mbit") as fault:
            assert [q.rate_bps for q in qdiscs(emulated_cluster, "n2") if q.rate_bps is not None] == [20e6] * 2
            slow = transfer(emulated_cluster, TRANSFER_BYTES, 29733)
            raise RuntimeError("body failed")
    assert fault.log.undone and qdiscs(emulated_cluster, "n2") == before
    assert slow > 3 * fast, (slow, fast)


def test_link_of_an_unknown_node_is_refused(emulated_cluster):
    require_cluster_prerequisites()
    with pytest.raises(NodeFaultError, match="no node 'n9'"):
        node_link(emulated_cluster, "n9")
    with pytest.raises(NodeFaultError, match="rate: 'fast' is not a rate"):
        DegradedLink(node_link(emulated_cluster, "n2"), "fast")


_READER = """
import os, sys, time
path = sys.argv[1]
for line in sys.stdin:
    fd = os.open(path, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    t = time.perf_counter(); n = 0
    while True:
        b = os.read(fd, 1 << 20)
        if not b: break
        n += len(b)
    os.close(fd); print(n, time.perf_counter() - t, flush=True)
"""


def timed_read(reader: subprocess.Popen) -> float:
    reader.stdin.write("go\n")
    reader.stdin.flush()
    return float(reader.stdout.readline().split()[1])


@pytest.fixture
def data_file(tmp_path) -> Path:
    path = tmp_path / "data.bin"
    path.write_bytes(os.urandom(2 << 20))
    os.sync()
    return path


def test_slow_storage_throttles_a_real_process_reads(data_file):
    need_root()
    problem = storage_throttle_problem(data_file)
    if problem:
        missing(problem)
    reader = subprocess.Popen([sys.executable, "-c", _READER, str(data_file)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        cold = timed_read(reader)
        with SlowStorage("n2", [reader.pid], data_file, read_bps=4 << 20, read_iops=1000) as fault:
            assert blkio_cgroup_of(reader.pid) == "/" + fault.cgroup.name
            throttled = timed_read(reader)
        after = timed_read(reader)
        assert blkio_cgroup_of(reader.pid) == "/" and not fault.cgroup.exists()
    finally:
        reader.kill()
        reader.wait()
    # 2 MiB at 4 MiB/s: about half a second, against milliseconds unthrottled
    assert throttled >= 0.4 and cold < throttled / 4 and after < throttled / 4, (cold, throttled, after)
    assert fault.log.counters["read_bytes"] >= 2 << 20
    assert f"{block_device_of(data_file)} {4 << 20}" in fault.log.describe()


def test_slow_storage_that_fails_half_way_leaves_no_cgroup(data_file):
    need_root()
    if storage_throttle_problem(data_file):
        missing(storage_throttle_problem(data_file))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with pytest.raises(OSError):
        with SlowStorage("n2", [gone.pid], data_file, read_bps=1 << 20):
            pass
    assert not list(BLKIO_ROOT.glob(f"{CGROUP_PREFIX}-*"))


def test_slow_storage_refuses_memory_file_systems(tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm")
    probe = shm / f"hpcbench-probe-{os.getpid()}"
    probe.write_bytes(b"x")
    try:
        with pytest.raises(NodeFaultError, match="no block device"):
            block_device_of(probe)
        assert "no block device" in storage_throttle_problem(probe)
    finally:
        probe.unlink()


def test_cpu_contention_pins_busy_processes_to_the_ranks_cpus_and_stops_them():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        cpus = allowed_cpus(sleeper.pid)
        with CpuContention("n2", [sleeper.pid], per_cpu=1) as fault:
            pids = [p.pid for p in fault.procs]
            assert len(pids) == len(cpus)
            time.sleep(0.5)
            assert sorted(allowed_cpus(p)[0] for p in pids) == cpus  # each pinned to one of the ranks' CPUs
            assert all(len(allowed_cpus(p)) == 1 for p in pids)
            assert fault.busy_cpu_seconds() > 0.1
        assert all(not Path(f"/proc/{p}").exists() for p in pids)
        assert fault.log.undone and f"CPUs {cpus}" in fault.log.describe()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_contention_refusals():
    with pytest.raises(NodeFaultError, match="no process"):
        CpuContention("n2", [])
    with pytest.raises(NodeFaultError, match="per_cpu"):
        CpuContention("n2", [os.getpid()], per_cpu=0)
    fault = CpuContention("n2", [os.getpid()])
    with fault:
        with pytest.raises(NodeFaultError, match="already applied"):
            fault.__enter__()
    assert not fault.procs and network.NODE_IFNAME == "hpcb0"


#: ``tc -s qdisc show`` of a node end shaped with a netem parent and a tbf child, as iproute2 6.1 prints it.
_TC_STATS = """\
qdisc netem 1: root refcnt 2 limit 100000 delay 2ms
 Sent 4200 bytes 30 pkt (dropped 0, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
qdisc tbf 10: parent 1:1 rate 1Gbit burst 128Kb lat 50.0ms
 Sent 4200 bytes 30 pkt (dropped 7, overlimits 12 requeues 0)
 backlog 1514b 1p requeues 0
"""


def test_tc_listings_parse_into_qdiscs_with_their_counters():
    netem, tbf = parse_qdiscs(_TC_STATS)
    assert (netem.kind, netem.handle, netem.parent, netem.delay_s, netem.rate_bps) == ("netem", "1:", "root", 2e-3,
                                                                                        None)
    assert (tbf.kind, tbf.parent, tbf.rate_bps, tbf.burst_bytes) == ("tbf", "1:1", 1e9, 128 * 1024)
    assert (tbf.sent_bytes, tbf.sent_packets, tbf.dropped, tbf.overlimits, tbf.backlog_packets) == (4200, 30, 7, 12, 1)
    # without -s: no counters; with several devices: each qdisc names its own
    (lo, eth) = parse_qdiscs("qdisc noqueue 0: dev lo root refcnt 2 \nqdisc pfifo_fast 0: dev eth0 root refcnt 2 "
                             "bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1\n")
    assert (lo.dev, lo.kind, lo.dropped, eth.dev, eth.options["bands"]) == ("lo", "noqueue", None, "eth0", "3")
    assert parse_qdiscs("") == []
