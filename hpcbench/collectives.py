"""Collective-communication benchmark in the manner of nccl-tests.

For each operation (all_reduce, all_gather, reduce_scatter, broadcast), each
message size of a geometric sweep (``min_bytes`` .. ``max_bytes`` by
``step_factor``), and each process-group kind (the world, the intra-node groups,
the inter-node peer groups), it runs warm-up iterations, then timed iterations
whose per-iteration times are kept, checks the result values, and records
algbw = S / t and busbw = algbw * factor (see :mod:`hpcbench.metrics`).

Sizes follow nccl-tests' convention: S is the full vector of all_reduce and
broadcast, the *output* of all_gather and the *input* of reduce_scatter; sizes are
rounded down to a multiple of ``nranks * element size``.

The pure core (sizes, fill values, expected values) has no torch.distributed
dependency; :func:`run_worker` is the adapter that runs on each rank.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Callable, Literal

from hpcbench.config import ByteSize, Config, param
from hpcbench.dist.topology import GROUP_KINDS, Topology
from hpcbench.metrics import algbw, busbw
from hpcbench.registry import Registry
from hpcbench.results import RecordWriter
from hpcbench.sanity import Verification

OP_NAMES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
#: NCCL's documented limit on NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD.
NCCL_SOCKET_THREADS_LIMIT = 64
NCCL_GLOO_REASON = "not applicable: NCCL settings have no effect on the gloo backend"
DTYPES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4}


@dataclass
class CollectivesConfig(Config):
    """Parameters of ``10_collectives``; the notebook's parameters cell mirrors them."""

    ops: list[str] = param(list(OP_NAMES), "collectives to measure", choices=OP_NAMES)
    min_bytes: ByteSize = param(ByteSize(1024), "smallest message (nccl-tests -b); 1K keeps latency visible", min=1)
    max_bytes: ByteSize = param(ByteSize(4 << 20), "largest message (nccl-tests -e); use 128M+ on a real fabric", min=1)
    step_factor: int = param(4, "multiply the size by this between steps (nccl-tests -f)", min=2, max=1024)
    warmup_iters: int = param(3, "untimed iterations per size; the first ones pay connection setup", min=0, max=10000)
    iters: int = param(10, "timed iterations per size; each one is kept as a sample", min=1, max=100000)
    dtype: str = param("float32", "element type of the buffers", choices=tuple(DTYPES))
    groups: list[str] = param(list(GROUP_KINDS), "process groups to measure on", choices=GROUP_KINDS)
    nodes: int = param(1, "nodes; on one machine more than 1 is an emulated split of the local ranks", min=1, max=4096)
    ranks_per_node: int = param(2, "ranks (GPUs, or CPU processes) per node", min=1, max=64)
    backend: str = param("auto", "auto: NCCL with a GPU per rank, else gloo", choices=("auto", "gloo", "nccl"))
    check: bool = param(True, "verify the result values of every op and size (outside the timed loop)")
    nccl_algo: str = param("", "NCCL_ALGO for this run: '' leaves NCCL's own choice (C10 tries Tree)",
                           choices=("", "Ring", "Tree"))
    nccl_buffsize: ByteSize = param(ByteSize(0), "NCCL_BUFFSIZE in bytes: 0 leaves NCCL's default (4M)", min=0)
    nccl_nsocks_perthread: int = param(0, "NCCL_NSOCKS_PERTHREAD (socket transport): 0 leaves the default",
                                       min=0, max=64)
    nccl_socket_nthreads: int = param(0, "NCCL_SOCKET_NTHREADS (socket transport): 0 leaves the default",
                                      min=0, max=16)

    def validate(self) -> None:
        if self.min_bytes > self.max_bytes:
            raise self._error("min_bytes", f"{self.min_bytes} is larger than max_bytes={self.max_bytes}")
        if self.nodes * self.ranks_per_node < 2:
            raise self._error("ranks_per_node", "a collective needs at least 2 ranks in all (nodes x ranks_per_node)")
        if not self.ops:
            raise self._error("ops", f"is empty; allowed: {list(OP_NAMES)}")
        if not self.groups:
            raise self._error("groups", f"is empty; allowed: {list(GROUP_KINDS)}")
        threads = max(self.nccl_nsocks_perthread, 1) * max(self.nccl_socket_nthreads, 1)
        if threads > NCCL_SOCKET_THREADS_LIMIT:
            raise self._error("nccl_socket_nthreads", f"x nccl_nsocks_perthread = {threads} socket threads; NCCL "
                                                      f"allows at most {NCCL_SOCKET_THREADS_LIMIT}")

    def nccl_settings(self) -> dict[str, str]:
        """The NCCL_* variables this run sets (fields left at 0 / '' are not set)."""
        values = {"NCCL_ALGO": self.nccl_algo, "NCCL_BUFFSIZE": self.nccl_buffsize,
                  "NCCL_NSOCKS_PERTHREAD": self.nccl_nsocks_perthread,
                  "NCCL_SOCKET_NTHREADS": self.nccl_socket_nthreads}
        return {k: str(int(v)) if isinstance(v, int) else v for k, v in values.items() if v}

    def worker_env(self) -> dict[str, str]:
        return self.nccl_settings()


