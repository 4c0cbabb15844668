"""What each gradient-reduction algorithm sends, per link level: bytes and latency steps.

Every function returns a list of :class:`Stage` s that run one after another. A stage says
what it puts on each level so that the model can charge each level its own alpha and beta:

* ``intra_bytes``: bytes one rank sends over its own intra-node link (NVLink: per GPU);
* ``inter_bytes``: bytes one *node* sends across the node boundary, all its ranks together
  (the node's NICs share them; on the emulated cluster, the node's one interface);
* ``world_bytes``: bytes one rank sends in all, as nccl-tests and
  :class:`hpcbench.parallel.compression.WireStats` count them.

Inside one stage the levels are pipelined (a ring or tree streams chunks through both at
once), so a stage costs ``alpha_intra * intra_steps + alpha_inter * inter_steps +
max(beta_intra * intra_bytes, beta_inter * inter_bytes)``; stages add up.

Sources of the counts:

* Ring all-reduce ``2 (N-1)/N S`` in ``2 (N-1)`` steps, reduce-scatter / all-gather
  ``(N-1)/N S`` in ``N-1`` steps (Thakur, Rabenseifner & Gropp, IJHPCA 2005, sec. 4; nccl-tests
  doc/PERFORMANCE.md bus-bandwidth factors); of the steps, ``2 (nodes-1)`` (resp. ``nodes-1``)
  cross the node boundary (NCCL ``src/graph/tuning.cc``, ``nInterSteps``).
* Per node, a ring's boundary edge carries the same ``2 (N-1)/N S`` as every edge; NCCL
  splits the data over several rings (channels), one per NIC, so the node's NICs together
  carry ``2 (N-1)/N S``.
* Tree all-reduce: NCCL's model (``tuning.cc``: algorithm bandwidth = bus bandwidth x 0.5,
  latency ``2 ((N/nodes - 1) intraLat + log2(nodes) interLat)``): a chain inside the node and a
  double binary tree across nodes (Sanders, Speck & Traeff, Parallel Computing 35(12), 2009),
  each rank and each node sending ``2 S``.
* Broadcast: a pipelined chain, ``S`` per rank in ``N-1`` steps (Thakur et al. 2005).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hpcbench.core.errors import ConfigError
from hpcbench.core.metrics import busbw_factor
from hpcbench.parallel.compression import message_bytes
from hpcbench.parallel.hooks import padded_length

FP32_BYTES = 4


@dataclass(frozen=True)
class Stage:
    """One collective of an algorithm and what it puts on each link level."""

    name: str
    """what it is, e.g. ``"intra-node reduce-scatter"``"""
    op: str
    """the collective whose fit prices it: all_reduce, reduce_scatter, all_gather, broadcast, all_to_all"""
    group: str
    """the process-group kind it runs on: world, intra_node or inter_node"""
    intra_bytes: float = 0.0
    """bytes one rank sends over its intra-node link"""
    inter_bytes: float = 0.0
    """bytes one node sends across the node boundary (all its ranks together)"""
    intra_steps: int = 0
    inter_steps: int = 0
    world_bytes: float = 0.0
    """bytes one rank sends in all (what WireStats counts)"""
    ranks_per_node: int = 1

    @property
    def inter_bytes_per_rank(self) -> float:
        """``inter_bytes`` shared out over the node's ranks."""
        return self.inter_bytes / self.ranks_per_node

    @property
    def steps(self) -> int:
        return self.intra_steps + self.inter_steps


def _check_layout(nodes: int, ranks_per_node: int) -> None:
    if nodes < 1:
        raise ConfigError(f"{nodes} is out of range; allowed: >= 1", field="nodes", config="scale model")
    if ranks_per_node < 1:
        raise ConfigError(f"{ranks_per_node} is out of range; allowed: >= 1", field="ranks_per_node",
                          config="scale model")


#: Latency steps of a ring (chain for broadcast) over n ranks. The bytes each rank sends are S times
#: nccl-tests' bus-bandwidth factor of the op (:func:`hpcbench.core.metrics.busbw_factor`).
RING_STEPS = {
    "all_reduce": lambda n: 2 * (n - 1),
    "reduce_scatter": lambda n: n - 1,
    "all_gather": lambda n: n - 1,
    "broadcast": lambda n: n - 1,
}


