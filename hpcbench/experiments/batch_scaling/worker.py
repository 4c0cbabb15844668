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
import math
import os
import resource
import statistics
import threading
import time

from hpcbench.cluster.link_phase import SteeredLink
from hpcbench.core.results import RecordWriter
from hpcbench.dist.topology import Topology
from hpcbench.experiments.batch_scaling.config import TEST_REGIME, BatchScalingConfig
from hpcbench.models import MODELS
from hpcbench.models.step import make_optimizer, prepare_model, step_settings
from hpcbench.parallel.modes import parallelize
from hpcbench.scale.regime import (Calibration, busy_share, calibrate_on_ranks, judged_rate_bps, regime_facts,
                                   write_calibration)
from hpcbench.system.facts import write_facts

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
    """Entry point on every rank (see :func:`hpcbench.dist.launch`).

    With ``link_regime="guide"`` the sweep runs inside the guide's regime: the 1x step and its
    no-op twin are timed at each calibration rate, the link shaped to the solved rate
    (:func:`hpcbench.scale.regime.calibrate_on_ranks`), the sweep timed there, the twin timed
    once more for the reached busy share, and the links put back.
    """
    import torch
    import torch.distributed as dist

    from hpcbench.dist.worker import rank_setup

    rank = rank_setup(cfg, topo)
    device, sync = rank.device, rank.sync
    spec = MODELS.get(cfg.model)
    torch.manual_seed(cfg.seed)
    base = spec.build().to(device)
    items_per_sample = spec.items_per_sample(seq_len=cfg.seq_len)
    lead = rank.lead
    steer = SteeredLink() if cfg.link_regime == "guide" else None
    with steer if steer is not None else contextlib.nullcontext():
        baseline = BaselineTwin(cfg, topo, base, device) if steer is not None else None
        calibration = (calibrate_on_ranks(steer, lambda: baseline.busy(cfg.calibration_steps, sync),
                                          cfg.calibration_rates, TEST_REGIME.target_busy, lead=lead, device=device)
                       if baseline is not None and topo.nodes > 1 else None)
        judged = _sweep(cfg, topo, rank, writer, spec, base, items_per_sample)
        compute = baseline.compute(cfg.steps, sync) if baseline is not None else None
        judged_at = steer.current if steer is not None else None  # before leaving the block puts the link back
        dist.barrier()  # every rank done with the judged steps before rank 0 puts the links back
    if baseline is not None and lead:
        write_regime(writer, calibration, steer, judged, compute, topo, judged_at)


def _sweep(cfg: BatchScalingConfig, topo: Topology, rank, writer: RecordWriter, spec, base,
           items_per_sample: int) -> list[float]:
    """Every (regime, factor) of the config, timed; returns the larger_batch 1x step times (the baseline's)."""
    import copy

    import torch
    import torch.distributed as dist

    from hpcbench.dist.worker import progress

    cuda, device, sync, lead = rank.backend == "nccl", rank.device, rank.sync, rank.lead
    settings = step_settings(cfg.step_recipe(), device.type, spec.kind)
    baseline_times: list[float] = []
    for regime in cfg.regimes:
        for factor in sorted(cfg.factors):  # ascending: RSS never shrinks, so each value bounds its own need
            micro, accum = cfg.plan(regime, factor)
            labels = {"model": cfg.model, "regime": regime, "factor": factor, "micro_batch": micro,
                      "accumulation": accum, "batch_per_step": micro * accum, "device": device.type,
                      "mode": cfg.mode, "precision": settings.dtype, "compiled": settings.compile}
            # the step's precision, layout and compilation around the data parallelism (models.step)
            model = prepare_model(copy.deepcopy(base), settings, wrap=lambda m: parallelize(
                m, cfg.mode, topo, bucket_cap_mb=cfg.bucket_cap_mb, device=device))
            opt = make_optimizer(model.parameters(), settings)
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
                    if i == 0:
                        first = time.perf_counter() - t0  # a compiled model compiles here
                    if i >= cfg.warmup_steps:
                        times.append(time.perf_counter() - t0)
            mem = torch.tensor([float(torch.cuda.max_memory_allocated(device)) if cuda else float(rss.peak)],
                               dtype=torch.float64, device=device)
            flat = torch.tensor(times, dtype=torch.float64, device=device)
            dist.all_reduce(flat, op=dist.ReduceOp.MAX)
            dist.all_reduce(mem, op=dist.ReduceOp.MAX)
            flat = flat.cpu().tolist()
            if (regime, factor) == BASELINE:
                baseline_times = flat
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
            if settings.compile:
                writer.add("first_step_time", first, "s", labels=labels,
                           text="rank 0's first warm-up step, torch.compile's compilation included (never timed)")
    return baseline_times


