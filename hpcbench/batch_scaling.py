"""Per-rank throughput against the batch size, with or without gradient accumulation (C2).

The guide (section 1) reports that a batch more than 4x the usual "cloud" batch, with
gradient accumulation, raised per-GPU throughput by 220 %. This experiment trains a model
with data parallelism (:func:`hpcbench.comm_modes.parallelize`) on synthetic inputs made
on the device and measures, for batch factors 1x, 2x, 4x, 8x of a base batch:

* ``larger_batch``: the micro-batch is factor x base and every micro-batch is an optimizer
  step (one gradient all-reduce per factor x base samples);
* ``fixed_global_batch``: every optimizer step sees max(factors) x base samples per rank;
  the micro-batch is factor x base and the micro-steps accumulate gradients under
  ``no_sync()`` (one all-reduce per step whatever the factor).

Per optimizer step it records the step time, the per-rank throughput and the memory each
rank needed. :func:`step_cost_model` fits step = batch x per-sample time + per-step cost
to say what bounds the gain on the machine that ran it.
"""

from __future__ import annotations

import contextlib
import os
import resource
import threading
import time
from dataclasses import dataclass
from typing import Any

from hpcbench.collectives import expand_labels
from hpcbench.comm_modes import MODE_NAMES, MODES, parallelize
from hpcbench.config import Config, param
from hpcbench.dist.topology import Topology
from hpcbench.models import MODEL_NAMES, MODELS
from hpcbench.results import RecordWriter

REGIMES = ("larger_batch", "fixed_global_batch")


@dataclass
class BatchScalingConfig(Config):
    """Parameters of ``01_batch_scaling``; the notebook's parameters cell mirrors them."""

    model: str = param("resnet_tiny", "model to train (resnet50 / gpt2_124M on GPUs)", choices=MODEL_NAMES)
    base_batch: int = param(4, "the 'cloud' batch per rank that the factors multiply", min=1)
    factors: list[int] = param([1, 2, 4, 8], "batch factors; the guide's claim is about > 4x", min=1, max=1024)
    regimes: list[str] = param(list(REGIMES), "larger_batch: one step per micro-batch; fixed_global_batch: "
                                              "max(factors) x base_batch per step by gradient accumulation",
                               choices=REGIMES)
    mode: str = param("ddp", "communication mode of the data parallelism", choices=MODE_NAMES)
    bucket_cap_mb: float = param(25.0, "DDP gradient bucket size in MiB", min=1e-6)
    image_size: int = param(32, "side of the synthetic images (224 for ImageNet-sized steps)", min=32, max=1024)
    seq_len: int = param(64, "tokens per synthetic sequence", min=2, max=1024)
    warmup_steps: int = param(1, "untimed optimizer steps per batch size", min=0, max=1000)
    steps: int = param(4, "timed optimizer steps per batch size; each one is kept as a sample", min=1, max=100000)
    seed: int = param(0, "seed of the initial weights and the synthetic batches", min=0)
    nodes: int = param(1, "nodes; on one machine more than 1 is an emulated split of the local ranks",
                       min=1, max=4096)
    ranks_per_node: int = param(2, "ranks (GPUs, or CPU processes) per node", min=1, max=64)
    backend: str = param("auto", "auto: NCCL with a GPU per rank, else gloo", choices=("auto", "gloo", "nccl"))

    def validate(self) -> None:
        if not self.factors:
            raise self._error("factors", "is empty; give batch factors such as [1, 2, 4, 8]")
        if len(set(self.factors)) != len(self.factors):
            raise self._error("factors", f"{self.factors} repeats a factor")
        if not self.regimes:
            raise self._error("regimes", f"is empty; allowed: {list(REGIMES)}")
        top = max(self.factors)
        if "fixed_global_batch" in self.regimes:
            for f in self.factors:
                if top % f:
                    raise self._error("factors", f"{f} does not divide the largest factor {top}, so "
                                                 "fixed_global_batch cannot accumulate to the same batch")
        problem = MODES.get(self.mode).layout_problem(self.nodes, self.ranks_per_node)
        if problem:
            raise self._error("mode", f"{self.mode!r} {problem}")
        spec = MODELS.get(self.model)
        if spec.kind == "text" and self.seq_len > spec.max_seq_len:
            raise self._error("seq_len", f"{self.seq_len} exceeds {self.model}'s block size {spec.max_seq_len}")

    def plan(self, regime: str, factor: int) -> tuple[int, int]:
        """(micro-batch per rank, micro-steps per optimizer step) of one regime and factor."""
        micro = self.base_batch * factor
        if regime == "larger_batch":
            return micro, 1
        return micro, max(self.factors) // factor