ALL_TO_ALL = "all_to_all"


def all_to_all_cost(nbytes: float, *, nodes: int, ranks_per_node: int) -> Stage:
    """One all-to-all of ``nbytes`` per rank (nccl-tests' S: the whole send buffer, S / N to each rank).

    Each rank sends ``(N-1)/N S`` (nccl-tests doc/PERFORMANCE.md: alltoall bus bandwidth =
    algbw x (N-1)/N), ``(ranks_per_node - 1)/N S`` of it inside the node; per node
    ``ranks_per_node x (N - ranks_per_node)/N S`` cross the boundary (an all-to-all does not
    aggregate). Every send is posted at once (NCCL: one group of send/recv; gloo's alltoall
    posts all sends before waiting): one latency step per level it touches.
    """
    _check_layout(nodes, ranks_per_node)
    n = nodes * ranks_per_node
    if n == 1:
        return Stage(name="all_to_all", op=ALL_TO_ALL, group="world", ranks_per_node=ranks_per_node)
    return Stage(name="all_to_all", op=ALL_TO_ALL, group="world",
                 intra_bytes=(ranks_per_node - 1) / n * nbytes,
                 inter_bytes=ranks_per_node * (n - ranks_per_node) / n * nbytes,
                 intra_steps=1 if ranks_per_node > 1 else 0, inter_steps=1 if nodes > 1 else 0,
                 world_bytes=(n - 1) / n * nbytes, ranks_per_node=ranks_per_node)


def collective_cost(op: str, nbytes: float, *, nodes: int, ranks_per_node: int) -> Stage:
    """One flat ring (chain for broadcast) collective of ``nbytes`` over ``nodes x ranks_per_node`` ranks.

    ``nbytes`` is nccl-tests' S: the full vector (all_reduce, broadcast), the output
    (all_gather) or the input (reduce_scatter); ``all_to_all`` is :func:`all_to_all_cost`.

    Raises:
        ConfigError: unknown ``op`` (the message lists the valid ones) or a bad layout.
    """
    _check_layout(nodes, ranks_per_node)
    if op == ALL_TO_ALL:
        return all_to_all_cost(nbytes, nodes=nodes, ranks_per_node=ranks_per_node)
    if op not in RING_STEPS:
        raise ConfigError(f"unknown collective {op!r}; valid: {sorted([*RING_STEPS, ALL_TO_ALL])}", field="op",
                          config="scale model")
    n = nodes * ranks_per_node
    steps_of = RING_STEPS[op]
    per_rank = busbw_factor(op, n) * nbytes if n > 1 else 0.0  # one rank sends nothing
    steps = steps_of(n)
    inter_steps = steps_of(nodes) if nodes > 1 else 0
    return Stage(name=f"ring {op}", op=op, group="world",
                 intra_bytes=per_rank if ranks_per_node > 1 else 0.0,
                 inter_bytes=per_rank if nodes > 1 else 0.0,
                 intra_steps=steps - inter_steps, inter_steps=inter_steps,
                 world_bytes=per_rank, ranks_per_node=ranks_per_node)


def ring_allreduce(nbytes: float, *, nodes: int, ranks_per_node: int) -> list[Stage]:
    """DDP's default: one flat ring all-reduce of the bucket (``2 (N-1)/N S`` per rank)."""
    if nodes * ranks_per_node == 1:
        return []
    return [collective_cost("all_reduce", nbytes, nodes=nodes, ranks_per_node=ranks_per_node)]


def tree_allreduce(nbytes: float, *, nodes: int, ranks_per_node: int) -> list[Stage]:
    """NCCL's tree all-reduce (``NCCL_ALGO=Tree``, C10): chain in the node, double binary tree across.

    Model (NCCL ``tuning.cc``): ``2 S`` per rank and per node, ``2 (ranks_per_node - 1)`` intra
    and ``2 ceil(log2 nodes)`` inter latency steps.
    """
    _check_layout(nodes, ranks_per_node)
    if nodes * ranks_per_node == 1:
        return []
    log_nodes = (nodes - 1).bit_length()  # ceil(log2(nodes))
    return [Stage(name="tree all_reduce", op="all_reduce", group="world",
                  intra_bytes=2.0 * nbytes if ranks_per_node > 1 else 0.0,
                  inter_bytes=2.0 * nbytes if nodes > 1 else 0.0,
                  intra_steps=2 * (ranks_per_node - 1), inter_steps=2 * log_nodes,
                  world_bytes=2.0 * nbytes, ranks_per_node=ranks_per_node)]


