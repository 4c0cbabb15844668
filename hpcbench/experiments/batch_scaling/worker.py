"""Per-rank throughput against the batch size, with or without gradient accumulation (C2).

The guide (section 1) reports that a batch more than 4x the usual "cloud" batch, with
gradient accumulation, raised per-GPU throughput by 220 %. This experiment trains a model
with data parallelism (:func:`hpcbench.parallel.modes.parallelize`) on synthetic inputs made
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

from hpcbench.core.results import RecordWriter
from hpcbench.dist.topology import Topology
from hpcbench.experiments.batch_scaling.config import BatchScalingConfig
from hpcbench.models import MODELS
from hpcbench.parallel.modes import parallelize

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

    from hpcbench.dist.worker import progress, rank_setup

    rank = rank_setup(cfg, topo)
    cuda, device, sync = rank.backend == "nccl", rank.device, rank.sync
    spec = MODELS.get(cfg.model)
    torch.manual_seed(cfg.seed)
    base = spec.build().to(device)
    items_per_sample = spec.items_per_sample(seq_len=cfg.seq_len)
    lead = rank.lead
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


