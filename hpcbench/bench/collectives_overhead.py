"""Harness overhead: hpcbench's collective measurement against a raw torch.distributed loop.

Run: ``python -m hpcbench.bench.collectives_overhead [--ranks 4] [--min-bytes 1M] [--max-bytes 32M]``

For each size, in alternating rounds on the same process group, it times
* the *raw loop*: ``iters`` back-to-back all_reduce calls between two clock reads
  (what nccl-tests' timing reduces to), busbw from the mean time per call, and
* the *harness*: :func:`hpcbench.collectives.measure_op`, per-iteration timing,
  busbw from the p50 iteration (what the report shows),
and prints harness busbw / raw busbw. Target: within 5 % (ratio >= 0.95).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hpcbench.collectives import OPS, aligned_size, measure_op, size_sweep
from hpcbench.config import ByteSize, Config, param
from hpcbench.dist import Topology, launch
from hpcbench.metrics import busbw
from hpcbench.results import RecordContext, RecordWriter, read_records


@dataclass
class OverheadConfig(Config):
    min_bytes: ByteSize = param(ByteSize(1 << 20), "smallest all_reduce", min=4)
    max_bytes: ByteSize = param(ByteSize(32 << 20), "largest all_reduce", min=4)
    iters: int = param(10, "calls per measurement", min=1)
    rounds: int = param(5, "alternating raw/harness rounds per size; medians are compared", min=1)


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
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(cfg.iters):
                dist.all_reduce(buf)
            raw = (time.perf_counter() - t0) / cfg.iters
            dist.barrier()
            times, _ = measure_op(op, s, group=None, grank=topo.rank, n=n, root=0, dtype=torch.float32,
                                  device=torch.device("cpu"), warmup=0, iters=cfg.iters, check=False,
                                  sync=lambda: None)
            t = torch.tensor([raw, statistics.median(times)], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)  # slowest rank, as the harness records
            if topo.rank == 0:
                labels = {"size_bytes": s, "round": rnd}
                writer.add("raw_busbw", busbw("all_reduce", s, t[0].item(), n), "GB/s", labels=labels)
                writer.add("harness_busbw", busbw("all_reduce", s, t[1].item(), n), "GB/s", labels=labels)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--min-bytes", default="1M")
    ap.add_argument("--max-bytes", default="32M")
    ap.add_argument("--iters", default=10)
    ap.add_argument("--rounds", default=5)
    ap.add_argument("--out", default=None, help="folder for records (default: a temp dir)")
    args = ap.parse_args(argv)
    cfg = OverheadConfig.from_dict({"min_bytes": args.min_bytes, "max_bytes": args.max_bytes,
                                    "iters": args.iters, "rounds": args.rounds})
    out = Path(args.out or tempfile.mkdtemp(prefix="hpcbench-bench-"))
    ctx = RecordContext(experiment="bench.collectives_overhead", params=cfg.to_dict())
    res = launch(bench_worker, cfg, nodes=1, ranks_per_node=args.ranks, context=ctx, out_dir=out)
    import pandas as pd

    df = pd.concat([read_records(p) for p in res.records])
    df = df[df["metric"].isin(["raw_busbw", "harness_busbw"])]
    df["size_bytes"] = df["labels"].map(lambda s: json.loads(s)["size_bytes"])
    table = df.pivot_table(index="size_bytes", columns="metric", values="value", aggfunc="median")
    table["ratio"] = table["harness_busbw"] / table["raw_busbw"]
    print(f"\nall_reduce on {args.ranks} ranks (gloo), median of {cfg.rounds} alternating rounds, busbw in GB/s")
    print(table.to_string(float_format=lambda v: f"{v:.4f}"))
    worst = table["ratio"].min()
    print(f"\nworst harness/raw ratio: {worst:.3f} (target >= 0.95); records: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