def _on_intra(stage: Stage, name: str) -> Stage:
    """A collective over one node's ranks: every byte and step is intra-node."""
    return replace(stage, name=name, group="intra_node", intra_bytes=stage.world_bytes, inter_bytes=0.0,
                   intra_steps=stage.steps, inter_steps=0)


def _on_peers(stage: Stage, name: str, ranks_per_node: int) -> Stage:
    """A collective over the inter-node peer groups (one rank per node), all ``ranks_per_node`` at once."""
    return replace(stage, name=name, group="inter_node", intra_bytes=0.0,
                   inter_bytes=stage.world_bytes * ranks_per_node, intra_steps=0, inter_steps=stage.steps,
                   ranks_per_node=ranks_per_node)


def _intra_reduce_and_gather(total: float, ranks_per_node: int, via_allreduce: bool) -> tuple[Stage, Stage]:
    """The intra-node stages around a hierarchical exchange, of the padded bucket's ``total`` bytes.

    Reduce-scatter before and all-gather after; with ``via_allreduce`` (the hooks' CPU/gloo path)
    an all-reduce of the whole bucket each.
    """
    one_node = dict(nodes=1, ranks_per_node=ranks_per_node)
    if via_allreduce:
        first = _on_intra(collective_cost("all_reduce", total, **one_node), "intra-node all-reduce (sum)")
        last = _on_intra(collective_cost("all_reduce", total, **one_node), "intra-node all-reduce (gather)")
    else:
        first = _on_intra(collective_cost("reduce_scatter", total, **one_node), "intra-node reduce-scatter")
        last = _on_intra(collective_cost("all_gather", total, **one_node), "intra-node all-gather")
    return first, last


def hierarchical_allreduce(n_elems: int, elem_bytes: int, *, nodes: int, ranks_per_node: int,
                           intra_via_allreduce: bool = False) -> list[Stage]:
    """The three stages of :func:`hpcbench.parallel.hooks.hierarchical_allreduce_`.

    The bucket is zero-padded to ``T = ceil(n / ranks_per_node) x ranks_per_node`` elements;
    (1) reduce-scatter of ``T`` in the node, (2) all-reduce of the ``T / ranks_per_node`` shard
    among the ``nodes`` peers of equal local rank (all peer groups at once), (3) all-gather in
    the node. With ``intra_via_allreduce`` (the hook's CPU/gloo path) stages 1 and 3 are
    all-reduces of the whole ``T``. With one rank per node only stage 2 runs, on the bucket.
    Inter-node bytes per rank: ``T e / ranks_per_node x 2 (nodes-1)/nodes``.
    """
    _check_layout(nodes, ranks_per_node)
    if ranks_per_node == 1:
        if nodes == 1:
            return []
        ar = collective_cost("all_reduce", n_elems * elem_bytes, nodes=nodes, ranks_per_node=1)
        return [_on_peers(ar, "inter-node all-reduce", 1)]
    total = padded_length(n_elems, ranks_per_node) * elem_bytes
    shard = total / ranks_per_node
    first, last = _intra_reduce_and_gather(total, ranks_per_node, intra_via_allreduce)
    stages = [first]
    if nodes > 1:
        ar = collective_cost("all_reduce", shard, nodes=nodes, ranks_per_node=1)
        stages.append(_on_peers(ar, "inter-node all-reduce of the shard", ranks_per_node))
    stages.append(last)
    return stages


def half_precision_allreduce(n_elems: int, *, nodes: int, ranks_per_node: int, wire_bytes: int = 2) -> list[Stage]:
    """PyTorch's ``fp16_compress_hook`` / ``bf16_compress_hook``: a ring all-reduce of 2-byte values."""
    return ring_allreduce(n_elems * wire_bytes, nodes=nodes, ranks_per_node=ranks_per_node)


