"""Breaking things on purpose: every fault hpcbench injects, for real, and the one helper that applies them.

Fault *tolerance* (checkpoints, the job wrapper's retries) is the rest of :mod:`hpcbench.fault`;
this subpackage is what the tests and experiments do to a node, a process, a file or a disk to
see that tolerance (or a monitor, or a gate) at work. Nothing is simulated: a link gets a real
tbf, a rank a real SIGKILL, a shard a flipped byte on disk. One module per kind of target:

* :mod:`~hpcbench.fault.inject.link` — a node's link: a rate cut, a lossy queue (:class:`DegradedLink`),
  a flapping link (:class:`LinkFlap`); the node's TCP retransmissions counted.
* :mod:`~hpcbench.fault.inject.storage` — blkio-throttled reads (:class:`SlowStorage`), a disk that
  fills up (:func:`full_disk`).
* :mod:`~hpcbench.fault.inject.cpu` — busy neighbours (:class:`CpuContention`), a slow node's CPU
  quota (:class:`CpuQuota`), unbound threads (:class:`ThreadHungryNeighbour`, :func:`unbound_rank_threads`).
* :mod:`~hpcbench.fault.inject.process` — a rank killed mid-step, a writer killed mid-write, a job's try killed.
* :mod:`~hpcbench.fault.inject.node` — a whole node of the emulated cluster out (slurmd, a crash, its link) and back.
* :mod:`~hpcbench.fault.inject.data` — a shard or checkpoint file damaged in place.
* :mod:`~hpcbench.fault.inject.base` — the apply/undo template (:class:`NodeFault`), its log, the
  registry of the kinds an experiment can put on a node for a phase (:data:`FAULT_KINDS`).
* :mod:`~hpcbench.fault.inject.record` — :func:`apply_and_record`: apply, record what and when,
  always undo, and report a failed undo without hiding the body's own exception.
* :mod:`~hpcbench.fault.inject.cgroups` — the cgroup v1 moves the storage and CPU faults share.

Most faults need root (tc, nsenter, cgroups, signals to other users' processes, mount).
"""

from hpcbench.fault.inject.base import (FAULT_KINDS, FaultError, FaultKind, FaultLog, FaultSite, NodeFault,
                                        NodeFaultError, build_node_part)
from hpcbench.fault.inject.cpu import (CpuContention, CpuQuota, ThreadHungryNeighbour, cpu_quota_problem,
                                       unbound_rank_threads)
from hpcbench.fault.inject.data import ShardDamage, corrupt_shard
from hpcbench.fault.inject.link import DegradedLink, LinkFlap, NodeLink, node_link, tcp_counters
from hpcbench.fault.inject.node import NodeOutage, node_down, node_up
from hpcbench.fault.inject.process import (KilledProcess, find_ranks, kill_during_write, kill_one_rank,
                                           kill_process_groups, kill_try_groups, try_groups)
from hpcbench.fault.inject.record import (AppliedFault, FaultUndoError, apply_and_record, node_fault_for_phase,
                                          rank_part_for_phase)
from hpcbench.fault.inject.storage import SlowStorage, block_device_of, full_disk, storage_throttle_problem

__all__ = [
    "FAULT_KINDS", "FaultError", "FaultKind", "FaultLog", "FaultSite", "NodeFault", "NodeFaultError", "build_node_part",
    "CpuContention", "CpuQuota", "ThreadHungryNeighbour", "cpu_quota_problem", "unbound_rank_threads",
    "ShardDamage", "corrupt_shard",
    "DegradedLink", "LinkFlap", "NodeLink", "node_link", "tcp_counters",
    "NodeOutage", "node_down", "node_up",
    "KilledProcess", "find_ranks", "kill_during_write", "kill_one_rank", "kill_process_groups", "kill_try_groups",
    "try_groups",
    "AppliedFault", "FaultUndoError", "apply_and_record", "node_fault_for_phase", "rank_part_for_phase",
    "SlowStorage", "block_device_of", "full_disk", "storage_throttle_problem",
]
