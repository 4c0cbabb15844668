"""Harness overhead: hpcbench's collective measurement against a raw torch.distributed loop.

Run: ``hpcbench bench collectives [--ranks 4] [--min-bytes 1M] [--max-bytes 32M]``

For each size, in alternating rounds on the same process group, it times
* the *raw loop*: ``iters`` back-to-back all_reduce calls between two clock reads
  (what nccl-tests' timing reduces to), busbw from the mean time per call, and
* the *harness*: :func:`hpcbench.experiments.collectives.worker.measure_op`, per-iteration timing,
  busbw from the p50 iteration (what the report shows) and from the mean iteration
  (the like-for-like figure: the raw loop can only give a mean),
and prints harness busbw / raw busbw. Target: within 5 % (0.95 <= ratio).
Default 2 ranks: one per core of a 2-core machine, so the comparison measures the
harness rather than the OS scheduler.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hpcbench.core.config import ByteSize, Config, param
from hpcbench.core.metrics import busbw
from hpcbench.core.results import RecordContext, RecordWriter, read_records
from hpcbench.dist import Topology, launch
from hpcbench.experiments.collectives.worker import OPS, aligned_size, measure_op, size_sweep


#: A run of seconds for tests/test_bench.py: every path of the benchmark at toy size; its figures mean nothing.
TOY_ARGS = ["--min-bytes", "64K", "--max-bytes", "128K", "--iters", "2", "--rounds", "2"]

@dataclass
class OverheadConfig(Config):
    min_bytes: ByteSize = param(ByteSize(1 << 20), "smallest all_reduce", min=4)
    max_bytes: ByteSize = param(ByteSize(32 << 20), "largest all_reduce", min=4)
    iters: int = param(10, "calls per measurement", min=1)
    rounds: int = param(15, "alternating raw/harness rounds per size; medians are compared", min=1)


def bench_worker(cfg: OverheadConfig, topo: Topology, writer: RecordWriter) -> None:
    import torch
    import torch.distributed as dist

    op = OPS.get("all_reduce")
    n = topo.world_size
    for size in size_sweep(cfg.min_bytes, cfg.max_bytes, 2):
        s = aligned_size(size, n, 4)
        buf = torch.ones(s // 4)
        for _ in range(2):  # warm-up
            dist.all_reduce(buf)
        for rnd in range(cfg.rounds):
            # Alternate which method goes first so that drift favours neither.
            order = ("raw", "harness") if rnd % 2 == 0 else ("harness", "raw")
            measured = {}
            for method in order:
                dist.barrier()
                if method == "raw":
                    t0 = time.perf_counter()
                    for _ in range(cfg.iters):
                        dist.all_reduce(buf)
                    measured["raw"] = (time.perf_counter() - t0) / cfg.iters
                else:
                    times, _ = measure_op(op, s, group=None, grank=topo.rank, n=n, root=0,
                                          dtype=torch.float32, device=torch.device("cpu"), warmup=0,
                                          iters=cfg.iters, check=False, sync=lambda: None)
                    measured["p50"] = statistics.median(times)
                    measured["mean"] = statistics.fmean(times)
            t = torch.tensor([measured["raw"], measured["p50"], measured["mean"]], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)  # slowest rank, as the harness records
            if topo.rank == 0:
                labels = {"size_bytes": s, "round": rnd}
                raw, p50, mean = (busbw("all_reduce", s, v, n) for v in t.tolist())
                writer.add("raw_busbw", raw, "GB/s", labels=labels)
                writer.add("harness_p50_busbw", p50, "GB/s", labels=labels)
                writer.add("harness_mean_busbw", mean, "GB/s", labels=labels)
                # Paired per round: both methods saw the same machine state.
                writer.add("ratio_p50", p50 / raw, "1", labels=labels)
                writer.add("ratio_mean", mean / raw, "1", labels=labels)


#: The harness's busbw over the raw loop's must be at least this (within 5 %).
RATIO_TARGET = 0.95


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """This benchmark's options (``hpcbench bench collectives --help``)."""
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--min-bytes", default="1M")
    ap.add_argument("--max-bytes", default="32M")
    ap.add_argument("--iters", default=10)
    ap.add_argument("--rounds", default=15)
    ap.add_argument("--out", default=None, help="folder for records (default: a temp dir)")


def run(args: argparse.Namespace) -> dict:
    """Raw loop and harness side by side per size; the result's dict form (``hpcbench.bench.result.BenchResult``):
    one row per size, each size's harness/raw ratios (p50 and mean), judged against :data:`RATIO_TARGET`."""
    cfg = OverheadConfig.from_dict({"min_bytes": args.min_bytes, "max_bytes": args.max_bytes,
                                    "iters": args.iters, "rounds": args.rounds})
    out = Path(args.out or tempfile.mkdtemp(prefix="hpcbench-bench-"))
    ctx = RecordContext(experiment="collectives.bench", params=cfg.to_dict())
    res = launch(bench_worker, cfg, nodes=1, ranks_per_node=args.ranks, context=ctx, out_dir=out)
    import pandas as pd

    df = pd.concat([read_records(p) for p in res.records])
    df = df[df["metric"].str.endswith("_busbw") | df["metric"].str.startswith("ratio_")]
    df["size_bytes"] = df["labels"].map(lambda s: json.loads(s)["size_bytes"])
    table = df.pivot_table(index="size_bytes", columns="metric", values="value", aggfunc="median")
    ratios = [{"name": f"all_reduce {int(size)} B, harness {kind} / raw loop busbw",
               "numerator": f"harness_{kind}_busbw", "denominator": "raw_busbw", "value": row[f"ratio_{kind}"],
               "target": RATIO_TARGET}
              for size, row in table.iterrows() for kind in ("p50", "mean")]
    notes = [f"all_reduce on {args.ranks} ranks (gloo), medians of {cfg.rounds} alternating rounds (ratios paired per "
             f"round), busbw in GB/s", f"records: {out}"]
    return {"rows": table.reset_index().to_dict("records"), "ratios": ratios, "notes": notes,
            "params": {"ranks": args.ranks, **cfg.to_dict()}}
