"""The faults of ``practice``, one registry entry each: the common problem it stands for, and how it is made.

Every fault is real and lives in :mod:`hpcbench.fault.inject` (its :data:`~hpcbench.fault.inject.FAULT_KINDS`
says how each is made and undone); this module adds what the experiment claims about it: the
problem practitioners meet that it stands for. It is applied to the last node while one
training phase runs and undone after it, in up to two parts:

* the **node part**, made and applied by the faulty node's local rank 0 (the injector) for the
  whole node: a :class:`~hpcbench.fault.inject.NodeFault`, or a sentence saying why it cannot be
  applied here (then the phase is recorded *not injected* and never counts);
* the **rank part**, which every rank of the faulty node applies to itself, because only a
  process can change its own threads (``unbound_threads``).

The list is this project's: the faults it can make on CPUs, veths and cgroups, each standing
for one problem practitioners meet before scaling out. It is not a census of "common
problems", so the fraction the gate catches is a fraction of *these*.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ContextManager

from hpcbench.core.registry import Registry
from hpcbench.fault.inject import FAULT_KINDS as INJECTABLE
from hpcbench.fault.inject import FaultSite


@dataclass(frozen=True)
class FaultKind:
    """One fault the experiment can inject: the problem it stands for, and the injectable kind that makes it."""

    name: str
    problem: str
    """the common problem it stands for, in words"""
    how: str
    """what is really done, in words"""
    node_part: Callable[[FaultSite], Any] | None
    """site -> a NodeFault to apply on the node, or why not (str); None: the fault has no node part"""
    rank_part: Callable[[Any], ContextManager[str]] | None = None
    """cfg -> a context manager each rank of the faulty node enters, yielding what it did"""
    needs_cluster: bool = False
    """needs the emulated cluster's per-node link"""


FAULT_KINDS: Registry[FaultKind] = Registry("practice fault")

#: Each fault's problem, in the words the report shows; how it is made comes from hpcbench.fault.inject.
PROBLEMS = {
    "slow_link": "a slow or mis-negotiated inter-node link (a port at a lower speed, a congested uplink)",
    "lossy_link": "a lossy link (a bad cable or transceiver): packets dropped and resent",
    "slow_storage": "slow shared storage (an overloaded file system, a degraded disk)",
    "cpu_contention": "another job or daemon busy on the node's cores",
    "unbound_threads": "threads not bound and oversubscribed (OMP_NUM_THREADS unset, no --cpu-bind)",
    "slow_node": "one slower node (lower clock, thermal throttling, a CPU limit)",
    "link_flap": "a flapping link, a transient fault (a loose cable, a resetting switch port)",
}

for _name, _problem in PROBLEMS.items():
    _made = INJECTABLE.get(_name)
    FAULT_KINDS.register(_name, FaultKind(_name, _problem, _made.how, _made.node_part, _made.rank_part,
                                          _made.needs_cluster))
