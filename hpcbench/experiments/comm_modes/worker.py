"""The ``comm_modes`` experiment on one rank (T-comm: C3, C17).

:func:`run_worker`: per model, mode (:mod:`hpcbench.parallel.modes`) and bucket size it
checks that one step's gradients equal plain DDP's, then times training steps with the
mode's communication and, side by side (interleaved), the same step with a no-op
communication hook: communication share = 1 - t(no-op) / t(mode).

Diagnostics (T-diag, :mod:`hpcbench.diag`): every rank records each timed step's phases
(forward, backward, exposed communication wait, optimizer; :class:`StepTimer`) and its
jitter, its TF32 settings, and checks that every rank built the same initial weights
(:func:`check_same_start`); with ``trace`` the first combination that runs is profiled for
a few extra, untimed steps and each rank's Chrome trace is written to
``<task dir>/trace/<rank>.json`` with its top operators and gaps recorded.
"""

from __future__ import annotations

import contextlib
import copy
import math
import statistics
import time
from typing import Any, Callable

from hpcbench.cluster.link_phase import SteeredLink

from hpcbench.core.results import RecordWriter
from hpcbench.diag.records import record_same_start, record_tf32, record_trace
from hpcbench.diag.step_breakdown import StepTimer, write_breakdown
from hpcbench.dist.topology import Topology
from hpcbench.experiments.comm_modes.config import DEFAULT_BUCKET_MB, GUIDE_REGIME, CommModesConfig
from hpcbench.models import MODELS, ModelSpec
from hpcbench.parallel.hooks import BucketLog, HierarchicalState
from hpcbench.parallel.modes import MODES, ModeNotApplicable, parallelize
from hpcbench.scale.regime import (Calibration, busy_share, calibrate_on_ranks, judged_rate_bps, regime_facts,
                                   write_calibration)
from hpcbench.system.facts import write_facts

#: Gradient agreement with plain DDP (fp32; only the summation order differs).
GRAD_RTOL, GRAD_ATOL = 1e-5, 1e-6
#: Why the breakdown has no data wait here.
NO_DATA_WAIT = "synthetic batches are made on the device before timing: no data loading in this experiment"


# -- the guide's regime ------------------------------------------------------------------

class BaselineTwin:
    """ddp at DDP's default bucket and the same step under a no-op comm hook, for the regime's busy share."""

    def __init__(self, cfg: CommModesConfig, topo: Topology, spec: ModelSpec, base: Any, batch: tuple[Any, Any],
                 device: Any, state: Any) -> None:
        import torch

        from hpcbench.parallel.overlap import accumulation_step

        self.device = device
        self.runs = {}
        for comm in ("mode", "noop"):
            model = parallelize(copy.deepcopy(base), "ddp", topo, bucket_cap_mb=DEFAULT_BUCKET_MB, device=device,
                                state=state, comm=comm)
            opt = torch.optim.SGD(model.parameters(), lr=1e-4)
            self.runs[comm] = lambda m=model, o=opt: accumulation_step(m, [batch], spec.loss, o)

    def busy(self, steps: int, sync: Callable[[], None]) -> float:
        """ddp's busy share on the link as it is now (collective; the slowest rank's times)."""
        from hpcbench.dist.worker import progress
        from hpcbench.parallel.overlap import interleaved_step_times

        t = interleaved_step_times(self.runs, device=self.device, steps=steps, warmup=1, sync=sync)
        share = busy_share(t["mode"], t["noop"])
        progress(f"calibration: ddp {share:.0%} busy")
        return share

    def compute(self, steps: int, sync: Callable[[], None]) -> list[float]:
        """The no-op twin's step times (ddp's compute), collective."""
        from hpcbench.parallel.overlap import interleaved_step_times

        return interleaved_step_times({"noop": self.runs["noop"]}, device=self.device, steps=steps, warmup=1,
                                      sync=sync)["noop"]


def write_regime(writer: RecordWriter, model: str, calibration: Calibration, steer: SteeredLink,
                 judged: list[float], compute: list[float]) -> None:
    """The calibration's points and the regime facts the C3 rule reads (``fact.regime.*``, ``fact.regime.model``).

    The reached busy share is the no-op twin's median step (timed right after the model's runs) over
    ddp's median judged step, both at the link the judged steps ran on.
    """
    step = statistics.median(judged) if judged else math.nan
    reached = statistics.median(compute) / step if judged and compute and step > 0 else math.nan
    write_calibration(writer, calibration, f"{model} ddp", labels={"model": model}, judged_busy=reached,
                      target_busy=GUIDE_REGIME.target_busy)
    rate = judged_rate_bps(steer, calibration, steer.current)
    write_facts(writer, {**regime_facts(GUIDE_REGIME.target_busy, reached, rate), "regime.model": model})