# -- memory -------------------------------------------------------------------------------

def _rss_bytes() -> int:
    """This process's resident set size now (Linux /proc), or its peak so far elsewhere."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class RssPeak:
    """Samples the resident set size every ``interval_s`` while active; ``peak`` is the largest.

    CPU tensors come from malloc, so the RSS is the memory a CPU rank really holds; freed
    memory that the allocator keeps is still counted, which makes it an upper bound.
    """

    def __init__(self, interval_s: float = 0.002):
        self.interval_s = interval_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss_bytes())
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "RssPeak":
        self.peak = _rss_bytes()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        self.peak = max(self.peak, _rss_bytes())


# -- the worker ---------------------------------------------------------------------------

def run_worker(cfg: BatchScalingConfig, topo: Topology, writer: RecordWriter) -> None:
    """Entry point on every rank (see :func:`hpcbench.dist.launch`)."""
    import copy

    import torch
    import torch.distributed as dist

    from hpcbench.dist.worker import progress

    if topo.world_size != cfg.nodes * cfg.ranks_per_node:
        raise RuntimeError(f"launched {topo.describe()}, config asks for {cfg.nodes} x {cfg.ranks_per_node}")
    backend = dist.get_backend()
    cuda = backend == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    spec = MODELS.get(cfg.model)
    torch.manual_seed(cfg.seed)
    base = spec.build().to(device)
    items_per_sample = spec.items_per_sample(seq_len=cfg.seq_len)
    lead = topo.rank == 0
    for regime in cfg.regimes:
        for factor in sorted(cfg.factors):  # ascending: RSS never shrinks, so each value bounds its own need
            micro, accum = cfg.plan(regime, factor)
            labels = {"model": cfg.model, "regime": regime, "factor": factor, "micro_batch": micro,
                      "accumulation": accum, "batch_per_step": micro * accum, "device": device.type,
                      "mode": cfg.mode}
            model = parallelize(copy.deepcopy(base), cfg.mode, topo, bucket_cap_mb=cfg.bucket_cap_mb,
                                device=device)
            opt = torch.optim.SGD(model.parameters(), lr=1e-4)
            x, y = spec.synthetic_batch(micro, device=device, seed=cfg.seed * 100003 + topo.rank,
                                        image_size=cfg.image_size, seq_len=cfg.seq_len)
            times = []
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)
            with RssPeak() as rss:
                for i in range(cfg.warmup_steps + cfg.steps):
                    dist.barrier()
                    sync()
                    t0 = time.perf_counter()
                    for k in range(accum):
                        last = k == accum - 1
                        with (contextlib.nullcontext() if last else model.no_sync()):
                            (spec.loss(model(x), y) / accum).backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    sync()
                    if i >= cfg.warmup_steps:
                        times.append(time.perf_counter() - t0)
            mem = torch.tensor([float(torch.cuda.max_memory_allocated(device)) if cuda else float(rss.peak)],
                               dtype=torch.float64, device=device)
            flat = torch.tensor(times, dtype=torch.float64, device=device)
            dist.all_reduce(flat, op=dist.ReduceOp.MAX)
            dist.all_reduce(mem, op=dist.ReduceOp.MAX)
            flat = flat.cpu().tolist()
            progress(f"{regime} x{factor}: step p50 {sorted(flat)[len(flat) // 2] * 1e3:.1f} ms")
            del model, opt, x, y
            if not lead:
                continue
            per_step = micro * accum * items_per_sample
            for step, t in enumerate(flat):
                writer.add("step_time", t, "s", step=step, labels=labels)
                writer.add("throughput_per_rank", per_step / t, spec.throughput_unit, step=step, labels=labels)
            how = ("torch.cuda.max_memory_allocated" if cuda else
                   "peak resident set size of the rank process during the steps (an upper bound)")
            writer.add("memory_per_rank", float(mem[0]) / (1 << 20), "MiB", labels=labels, text=how)


# -- reading the records back -------------------------------------------------------------

SUMMARY_KEYS = ["regime", "factor"]


def summarize(records: Any) -> Any:
    """One row per (regime, factor): throughput per rank p50, its gain over 1x, step p50/p99, memory."""
    import pandas as pd

    rows = records[(records["experiment"] == "batch_scaling") & records["value"].notna()]
    rows = rows[rows["metric"].isin(["throughput_per_rank", "step_time", "memory_per_rank"])]
    if rows.empty:
        return pd.DataFrame(columns=SUMMARY_KEYS + ["throughput_p50", "gain_vs_1x"])
    wide = expand_labels(rows)
    out = []
    for (regime, factor), g in wide.groupby(SUMMARY_KEYS, sort=True):
        tput = g[g["metric"] == "throughput_per_rank"]
        step = g[g["metric"] == "step_time"]["value"]
        mem = g[g["metric"] == "memory_per_rank"]["value"]
        out.append({"regime": regime, "factor": int(factor), "micro_batch": int(g["micro_batch"].iloc[0]),
                    "accumulation": int(g["accumulation"].iloc[0]),
                    "batch_per_step": int(g["batch_per_step"].iloc[0]),
                    "unit": tput["unit"].iloc[0] if len(tput) else "",
                    "throughput_p50": tput["value"].median(), "step_p50_ms": step.median() * 1e3,
                    "step_p99_ms": step.quantile(0.99) * 1e3,
                    "memory_MiB": mem.max() if len(mem) else float("nan"), "steps": len(step)})
    frame = pd.DataFrame(out)
    smallest = frame.loc[frame.groupby("regime")["factor"].idxmin()].set_index("regime")["throughput_p50"]
    frame["gain_vs_1x"] = frame["throughput_p50"] / frame["regime"].map(smallest)
    return frame


@dataclass(frozen=True)
class StepCostModel:
    """step time = samples x per_sample_s + per_step_s, fitted on the larger_batch regime."""

    per_sample_s: float
    per_step_s: float
    fixed_share_at_1x: float
    """the per-step cost's share of the smallest batch's step"""
    gain_bound: float
    """1 / (1 - fixed_share_at_1x): the most any batch growth can give per rank"""

    def describe(self) -> str:
        return (f"step ≈ {self.per_sample_s * 1e3:.3g} ms per sample + {self.per_step_s * 1e3:.3g} ms per step; "
                f"the per-step cost is {self.fixed_share_at_1x:.0%} of the smallest batch's step, so growing "
                f"the batch can raise per-rank throughput by at most {self.gain_bound:.2f}x "
                f"(the guide's +220 % is 3.2x)")


def step_cost_model(summary: Any, regime: str = "larger_batch") -> StepCostModel | None:
    """Least-squares fit of step time against samples per step (None with fewer than 2 sizes)."""
    import numpy as np

    part = summary[summary["regime"] == regime].sort_values("batch_per_step")
    if len(part) < 2:
        return None
    slope, intercept = np.polyfit(part["batch_per_step"], part["step_p50_ms"] / 1e3, 1)
    slope, intercept = max(float(slope), 0.0), max(float(intercept), 0.0)
    first = float(part["step_p50_ms"].iloc[0]) / 1e3
    share = min(intercept / first, 0.999) if first > 0 else 0.0
    return StepCostModel(per_sample_s=slope, per_step_s=intercept, fixed_share_at_1x=share,
                         gain_bound=1.0 / (1.0 - share))
