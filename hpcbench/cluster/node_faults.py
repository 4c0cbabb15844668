"""Real faults on one node of the emulated cluster: a degraded link, slow storage, CPU contention.

Each fault is a context manager that applies itself on entry and undoes itself on exit, also
when the body raises or the apply fails half-way, and keeps a :class:`FaultLog` of what it did
(the commands run, the processes it started or moved, the counters before and after)::

    with DegradedLink(link, rate="20mbit", queue_bytes=3000) as fault:
        train()
    print(fault.log.describe())          # what was changed, and the retransmissions it caused

What each fault really does (nothing is simulated in the code under test):

* :class:`DegradedLink` — replaces the root qdisc of both ends of the node's veth pair (the
  node side ``hpcb0`` in its namespace, the host side ``hpcb-hN`` on the bridge, as
  :func:`hpcbench.cluster.network.shape_all_links` shapes them) with a ``tbf`` at a lower rate;
  with ``queue_bytes`` the token bucket's queue holds only that many bytes, so bursts are
  dropped and TCP retransmits (counted from ``/proc/net/snmp`` inside the namespace). Undo puts
  the cluster's own shaping back.
* :class:`SlowStorage` — cgroup v1 ``blkio.throttle.read_bps_device`` / ``read_iops_device``
  for the disk holding the data set, on a new blkio cgroup that the node's rank processes are
  moved into (and moved back out of). Only reads that reach the disk are throttled: the reader
  must evict its file from the page cache (``posix_fadvise(DONTNEED)``) or read with O_DIRECT.
* :class:`CpuContention` — busy-loop processes pinned (``sched_setaffinity``) to the CPUs the
  node's ranks may run on (``Cpus_allowed_list`` of each rank), stopped by pid.

Needs root (tc, nsenter, the cgroup tree). Functions that only read (``tcp_counters``,
``allowed_cpus``, ``block_device_of``) need no privileges beyond reading ``/proc`` and ``/sys``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from hpcbench.affinity.applied import allowed_cpus
from hpcbench.cluster import network
from hpcbench.cluster.host_commands import ClusterError
from hpcbench.core.errors import HpcbenchError
from hpcbench.monitor.sources.tcp import parse_snmp

#: Where cgroup v1 mounts the blkio controller.
BLKIO_ROOT = Path("/sys/fs/cgroup/blkio")
#: Prefix of every cgroup made here (removed again on exit).
CGROUP_PREFIX = "hpcbench-slow-storage"
#: tbf needs a bucket of at least one MTU-sized packet plus headers, or it drops everything.
MIN_BURST_BYTES = 1600
#: Seconds a busy process gets to exit after SIGTERM before SIGKILL.
STOP_GRACE_S = 2.0

#: A busy loop for one CPU: pins itself, then spins until it is signalled. Python, not `yes`, so
#: that it does no I/O; a few MB of memory each.
_BUSY_LOOP = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


class NodeFaultError(HpcbenchError):
    """A fault could not be applied here; the message says exactly why (and what is needed)."""


@dataclass
class FaultLog:
    """What one fault did: its kind and node, the actions in order, counters, start and stop times."""

    kind: str
    node: str
    actions: list[str] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=dict)
    started: float | None = None
    stopped: float | None = None
    undone: bool = False

    def describe(self) -> str:
        lines = [f"{self.kind} on {self.node}: " + ("undone" if self.undone else "NOT undone")]
        lines += [f"  {a}" for a in self.actions]
        if self.counters:
            lines.append("  counters: " + ", ".join(f"{k}={v:g}" for k, v in sorted(self.counters.items())))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "node": self.node, "actions": list(self.actions), "counters": dict(self.counters),
                "started": self.started, "stopped": self.stopped, "undone": self.undone}


class NodeFault:
    """Template of a fault: :meth:`_apply` on entry, :meth:`_undo` on exit (always, also after a failed apply).

    Subclasses fill in the two methods and append to ``self.log.actions``; ``_undo`` must be
    safe to call after a partial ``_apply``.
    """

    kind = "fault"

    def __init__(self, node: str) -> None:
        self.log = FaultLog(self.kind, node)
        self._active = False

    def __enter__(self) -> "NodeFault":
        if self._active:
            raise NodeFaultError(f"{self.kind} on {self.log.node} is already applied")
        self._active = True
        try:
            self._apply()
        except BaseException:
            self._exit()
            raise
        self.log.started = time.time()
        return self

    def __exit__(self, *exc) -> None:
        self._exit()

    def _exit(self) -> None:
        if not self._active:
            return
        self._active = False
        try:
            self._undo()
            self.log.undone = True
        finally:
            self.log.stopped = time.time()

    def _apply(self) -> None:
        raise NotImplementedError

    def _undo(self) -> None:
        raise NotImplementedError


def _run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NodeFaultError(f"`{' '.join(argv)}` could not run: {exc}") from None
    if check and proc.returncode != 0:
        raise NodeFaultError(f"`{' '.join(argv)}` failed (rc {proc.returncode}): {proc.stderr.strip()}")
    return proc


def in_netns(netns_path: str, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside the network namespace at ``netns_path`` (``/run/netns/NS``, ``/proc/PID/ns/net``)."""
    return ["nsenter", f"--net={netns_path}", *argv]


