"""Bytes that leave one node per synchronisation, from what the hooks counted (pure arithmetic, no torch).

The ranks are laid out node by node (ranks ``n x r .. n x r + r - 1`` on node ``n``), N = M x r
ranks on M nodes. What is counted where, per synchronisation of S gradient bytes:

* **flat ring all-reduce** (DDP's own reduction, and the plain part of a flat quant2bit): a
  bandwidth-optimal ring sends 2 (N-1)/N x S over every ring edge; the ring through node-ordered
  ranks crosses each node boundary on one edge, so **2 (N-1)/N x S leave each node** (Patarasuk
  & Yuan 2009; NCCL's ring and gloo's ring algorithms for large buffers). S comes from the bucket
  sizes DDP hands to its hooks (:class:`~hpcbench.parallel.hooks.BucketLog` of the no-op twin).
* **hierarchical reduction**: each of the r ranks of a node all-reduces its shard of
  ``padded(S, r) / r`` bytes among its M peers of equal local rank on the other nodes, so
  **2 (M-1)/M x padded(S, r) leave each node** — S counted by the hook itself
  (``HierarchicalState.bytes_reduced``).
* **quant2bit** (:class:`~hpcbench.parallel.compression.WireStats`, bytes each rank *sends*):
  with the hierarchical composition every counted byte is inter-node (the exchange runs among
  peers on other nodes), so r x (compressed + plain bytes) leave each node; flat, over the world,
  the all-to-all and all-gather spread a rank's sends evenly over its N-1 peers, of which N-r
  sit on other nodes, so r x compressed x (N-r)/(N-1) leave each node, and the plain part is a
  flat ring as above (its counted per-rank bytes are one ring edge's).

These are the algorithms' byte counts from counted sizes, not a packet capture; intra-node
bytes are not counted. With one node nothing leaves it.
"""

from __future__ import annotations

from hpcbench.core.metrics import allreduce_bytes_sent


def padded(numel_bytes: int, parts: int, element_size: int = 4) -> int:
    """``numel_bytes`` rounded up to a whole number of elements per part (the reduce-scatter's padding)."""
    elements = -(-numel_bytes // element_size)
    return -(-elements // parts) * parts * element_size


def flat_node_bytes(sync_bytes: float, nodes: int, ranks_per_node: int) -> float:
    """Bytes leaving one node for one flat ring all-reduce of ``sync_bytes``."""
    if nodes < 2:
        return 0.0
    return allreduce_bytes_sent(sync_bytes, nodes * ranks_per_node)


def hierarchical_node_bytes(sync_bytes: int, nodes: int, ranks_per_node: int) -> float:
    """Bytes leaving one node for one hierarchical reduction of ``sync_bytes`` (float32 buckets)."""
    if nodes < 2:
        return 0.0
    return allreduce_bytes_sent(padded(int(sync_bytes), ranks_per_node), nodes)


def compressed_node_bytes(compressed_sent: float, plain_sent: float, *, hierarchical: bool, nodes: int,
                          ranks_per_node: int) -> float:
    """Bytes leaving one node from one rank's WireStats counts (``compressed_bytes``, ``plain_bytes``).

    Args:
        compressed_sent, plain_sent: bytes one rank sent for the compressed and the plain parts.
        hierarchical: the counts come from the hierarchical composition (all inter-node).
    """
    if nodes < 2:
        return 0.0
    r = ranks_per_node
    if hierarchical:
        return r * (compressed_sent + plain_sent)
    world = nodes * r
    return r * compressed_sent * (world - r) / (world - 1) + plain_sent
