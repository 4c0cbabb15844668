"""A recorded node's binding plan on this machine: the dress rehearsal of a GPU node's placement.

A plan made from a recorded topology (``tests/fixtures/topology/two_socket_8gpu_4nic``: a DGX-like
node, 256 CPUs on 8 NUMA nodes, 8 GPUs, 4 InfiniBand HCAs) names CPUs, memory nodes and NICs that
a small machine does not have. What a rank can honestly get here, and what it is checked against:

* *cores*: the plan's CPU numbers mean nothing on 2 cores, so each rank takes the share of the CPUs
  it was started with that its place in the plan gives it (local rank i: the i-th equal share, in
  CPU order). Disjoint as the plan's are, as long as there are as many CPUs as ranks; with fewer,
  ranks share them round robin and a note says so. The plan's own numbers are kept beside, never
  claimed as applied.
* *memory node*: applied only where this machine has that node and more than one; otherwise the
  plan's node is recorded as planned and the memory policy is left as it is, with a note.
* *NIC*: the plan's NCCL variable (``NCCL_IB_HCA==mlx5_0``) is set as on the real node; the device
  does not exist here, so what is checked is that the variable reached the rank.
* *GPU*: not stood in for: SLURM's GRES assignment gives each task its device, compared with the
  plan's index (:func:`hpcbench.affinity.applied.assigned_gpu`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from hpcbench.affinity.plan import RankBinding
from hpcbench.affinity.topology import format_cpulist
from hpcbench.core.errors import ConfigError


@dataclass(frozen=True)
class StandIn:
    """One rank's binding: the plan's (on the recorded node) and what this machine applies for it."""

    planned: RankBinding
    applied: RankBinding
    notes: tuple[str, ...]


def stand_in_cpus(local_rank: int, local_world: int, cpus: Sequence[int]) -> tuple[tuple[int, ...], str | None]:
    """The real CPUs that stand in for local rank ``local_rank``'s planned cores.

    Args:
        local_rank, local_world: the rank's place on its node and the ranks on it.
        cpus: the CPUs the rank may use here (what it was started with).
    Returns:
        The rank's equal share of ``cpus`` in CPU order, and a note when there are fewer CPUs than
        ranks (then ranks share CPUs round robin, one each).
    Raises:
        ConfigError: naming ``local_rank`` outside ``0..local_world-1``, or ``cpus`` when empty.
    """
    if not 0 <= local_rank < local_world:
        raise ConfigError(f"{local_rank} is outside 0..{local_world - 1}", field="local_rank")
    real = sorted(set(cpus))
    if not real:
        raise ConfigError("no CPU to stand in for the plan's cores", field="cpus")
    share = len(real) // local_world
    if share == 0:
        note = (f"{local_world} ranks on {len(real)} CPU(s): ranks share CPUs round robin, where the plan gives "
                f"each its own cores")
        return (real[local_rank % len(real)],), note
    return tuple(real[local_rank * share:(local_rank + 1) * share]), None


def stand_in_binding(planned: RankBinding, local_world: int, cpus: Sequence[int],
                     memory_nodes: Sequence[int]) -> StandIn:
    """What this machine applies for a binding planned on a recorded node (see the module's text).

    Args:
        planned: the rank's binding from the recorded node's plan.
        local_world: ranks on the node.
        cpus: the CPUs the rank may use here.
        memory_nodes: this machine's memory nodes.
    Returns:
        The planned binding, the one to apply (real CPUs, threads = their count, the memory node
        only where it exists here, no loader cores) and what the mapping assumed.
    """
    real, note = stand_in_cpus(planned.local_rank, local_world, cpus)
    notes = [f"local rank {planned.local_rank}: planned CPUs {format_cpulist(planned.cpus)} of the recorded node "
             f"stand in as CPU(s) {format_cpulist(real)} here"]
    if note:
        notes.append(note)
    mem_node = planned.mem_node
    if mem_node is not None and (len(memory_nodes) < 2 or mem_node not in memory_nodes):
        notes.append(f"memory node {mem_node} of the recorded node not applied: this machine has memory node(s) "
                     f"{format_cpulist(memory_nodes) or 'none'}")
        mem_node = None
    if planned.loader_cpus:
        notes.append(f"loader CPUs {format_cpulist(planned.loader_cpus)} not stood in for")
    applied = replace(planned, cpus=real, threads=len(real), mem_node=mem_node, loader_cpus=())
    return StandIn(planned=planned, applied=applied, notes=tuple(notes))