def netns_path(netns: str) -> str:
    """The bind mount ``ip netns add`` made for ``netns``."""
    return f"/run/netns/{netns}"


# -- the link --------------------------------------------------------------------------------

def tcp_counters(netns: str | None = None) -> dict[str, float]:
    """The ``Tcp:`` counters of ``/proc/net/snmp`` in the namespace at ``netns`` (a path; None: this one).

    Returns:
        ``{"OutSegs": ..., "RetransSegs": ..., ...}``: every numeric field of the Tcp lines.
    """
    if netns is None:
        text = Path("/proc/net/snmp").read_text()
    else:
        text = _run(in_netns(netns, ["cat", "/proc/net/snmp"])).stdout
    counters = parse_snmp(text).get("Tcp")
    if not counters:
        raise NodeFaultError(f"/proc/net/snmp in {netns or 'this namespace'} has no Tcp counters")
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


def cluster_of(env: Mapping[str, str] | None = None):
    """The emulated cluster this process belongs to (``SLURM_CONF``'s folder holds cluster.json), or None."""
    from hpcbench.cluster.emulated import ClusterInfo

    env = os.environ if env is None else env
    conf = env.get("SLURM_CONF")
    if not conf:
        return None
    path = Path(conf).parent / "cluster.json"
    try:
        return ClusterInfo.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def node_link(cluster, node: str) -> NodeLink:
    """The link of ``node`` (e.g. ``"n2"``) in ``cluster`` (a :class:`~hpcbench.cluster.ClusterInfo`)."""
    try:
        info = cluster.node(node)
    except ClusterError as exc:
        raise NodeFaultError(str(exc)) from None
    return NodeLink(node=node, node_netns=netns_path(info.netns), host_veth=info.veth_host,
                    shaping=network.LinkShaping(cluster.spec.link_rate, cluster.spec.link_delay),
                    host_netns=host_netns_of(cluster), node_dev=info.veth_node)


def host_netns_of(cluster) -> str:
    """The host's network namespace, reachable from any node: that of the cluster's slurmctld.

    slurmctld runs on the host at the bridge address, and every node's processes share the host's
    pid namespace (slurmd is started with ``nsenter --net``, no new pid namespace), so its
    ``/proc/PID/ns/net`` is the bridge's namespace seen from anywhere. (``/proc/1`` may belong to
    an init that root cannot inspect, as in a micro-VM.)
    """
    from hpcbench.cluster import daemons

    pid_file = Path(cluster.state_dir) / "run" / "slurmctld.pid"
    record = daemons.read_pid_file(pid_file)
    path = f"/proc/{record[0]}/ns/net" if record else ""
    if not record or not os.path.exists(path):
        raise NodeFaultError(f"the cluster's slurmctld is not running ({pid_file}): its network namespace, the "
                             f"host's, holds the bridge-side veths")
    return path