def _quant2bit_exchange(m: int, *, nodes: int, ranks_per_node: int, chunk_size: int) -> list[Stage]:
    """The two phases of :func:`hpcbench.parallel.compression.compressed_allreduce` over ``N`` ranks.

    Each rank's bucket is cut into ``N`` parts of ``P = pad4(ceil(m / N))`` elements; one part's
    message is ``ceil(P / 4)`` code bytes plus 4 bytes per chunk of ``chunk_size``
    (:func:`~hpcbench.parallel.compression.message_bytes`). The all-to-all sends ``N-1``
    messages per rank (``ranks_per_node - 1`` of them inside the node); the all-gather of one
    message per rank is a ring all-gather of ``N`` messages: ``N-1`` messages per rank and per
    node boundary. ``compressed_allreduce`` counts ``sent = (N-1) x (msg + msg)``. Per node the
    all-to-all does not aggregate: ``ranks_per_node x (N - ranks_per_node)`` messages leave it.
    """
    n = nodes * ranks_per_node
    if n == 1 or m == 0:
        return []
    part = padded_length(-(-m // n), 4)
    msg = message_bytes(part, chunk_size)
    # All peers' messages are posted at once (NCCL's all-to-all is one group of send/recv; gloo's
    # alltoall posts every send before waiting): one latency per level, not one per peer.
    a2a = Stage(name="2-bit all-to-all", op="all_to_all", group="world",
                intra_bytes=(ranks_per_node - 1) * msg, inter_bytes=ranks_per_node * (n - ranks_per_node) * msg,
                intra_steps=1 if ranks_per_node > 1 else 0, inter_steps=1 if nodes > 1 else 0,
                world_bytes=(n - 1) * msg, ranks_per_node=ranks_per_node)
    gather = replace(collective_cost("all_gather", n * msg, nodes=nodes, ranks_per_node=ranks_per_node),
                     name="2-bit all-gather")
    return [a2a, gather]


def quant2bit_allreduce(compressed_elems: int, *, nodes: int, ranks_per_node: int, plain_elems: int = 0,
                        plain_elem_bytes: int = FP32_BYTES, chunk_size: int = 1024, hierarchical: bool = False,
                        intra_via_allreduce: bool = False) -> list[Stage]:
    """One bucket through :func:`hpcbench.parallel.compression.quant2bit_hook`.

    Flat: the 2-bit exchange of the ``compressed_elems`` over the world, and a plain ring
    all-reduce of the ``plain_elems`` (layer-norm gradients, ``plain_elem_bytes`` each; the hook
    starts it first and it overlaps the exchange, charged here in sequence: an upper bound).
    Hierarchical (``Quant2BitState._hierarchical``): float32 intra-node reduce of the padded
    bucket, the 2-bit exchange of this rank's shard among the node peers, intra-node gather;
    the plain part through :func:`hierarchical_allreduce`.
    """
    _check_layout(nodes, ranks_per_node)
    stages: list[Stage] = []
    if plain_elems:
        if hierarchical:
            stages += hierarchical_allreduce(plain_elems, plain_elem_bytes, nodes=nodes,
                                             ranks_per_node=ranks_per_node, intra_via_allreduce=intra_via_allreduce)
        else:
            stages += ring_allreduce(plain_elems * plain_elem_bytes, nodes=nodes, ranks_per_node=ranks_per_node)
    if not compressed_elems:
        return stages
    if not hierarchical:
        return stages + _quant2bit_exchange(compressed_elems, nodes=nodes, ranks_per_node=ranks_per_node,
                                            chunk_size=chunk_size)
    per = ranks_per_node
    total = padded_length(compressed_elems, per) * FP32_BYTES
    exchange = [_on_peers(s, s.name + " (node peers)", per)
                for s in _quant2bit_exchange(total // FP32_BYTES // per, nodes=nodes, ranks_per_node=1,
                                             chunk_size=chunk_size)]
    if per == 1:
        return stages + exchange
    first, last = _intra_reduce_and_gather(total, per, intra_via_allreduce)
    return stages + [first, *exchange, last]


def world_bytes(stages: list[Stage]) -> float:
    """Bytes one rank sends over all stages (comparable with WireStats' compressed + plain bytes)."""
    return sum(s.world_bytes for s in stages)


__all__ = ["ALL_TO_ALL", "FP32_BYTES", "RING_STEPS", "Stage", "all_to_all_cost", "collective_cost",
           "half_precision_allreduce", "hierarchical_allreduce", "quant2bit_allreduce", "ring_allreduce",
           "tree_allreduce", "world_bytes"]
