"""DDP communication hooks for topology-aware gradient reduction (T-comm, claims C3 and C17).

Every hook has PyTorch's signature ``hook(state, bucket) -> Future[Tensor]`` (see
``torch/distributed/algorithms/ddp_comm_hooks``) and is registered with
``ddp_model.register_comm_hook(state, hook)``. The state classes hold the process
groups (built from a :class:`~hpcbench.dist.Topology`) and call statistics.

* :func:`hierarchical_allreduce_hook`: reduce-scatter inside the node, all-reduce of
  each shard across nodes among ranks of equal local rank, all-gather inside the node.
  Each node's bytes cross the node boundary once per shard owner: a node sends S in
  all (ranks_per_node shards of S / ranks_per_node) instead of a flat ring's
  2 (N-1)/N S per rank.
* :func:`leader_allreduce_hook`: reduce to local rank 0, all-reduce among the node
  leaders, broadcast inside the node (the guide's "DP inside the node" taken literally:
  one process per node talks to the other nodes).
* :func:`noop_hook`: returns the local gradients untouched; the step time with it is
  the step without gradient communication (the baseline of the communication share).

Both reductions average like DDP's default hook (divide by the world size, then sum),
so the gradients equal plain DDP's up to floating-point summation order.

On CPU (gloo), gloo's ``Work`` objects of reduce-scatter and all-gather have no
future, so the three stages run in order on one background thread per state; the hook
returns at once and DDP keeps computing the next buckets, as with its own all-reduce.
On GPU (NCCL), ``Work.wait()`` only makes the current stream wait, so the stages are
issued inline without blocking the CPU.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from hpcbench.dist.topology import Topology


def padded_length(numel: int, parts: int) -> int:
    """The smallest multiple of ``parts`` that is >= ``numel`` (reduce-scatter needs equal shards)."""
    return -(-numel // parts) * parts


def _dist():
    import torch.distributed as dist

    return dist


def reduce_scatter_async(out, inp, group):
    """Start a reduce-scatter of ``inp`` into ``out`` over ``group``; returns the ``Work``."""
    dist = _dist()
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return fn(out, inp, group=group, async_op=True)


def all_gather_async(out, inp, group):
    """Start an all-gather of ``inp`` into ``out`` over ``group``; returns the ``Work``."""
    dist = _dist()
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return fn(out, inp, group=group, async_op=True)


class OrderedExecutor:
    """One daemon thread running submitted functions in submission order.

    DDP calls a hook bucket after bucket in the same order on every rank; running the
    stages of each bucket in that order on one thread keeps every process group's
    collectives in the same order on every rank, which gloo and NCCL require.
    """

    def __init__(self, name: str):
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            fn, arg, fut = self._queue.get()
            try:
                fut.set_result(fn(arg))
            except Exception as exc:  # noqa: BLE001 - handed to DDP through the future
                fut.set_exception(exc)

    def submit(self, fn: Callable[[Any], Any], arg: Any):
        import torch

        fut = torch.futures.Future()
        self._queue.put((fn, arg, fut))
        return fut


@dataclass
class HierarchicalState:
    """Process groups and statistics of the two-level reductions.

    Build it with :meth:`from_topology` on every rank at the same time (creating process
    groups is collective).
    """

    topology: Topology
    intra_group: Any
    """this rank's node: ranks_per_node ranks"""
    inter_group: Any
    """this rank's peers of equal local rank on every node: nodes ranks"""
    leaders_group: Any
    """local rank 0 of every node (used by the leader variant)"""
    # -- statistics ----------------------------------------------------------
    buckets_reduced: int = 0
    bytes_reduced: int = 0
    padded_elements: int = 0
    """elements added so that reduce-scatter shards are equal"""
    intra_via_allreduce: bool | None = None
    """do the intra-node stages with all-reduces (None: on CPU tensors, where gloo's
    reduce-scatter / all-gather are slow); the inter-node bytes are the same either way"""
    _executor: OrderedExecutor | None = field(default=None, repr=False)

    @classmethod
    def from_topology(cls, topo: Topology) -> "HierarchicalState":
        """Create the intra-node, inter-node and leader groups of ``topo`` (collective call)."""
        dist = _dist()
        intra, _ = dist.new_subgroups_by_enumeration(topo.intra_node_groups())
        inter, _ = dist.new_subgroups_by_enumeration(topo.inter_node_groups())
        leaders = dist.new_group(ranks=topo.inter_node_groups()[0])
        return cls(topology=topo, intra_group=intra, inter_group=inter, leaders_group=leaders)

    @property
    def leader(self) -> int:
        """Global rank of this node's local rank 0."""
        return self.topology.node_rank * self.topology.ranks_per_node

    def run(self, fn: Callable[[Any, "HierarchicalState"], Any], tensor: Any):
        """Average ``tensor`` over the world with ``fn``; return a future of the result."""
        import torch

        self.buckets_reduced += 1
        self.bytes_reduced += tensor.numel() * tensor.element_size()
        tensor.div_(self.topology.world_size)
        if tensor.is_cuda:
            fn(tensor, self)
            fut = torch.futures.Future(devices=[tensor.device])
            fut.set_result(tensor)
            return fut
        if self._executor is None:
            self._executor = OrderedExecutor(f"hpcbench-hierarchical-{self.topology.rank}")
        return self._executor.submit(lambda t: fn(t, self), tensor)