class DegradedLink(NodeFault):
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

    def __init__(self, link: NodeLink, rate: str, *, queue_bytes: int | None = None,
                 burst_bytes: int | None = None) -> None:
        super().__init__(link.node)
        network.parse_rate(rate)  # a typo fails here, not half-way through the tc commands
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
        return ["tbf", "rate", self.rate, "burst", str(self.burst_bytes), *queue]

    def _apply(self) -> None:
        self.log.counters.update({f"before_{k}": v for k, v in self._tcp().items()})
        for end, ns, dev in self.link.ends():
            _run(in_netns(ns, ["tc", "qdisc", "del", "dev", dev, "root"]), check=False)
            self._changed.append((end, ns, dev))  # from here on, undo must reshape it
            _run(in_netns(ns, ["tc", "qdisc", "add", "dev", dev, "root", "handle", "10:", *self.tbf()]))
            self.log.actions.append(f"{end} {dev}: tc qdisc root tbf " + " ".join(self.tbf()[1:]))

    def _undo(self) -> None:
        errors = []
        for end, ns, dev in self._changed:
            _run(in_netns(ns, ["tc", "qdisc", "del", "dev", dev, "root"]), check=False)
            for cmd in self.link.shaping.commands(dev, None):
                proc = _run(in_netns(ns, cmd), check=False)
                if proc.returncode != 0:
                    errors.append(f"{end} {dev}: `{' '.join(cmd)}`: {proc.stderr.strip()}")
            self.log.actions.append(f"{end} {dev}: restored rate {self.link.shaping.rate}, "
                                    f"delay {self.link.shaping.delay}")
        self._changed.clear()
        try:
            after = self._tcp()
        except NodeFaultError:
            after = {}
        self.log.counters.update({f"after_{k}": v for k, v in after.items()})
        if errors:
            raise NodeFaultError("the link could not be restored: " + "; ".join(errors))

    def _tcp(self) -> dict[str, float]:
        c = tcp_counters(self.link.node_netns)
        return {"OutSegs": c.get("OutSegs", 0.0), "RetransSegs": c.get("RetransSegs", 0.0)}

    @property
    def retransmitted(self) -> float | None:
        """Segments the node retransmitted while the fault was on (None before it was undone)."""
        c = self.log.counters
        if "after_RetransSegs" not in c:
            return None
        return c["after_RetransSegs"] - c["before_RetransSegs"]

    @property
    def sent(self) -> float | None:
        c = self.log.counters
        return c["after_OutSegs"] - c["before_OutSegs"] if "after_OutSegs" in c else None


# -- storage ----------------------------------------------------------------------------------

def block_device_of(path: str | os.PathLike) -> str:
    """``MAJ:MIN`` of the whole disk holding ``path`` (a partition's parent disk), for blkio's throttles.

    Raises:
        NodeFaultError: the file system has no block device (tmpfs, overlay, NFS...): nothing
            a block-layer throttle could slow down.
    """
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    sysdev = Path(f"/sys/dev/block/{major}:{minor}")
    if not sysdev.exists():
        raise NodeFaultError(f"{path} is on device {major}:{minor}, which is no block device (tmpfs, overlay or a "
                             f"network file system): a block-layer read throttle cannot slow it down")
    real = sysdev.resolve()
    if (real / "partition").exists():  # throttles act on the disk's request queue
        return (real.parent / "dev").read_text().strip()
    return f"{major}:{minor}"


