"""The faults of ``practice``, one registry entry each: what it does, the common problem it stands for.

Every fault is real (:mod:`hpcbench.cluster.node_faults`): it is applied to the last node while
one training phase runs and undone after it. A fault has up to two parts:

* the **node part**, made and applied by the faulty node's local rank 0 (the injector) for the
  whole node: a :class:`~hpcbench.cluster.node_faults.NodeFault`, or a sentence saying why it
  cannot be applied here (then the phase is recorded *not injected* and never counts);
* the **rank part**, which every rank of the faulty node applies to itself, because only a
  process can change its own threads (``unbound_threads``).

The list is this project's: the faults it can make on CPUs, veths and cgroups, each standing
for one problem practitioners meet before scaling out. It is not a census of "common
problems", so the fraction the gate catches is a fraction of *these*.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator

from hpcbench.core.registry import Registry
from hpcbench.experiments.practice.config import PracticeConfig


@dataclass(frozen=True)
class FaultSite:
    """What a fault acts on: the faulty node, its ranks' pids, the task's data set, the config."""

    cfg: PracticeConfig
    node: str
    pids: list[int]
    data: Path


@dataclass(frozen=True)
class FaultKind:
    """One fault the experiment can inject."""

    name: str
    problem: str
    """the common problem it stands for, in words"""
    how: str
    """what is really done, in words"""
    node_part: Callable[[FaultSite], Any] | None
    """site -> a NodeFault to apply on the node, or why not (str); None: the fault has no node part"""
    rank_part: Callable[[PracticeConfig], ContextManager[str]] | None = None
    """cfg -> a context manager each rank of the faulty node enters, yielding what it did"""
    needs_cluster: bool = False
    """needs the emulated cluster's per-node link"""


FAULT_KINDS: Registry[FaultKind] = Registry("practice fault")

NO_CLUSTER = ("no emulated cluster (SLURM_CONF's folder holds no cluster.json): the nodes share one loopback, there "
              "is no node link to degrade")


def _link(site: FaultSite):
    """The faulty node's link, or why there is none here."""
    from hpcbench.cluster import node_faults as nf

    cluster = nf.cluster_of()
    if cluster is None:
        return NO_CLUSTER
    return nf.node_link(cluster, site.node)


def _slow_link(site: FaultSite, *, lossy: bool):
    from hpcbench.cluster import node_faults as nf

    link = _link(site)
    if isinstance(link, str):
        return link
    return nf.DegradedLink(link, site.cfg.slow_link_rate, queue_bytes=site.cfg.lossy_queue_bytes if lossy else None)


def _slow_storage(site: FaultSite):
    from hpcbench.cluster import node_faults as nf

    shards = sorted(site.data.glob("*.h5"))
    if not shards:
        return f"no data shard under {site.data} to find the disk of"
    # SlowStorage names its cgroup after the node: an emulated node's name ("host/node1") holds a slash
    return nf.SlowStorage(site.node, site.pids, shards[0], read_bps=site.cfg.storage_read_bps,
                          read_iops=site.cfg.storage_read_iops)


def _cpu_contention(site: FaultSite):
    from hpcbench.cluster import node_faults as nf

    return nf.CpuContention(site.node, site.pids, per_cpu=site.cfg.contention_per_cpu)


def _neighbour(site: FaultSite):
    from hpcbench.affinity.applied import allowed_cpus
    from hpcbench.cluster import node_faults as nf

    cpus = set().union(*(allowed_cpus(p) for p in site.pids))
    return nf.ThreadHungryNeighbour(site.node, site.pids, threads=site.cfg.thread_factor * len(cpus))


@contextlib.contextmanager
def unbound_rank_threads(cfg: PracticeConfig) -> Iterator[str]:
    """This rank, for the block: ``thread_factor`` torch threads per CPU it may use, and no binding.

    Every thread of the process (``/proc/self/task``) may run on every online CPU; torch's
    intra-op pool grows to ``thread_factor x`` the CPUs the rank had. Both are put back after.
    """
    import torch

    before_cpus = sorted(os.sched_getaffinity(0))
    before_threads = torch.get_num_threads()
    every = set(range(os.cpu_count() or 1))
    threads = cfg.thread_factor * len(before_cpus)

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


def _cpu_quota(site: FaultSite):
    from hpcbench.cluster import node_faults as nf

    return nf.CpuQuota(site.node, site.pids, cpus=site.cfg.node_cpu_share * len(site.pids))


def _link_flap(site: FaultSite):
    from hpcbench.cluster import node_faults as nf

    link = _link(site)
    if isinstance(link, str):
        return link
    cfg = site.cfg
    # half a period first: with the default 8 s phase and 4 s period, both flaps land in the timed steps
    return nf.LinkFlap(link, down_s=cfg.flap_down_s, period_s=cfg.flap_period_s, first_after_s=cfg.flap_period_s / 2)


for _kind in (
    FaultKind("slow_link", "a slow or mis-negotiated inter-node link (a port at a lower speed, a congested uplink)",
              "tbf at slow_link_rate on both ends of the node's veth", lambda s: _slow_link(s, lossy=False),
              needs_cluster=True),
    FaultKind("lossy_link", "a lossy link (a bad cable or transceiver): packets dropped and resent",
              "tbf at slow_link_rate with a lossy_queue_bytes queue: bursts are dropped, TCP retransmits",
              lambda s: _slow_link(s, lossy=True), needs_cluster=True),
    FaultKind("slow_storage", "slow shared storage (an overloaded file system, a degraded disk)",
              "cgroup-v1 blkio read throttle on the disk holding the data set, for the node's ranks",
              _slow_storage),
    FaultKind("cpu_contention", "another job or daemon busy on the node's cores",
              "contention_per_cpu busy processes pinned to each CPU the node's ranks may use", _cpu_contention),
    FaultKind("unbound_threads", "threads not bound and oversubscribed (OMP_NUM_THREADS unset, no --cpu-bind)",
              "the node's ranks run thread_factor x their CPUs in torch threads, unbound, next to a neighbour "
              "process with as many unpinned threads on the same CPUs", _neighbour, unbound_rank_threads),
    FaultKind("slow_node", "one slower node (lower clock, thermal throttling, a CPU limit)",
              "cgroup-v1 CFS quota of node_cpu_share CPU per rank for the node's ranks", _cpu_quota),
    FaultKind("link_flap", "a flapping link, a transient fault (a loose cable, a resetting switch port)",
              "the node's link down for flap_down_s every flap_period_s (bridge side of its veth)", _link_flap,
              needs_cluster=True),
):
    FAULT_KINDS.register(_kind.name, _kind)


def make_node_fault(name: str, site: FaultSite):
    """The node part of fault ``name`` at ``site`` (a NodeFault), None without one, or why it cannot be here (str)."""
    from hpcbench.cluster.node_faults import NodeFaultError

    kind = FAULT_KINDS.get(name)
    if kind.node_part is None:
        return None
    try:
        return kind.node_part(site)
    except (NodeFaultError, OSError) as exc:
        return str(exc)
