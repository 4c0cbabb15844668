"""The emulated SLURM cluster: how much of a shaped link a collective gets, and what SLURM costs per task.

Run (root, with slurm-wlm and munge installed):
``python -m hpcbench.bench.slurm_cluster [--link-rate 1gbit] [--iters 5]``

1. Brings up a 2-node emulated cluster with the given inter-node rate (or uses the
   one already up in ``--state``), runs the collectives experiment through the SLURM
   backend with one rank per node (so every byte of the all_reduce crosses the
   link; busbw = algbw for 2 ranks), and prints busbw for 64 MiB and larger as a
   fraction of the shaped rate (target: at least 0.80).
2. Runs the same small notebook (the environment inventory) through the local
   backend and through the SLURM backend, and prints SLURM's per-task overhead:
   submission to start, and total wall time against the local run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from hpcbench.cluster import ClusterSpec, cluster_down, cluster_up, load_cluster
from hpcbench.cluster.emulated import ClusterError
from hpcbench.core.results import find_record_files, read_records
from hpcbench.run.rundir import read_statuses
from hpcbench.run.runner import run_suite
from hpcbench.run.suite import parse_suite


def _busbw_fraction(out: Path, link_rate_bits: float, iters: int) -> pd.DataFrame:
    suite = parse_suite({"name": "bench-link", "tasks": [{"experiment": "collectives", "variants": {"x2nodes": {
        "nodes": 2, "ranks_per_node": 1, "ops": "all_reduce", "groups": "world",
        "min_bytes": "64M", "max_bytes": "256M", "step_factor": 2, "iters": iters, "warmup_iters": 1}}}]})
    run_dir = out / "link"
    (st,) = run_suite(suite, run_dir, backend="slurm", progress=False)
    if st.state != "done":
        raise SystemExit(f"collectives task failed: {st.error}")
    df = pd.concat([read_records(p) for p in find_record_files(run_dir / "tasks")])
    df = df[df["metric"] == "busbw"]
    df["size_bytes"] = df["labels"].map(lambda s: json.loads(s)["size_bytes"])
    table = df.groupby("size_bytes")["value"].agg(["median", "max"]).rename(
        columns={"median": "busbw_p50_GBps", "max": "busbw_max_GBps"})
    shaped = link_rate_bits / 8 / 1e9
    table["fraction_of_link"] = table["busbw_p50_GBps"] / shaped
    return table


def _seconds(a: str, b: str) -> float:
    return (dt.datetime.fromisoformat(b) - dt.datetime.fromisoformat(a)).total_seconds()


def _overhead(out: Path, repeats: int) -> pd.DataFrame:
    rows = []
    for backend in ("local", "slurm"):
        suite = parse_suite({"name": f"bench-{backend}", "repeat": repeats, "tasks": [
            {"experiment": "environment", "params": {"include_commands": False}}]})
        run_dir = out / f"overhead-{backend}"
        t0 = time.time()
        # One task at a time on both backends (%1 for the array), so the wall time per
        # task compares like with like rather than SLURM's two nodes with one local core pair.
        run_suite(suite, run_dir, backend=backend, jobs=1, progress=False)
        total = time.time() - t0
        created = json.loads((run_dir / "run.json").read_text())["created"]
        for st in read_statuses(run_dir):
            rows.append({"backend": backend, "task": st.task_id, "notebook_s": st.duration_s,
                         "submit_to_start_s": _seconds(created, st.started),
                         "suite_wall_s_per_task": total / repeats})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--link-rate", default="1gbit")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3, help="tasks per backend for the overhead figure")
    ap.add_argument("--state", default="/tmp/hpcbench-bench-cluster")
    ap.add_argument("--keep", action="store_true", help="leave the cluster up afterwards")
    args = ap.parse_args(argv)
    spec = ClusterSpec(nodes=2, link_rate=args.link_rate, link_delay="0ms", state_dir=args.state)
    try:
        info = load_cluster(args.state)
        print(f"using the cluster already up in {args.state}")
    except ClusterError:
        info = cluster_up(spec)
    import os

    os.environ.update(info.env())
    out = Path(tempfile.mkdtemp(prefix="hpcbench-bench-slurm-"))
    try:
        link = _busbw_fraction(out, info.spec.link_rate_bits, args.iters)
        over = _overhead(out, args.repeats)
    finally:
        if not args.keep:
            cluster_down(args.state)
    print(f"\n1. all_reduce, 2 nodes x 1 rank, inter-node link shaped to {info.spec.link_rate} "
          f"({info.spec.link_rate_bits / 8 / 1e9:.4f} GB/s); busbw median over iterations:")
    print(link.to_string(float_format=lambda v: f"{v:.4f}"))
    print(f"   worst fraction of the shaped rate: {link['fraction_of_link'].min():.3f} (target >= 0.80)")
    summary = over.groupby("backend").agg(notebook_s=("notebook_s", "median"),
                                          first_submit_to_start_s=("submit_to_start_s", "min"),
                                          suite_wall_s_per_task=("suite_wall_s_per_task", "median"))
    print("\n2. the environment notebook, one task at a time, local vs SLURM backend (seconds; notebook time is "
          "the median, submission to start is the first task's):")
    print(summary.to_string(float_format=lambda v: f"{v:.2f}"))
    extra = summary.loc["slurm", "suite_wall_s_per_task"] - summary.loc["local", "suite_wall_s_per_task"]
    print(f"   SLURM overhead per task: {extra:+.2f} s of wall time; records: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
