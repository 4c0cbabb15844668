"""Asynchronous light checkpoints against synchronous ones: the training stall per save, side by side.

Run: ``hpcbench bench fault-tolerance [--model gpt2_small] [--saves 10] [--root DIR]``

One model trains AdamW steps on synthetic inputs; every ``--steps-between`` steps its light
state (model, optimizer, progress: :func:`hpcbench.fault.state.capture_light`) is saved, in
alternating order:

* *sync*: :meth:`hpcbench.fault.checkpoint.CheckpointManager.save` on the training thread:
  serialize, zstd, write, fsync; the loop waits for all of it;
* *async*: :class:`hpcbench.fault.async_save.AsyncCheckpointer`: the loop waits for the copy
  of the state to CPU memory, the write runs in a background thread while training goes on
  (as many steps as the write takes; a write still running at the next save is a stall too).

Printed: the median stall of each, their ratio, and how much the steps that overlapped the
background write slowed down against the median step (on a machine with few cores, training
and zstd share them). Target: async stall <= 5 % of the sync stall (the median of each).
The state must be large enough for the save to matter: the default ``gpt2_small`` holds
~64 MB (weights and two AdamW moments, float32).
"""

from __future__ import annotations

import argparse
import statistics

import torch

from hpcbench.core.results import RecordContext, RecordWriter
from hpcbench.data.scratch import disk_scratch
from hpcbench.experiments.fault_tolerance.config import FaultToleranceConfig
from hpcbench.experiments.fault_tolerance.worker import TIMED_STEPS, WARMUP_STEPS, build_training, measure_stall

STALL_SHARE_TARGET = 0.05
#: A run of seconds for tests/test_bench.py: every path of the benchmark at toy size; its figures mean nothing.
TOY_ARGS = ["--model", "gpt2_tiny", "--saves", "2", "--steps-between", "1", "--batch-size", "1"]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """This benchmark's options (``hpcbench bench fault-tolerance --help``)."""
    ap.add_argument("--model", default="gpt2_small", help="a registered model (resnet50, gpt2_124M for real sizes)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--saves", type=int, default=10, help="saves of each kind (alternating); medians are compared")
    ap.add_argument("--steps-between", type=int, default=2, help="training steps after each save (at least)")
    ap.add_argument("--level", type=int, default=3, help="zstd level of both kinds of save")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--root", default=None, help="checkpoint folder (default: a temporary folder under ./results, "
                                                 "removed afterwards: /tmp may be a tmpfs, which writes nothing)")


def run(args: argparse.Namespace) -> dict:
    """Sync and async saves, alternating; the result's dict form (``hpcbench.bench.result.BenchResult``): one
    row per kind of save, async stall / sync stall judged against :data:`STALL_SHARE_TARGET`."""
    cfg = FaultToleranceConfig.from_dict({"models": [args.model], "dtypes": [args.dtype], "zstd_level": args.level,
                                          "repeats": args.saves, "steps_between_saves": args.steps_between,
                                          "batch_size": args.batch_size})
    with disk_scratch(args.root, "bench-checkpoint-stall-") as root:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        tr = build_training(cfg, args.model, args.dtype, device)
        tr.train(WARMUP_STEPS)
        step_s = statistics.median(tr.train(TIMED_STEPS))
        # The records are not kept: the benchmark returns its figures.
        with RecordWriter(root / "records.parquet", RecordContext(experiment="bench")) as writer:
            stalls = measure_stall(cfg, tr, root / "checkpoints", step_s, writer, progress=lambda line: None)
    sync, asyn = statistics.median(stalls["sync"]), statistics.median(stalls["async"])
    slowdown = statistics.median(stalls["slowdown"])
    state_mb = sum(p.numel() * p.element_size() for p in tr.model.parameters()) * 3 / 1e6
    # the slowdown of the steps that overlap a background write: async saves only
    rows = [{"save": mode, "stall_p50_ms": statistics.median(stalls[mode]) * 1e3,
             "stall_min_ms": min(stalls[mode]) * 1e3, "stall_max_ms": max(stalls[mode]) * 1e3,
             "overlap_slowdown_p50_ms": slowdown * 1e3 if mode == "async" else None,
             "stalls_s": stalls[mode], "overlap_slowdowns_s": stalls["slowdown"] if mode == "async" else []}
            for mode in ("sync", "async")]
    notes = [f"{args.model} {args.dtype} on {device.type}: light state ~{state_mb:.0f} MB (weights + 2 AdamW "
             f"moments), zstd level {args.level}, {args.saves} saves of each kind, median step {step_s * 1e3:.1f} ms",
             f"steps overlapping an async write: {slowdown * 1e3:+.1f} ms per save against the median step "
             f"(median over saves)"]
    ratios = [{"name": "training stall per save, async / sync (p50)", "numerator": "async stall_p50_ms",
               "denominator": "sync stall_p50_ms", "value": asyn / sync, "target": STALL_SHARE_TARGET,
               "higher_is_better": False}]
    return {"rows": rows, "ratios": ratios, "notes": notes, "params": {**vars(args), "device": device.type}}
