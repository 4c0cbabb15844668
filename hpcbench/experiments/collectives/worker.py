"""Collective-communication benchmark in the manner of nccl-tests.

For each operation (all_reduce, all_gather, reduce_scatter, broadcast), each
message size of a geometric sweep (``min_bytes`` .. ``max_bytes`` by
``step_factor``), and each process-group kind (the world, the intra-node groups,
the inter-node peer groups), it runs warm-up iterations, then timed iterations
whose per-iteration times are kept, checks the result values, and records
algbw = S / t and busbw = algbw * factor (see :mod:`hpcbench.core.metrics`).

Sizes follow nccl-tests' convention: S is the full vector of all_reduce and
broadcast, the *output* of all_gather and the *input* of reduce_scatter; sizes are
rounded down to a multiple of ``nranks * element size``.

The pure core (sizes, fill values, expected values) has no torch.distributed
dependency; :func:`run_worker` is the adapter that runs on each rank.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from hpcbench.core.metrics import algbw, busbw, size_sweep
from hpcbench.core.registry import Registry
from hpcbench.core.results import RecordWriter
from hpcbench.dist.topology import Topology
from hpcbench.experiments.collectives.config import DTYPES, NCCL_GLOO_REASON, CollectivesConfig


def aligned_size(size_bytes: int, nranks: int, elem_bytes: int) -> int:
    """Round down to a multiple of ``nranks * elem_bytes`` (at least one element per rank)."""
    unit = nranks * elem_bytes
    return max(unit, (size_bytes // unit) * unit)


@dataclass(frozen=True)
class CollectiveOp:
    """How to allocate, fill, run and check one collective.

    ``in_place`` ops read and write one buffer; ``in_elems``/``out_elems`` map (total elements S/e, nranks) to buffer lengths;
    ``fill(grank, n, length)`` gives the input values as a list of per-chunk
    constants; ``expected(grank, n)`` the output's per-chunk constants.
    """

    name: str
    in_place: bool
    in_elems: Callable[[int, int], int]
    out_elems: Callable[[int, int], int]
    in_chunks: Callable[[int, int], list[float]]
    expected_chunks: Callable[[int, int], list[float]]
    run: Callable  # (inp, out, group, root_global_rank) -> None


def _tri(n: int) -> float:
    return n * (n + 1) / 2


def _dist():
    import torch.distributed as dist

    return dist


OPS: Registry[CollectiveOp] = Registry("collective op")
OPS.register("all_reduce", CollectiveOp(
    "all_reduce", True, lambda e, n: e, lambda e, n: e,
    in_chunks=lambda r, n: [r + 1.0],
    expected_chunks=lambda r, n: [_tri(n)],
    run=lambda inp, out, g, root: _dist().all_reduce(inp, group=g),
))
OPS.register("all_gather", CollectiveOp(
    "all_gather", False, lambda e, n: e // n, lambda e, n: e,
    in_chunks=lambda r, n: [r + 1.0],
    expected_chunks=lambda r, n: [i + 1.0 for i in range(n)],
    run=lambda inp, out, g, root: _dist().all_gather_into_tensor(out, inp, group=g),
))
# Chunk j of rank r holds (r + 1) + 10 j: the sum over ranks of chunk r is
# tri(n) + 10 n r, so a chunk delivered to the wrong rank is caught.
OPS.register("reduce_scatter", CollectiveOp(
    "reduce_scatter", False, lambda e, n: e, lambda e, n: e // n,
    in_chunks=lambda r, n: [r + 1.0 + 10.0 * j for j in range(n)],
    expected_chunks=lambda r, n: [_tri(n) + 10.0 * n * r],
    run=lambda inp, out, g, root: _dist().reduce_scatter_tensor(out, inp, group=g),
))
OPS.register("broadcast", CollectiveOp(
    "broadcast", True, lambda e, n: e, lambda e, n: e,
    in_chunks=lambda r, n: [7.0 if r == 0 else 0.0],
    expected_chunks=lambda r, n: [7.0],
    run=lambda inp, out, g, root: _dist().broadcast(inp, src=root, group=g),
))


# -- torch adapter ---------------------------------------------------------------

def _fill(tensor, chunks: list[float]) -> None:
    for piece, value in zip(tensor.chunk(len(chunks)), chunks):
        piece.fill_(value)


def _matches(tensor, chunks: list[float]) -> bool:
    import torch

    return all(torch.all(piece == value).item() for piece, value in zip(tensor.chunk(len(chunks)), chunks))


def measure_op(op: CollectiveOp, size_bytes: int, *, group, grank: int, n: int, root: int,
               dtype, device, warmup: int, iters: int, check: bool,
               sync: Callable[[], None]) -> tuple[list[float], bool | None]:
    """Time ``iters`` runs of one op at one size on one group; return (local times, correct).

    Each iteration is timed on its own (device synchronised before and after) so that
    the p99 shows stragglers; the correctness check runs after the timed loop on
    freshly filled buffers, so it costs no timed work.
    """
    import torch

    elems = size_bytes // torch.empty((), dtype=dtype).element_size()
    inp = torch.empty(op.in_elems(elems, n), dtype=dtype, device=device)
    out = inp if op.in_place else torch.empty(op.out_elems(elems, n), dtype=dtype, device=device)
    _fill(inp, op.in_chunks(grank, n))
    for _ in range(warmup):
        op.run(inp, out, group, root)
    sync()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        op.run(inp, out, group, root)
        sync()
        times.append(time.perf_counter() - t0)
    correct = None
    if check:
        _fill(inp, op.in_chunks(grank, n))
        op.run(inp, out, group, root)
        sync()
        correct = _matches(out, op.expected_chunks(grank, n))
    return times, correct


def run_worker(cfg: CollectivesConfig, topo: Topology, writer: RecordWriter) -> None:
    """Entry point on every rank (see :func:`hpcbench.dist.launch`)."""
    import torch
    import torch.distributed as dist

    from hpcbench.dist.worker import progress, rank_setup

    rank = rank_setup(cfg, topo)
    backend, device, sync = rank.backend, rank.device, rank.sync
    dtype = getattr(torch, cfg.dtype)
    elem = DTYPES[cfg.dtype]
    sizes = size_sweep(cfg.min_bytes, cfg.max_bytes, cfg.step_factor)
    settings = cfg.nccl_settings()
    if settings and topo.rank == 0:
        if backend == "nccl":
            import os

            for name in settings:  # what NCCL really saw, as the launcher set it
                writer.add("nccl_setting", None, "", labels={"name": name}, text=os.environ.get(name, "unset"))
        else:
            writer.add("nccl_settings", None, "", labels=settings, text=NCCL_GLOO_REASON)

    for kind in cfg.groups:
        layouts = topo.groups(kind)
        n = len(layouts[0])
        if n < 2:
            if topo.rank == 0:
                for op_name in cfg.ops:
                    writer.add("busbw", None, "GB/s", labels={"op": op_name, "group": kind},
                               text=f"not applicable: {kind} groups have 1 rank with {topo.describe()}")
            continue
        if kind == "world":
            group, members = None, layouts[0]
        else:
            group, _ = dist.new_subgroups_by_enumeration(layouts)
            members = next(g for g in layouts if topo.rank in g)
        grank = members.index(topo.rank)
        group_index = layouts.index(members)
        times_by_key: list[tuple[str, int, list[float], bool | None]] = []
        for op_name in cfg.ops:
            op = OPS.get(op_name)
            for size in sizes:
                s = aligned_size(size, n, elem)
                dist.barrier(group=group)
                times, correct = measure_op(op, s, group=group, grank=grank, n=n, root=members[0],
                                            dtype=dtype, device=device, warmup=cfg.warmup_iters,
                                            iters=cfg.iters, check=cfg.check, sync=sync)
                times_by_key.append((op_name, s, times, correct))
            progress(f"{kind}: {op_name} done ({len(sizes)} sizes, group of {n})")
        # One reduction after the sweep: an iteration's collective time is that of
        # its slowest rank, and gathering it here keeps it out of the timed loop.
        flat = torch.tensor([t for _, _, ts, _ in times_by_key for t in ts], dtype=torch.float64)
        ok = torch.tensor([1.0 if c or c is None else 0.0 for *_, c in times_by_key], dtype=torch.float64)
        if device.type == "cuda":
            flat, ok = flat.to(device), ok.to(device)
        dist.all_reduce(flat, op=dist.ReduceOp.MAX, group=group)
        dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=group)
        flat, ok = flat.cpu().tolist(), ok.cpu().tolist()
        if grank != 0:
            continue  # the group's first rank speaks for the group
        pos = 0
        for i, (op_name, s, times, correct) in enumerate(times_by_key):
            labels = {"op": op_name, "size_bytes": s, "group": kind, "group_index": group_index,
                      "group_ranks": n, "dtype": cfg.dtype}
            for step in range(len(times)):
                t = flat[pos + step]
                writer.add("time", t, "s", step=step, labels=labels)
                writer.add("algbw", algbw(s, t), "GB/s", step=step, labels=labels)
                writer.add("busbw", busbw(op_name, s, t, n), "GB/s", step=step, labels=labels)
            pos += len(times)
            if correct is not None:
                writer.add("correct", ok[i], "bool", labels=labels)


# -- reading the records back -----------------------------------------------------