def blkio_cgroup_of(pid: int) -> str:
    """The blkio cgroup (v1) of ``pid``, e.g. ``/`` or ``/slurm/job_3``."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "blkio" in controllers.split(","):
            return path
    raise NodeFaultError(f"process {pid} is in no blkio cgroup (/proc/{pid}/cgroup): this kernel mounts no "
                         f"cgroup v1 blkio controller")


def storage_throttle_problem(path: str | os.PathLike) -> str | None:
    """None when :class:`SlowStorage` can work on ``path`` here, else exactly why not."""
    if not (BLKIO_ROOT / "blkio.throttle.read_bps_device").exists():
        return (f"no cgroup v1 blkio controller with throttles at {BLKIO_ROOT} (a cgroup v2-only host would need "
                f"io.max instead)")
    if os.geteuid() != 0:
        return "creating a blkio cgroup and moving processes into it needs root"
    try:
        block_device_of(path)
    except (NodeFaultError, OSError) as exc:
        return str(exc)
    return None


def move_back(origin: dict[int, str], root: Path, controller: str, log) -> None:
    """Move each pid of ``origin`` back into its cgroup (``root``/path), logging it; ``origin`` is emptied.

    A process that has exited meanwhile is noted, not an error.
    """
    for pid, path in list(origin.items()):
        try:
            (root / path.lstrip("/") / "cgroup.procs").write_text(f"{pid}\n")
            log.actions.append(f"moved pid {pid} back to {controller}:{path}")
        except ProcessLookupError:
            log.actions.append(f"pid {pid} had exited")
        except OSError as exc:
            if exc.errno != 3:  # ESRCH: gone
                raise
    origin.clear()


def remove_cgroup(cgroup: Path, root: Path, log) -> None:
    """Remove ``cgroup`` if it exists, first moving any process still in it to ``root``."""
    if not cgroup.exists():
        return
    # Threads a moved process started while inside stay there: move any leftover out first.
    for pid in (cgroup / "cgroup.procs").read_text().split():
        try:
            (root / "cgroup.procs").write_text(f"{pid}\n")
        except OSError:
            pass
    cgroup.rmdir()
    log.actions.append(f"removed {cgroup}")


class SlowStorage(NodeFault):
    """Reads from the disk holding ``path`` throttled for the processes ``pids`` (a node's ranks).

    Args:
        node: the node's name, for the log.
        pids: the processes to throttle (each moves with all its threads).
        path: a file on the disk to throttle (the data set).
        read_bps: bytes per second of reads from that disk, for those processes.
        read_iops: read requests per second (``None``: not limited).
    """

    kind = "slow_storage"

    def __init__(self, node: str, pids: Iterable[int], path: str | os.PathLike, *, read_bps: int,
                 read_iops: int | None = None) -> None:
        super().__init__(node)
        self.pids = sorted(set(int(p) for p in pids))
        if not self.pids:
            raise NodeFaultError("no process to throttle")
        if read_bps < 1 or (read_iops is not None and read_iops < 1):
            raise NodeFaultError(f"read_bps={read_bps}, read_iops={read_iops}: give limits >= 1")
        problem = storage_throttle_problem(path)
        if problem:
            raise NodeFaultError(f"cannot throttle reads of {path}: {problem}")
        self.path, self.read_bps, self.read_iops = Path(path), int(read_bps), read_iops
        self.device = block_device_of(path)
        self.cgroup = BLKIO_ROOT / f"{CGROUP_PREFIX}-{node.replace('/', '_')}-{os.getpid()}"
        self._origin: dict[int, str] = {}

    def _apply(self) -> None:
        self.cgroup.mkdir()
        self.log.actions.append(f"created blkio cgroup {self.cgroup}")
        (self.cgroup / "blkio.throttle.read_bps_device").write_text(f"{self.device} {self.read_bps}\n")
        self.log.actions.append(f"blkio.throttle.read_bps_device = {self.device} {self.read_bps}")
        if self.read_iops is not None:
            (self.cgroup / "blkio.throttle.read_iops_device").write_text(f"{self.device} {self.read_iops}\n")
            self.log.actions.append(f"blkio.throttle.read_iops_device = {self.device} {self.read_iops}")
        for pid in self.pids:
            self._origin[pid] = blkio_cgroup_of(pid)
            (self.cgroup / "cgroup.procs").write_text(f"{pid}\n")
            self.log.actions.append(f"moved pid {pid} from blkio:{self._origin[pid]} into it")

    def _undo(self) -> None:
        move_back(self._origin, BLKIO_ROOT, "blkio", self.log)
        stats = self.cgroup / "blkio.throttle.io_service_bytes"
        if stats.exists():
            for line in stats.read_text().splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[0] == self.device and parts[1] == "Read":
                    self.log.counters["read_bytes"] = float(parts[2])
        remove_cgroup(self.cgroup, BLKIO_ROOT, self.log)


# -- CPU ----------------------------------------------------------------------------------

class CpuContention(NodeFault):
    """``per_cpu`` busy processes on every CPU the processes ``pids`` may run on.

    Args:
        node: the node's name, for the log.
        pids: the node's ranks; their ``Cpus_allowed_list`` says which CPUs to load.
        per_cpu: busy processes pinned to each of those CPUs (1 takes half a CPU from one rank
            under the fair scheduler; 2 take two thirds).
    """

    kind = "cpu_contention"

    def __init__(self, node: str, pids: Iterable[int], *, per_cpu: int = 1) -> None:
        super().__init__(node)
        self.pids = sorted(set(int(p) for p in pids))
        if not self.pids:
            raise NodeFaultError("no process whose CPUs to load")
        if per_cpu < 1:
            raise NodeFaultError(f"per_cpu={per_cpu}: give >= 1")
        self.per_cpu = per_cpu
        self.cpus: list[int] = []
        self.procs: list[subprocess.Popen] = []

    def _apply(self) -> None:
        self.cpus = sorted(set().union(*(allowed_cpus(p) for p in self.pids)))
        self.log.actions.append(f"ranks {self.pids} may run on CPUs {self.cpus}")
        for cpu in self.cpus:
            for _ in range(self.per_cpu):
                proc = subprocess.Popen([sys.executable, "-c", _BUSY_LOOP, str(cpu)], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
                self.procs.append(proc)
                self.log.actions.append(f"started busy process {proc.pid} pinned to CPU {cpu}")

    def _undo(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            self.log.actions.append(f"stopped busy process {proc.pid} (rc {proc.returncode})")
        self.procs.clear()

    def busy_cpu_seconds(self) -> float:
        """CPU seconds the busy processes have used so far (while they run)."""
        total = 0.0
        tick = os.sysconf("SC_CLK_TCK")
        for proc in self.procs:
            try:
                fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / tick
            except (OSError, IndexError, ValueError):
                continue
        return total


# -- faults added for the practice gate (C12): a slow node, a thread-hungry neighbour, a flapping link --------

#: Where cgroup v1 mounts the cpu controller (CFS bandwidth control: ``cpu.cfs_quota_us``).
CPU_ROOT = Path("/sys/fs/cgroup/cpu")
#: Prefix of every cpu cgroup made here (removed again on exit).
CPU_CGROUP_PREFIX = "hpcbench-slow-node"
#: The CFS period the quota is counted in: the kernel's default, 100 ms (Documentation/scheduler/sched-bwc.rst).
CFS_PERIOD_US = 100_000

#: A thread-hungry neighbour: torch's intra-op pool of argv[1] threads multiplying matrices on the CPUs of
#: argv[2], free to move between them (one affinity for the process, none per thread), until signalled.
_THREAD_HUNGRY = ("import os, sys\nos.sched_setaffinity(0, {int(c) for c in sys.argv[2].split(',')})\n"
                  "import torch\ntorch.set_num_threads(int(sys.argv[1]))\na = torch.randn(256, 256)\n"
                  "while True:\n    a @ a\n")


def cgroup_v1_of(pid: int, controller: str) -> str:
    """The cgroup (v1) of ``pid`` for ``controller`` (``"cpu"``, ``"blkio"``), e.g. ``/`` or ``/slurm/job_3``."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    raise NodeFaultError(f"process {pid} is in no {controller} cgroup (/proc/{pid}/cgroup): this kernel mounts no "
                         f"cgroup v1 {controller} controller")


