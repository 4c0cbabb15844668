"""The emulated SLURM cluster: how much of a shaped link a collective gets, and what SLURM costs per task.

Run (root, with slurm-wlm and munge installed):
``hpcbench bench slurm-cluster [--link-rate 1gbit] [--iters 5]``

1. Brings up a 2-node emulated cluster with the given inter-node rate (or uses the
   one already up in ``--state``), runs the collectives experiment through the SLURM
   backend with one rank per node (so every byte of the all_reduce crosses the
   link; busbw = algbw for 2 ranks), and prints busbw for 64 MiB and larger as a
   fraction of the shaped rate (target: at least 0.80).
2. Runs the same small notebook (the environment inventory) through the local
   backend and through the SLURM backend, and prints SLURM's per-task overhead:
   submission to start, and total wall time against the local run.

The two suites are data, in ``slurm_cluster.yaml`` beside this module. ``--dry-run`` starts
nothing: it checks both suites' parameters against their experiments' configs and prints their
plans on this machine.
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
import yaml

from hpcbench.bench.result import BenchResult, Ratio
from hpcbench.cluster import ClusterSpec, cluster_down, cluster_up, load_cluster
from hpcbench.cluster.emulated import ClusterError
from hpcbench.core.errors import HpcbenchError
from hpcbench.core.results import find_record_files, read_records
from hpcbench.run.rundir import read_statuses
from hpcbench.run.runner import run_suite
from hpcbench.run.suite import Suite, parse_suite

SUITES = Path(__file__).with_name("slurm_cluster.yaml")
#: What tests/test_bench.py runs: both suites checked and planned, nothing started (the benchmark needs root
#: and slurm-wlm).
TOY_ARGS = ["--dry-run"]


def bench_suites(iters: int, repeats: int) -> dict[str, Suite]:
    """The link suite with ``iters`` timed iterations and the overhead suite with ``repeats`` tasks."""
    data = yaml.safe_load(SUITES.read_text())
    for variant in data["link"]["tasks"][0]["variants"].values():
        variant["iters"] = iters
    data["overhead"]["repeat"] = repeats
    return {name: parse_suite(suite, f"{SUITES.name}: {name}") for name, suite in data.items()}


def _busbw_fraction(suite: Suite, out: Path, link_rate_bits: float) -> pd.DataFrame:
    run_dir = out / "link"
    (st,) = run_suite(suite, run_dir, backend="slurm", progress=False)
    if st.state != "done":
        raise HpcbenchError(f"{st.task_id} failed: {st.error}")
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


def _overhead(suite: Suite, out: Path, repeats: int) -> pd.DataFrame:
    rows = []
    for backend in ("local", "slurm"):
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


#: busbw for 64 MiB and larger must reach this fraction of the shaped link rate.
LINK_FRACTION_TARGET = 0.80


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """This benchmark's options (``hpcbench bench slurm-cluster --help``)."""
    ap.add_argument("--link-rate", default="1gbit")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3, help="tasks per backend for the overhead figure")
    ap.add_argument("--state", default="/tmp/hpcbench-bench-cluster")
    ap.add_argument("--keep", action="store_true", help="leave the cluster up afterwards")
    ap.add_argument("--dry-run", action="store_true", help="start nothing: check both suites and print their plans")


def run(args: argparse.Namespace) -> BenchResult:
    """The link suite, then the overhead suite on both backends: one row per message size and one per
    backend; each size's busbw over the shaped rate (judged against :data:`LINK_FRACTION_TARGET`) and the
    wall time per task, SLURM over local. ``--dry-run``: the two plans as notes, ``ok`` when both would start."""
    suites = bench_suites(args.iters, args.repeats)
    if args.dry_run:
        from hpcbench.run.limits import dry_run

        ok, notes = True, []
        for name, suite in suites.items():
            text, fits = dry_run(suite, Path(tempfile.gettempdir()) / f"hpcbench-bench-slurm-dry-run-{name}",
                                 backend="local", oversubscribe=True)
            notes += [*text.splitlines(), ""]
            ok = ok and fits
        return BenchResult("slurm-cluster", notes=notes[:-1], ok=ok)
    spec = ClusterSpec(nodes=2, link_rate=args.link_rate, link_delay="0ms", state_dir=args.state)
    try:
        info = load_cluster(args.state)
        print(f"using the cluster already up in {args.state}", file=sys.stderr)
    except ClusterError:
        info = cluster_up(spec)
    import os

    os.environ.update(info.env())
    out = Path(tempfile.mkdtemp(prefix="hpcbench-bench-slurm-"))
    try:
        link = _busbw_fraction(suites["link"], out, info.spec.link_rate_bits)
        over = _overhead(suites["overhead"], out, args.repeats)
    finally:
        if not args.keep:
            cluster_down(args.state)
    summary = over.groupby("backend").agg(notebook_s=("notebook_s", "median"),
                                          first_submit_to_start_s=("submit_to_start_s", "min"),
                                          suite_wall_s_per_task=("suite_wall_s_per_task", "median"))
    extra = summary.loc["slurm", "suite_wall_s_per_task"] - summary.loc["local", "suite_wall_s_per_task"]
    rows = [{"measure": "all_reduce busbw (GB/s), median over iterations", **r}
            for r in link.reset_index().to_dict("records")]
    rows += [{"measure": "inventory notebook, one task at a time (s)", **r}
             for r in summary.reset_index().to_dict("records")]
    ratios = [Ratio(f"all_reduce {int(size)} B: busbw p50 / shaped link rate", "busbw p50",
                    f"{info.spec.link_rate} shaped rate", row["fraction_of_link"], LINK_FRACTION_TARGET)
              for size, row in link.iterrows()]
    ratios.append(Ratio("suite wall time per task, SLURM / local backend", "SLURM s per task", "local s per task",
                        summary.loc["slurm", "suite_wall_s_per_task"] / summary.loc["local", "suite_wall_s_per_task"]))
    return BenchResult("slurm-cluster", rows=rows, ratios=ratios, notes=[
        f"1. all_reduce, 2 nodes x 1 rank, inter-node link shaped to {info.spec.link_rate} "
        f"({info.spec.link_rate_bits / 8 / 1e9:.4f} GB/s); busbw median over iterations; worst fraction of the "
        f"shaped rate: {link['fraction_of_link'].min():.3f}",
        "2. the inventory notebook, one task at a time, local vs SLURM backend (seconds; notebook time is the "
        "median, submission to start is the first task's)",
        f"SLURM overhead per task: {extra:+.2f} s of wall time; records: {out}"])