# -- the experiment -------------------------------------------------------------------


def _grads(model: Any) -> list[Any]:
    return [p.grad.detach().clone() if p.grad is not None else None for p in model.parameters()]


def _one_step_gradients(model: Any, spec: ModelSpec, batch: tuple[Any, Any]) -> list[Any]:
    x, y = batch
    model.zero_grad(set_to_none=True)
    spec.loss(model(x), y).backward()
    grads = _grads(model)
    model.zero_grad(set_to_none=True)
    return grads


def compare_gradients(got: list[Any], want: list[Any]) -> tuple[float, bool]:
    """(largest absolute difference, all close within GRAD_RTOL/GRAD_ATOL) of two gradient lists."""
    import torch

    worst, ok = 0.0, len(got) == len(want)
    for g, w in zip(got, want):
        if g is None or w is None:
            ok = ok and g is None and w is None
            continue
        g = g.to(w.device)
        worst = max(worst, float((g - w).abs().max()))
        ok = ok and bool(torch.allclose(g, w, rtol=GRAD_RTOL, atol=GRAD_ATOL))
    return worst, ok


def _timed_step(model: Any, opt: Any, spec: ModelSpec, batch: tuple[Any, Any], sync: Callable[[], None],
                timer: StepTimer) -> float:
    """One training step: its wall time (host clock between two device syncs); ``timer`` gets its phases."""
    x, y = batch
    sync()
    t0 = time.perf_counter()
    with timer.phase("forward"):
        loss = spec.loss(model(x), y)
    timer.backward(loss)
    with timer.phase("optimizer"):
        opt.step()
        opt.zero_grad(set_to_none=True)
    sync()
    elapsed = time.perf_counter() - t0
    timer.end_step()
    return elapsed