def cpu_quota_problem() -> str | None:
    """None when :class:`CpuQuota` can work here, else exactly why not."""
    if not (CPU_ROOT / "cpu.cfs_quota_us").exists():
        return (f"no cgroup v1 cpu controller with CFS bandwidth control at {CPU_ROOT} (a cgroup v2-only host would "
                f"need cpu.max instead)")
    if os.geteuid() != 0:
        return "creating a cpu cgroup and moving processes into it needs root"
    return None


class CpuQuota(NodeFault):
    """A slow node: the processes ``pids`` (a node's ranks) together get ``cpus`` CPUs' worth of time.

    A new cgroup v1 ``cpu`` cgroup with ``cpu.cfs_quota_us = cpus x cpu.cfs_period_us``; the
    processes move into it with all their threads (``cgroup.procs``) and back out on exit. What
    a node with a lower clock, thermal throttling or a co-scheduled job's CPU limit looks like to
    its ranks: every step computes at a fraction of the speed, in bursts of the CFS period.

    Args:
        node: the node's name, for the log.
        pids: the processes to slow down.
        cpus: CPU time per wall second for all of them together (0.5: half a CPU).
        period_us: the CFS period.
    """

    kind = "slow_node"

    def __init__(self, node: str, pids: Iterable[int], *, cpus: float, period_us: int = CFS_PERIOD_US) -> None:
        super().__init__(node)
        self.pids = sorted(set(int(p) for p in pids))
        if not self.pids:
            raise NodeFaultError("no process to slow down")
        # the kernel refuses quotas under 1 ms and periods outside [1 ms, 1 s]
        if not 1000 <= period_us <= 1_000_000 or not cpus * period_us >= 1000:
            raise NodeFaultError(f"cpus={cpus}, period_us={period_us}: the quota (cpus x period) must be >= 1000 us "
                                 f"and the period within [1000, 1000000] us")
        problem = cpu_quota_problem()
        if problem:
            raise NodeFaultError(f"cannot limit the CPU time of {self.pids}: {problem}")
        self.cpus, self.period_us = float(cpus), int(period_us)
        self.cgroup = CPU_ROOT / f"{CPU_CGROUP_PREFIX}-{node.replace('/', '_')}-{os.getpid()}"
        self._origin: dict[int, str] = {}

    @property
    def quota_us(self) -> int:
        return int(round(self.cpus * self.period_us))

    def _apply(self) -> None:
        self.cgroup.mkdir()
        self.log.actions.append(f"created cpu cgroup {self.cgroup}")
        (self.cgroup / "cpu.cfs_period_us").write_text(f"{self.period_us}\n")
        (self.cgroup / "cpu.cfs_quota_us").write_text(f"{self.quota_us}\n")
        self.log.actions.append(f"cpu.cfs_quota_us = {self.quota_us} per cpu.cfs_period_us = {self.period_us} "
                                f"({self.cpus:g} CPU for {len(self.pids)} process(es))")
        for pid in self.pids:
            self._origin[pid] = cgroup_v1_of(pid, "cpu")
            (self.cgroup / "cgroup.procs").write_text(f"{pid}\n")
            self.log.actions.append(f"moved pid {pid} from cpu:{self._origin[pid]} into it")

    def _undo(self) -> None:
        move_back(self._origin, CPU_ROOT, "cpu", self.log)
        stat = self.cgroup / "cpu.stat"
        if stat.exists():
            for line in stat.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name in ("nr_periods", "nr_throttled", "throttled_time") and value.strip().isdigit():
                    self.log.counters[name] = float(value)
        remove_cgroup(self.cgroup, CPU_ROOT, self.log)