# -- the guide's regime ---------------------------------------------------------------------

#: The arm whose busy share is matched to the guide's: one micro-batch, one synchronisation per step.
BASELINE = ("larger_batch", 1)


class BaselineTwin:
    """The 1x step and the same step under a no-op comm hook (its compute), for the regime's busy share."""

    def __init__(self, cfg: BatchScalingConfig, topo: Topology, base, device) -> None:
        import copy

        from hpcbench.parallel.overlap import accumulation_step

        spec = MODELS.get(cfg.model)
        settings = step_settings(cfg.step_recipe(), device.type, spec.kind)  # the judged step's own
        micro, _ = cfg.plan(*BASELINE)
        batch = spec.synthetic_batch(micro, device=device, seed=cfg.seed * 100003 + topo.rank,
                                     image_size=cfg.image_size, seq_len=cfg.seq_len)
        self.device = device
        self.runs = {}
        for comm in ("mode", "noop"):
            model = prepare_model(copy.deepcopy(base), settings, wrap=lambda m, comm=comm: parallelize(
                m, cfg.mode, topo, bucket_cap_mb=cfg.bucket_cap_mb, device=device, comm=comm))
            opt = make_optimizer(model.parameters(), settings)
            self.runs[comm] = lambda m=model, o=opt: accumulation_step(m, [batch], spec.loss, o)

    def busy(self, steps: int, sync) -> float:
        """The 1x step's busy share on the link as it is now (collective; the slowest rank's times)."""
        from hpcbench.dist.worker import progress
        from hpcbench.parallel.overlap import interleaved_step_times

        t = interleaved_step_times(self.runs, device=self.device, steps=steps, warmup=1, sync=sync)
        share = busy_share(t["mode"], t["noop"])
        progress(f"calibration: larger_batch 1x {share:.0%} busy")
        return share

    def compute(self, steps: int, sync) -> list[float]:
        """The no-op twin's step times (the 1x step's compute), collective."""
        from hpcbench.parallel.overlap import interleaved_step_times

        return interleaved_step_times({"noop": self.runs["noop"]}, device=self.device, steps=steps, warmup=1,
                                      sync=sync)["noop"]


def write_regime(writer: RecordWriter, calibration: Calibration | None, steer: SteeredLink, judged: list[float],
                 compute: list[float], topo: Topology, judged_at: str | None) -> None:
    """The calibration's points and the regime facts the C2 rule reads (``fact.regime.*``).

    The reached busy share is the median no-op step over the median judged 1x step: both timed at the
    link the judged steps ran on (``judged_at``, read before the link was put back), the twin right after
    the sweep.
    """
    if calibration is None:
        calibration = Calibration((), None, None, why_not="one node: no inter-node link to steer by")
    step = statistics.median(judged) if judged else math.nan
    reached = statistics.median(compute) / step if judged and compute and step > 0 else math.nan
    write_calibration(writer, calibration, "the larger_batch 1x step", judged_busy=reached,
                      target_busy=TEST_REGIME.target_busy)
    write_facts(writer, regime_facts(TEST_REGIME.target_busy, reached, judged_rate_bps(steer, calibration, judged_at)))


# -- reading the records back -------------------------------------------------------------


