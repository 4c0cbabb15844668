"""The ``overlap`` experiment on one rank (T-case: C9).

:func:`run_worker`: per model and series ``(k, no_sync)`` of the config, with plain DDP
(:mod:`hpcbench.parallel.overlap` does the work):

1. *checks* (``check``): k micro-steps of b give the gradients of one step of k x b; a
   training run on ``loss_samples`` samples per rank checks after every optimizer step that
   all ranks hold bit-identical parameters, and its loss on a fixed batch against k=1's;
2. *timing*: optimizer steps of k micro-steps with DDP's all-reduce through
   :func:`~hpcbench.parallel.overlap.counting_allreduce_hook` (which counts the all-reduces
   and bytes it really sends), each next to the same step under the no-op hook, then one
   synchronisation's buckets all-reduced alone: exposed communication = t(step) - t(no-op
   step), total = t(alone) x synchronisations per step. Every series of a model is timed in
   one interleaved loop (one step of each in turn), so the ratio the rule reads (k=4 under
   no_sync() over k=4 synchronising every micro-step) compares steps taken under the same
   machine load, not one series' minute with another's.

Diagnostics (T-diag, :mod:`hpcbench.diag`): every rank records its TF32 settings and checks that
every rank built the same initial weights. The timed steps run through
:func:`~hpcbench.parallel.overlap.accumulation_step`, which a phase timer cannot wrap without
changing the code measured, so the step breakdown (forward, backward, exposed communication
wait, optimizer, summed over the k micro-steps) and its jitter come from
:data:`~hpcbench.diag.records.BREAKDOWN_STEPS` extra, untimed steps of each series with
communication, after all of its measurements (:func:`~hpcbench.diag.records.phase_accumulation_step`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable

from hpcbench.core.results import RecordWriter
from hpcbench.diag.records import BREAKDOWN_STEPS, phase_accumulation_step, record_same_start, record_tf32
from hpcbench.diag.step_breakdown import StepTimer, write_breakdown
from hpcbench.dist.topology import Topology
from hpcbench.experiments.overlap.config import BASELINE_MICRO_STEPS, OverlapExperimentConfig
from hpcbench.models import MODELS, ModelSpec
from hpcbench.parallel.hooks import BucketLog
from hpcbench.parallel.modes import parallelize
from hpcbench.parallel.overlap import (SyncCounter, accumulation_step, counting_allreduce_hook, interleaved_step_times,
                                       ranks_agree, time_bucket_allreduces)

#: k micro-steps against one big step: the same sums in another order (fp32). The absolute part is
#: relative to the largest gradient, so it means the same for every model; a skipped synchronisation
#: differs by the order of the gradients themselves.
GRAD_RTOL, GRAD_ATOL_SHARE = 1e-4, 1e-6
#: The loss after the same samples with k micro-steps must be within this share of k=1's (our bound:
#: with linear learning-rate scaling both runs follow the same path to first order).
LOSS_RTOL = 0.05
#: Samples of the fixed batch the loss is evaluated on (the same on every rank and every series).
EVAL_SAMPLES = 8
#: Seed offsets keeping the timing batch, the training chunks and the evaluation batch apart.
_TRAIN_SEED, _EVAL_SEED = 1_000_003, 7_777_777
#: Why the step breakdown has no data wait here.
NO_DATA_WAIT = "synthetic micro-batches are made on the device before timing: no data loading in this experiment"


def _split(batch: tuple[Any, Any], parts: int) -> list[tuple[Any, Any]]:
    x, y = batch
    size = x.shape[0] // parts
    return [(x[i * size:(i + 1) * size], y[i * size:(i + 1) * size]) for i in range(parts)]


def _ddp(base: Any, topo: Topology, device: Any) -> tuple[Any, SyncCounter]:
    """A DDP copy of ``base`` whose all-reduce counts its buckets and bytes."""
    model = parallelize(copy.deepcopy(base), "ddp", topo, device=device)
    counter = SyncCounter(world_size=topo.world_size)
    model.register_comm_hook(counter, counting_allreduce_hook)
    return model, counter


def _eval_loss(model: Any, spec: ModelSpec, batch: tuple[Any, Any]) -> float:
    import torch

    module = getattr(model, "module", model)
    with torch.no_grad():
        return float(spec.loss(module(batch[0]), batch[1]))


def _gradient_check(base: Any, spec: ModelSpec, topo: Topology, device: Any, micro: list, k: int,
                    no_sync: bool) -> tuple[float, bool]:
    """(largest |difference|, within tolerance on every rank) of k accumulated micro-steps vs one step of k x b."""
    import torch
    import torch.distributed as dist

    acc, _ = _ddp(base, topo, device)
    accumulation_step(acc, micro[:k], spec.loss, None, no_sync=no_sync)
    big = parallelize(copy.deepcopy(base), "ddp", topo, device=device)
    x = torch.cat([m[0] for m in micro[:k]])
    y = torch.cat([m[1] for m in micro[:k]])
    spec.loss(big(x), y).backward()
    pairs = [(a.grad, b.grad) for a, b in zip(acc.parameters(), big.parameters()) if b.grad is not None]
    scale = max(float(b.abs().max()) for _, b in pairs)
    worst = max(float((a - b).abs().max()) for a, b in pairs)
    ok = all(torch.allclose(a, b, rtol=GRAD_RTOL, atol=GRAD_ATOL_SHARE * scale) for a, b in pairs)
    verdict = torch.tensor([worst, 1.0 if ok else 0.0], dtype=torch.float64, device=device)
    dist.all_reduce(verdict[:1], op=dist.ReduceOp.MAX)
    dist.all_reduce(verdict[1:], op=dist.ReduceOp.MIN)
    return float(verdict[0]), bool(verdict[1] == 1.0)


def _train(base: Any, spec: ModelSpec, topo: Topology, device: Any, cfg: OverlapExperimentConfig, k: int,
           no_sync: bool, chunk: Callable[[int], tuple[Any, Any]], eval_batch: tuple[Any, Any]
           ) -> tuple[float, int, int]:
    """Train on ``loss_samples`` per rank, k micro-steps per optimizer step at k x lr.

    Returns:
        (loss on the fixed batch afterwards, optimizer steps after which all ranks agreed, optimizer steps).
    """
    import torch

    model, _ = _ddp(base, topo, device)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr * k)
    steps = cfg.loss_samples // (cfg.batch_size * k)
    agreed = 0
    for s in range(steps):
        accumulation_step(model, [chunk(s * k + j) for j in range(k)], spec.loss, opt, no_sync=no_sync)
        agreed += ranks_agree(model)
    return _eval_loss(model, spec, eval_batch), agreed, steps


@dataclass
class _Timed:
    """One series' timed pair: the counting-hook DDP copy and the no-op copy, and what the loop collects."""

    model: Any
    counter: SyncCounter
    noop: Any
    log: BucketLog
    counts: list[tuple[int, int]] = field(default_factory=list)
    """(all-reduces, bytes) the hook sent, per optimizer step of ``model``"""