def size_sweep(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """Geometric sizes from ``min_bytes`` up to and including ``max_bytes`` when reached."""
    sizes, s = [], int(min_bytes)
    while s <= max_bytes:
        sizes.append(s)
        s *= factor
    return sizes


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

    from hpcbench.dist.worker import progress

    if topo.world_size != cfg.nodes * cfg.ranks_per_node:
        raise RuntimeError(f"launched {topo.describe()}, config asks for {cfg.nodes} x {cfg.ranks_per_node}")
    backend = dist.get_backend()
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
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

SUMMARY_KEYS = ["op", "group", "size_bytes"]


def expand_labels(records):
    """The records with their ``labels`` JSON expanded into columns."""
    import json

    import pandas as pd

    labels = pd.DataFrame([json.loads(s) for s in records["labels"]], index=records.index)
    return pd.concat([records.drop(columns=["labels"]), labels], axis=1)


def summarize(records):
    """Per (op, group, size): busbw p50 and mean, algbw p50, time p50/p99 over iterations.

    Samples of every group of a kind (e.g. both intra-node groups) are pooled;
    ``groups_measured`` says how many there were.
    """
    import pandas as pd

    rows = records[(records["experiment"] == "collectives") & records["value"].notna()]
    rows = rows[rows["metric"].isin(["time", "algbw", "busbw"])]
    if rows.empty:
        return pd.DataFrame(columns=SUMMARY_KEYS + ["busbw_p50_GBps"])
    wide = expand_labels(rows)
    out = []
    for key, g in wide.groupby(SUMMARY_KEYS, sort=True):
        t = g[g["metric"] == "time"]["value"]
        out.append({
            **dict(zip(SUMMARY_KEYS, key)),
            "group_ranks": int(g["group_ranks"].iloc[0]),
            "groups_measured": g["group_index"].nunique(),
            "busbw_p50_GBps": g[g["metric"] == "busbw"]["value"].median(),
            "busbw_mean_GBps": g[g["metric"] == "busbw"]["value"].mean(),
            "algbw_p50_GBps": g[g["metric"] == "algbw"]["value"].median(),
            "time_p50_us": t.quantile(0.5) * 1e6,
            "time_p99_us": t.quantile(0.99) * 1e6,
            "iterations": len(t),
        })
    return pd.DataFrame(out)


def nccl_settings_note(records, cfg: CollectivesConfig) -> str:
    """What this run's NCCL settings did: applied (NCCL), not applicable (gloo), or none set (C10)."""
    settings = cfg.nccl_settings()
    if not settings:
        return "No NCCL_* setting was set: NCCL (if used) chose its own algorithm and buffer sizes."
    listed = ", ".join(f"{k}={v}" for k, v in settings.items())
    coll = records[records["experiment"] == "collectives"]
    if (coll["metric"] == "nccl_settings").any():
        return (f"{listed}: {NCCL_GLOO_REASON}. On GPUs (backend nccl) this run would measure busbw with these "
                f"settings; the claims ledger's C10 rule compares it with the same sweep under NCCL's defaults "
                f"at the largest all_reduce size on the inter-node groups.")
    seen = coll[coll["metric"] == "nccl_setting"]
    shown = ", ".join(f"{json.loads(lab)['name']}={t}" for lab, t in zip(seen["labels"], seen["text"]))
    return f"Applied through the workers' environment before NCCL started: {shown or listed}."


_PASSED = "every op returned the expected values and every requested group and size was measured"


def verify_records(records, cfg: CollectivesConfig) -> Verification:
    """Check correctness flags and coverage of a run against its config."""
    problems = []
    coll = records[records["experiment"] == "collectives"]
    wide = expand_labels(coll) if not coll.empty else coll
    checks = wide[wide["metric"] == "correct"] if not coll.empty else wide
    for _, row in checks[checks["value"] != 1.0].iterrows():
        problems.append(f"{row['op']} on {row['group']} (group {row['group_index']}) at {row['size_bytes']} B "
                        "returned wrong values")
    if cfg.check and checks.empty:
        problems.append("no correctness checks were recorded")
    measured = set()
    if not coll.empty:
        timed = wide[wide["metric"] == "busbw"]
        measured = {(r.op, r.group) for r in timed.itertuples()}
    topo = Topology(nodes=cfg.nodes, ranks_per_node=cfg.ranks_per_node)
    for kind in cfg.groups:
        if len(topo.groups(kind)[0]) < 2:
            continue  # recorded as not applicable
        for op_name in cfg.ops:
            if (op_name, kind) not in measured:
                problems.append(f"{op_name} on {kind} groups was not measured")
    return Verification(problems, passed=_PASSED)
