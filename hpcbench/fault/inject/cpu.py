"""CPU faults on one node: busy neighbours, a slow node's CPU quota, a thread-hungry neighbour, unbound threads.

* :class:`CpuContention` — busy-loop processes pinned (``sched_setaffinity``) to the CPUs the
  node's ranks may run on (``Cpus_allowed_list`` of each rank), stopped by pid.
* :class:`CpuQuota` — a slow node: the ranks together get a fraction of CPU time (cgroup v1 CFS quota).
* :class:`ThreadHungryNeighbour` and :func:`unbound_rank_threads` — together the "unbound
  threads" problem: more runnable threads than cores, none pinned.

Functions that only read (``allowed_cpus``, ``cpu_quota_problem``) need no privileges beyond
reading ``/proc`` and ``/sys``; the cgroup moves need root.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator

from hpcbench.affinity.applied import allowed_cpus
from hpcbench.fault.inject.base import FAULT_KINDS, FaultKind, FaultSite, NodeFault, NodeFaultError, stop_processes
from hpcbench.fault.inject.cgroups import move_back, move_in, remove_cgroup

#: Where cgroup v1 mounts the cpu controller (CFS bandwidth control: ``cpu.cfs_quota_us``).
CPU_ROOT = Path("/sys/fs/cgroup/cpu")
#: Prefix of every cpu cgroup made here (removed again on exit).
CPU_CGROUP_PREFIX = "hpcbench-slow-node"
#: The CFS period the quota is counted in: the kernel's default, 100 ms (Documentation/scheduler/sched-bwc.rst).
CFS_PERIOD_US = 100_000

#: A busy loop for one CPU: pins itself, then spins until it is signalled. Python, not `yes`, so
#: that it does no I/O; a few MB of memory each.
_BUSY_LOOP = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"

#: A thread-hungry neighbour: torch's intra-op pool of argv[1] threads multiplying matrices on the CPUs of
#: argv[2], free to move between them (one affinity for the process, none per thread), until signalled.
_THREAD_HUNGRY = ("import os, sys\nos.sched_setaffinity(0, {int(c) for c in sys.argv[2].split(',')})\n"
                  "import torch\ntorch.set_num_threads(int(sys.argv[1]))\na = torch.randn(256, 256)\n"
                  "while True:\n    a @ a\n")


def _pids(pids: Iterable[int], what: str) -> list[int]:
    found = sorted(set(int(p) for p in pids))
    if not found:
        raise NodeFaultError(f"no process {what}")
    return found


def _spawn(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


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
        self.pids = _pids(pids, "whose CPUs to load")
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
                proc = _spawn([sys.executable, "-c", _BUSY_LOOP, str(cpu)])
                self.procs.append(proc)
                self.log.actions.append(f"started busy process {proc.pid} pinned to CPU {cpu}")

    def _undo(self) -> None:
        stop_processes(self.procs)
        for proc in self.procs:
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
        self.pids = _pids(pids, "to slow down")
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
        move_in(self.cgroup, self.pids, "cpu", self._origin, self.log)

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

    Together with a rank that runs more intra-op threads than it has cores and no binding
    (:func:`unbound_rank_threads`, done inside the rank), it is the "unbound threads" problem:
    more runnable threads than cores on the node, each preempted at the scheduler's whim, OpenMP
    barriers waiting for threads that are not running.

    Args:
        node: the node's name, for the log.
        pids: the node's ranks; their ``Cpus_allowed_list`` says which CPUs the neighbour shares.
        threads: the neighbour's torch intra-op threads.
    """

    kind = "thread_hungry_neighbour"

    def __init__(self, node: str, pids: Iterable[int], *, threads: int) -> None:
        super().__init__(node)
        self.pids = _pids(pids, "whose CPUs to share")
        if threads < 1:
            raise NodeFaultError(f"threads={threads}: give >= 1")
        self.threads = int(threads)
        self.cpus: list[int] = []
        self.proc: subprocess.Popen | None = None

    def _apply(self) -> None:
        self.cpus = sorted(set().union(*(allowed_cpus(p) for p in self.pids)))
        self.proc = _spawn([sys.executable, "-c", _THREAD_HUNGRY, str(self.threads),
                            ",".join(str(c) for c in self.cpus)])
        self.log.actions.append(f"started neighbour {self.proc.pid}: {self.threads} torch threads multiplying "
                                f"matrices on CPUs {self.cpus} (ranks {self.pids}), unpinned")

    def _undo(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        stop_processes([proc])
        self.log.actions.append(f"stopped neighbour {proc.pid} (rc {proc.returncode})")


@contextlib.contextmanager
def unbound_rank_threads(settings: Any) -> Iterator[str]:
    """This rank, for the block: ``settings.thread_factor`` torch threads per CPU it may use, and no binding.

    Every thread of the process (``/proc/self/task``) may run on every online CPU; torch's
    intra-op pool grows to ``thread_factor x`` the CPUs the rank had. Both are put back after.
    """
    import torch

    before_cpus = sorted(os.sched_getaffinity(0))
    before_threads = torch.get_num_threads()
    every = set(range(os.cpu_count() or 1))
    threads = settings.thread_factor * len(before_cpus)

    def set_all(cpus) -> None:
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError):  # a thread may end meanwhile
                os.sched_setaffinity(int(tid), cpus)

    set_all(every)
    torch.set_num_threads(threads)
    try:
        yield (f"rank pid {os.getpid()}: torch threads {before_threads} -> {threads}, CPUs {before_cpus} -> "
               f"{sorted(every)} (unbound)")
    finally:
        torch.set_num_threads(before_threads)
        set_all(set(before_cpus))


def _neighbour(site: FaultSite) -> ThreadHungryNeighbour:
    cpus = set().union(*(allowed_cpus(p) for p in site.pids))
    return ThreadHungryNeighbour(site.node, site.pids, threads=site.settings.thread_factor * len(cpus))


for _kind in (
    FaultKind("cpu_contention", "contention_per_cpu busy processes pinned to each CPU the node's ranks may use",
              lambda s: CpuContention(s.node, s.pids, per_cpu=s.settings.contention_per_cpu),
              reads=("contention_per_cpu",)),
    FaultKind("slow_node", "cgroup-v1 CFS quota of node_cpu_share CPU per rank for the node's ranks",
              lambda s: CpuQuota(s.node, s.pids, cpus=s.settings.node_cpu_share * len(s.pids)),
              reads=("node_cpu_share",)),
    FaultKind("unbound_threads", "the node's ranks run thread_factor x their CPUs in torch threads, unbound, next to "
              "a neighbour process with as many unpinned threads on the same CPUs", _neighbour, unbound_rank_threads,
              reads=("thread_factor",)),
):
    FAULT_KINDS.register(_kind.name, _kind)