def _step_functions(timed: _Timed, spec: ModelSpec, micro: list, k: int, no_sync: bool,
                    lr: float) -> tuple[Callable[[], None], Callable[[], None]]:
    """The series' step with communication (counted) and its no-op twin, each with its own SGD."""
    import torch

    opt = torch.optim.SGD(timed.model.parameters(), lr=lr)
    noop_opt = torch.optim.SGD(timed.noop.parameters(), lr=lr)

    def step() -> None:
        calls, sent = timed.counter.buckets_reduced, timed.counter.bytes_reduced
        accumulation_step(timed.model, micro[:k], spec.loss, opt, no_sync=no_sync)
        timed.counts.append((timed.counter.buckets_reduced - calls, timed.counter.bytes_reduced - sent))

    def noop_step() -> None:
        accumulation_step(timed.noop, micro[:k], spec.loss, noop_opt, no_sync=no_sync)

    return step, noop_step


def _time_series(base: Any, spec: ModelSpec, topo: Topology, rank: Any, cfg: OverlapExperimentConfig,
                 micro: list) -> dict[tuple[int, bool], dict[str, Any]]:
    """Every series' optimizer steps timed in one interleaved loop, then each one's buckets all-reduced alone.

    Returns:
        (k, no_sync) -> ``mode`` / ``noop``: the slowest rank's step seconds; ``counts``: (all-reduces,
        bytes) per timed step; ``layout``: DDP's bucket bytes; ``alone``: seconds of one
        synchronisation's buckets all-reduced alone per repeat; ``agree``: every rank holds the same
        parameters afterwards; ``breakdown``: this rank's phases of :data:`BREAKDOWN_STEPS` extra,
        untimed steps with communication, taken after every measurement above. Returning frees the copies.
    """
    import torch
    import torch.distributed as dist

    device = rank.device
    timed: dict[tuple[int, bool], _Timed] = {}
    runs: dict[str, Callable[[], None]] = {}
    for k, no_sync in cfg.series():
        model, counter = _ddp(base, topo, device)
        log = BucketLog()
        noop = parallelize(copy.deepcopy(base), "ddp", topo, device=device, comm="noop", bucket_log=log)
        timed[k, no_sync] = _Timed(model, counter, noop, log)
        runs[f"{k}/{no_sync}/mode"], runs[f"{k}/{no_sync}/noop"] = _step_functions(
            timed[k, no_sync], spec, micro, k, no_sync, cfg.lr * k)
    slow = interleaved_step_times(runs, device=device, steps=cfg.steps, warmup=cfg.warmup_steps, sync=rank.sync)
    dtype = next(base.parameters()).dtype
    out = {}
    for (k, no_sync), t in timed.items():
        layout = t.log.layout()
        out[k, no_sync] = {
            "mode": slow[f"{k}/{no_sync}/mode"], "noop": slow[f"{k}/{no_sync}/noop"],
            "counts": t.counts[cfg.warmup_steps:], "layout": layout,
            "alone": time_bucket_allreduces(layout, device=device, dtype=dtype, repeats=cfg.layout_repeats,
                                            sync=rank.sync),
            "agree": ranks_agree(t.model)}
    for (k, no_sync), t in timed.items():
        timer = StepTimer(device, annotate=False)
        opt = torch.optim.SGD(t.model.parameters(), lr=cfg.lr * k)
        for _ in range(BREAKDOWN_STEPS):
            dist.barrier()
            phase_accumulation_step(timer, t.model, spec.loss, opt, k=k, batch=micro.__getitem__, data_wait=False,
                                    no_sync=no_sync)
        out[k, no_sync]["breakdown"] = timer.steps
    return out


