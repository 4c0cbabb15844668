"""2-bit gradients against a float32 all-reduce on the emulated cluster's shaped link: does the byte cut show in time?

Run (root, with slurm-wlm and munge installed; it brings up a 2-node cluster unless one is
already up in ``--state``, and takes it down afterwards unless ``--keep``):

    hpcbench bench gradient-compression [--link-rate 200mbit] [--model weather_small] [--steps 12]

One ``gradient_compression`` task, 2 nodes x 2 ranks, runs through the SLURM backend: ``none`` (float32
all-reduce), ``fp16`` and ``quant2bit`` train the same model on the same batches, all in the same
job, interleaved step by step with the same step under a no-op comm hook. Communication time per
step = t(series) - t(no-op). Every series uses the guide's 4 MiB buckets.

Prediction. Per rank, ``quant2bit`` sends 1/16 of float32's bytes for the compressed part
(plus one 4-byte scale per 1024 elements: 0.0635) and ``fp16`` 1/2. Over the inter-node link of 2
nodes x N/2 ranks, a ring all-reduce carries what one rank sends, 2 (N-1)/N S per direction; the
2-bit exchange (all-to-all, then all-gather) sends each rank's bytes evenly to its N-1 peers,
N/2 of them on the other node, so N^2 / (4 (N-1)) x one rank's bytes cross per direction: for
N = 4 that is 1/12 of the ring's bytes, not 1/16. Target: ``quant2bit``'s communication time at
most 1/4 of ``none``'s (ideal 1/16 by bytes sent, 1/12 by this layout's link); ``fp16`` about 1/2.
The table shows what the rest costs: the codec (quantise, encode, decode, re-quantise, timed
without collectives) next to the wire time the link rate predicts.

``--local`` runs the same task with the local backend on emulated nodes (every byte on one
loopback, no shaped link): a check of the pieces, not of the prediction.
"""

from __future__ import annotations

import argparse
import math

import pandas as pd


NODES, PER_NODE = 2, 2
WORLD = NODES * PER_NODE
COMPRESSIONS = ["none", "fp16", "quant2bit"]
#: quant2bit's communication time over none's must be at most this ...
TARGET_RATIO = 1 / 4
#: ... and would be this if time followed the bytes each rank sends (2 of 32 bits).
IDEAL_RATIO = 1 / 16
#: fp16's communication time over none's: half the bytes.
FP16_RATIO = 1 / 2
#: What tests/test_bench.py runs: the task's parameters checked against the experiment's config and planned,
#: nothing started (a --local run takes half a minute, a cluster root).
TOY_ARGS = ["--dry-run"]


def bench_suite(model: str, steps: int, batch_size: int, compressions: list[str]) -> dict:
    """The one-task suite: the compressions side by side on 2 nodes x 2 ranks, the guide's 4 MiB buckets."""
    return {"name": "bench-compression", "tasks": [{"experiment": "gradient_compression", "variants": {"wire": {
        "nodes": NODES, "ranks_per_node": PER_NODE, "models": [model], "compressions": compressions,
        "no_feedback_ablation": False, "modes": ["ddp"], "batch_size": batch_size, "warmup_steps": 2,
        "steps": steps, "backend": "gloo"}}}]}


def all_to_all_link_share(world: int = WORLD, nodes: int = NODES) -> float:
    """Bytes per direction of the node link, per byte one rank sends evenly to its world - 1 peers (2 nodes)."""
    per = world // nodes
    return per * per / (world - 1)


def link_bytes(row: pd.Series) -> float:
    """Bytes per step crossing the inter-node link in one direction: ring parts as sent, 2-bit parts spread."""
    if row["compression"] == "quant2bit":
        return row["plain_bytes_step"] + row["compressed_bytes_step"] * all_to_all_link_share()
    return row["bytes_step"]


