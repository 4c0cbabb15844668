"""The weather case's full stack against its original on a slow shaped link, beside what the bytes predict.

Run (root, with slurm-wlm and munge installed; it brings up a 2-node cluster unless one is
already up in ``--state``, and takes it down afterwards unless ``--keep``):

    hpcbench bench weather-case [--link-rate 100mbit] [--model weather_tiny] [--steps 10]

One ``weather_case`` task, 2 nodes x 2 ranks, runs every stage of the ablation (original,
comm_tuned, full and each technique alone) through the SLURM backend, all interleaved step by step
with their no-op-hook twins in one job. The link rate is chosen so that communication is at least
half of the original's step (its busy share <= 0.5): the regime the guide's tuning case is about.

Prediction per stage, from the byte counts alone: time per micro-step = the stage's own compute
(its no-op twin, per micro-step) + the bytes that leave one node per micro-step over the shaped
link rate, with nothing overlapped. Measured below the prediction means overlap hid some of the
transfer; above it means costs the bytes do not show (the 2-bit codec's CPU time, latency, gloo).
Target: full / original >= 2x where the original's communication share is >= 50 %.

``--local`` runs the same task with the local backend on emulated nodes (every byte on one
loopback, no shaped link): a check of the pieces, not of the prediction.
"""

from __future__ import annotations

import argparse

import pandas as pd


TARGET_SPEEDUP = 2.0
#: The original's communication share (1 - busy share) the target needs.
MIN_COMM_SHARE = 0.5
#: What tests/test_bench.py runs: the task's parameters checked against the experiment's config and planned,
#: nothing started (a --local run takes half a minute, a cluster root).
TOY_ARGS = ["--dry-run"]


def bench_suite(model: str, steps: int, micro_batch: int) -> dict:
    """The one-task suite: every stage of the ablation, 2 nodes x 2 ranks, synthetic data (no I/O in the step)."""
    return {"name": "bench-weather-case", "tasks": [{"experiment": "weather_case", "variants": {"ablation": {
        "nodes": 2, "ranks_per_node": 2, "backend": "gloo", "model": model, "micro_batch": micro_batch,
        "data_source": "synthetic", "warmup_steps": 2, "steps": steps}}}]}


def compare(records: pd.DataFrame, link_bps: float | None) -> pd.DataFrame:
    """Per stage: measured and predicted time per micro-step (ms), busy share, bytes across nodes."""
    from hpcbench.experiments.weather_case.summary import summarize

    s = summarize(records)
    compute_ms = s["noop_step_p50_ms"] / s["micro_steps"].astype(float)
    wire_ms = s["bytes_across_nodes"] * 8 / link_bps * 1e3 if link_bps else float("nan")
    out = pd.DataFrame({"stage": s["stage"], "micro_step_ms": s["micro_step_p50_ms"], "compute_ms": compute_ms,
                        "bytes_across_nodes": s["bytes_across_nodes"], "predicted_ms": compute_ms + wire_ms,
                        "busy_share": s["busy_share_p50"], "speedup": s["speedup_vs_original"],
                        "loss_vs_original": s["loss_vs_original"], "ok": s["ok"]})
    base = out[out["stage"] == "original"]["predicted_ms"]
    out["predicted_speedup"] = float(base.iloc[0]) / out["predicted_ms"] if len(base) else float("nan")
    return out.set_index("stage")


def report(table: pd.DataFrame, link: str) -> dict:
    """The result's dict form (``hpcbench.bench.result.BenchResult``): one row per stage; full / original
    measured (judged against :data:`TARGET_SPEEDUP`) and as the bytes predict it."""
    original, full = table.loc["original"], table.loc["full"]
    share = 1.0 - float(original["busy_share"])
    speedup = float(full["speedup"])
    regime = "met" if share >= MIN_COMM_SHARE else f"NOT met: lower --link-rate so that it reaches {MIN_COMM_SHARE:.0%}"
    notes = [f"inter-node link: {link}",
             f"original's communication share (1 - busy share): {share:.0%} (needs >= {MIN_COMM_SHARE:.0%}: {regime})",
             "predicted = own compute (no-op twin) + bytes across nodes / link rate, nothing overlapped"]
    failed = [str(i) for i, ok in table["ok"].items() if ok is False]
    if failed:
        notes.append(f"stages whose checks failed (do not count): {', '.join(failed)}")
    ratios = [{"name": "original's communication share (1 - busy share; the regime the target needs)",
               "numerator": "original's communication time", "denominator": "original's step time", "value": share,
               "target": MIN_COMM_SHARE},
              {"name": "full's speedup over original, time per micro-step", "numerator": "original micro_step_ms",
               "denominator": "full micro_step_ms", "value": speedup, "target": TARGET_SPEEDUP},
              {"name": "full's speedup over original, as the bytes predict it", "numerator": "original predicted_ms",
               "denominator": "full predicted_ms", "value": float(full["predicted_speedup"])}]
    return {"rows": table.reset_index().to_dict("records"), "ratios": ratios, "notes": notes}


#: The link of a cluster the runner brings up for this benchmark (``--link-rate`` overrides it).
LINK_RATE = "100mbit"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """This benchmark's own options; ``hpcbench.bench.cluster_task`` adds the cluster's."""
    ap.add_argument("--model", default="weather_tiny", help="a weather model (weather_tiny: 1.5 MB of gradients)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--micro-batch", type=int, default=4)


def suite_from(args: argparse.Namespace) -> dict:
    """The one-task suite the parsed options ask for."""
    return bench_suite(args.model, args.steps, args.micro_batch)


def report_run(records: pd.DataFrame, link_bps: float | None, link: str) -> dict:
    """The comparison of a finished run's records, in the result's dict form."""
    return report(compare(records, link_bps), link)
