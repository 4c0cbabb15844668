"""Hierarchical against flat DDP on the emulated cluster: does two-level reduction save link time?

Run (root, with slurm-wlm and munge installed; it brings up a 2-node cluster unless one is
already up in ``--state``, and takes it down afterwards unless ``--keep``):

    hpcbench bench comm-modes [--link-rate 1gbit] [--model resnet18] [--steps 10]

One ``comm_modes`` task, 2 nodes x 2 ranks, runs through the SLURM backend: plain DDP and the
hierarchical hook on the same model and batch, one after the other in the same job, each
step interleaved with the same step under a no-op comm hook. Communication time per step =
t(mode) - t(no-op).

Prediction: a flat ring all-reduce of S bytes over N = 4 ranks (2 per node) carries
2 (N-1)/N x S = 1.5 S over each direction of the inter-node link; the hierarchical scheme
carries S (two 2-rank all-reduces of S/2, one per local rank). When bandwidth dominates,
the communication time should drop by up to 1.5x; target: at least 80 % of it (1.2x).

``--local`` runs the same task with the local backend on emulated nodes (every byte on one
loopback, no shaped link): a check of the pieces, not of the prediction.
"""

from __future__ import annotations

import argparse

import pandas as pd

from hpcbench.core.metrics import allreduce_bytes_sent

WORLD, PER_NODE = 4, 2
#: Bytes over each direction of the inter-node link, in units of the gradient size S.
FLAT_RING_LINK_BYTES = allreduce_bytes_sent(1.0, WORLD)
HIERARCHICAL_LINK_BYTES = 1.0
PREDICTED = FLAT_RING_LINK_BYTES / HIERARCHICAL_LINK_BYTES
TARGET_FRACTION = 0.8
#: What tests/test_bench.py runs: the task's parameters checked against the experiment's config and planned,
#: nothing started (a --local run takes half a minute, a cluster root).
TOY_ARGS = ["--dry-run"]


def bench_suite(model: str, steps: int, batch_size: int) -> dict:
    """The one-task suite: ddp and hierarchical side by side on 2 nodes x 2 ranks."""
    return {"name": "bench-comm-modes", "tasks": [{"experiment": "comm_modes", "variants": {"hier_vs_flat": {
        "nodes": 2, "ranks_per_node": PER_NODE, "models": [model], "modes": ["ddp", "hierarchical"],
        "bucket_cap_mb": [25], "batch_size": batch_size, "image_size": 32, "seq_len": 64,
        "warmup_steps": 2, "steps": steps, "measure_noop": True, "check": True, "backend": "gloo"}}}]}


def compare(records: pd.DataFrame) -> pd.DataFrame:
    """Per mode: step, no-op step and communication time p50 (ms), throughput p50, gradient check."""
    from hpcbench.experiments.comm_modes.summary import summarize

    s = summarize(records).set_index("mode")
    return s[["step_p50_ms", "noop_step_p50_ms", "comm_time_p50_ms", "comm_share_p50", "throughput_total_p50",
              "unit", "grad_match", "buckets", "steps"]]


def report(table: pd.DataFrame, link: str) -> dict:
    """The result's dict form (``hpcbench.bench.result.BenchResult``): one row per mode, the two ratios."""
    flat, hier = table.loc["ddp"], table.loc["hierarchical"]
    comm_ratio = flat["comm_time_p50_ms"] / hier["comm_time_p50_ms"]
    tput_ratio = hier["throughput_total_p50"] / flat["throughput_total_p50"]
    notes = [f"inter-node link: {link}",
             f"predicted link bytes per direction: flat ring {FLAT_RING_LINK_BYTES:.2f} S, hierarchical "
             f"{HIERARCHICAL_LINK_BYTES:.2f} S -> communication time ratio up to {PREDICTED:.2f}x; target "
             f"{TARGET_FRACTION:.0%} of it"]
    ratios = [{"name": "communication time, flat / hierarchical (p50)", "numerator": "ddp comm_time_p50_ms",
               "denominator": "hierarchical comm_time_p50_ms", "value": comm_ratio,
               "target": TARGET_FRACTION * PREDICTED},
              {"name": "samples/s, hierarchical / flat (p50)", "numerator": "hierarchical throughput_total_p50",
               "denominator": "ddp throughput_total_p50", "value": tput_ratio}]
    return {"rows": table.reset_index().to_dict("records"), "ratios": ratios, "notes": notes}


#: The link of a cluster the runner brings up for this benchmark (``--link-rate`` overrides it).
LINK_RATE = "1gbit"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """This benchmark's own options; ``hpcbench.bench.cluster_task`` adds the cluster's."""
    ap.add_argument("--model", default="resnet18", help="a model of hpcbench.models (resnet18: 47 MB of gradients)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=4)


def suite_from(args: argparse.Namespace) -> dict:
    """The one-task suite the parsed options ask for."""
    return bench_suite(args.model, args.steps, args.batch_size)


def report_run(records: pd.DataFrame, link_bps: float | None, link: str) -> dict:
    """The comparison of a finished run's records, in the result's dict form."""
    return report(compare(records), link)