def run_worker(cfg: CommModesConfig, topo: Topology, writer: RecordWriter) -> None:
    """Entry point on every rank (see :func:`hpcbench.dist.launch`)."""
    import torch
    import torch.distributed as dist

    from hpcbench.dist.worker import progress, rank_setup

    rank = rank_setup(cfg, topo)
    device, sync, lead = rank.device, rank.sync, rank.lead
    record_tf32(writer)  # every rank: TF32 can differ between nodes
    if lead:
        writer.add("topology", None, "", text=topo.describe(),
                   labels={"nodes": topo.nodes, "ranks_per_node": topo.ranks_per_node, "emulated": topo.emulated})
    state = None
    if any(MODES.get(m).uses_groups for m in cfg.modes):
        state = HierarchicalState.from_topology(topo)
    traced = not cfg.trace

    for model_name in cfg.models:
        steer = SteeredLink() if model_name == cfg.calibrated_model() else None
        with steer if steer is not None else contextlib.nullcontext():
            spec = MODELS.get(model_name)
            torch.manual_seed(cfg.seed)
            base = spec.build().to(device)
            # Before DDP (which would broadcast rank 0's weights and hide a rank seeded differently).
            record_same_start(writer, base, lead=lead, labels={"model": model_name})
            batch = spec.synthetic_batch(cfg.batch_size, device=device, seed=cfg.seed * 100003 + topo.rank,
                                         image_size=cfg.image_size, seq_len=cfg.seq_len)
            items = cfg.batch_size * spec.items_per_sample(seq_len=cfg.seq_len)
            twin = BaselineTwin(cfg, topo, spec, base, batch, device, state) if steer is not None else None
            calibration = (calibrate_on_ranks(steer, lambda: twin.busy(cfg.calibration_steps, sync),
                                              cfg.calibration_rates, GUIDE_REGIME.target_busy, lead=lead,
                                              device=device)
                           if twin is not None else None)
            judged: list[float] = []
            reference = None
            if cfg.check:
                reference = _one_step_gradients(parallelize(copy.deepcopy(base), "ddp", topo), spec, batch)
            for mode in cfg.modes:
                for bucket in cfg.bucket_cap_mb:
                    labels = {"model": model_name, "mode": mode, "bucket_cap_mb": bucket, "device": device.type,
                              "emulated": topo.emulated, "nodes": topo.nodes, "ranks_per_node": topo.ranks_per_node}
                    try:
                        model = parallelize(copy.deepcopy(base), mode, topo, bucket_cap_mb=bucket, device=device,
                                            state=state)
                    except ModeNotApplicable as exc:
                        if lead:
                            for metric, unit in (("throughput", spec.throughput_unit), ("step_time", "s"),
                                                 ("comm_share", "fraction"), ("grad_match", "bool")):
                                writer.add(metric, None, unit, labels=labels, text=f"not applicable: {exc.reason}")
                        progress(f"{model_name} / {mode}: not applicable")
                        continue
                    runs = [("mode", model)]
                    buckets = BucketLog()
                    if cfg.measure_noop:
                        runs.append(("noop", parallelize(copy.deepcopy(base), mode, topo, bucket_cap_mb=bucket,
                                                         device=device, state=state, comm="noop",
                                                         bucket_log=buckets)))
                    if reference is not None:
                        diff, ok = compare_gradients(_one_step_gradients(model, spec, batch), reference)
                        verdict = torch.tensor([diff, 1.0 if ok else 0.0], dtype=torch.float64, device=device)
                        dist.all_reduce(verdict[:1], op=dist.ReduceOp.MAX)
                        dist.all_reduce(verdict[1:], op=dist.ReduceOp.MIN)
                        if lead:
                            writer.add("grad_max_abs_diff", float(verdict[0]), "", labels=labels)
                            writer.add("grad_match", float(verdict[1]), "bool", labels=labels,
                                       text=f"rtol={GRAD_RTOL}, atol={GRAD_ATOL} against plain DDP")
                    opts = {kind: torch.optim.SGD(m.parameters(), lr=1e-4) for kind, m in runs}
                    times: dict[str, list[float]] = {kind: [] for kind, _ in runs}
                    timers = {kind: StepTimer(device, annotate=False) for kind, _ in runs}
                    for i in range(cfg.warmup_steps + cfg.steps):
                        for kind, m in runs:  # interleaved: both see the same machine state
                            dist.barrier()
                            t = _timed_step(m, opts[kind], spec, batch, sync, timers[kind])
                            if i >= cfg.warmup_steps:
                                times[kind].append(t)
                    # This rank's own phases (a faster rank waits longer for the others' buckets).
                    for kind, _ in runs:
                        write_breakdown(writer, timers[kind].steps[cfg.warmup_steps:], {**labels, "comm": kind},
                                        not_measured={"data_wait": NO_DATA_WAIT})
                    if not traced:
                        traced = True
                        # A few extra, untimed steps (every rank the same number, so collectives stay matched).
                        def traced_step(timer: StepTimer, m: Any = model, opt: Any = opts["mode"]) -> None:
                            dist.barrier()
                            _timed_step(m, opt, spec, batch, sync, timer)

                        record_trace(writer, traced_step, device=device, rank=topo.rank,
                                     labels={**labels, "comm": "mode"})
                    layout = buckets.layout()
                    # A step lasts as long as its slowest rank: one reduction after the loop.
                    flat = torch.tensor([t for kind, _ in runs for t in times[kind]], dtype=torch.float64,
                                        device=device)
                    dist.all_reduce(flat, op=dist.ReduceOp.MAX)
                    flat = flat.cpu().tolist()
                    slow = {kind: flat[j * cfg.steps:(j + 1) * cfg.steps] for j, (kind, _) in enumerate(runs)}
                    if mode == "ddp" and bucket == DEFAULT_BUCKET_MB:
                        judged = slow["mode"]
                    progress(f"{model_name} / {mode} / bucket {bucket:g} MiB: step p50 "
                             f"{sorted(slow['mode'])[len(slow['mode']) // 2] * 1e3:.1f} ms")
                    if not lead:
                        continue
                    if layout:
                        writer.add("bucket_count", len(layout), "", labels=labels,
                                   text="bucket bytes in reduction order: " + ",".join(map(str, layout)))
                        writer.add("first_bucket_bytes", layout[0], "B", labels=labels)
                    for step in range(cfg.steps):
                        t_mode = slow["mode"][step]
                        writer.add("step_time", t_mode, "s", step=step, labels={**labels, "comm": "mode"})
                        writer.add("throughput", items / t_mode, spec.throughput_unit, step=step,
                                   labels={**labels, "scope": "rank"})
                        writer.add("throughput", topo.world_size * items / t_mode, spec.throughput_unit, step=step,
                                   labels={**labels, "scope": "total"})
                        if "noop" in slow:
                            t_noop = slow["noop"][step]
                            writer.add("step_time", t_noop, "s", step=step, labels={**labels, "comm": "noop"})
                            writer.add("comm_time", t_mode - t_noop, "s", step=step, labels=labels)
                            writer.add("comm_share", 1.0 - t_noop / t_mode, "fraction", step=step, labels=labels)
                    del runs, model, opts
            if twin is not None:
                compute = twin.compute(cfg.steps, sync)
                dist.barrier()  # every rank done with this model's steps before rank 0 puts the links back
                if lead:
                    write_regime(writer, model_name, calibration, steer, judged, compute)
                del twin
            del base


# -- reading the records back -----------------------------------------------------------