class ThreadHungryNeighbour(NodeFault):
    """A second process on the CPUs of ``pids`` whose ``threads`` compute threads are not pinned.

    Together with a rank that runs more intra-op threads than it has cores and no binding (the
    rank's own part, done inside the rank), it is the "unbound threads" problem: more runnable
    threads than cores on the node, each preempted at the scheduler's whim, OpenMP barriers
    waiting for threads that are not running.

    Args:
        node: the node's name, for the log.
        pids: the node's ranks; their ``Cpus_allowed_list`` says which CPUs the neighbour shares.
        threads: the neighbour's torch intra-op threads.
    """

    kind = "thread_hungry_neighbour"

    def __init__(self, node: str, pids: Iterable[int], *, threads: int) -> None:
        super().__init__(node)
        self.pids = sorted(set(int(p) for p in pids))
        if not self.pids:
            raise NodeFaultError("no process whose CPUs to share")
        if threads < 1:
            raise NodeFaultError(f"threads={threads}: give >= 1")
        self.threads = int(threads)
        self.cpus: list[int] = []
        self.proc: subprocess.Popen | None = None

    def _apply(self) -> None:
        self.cpus = sorted(set().union(*(allowed_cpus(p) for p in self.pids)))
        self.proc = subprocess.Popen([sys.executable, "-c", _THREAD_HUNGRY, str(self.threads),
                                      ",".join(str(c) for c in self.cpus)], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.log.actions.append(f"started neighbour {self.proc.pid}: {self.threads} torch threads multiplying "
                                f"matrices on CPUs {self.cpus} (ranks {self.pids}), unpinned")

    def _undo(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self.log.actions.append(f"stopped neighbour {proc.pid} (rc {proc.returncode})")


class LinkFlap(NodeFault):
    """A flapping link, a transient fault: the node's link goes down for ``down_s`` every ``period_s``.

    The bridge-side end of the node's veth (``ip link set hpcb-hN down``, then ``up``, in the
    host's namespace) as a flapping cable, transceiver or switch port does: the node's packets
    are lost while it is down and TCP resends them after its retransmission timeout once it is
    back, so the steps that straddle a flap take seconds longer and the others do not.
    :func:`hpcbench.fault.inject.node_down` with ``how="link"`` takes a node out for good;
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
        import threading

        self.flaps: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: str | None = None

    def _ip_link(self, state: str) -> subprocess.CompletedProcess:
        return _run(in_netns(self.link.host_netns, ["ip", "link", "set", self.link.host_veth, state]))

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
        import threading

        # a missing namespace or tool fails here, before any flap, with the command's error
        _run(in_netns(self.link.host_netns, ["ip", "link", "show", self.link.host_veth]))
        self.log.counters.update({f"before_{k}": v for k, v in self._tcp().items()})
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
        try:
            self.log.counters.update({f"after_{k}": v for k, v in self._tcp().items()})
        except NodeFaultError:
            pass
        if self._error:
            raise NodeFaultError(f"the link flap failed: {self._error}")

    def _tcp(self) -> dict[str, float]:
        c = tcp_counters(self.link.node_netns)
        return {"OutSegs": c.get("OutSegs", 0.0), "RetransSegs": c.get("RetransSegs", 0.0)}

    @property
    def retransmitted(self) -> float | None:
        """Segments the node retransmitted while the fault was on (None before it was undone)."""
        c = self.log.counters
        return c["after_RetransSegs"] - c["before_RetransSegs"] if "after_RetransSegs" in c else None

    @property
    def sent(self) -> float | None:
        c = self.log.counters
        return c["after_OutSegs"] - c["before_OutSegs"] if "after_OutSegs" in c else None