def compare(records: pd.DataFrame, link_bits_per_s: float | None) -> pd.DataFrame:
    """Per compression: bytes, predicted wire time, communication time, codec time and the rest, vs none."""
    from hpcbench.experiments.gradient_compression.summary import summarize

    s = summarize(records)
    s = s[s["mode"] == "ddp"].set_index("compression")
    table = pd.DataFrame(index=s.index)
    table["bytes/step/rank"] = s["bytes_step"]
    table["bytes vs none"] = s["bytes_vs_none"]
    table["link bytes/dir"] = [link_bytes(r) for _, r in s.reset_index().iterrows()]
    table["wire ms (pred.)"] = (table["link bytes/dir"] * 8 / link_bits_per_s * 1e3 if link_bits_per_s
                                else math.nan)
    table["comm ms p50"] = s["comm_time_p50_ms"]
    table["comm vs none"] = s["comm_vs_none"]
    table["codec ms"] = s["codec_ms"]
    table["rest ms"] = table["comm ms p50"] - table["wire ms (pred.)"] - table["codec ms"].fillna(0.0)
    table["step ms p50"] = s["step_p50_ms"]
    table["samples/s vs none"] = s["throughput_vs_none"]
    table["loss vs none"] = s["loss_vs_none"]
    table["checks"] = ["ok" if ok else "FAILED" for ok in s["ok"]]
    table.attrs["problems"] = [p for p in s["problem"] if p]
    return table


def report(table: pd.DataFrame, link: str) -> dict:
    """The result's dict form (``hpcbench.bench.result.BenchResult``): one row per compression; each one's
    communication time and bytes against none's as ratios (quant2bit's judged against :data:`TARGET_RATIO`)."""
    notes = [f"check failed: {p}" for p in table.attrs.get("problems", [])]
    notes.append(f"inter-node link: {link}")
    # a ring puts what one rank sends on each direction of the link; the 2-bit exchange all_to_all_link_share() x
    link_ideal = IDEAL_RATIO * all_to_all_link_share()
    notes.append(f"predicted bytes: quant2bit sends {IDEAL_RATIO:.4g} of float32's per rank (+ scales); over this "
                 f"layout's link {link_ideal:.4g} of the ring's (each rank sends {PER_NODE} of its {WORLD - 1} "
                 f"messages across); fp16 communication time expected about {FP16_RATIO:g} of none's")
    ratios = []
    for compression in (c for c in table.index if c != "none"):
        row = table.loc[compression]
        ratios.append({"name": f"{compression} communication time / none's (p50)",
                       "numerator": f"{compression} comm ms p50", "denominator": "none comm ms p50",
                       "value": row["comm vs none"], "target": TARGET_RATIO if compression == "quant2bit" else None,
                       "higher_is_better": False})
        ratios.append({"name": f"{compression} bytes / none's", "numerator": f"{compression} bytes/step/rank",
                       "denominator": "none bytes/step/rank", "value": row["bytes vs none"], "higher_is_better": False})
    if "quant2bit" in table.index:
        codec, comm = table.loc["quant2bit", "codec ms"], table.loc["quant2bit", "comm ms p50"]
        wire = table.loc["quant2bit", "wire ms (pred.)"]
        if math.isfinite(wire):
            notes.append(f"quant2bit's {comm:.4g} ms of communication: codec {codec:.4g} ms (quantise, encode, decode; "
                         f"no wire), predicted wire {wire:.4g} ms, the rest {comm - codec - wire:.4g} ms (collective "
                         f"latency, waits, CPU contention)")
        else:
            notes.append(f"quant2bit's {comm:.4g} ms of communication: codec {codec:.4g} ms (quantise, encode, decode; "
                         f"no wire); no shaped link, so no wire time to predict")
    return {"rows": table.reset_index().to_dict("records"), "ratios": ratios, "notes": notes}


#: The link of a cluster the runner brings up for this benchmark (``--link-rate`` overrides it).
LINK_RATE = "200mbit"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """This benchmark's own options; ``hpcbench.bench.cluster_task`` adds the cluster's."""
    ap.add_argument("--model", default="weather_small",
                    help="a model of hpcbench.models (weather_small: 3.5 M parameters, 14 MB of gradients)")
    ap.add_argument("--steps", type=int, default=12,
                    help="timed steps (error feedback needs ~12 to pass the 5 %% loss check)")
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--compressions", default=",".join(COMPRESSIONS),
                    help="comma-separated; must include none (the baseline)")


def suite_from(args: argparse.Namespace) -> dict:
    """The one-task suite the parsed options ask for."""
    return bench_suite(args.model, args.steps, args.batch_size, args.compressions.split(","))


def report_run(records: pd.DataFrame, link_bps: float | None, link: str) -> dict:
    """The comparison of a finished run's records, in the result's dict form."""
    return report(compare(records, link_bps), link)