def _labels(model: str, k: int, no_sync: bool, batch_size: int, device: Any, topo: Topology) -> dict[str, Any]:
    return {"model": model, "micro_steps": k, "no_sync": no_sync, "batch_size": batch_size, "device": device.type,
            "emulated": topo.emulated, "nodes": topo.nodes, "ranks_per_node": topo.ranks_per_node}


def run_worker(cfg: OverlapExperimentConfig, topo: Topology, writer: RecordWriter) -> None:
    """Entry point on every rank (see :func:`hpcbench.dist.launch`)."""
    import torch

    from hpcbench.dist.worker import progress, rank_setup

    rank = rank_setup(cfg, topo)
    device, lead, b, world = rank.device, rank.lead, cfg.batch_size, topo.world_size
    record_tf32(writer)  # every rank: TF32 can differ between nodes
    if lead:
        writer.add("topology", None, "", text=topo.describe(),
                   labels={"nodes": topo.nodes, "ranks_per_node": topo.ranks_per_node, "emulated": topo.emulated})

    for model_name in cfg.models:
        spec = MODELS.get(model_name)
        torch.manual_seed(cfg.seed)  # the same initial weights on every rank
        base = spec.build().to(device)
        # Before DDP (which would broadcast rank 0's weights and hide a rank seeded differently).
        record_same_start(writer, base, lead=lead, labels={"model": model_name})
        grad_bytes = sum(p.numel() * p.element_size() for p in base.parameters() if p.requires_grad)
        # each rank its own data, as in data parallelism; series of smaller k use the first micro-batches
        micro = _split(spec.synthetic_batch(max(cfg.micro_steps) * b, device=device,
                                            seed=cfg.seed * 100003 + topo.rank, seq_len=cfg.seq_len),
                       max(cfg.micro_steps))
        items = spec.items_per_sample(seq_len=cfg.seq_len)
        model_labels = {"model": model_name}

        def chunk(i: int) -> tuple[Any, Any]:
            """Training micro-batch i of this rank: every series sees the same samples in the same order."""
            return spec.synthetic_batch(b, device=device, seed=cfg.seed * 100003 + _TRAIN_SEED * (i + 1) + topo.rank,
                                        seq_len=cfg.seq_len)

        eval_batch = spec.synthetic_batch(EVAL_SAMPLES, device=device, seed=cfg.seed * 100003 + _EVAL_SEED,
                                          seq_len=cfg.seq_len)
        if lead:
            writer.add("gradient_bytes", grad_bytes, "B", labels=model_labels)
            if cfg.check:
                writer.add("loss_before", _eval_loss(base, spec, eval_batch), "", labels=model_labels)
        baseline_loss = None
        agreement: dict[tuple[int, bool], tuple[int, int]] = {}
        for k, no_sync in cfg.series():
            labels = _labels(model_name, k, no_sync, b, device, topo)
            agreed = checked = 0
            if cfg.check:
                if k > 1:
                    diff, ok = _gradient_check(base, spec, topo, device, micro, k, no_sync)
                    if lead:
                        writer.add("grad_max_abs_diff", diff, "", labels=labels)
                        writer.add("grad_match", float(ok), "bool", labels=labels,
                                   text=f"{k} micro-steps of {b} against one step of {k * b}: rtol={GRAD_RTOL}, "
                                        f"atol={GRAD_ATOL_SHARE} x the largest gradient")
                loss, agreed, checked = _train(base, spec, topo, device, cfg, k, no_sync, chunk, eval_batch)
                if k == BASELINE_MICRO_STEPS:
                    baseline_loss = loss
                if lead:
                    writer.add("loss_after", loss, "", labels=labels,
                               text=f"after {cfg.loss_samples} samples per rank at lr {cfg.lr:g} x {k}")
                    if k != BASELINE_MICRO_STEPS:
                        match = abs(loss - baseline_loss) <= LOSS_RTOL * abs(baseline_loss)
                        writer.add("loss_match", float(match), "bool", labels=labels,
                                   text=f"loss {loss:.6g} vs k={BASELINE_MICRO_STEPS}'s {baseline_loss:.6g}: "
                                        f"within {LOSS_RTOL:.0%} required")
            agreement[k, no_sync] = (agreed, checked)

        for (k, no_sync), r in _time_series(base, spec, topo, rank, cfg, micro).items():
            labels = _labels(model_name, k, no_sync, b, device, topo)
            agreed, checked = agreement[k, no_sync]
            agreed, checked = agreed + r["agree"], checked + 1  # after the timed steps too
            progress(f"{model_name} / k={k} / no_sync={no_sync}: step p50 "
                     f"{sorted(r['mode'])[len(r['mode']) // 2] * 1e3:.1f} ms, "
                     f"{r['counts'][-1][1] / grad_bytes:g} synchronisation(s) per step")
            # This rank's own phases (a faster rank waits longer for the others' buckets).
            write_breakdown(writer, r["breakdown"], labels, not_measured={"data_wait": NO_DATA_WAIT})
            if not lead:
                continue
            writer.add("params_agree", float(agreed == checked), "bool", labels=labels,
                       text=f"parameter checksums equal on every rank after {agreed} of {checked} "
                            f"optimizer steps checked")
            writer.add("bucket_count", len(r["layout"]), "", labels=labels,
                       text="bucket bytes in reduction order: " + ",".join(map(str, r["layout"])))
            samples = k * b  # per rank per optimizer step
            for step, (t_mode, t_noop, (calls, sent)) in enumerate(zip(r["mode"], r["noop"], r["counts"])):
                syncs = sent / grad_bytes  # every synchronisation all-reduces every gradient byte once
                writer.add("step_time", t_mode, "s", step=step, labels={**labels, "comm": "mode"})
                writer.add("step_time", t_noop, "s", step=step, labels={**labels, "comm": "noop"})
                writer.add("time_per_sample", t_mode / samples, "s", step=step, labels={**labels, "comm": "mode"})
                writer.add("time_per_sample", t_noop / samples, "s", step=step, labels={**labels, "comm": "noop"})
                writer.add("exposed_comm", t_mode - t_noop, "s", step=step, labels=labels)
                writer.add("throughput", world * samples * items / t_mode, spec.throughput_unit, step=step,
                           labels={**labels, "scope": "total"})
                writer.add("allreduce_calls", calls, "", step=step, labels=labels)
                writer.add("allreduce_bytes", sent, "B", step=step, labels=labels)
                writer.add("syncs", syncs, "", step=step, labels=labels)
                writer.add("syncs_per_sample", syncs / (world * samples), "1/sample", step=step, labels=labels)
                writer.add("bytes_per_sample", sent / samples, "B/sample", step=step, labels=labels)
            for repeat, t in enumerate(r["alone"]):
                writer.add("sync_alone_time", t, "s", step=repeat, labels=labels)
        del base