def hierarchical_allreduce_(tensor: Any, state: HierarchicalState) -> Any:
    """Sum ``tensor`` over the world in place: reduce-scatter (node), all-reduce (peers), all-gather (node).

    A length that does not divide by ranks_per_node is zero-padded for the two
    intra-node stages. Returns ``tensor``.
    """
    import torch

    dist = _dist()
    topo = state.topology
    per_node = topo.ranks_per_node
    if per_node == 1:
        if topo.nodes > 1:
            dist.all_reduce(tensor, group=state.inter_group)
        return tensor
    n = tensor.numel()
    total = padded_length(n, per_node)
    flat = tensor.view(-1)
    if total != n:
        state.padded_elements += total - n
        work = torch.zeros(total, dtype=tensor.dtype, device=tensor.device)
        work[:n].copy_(flat)
    else:
        work = flat
    size = total // per_node
    if state.intra_via_allreduce if state.intra_via_allreduce is not None else not tensor.is_cuda:
        # gloo's reduce-scatter and all-gather run 2-3x slower than its all-reduce (measured with
        # the collectives experiment, 32 MiB on 2 ranks); the same data flow with all-reduces:
        # node sum, then this rank's shard across nodes, then a sum of zero-filled shards = gather.
        dist.all_reduce(work, group=state.intra_group, async_op=True).wait()
        mine = work[topo.local_rank * size:(topo.local_rank + 1) * size]
        if topo.nodes > 1:
            dist.all_reduce(mine, group=state.inter_group, async_op=True).wait()
        work[:topo.local_rank * size].zero_()
        work[(topo.local_rank + 1) * size:].zero_()
        dist.all_reduce(work, group=state.intra_group, async_op=True).wait()
    else:
        shard = torch.empty(size, dtype=tensor.dtype, device=tensor.device)
        reduce_scatter_async(shard, work, state.intra_group).wait()
        if topo.nodes > 1:
            dist.all_reduce(shard, group=state.inter_group, async_op=True).wait()
        all_gather_async(work, shard, state.intra_group).wait()
    if total != n:
        flat.copy_(work[:n])
    return tensor


def leader_allreduce_(tensor: Any, state: HierarchicalState) -> Any:
    """Sum ``tensor`` over the world in place: reduce to local rank 0, all-reduce among leaders, broadcast."""
    dist = _dist()
    topo = state.topology
    if topo.ranks_per_node > 1:
        dist.reduce(tensor, dst=state.leader, group=state.intra_group, async_op=True).wait()
    if topo.local_rank == 0 and topo.nodes > 1:
        dist.all_reduce(tensor, group=state.leaders_group, async_op=True).wait()
    if topo.ranks_per_node > 1:
        dist.broadcast(tensor, src=state.leader, group=state.intra_group, async_op=True).wait()
    return tensor


def hierarchical_allreduce_hook(state: HierarchicalState, bucket):  # bucket: dist.GradBucket (DDP checks the annotation)
    """DDP comm hook: two-level all-reduce (reduce-scatter / all-reduce / all-gather), averaged."""
    return state.run(hierarchical_allreduce_, bucket.buffer())


def leader_allreduce_hook(state: HierarchicalState, bucket):
    """DDP comm hook: reduce to the node leader, all-reduce among leaders, broadcast; averaged."""
    return state.run(leader_allreduce_, bucket.buffer())


@dataclass
class BucketLog:
    """State of :func:`noop_hook`: the bucket sizes DDP handed to the hook, by bucket index.

    Each step overwrites the previous one's sizes, so after a few steps it holds the layout
    DDP settled on (DDP rebuilds its buckets after the first iteration).
    """

    sizes: dict[int, int] = field(default_factory=dict)

    def layout(self) -> list[int]:
        """Bucket sizes in bytes, in reduction order (bucket 0 is reduced first)."""
        return [self.sizes[i] for i in sorted(self.sizes)]


def noop_hook(state: BucketLog | None, bucket):
    """DDP comm hook that communicates nothing: the gradients stay local (a timing baseline only).

    ``state`` may be a :class:`BucketLog` to learn the bucket layout, or None.
    """
    import torch

    tensor = bucket.buffer()
    if state is not None:
        state.sizes[bucket.index()] = tensor.numel() * tensor.element_size()
    fut = torch.futures.Future(devices=[tensor.device]) if tensor.is_cuda else torch.futures.Future()
    fut.set_result(tensor)
    return fut


__all__ = ["BucketLog", "HierarchicalState", "OrderedExecutor", "all_gather_async", "hierarchical_allreduce_",
           "hierarchical_allreduce_hook", "leader_allreduce_", "leader_allreduce_hook", "noop_hook", "padded_length",
           "reduce_scatter_async"]
