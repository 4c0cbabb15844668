"""The ``gradient_compression`` experiment on one rank (T-case: C8).

:func:`run_worker`: per model and mode, every series (the compressions of
:mod:`hpcbench.parallel.compression`, and quant2bit without error feedback) trains a copy of
the same model from the same seed on the same batches, all series interleaved step by step
with a step under a no-op comm hook (communication time = t(series) - t(no-op)). Per timed
step: the step time, the throughput and the bytes this rank sent (compressed and plain part
apart, from the hook's :class:`~hpcbench.parallel.compression.WireStats`). After training:

* ``params_agree``: every rank holds bit-identical parameters (a compression that let them
  drift would train N different models);
* ``final_loss``: the loss on a held-out batch after (warmup + steps) x batch x world samples;
* ``grad_rel_err``: one more step's averaged gradients against the exact float32 average,
  ``||g - g_exact|| / ||g_exact||`` (with the residuals of the training in place);
* ``skip_exact`` (quant2bit): the skipped (layer-norm) gradients of that step are bit-identical
  to a plain reduction of the same values (the mode's: all-reduce, or the two-level one);
* ``codec_time`` (quant2bit): quantise, encode, decode and re-quantise of one step's compressed
  elements without any collective, i.e. what the exchange costs besides the wire.

Diagnostics (T-diag, :mod:`hpcbench.diag`): every rank records its TF32 settings and checks
that every rank built the same initial weights (:func:`~hpcbench.diag.records.record_same_start`);
each timed step (every series, the no-op one included) is split into forward, backward,
exposed communication wait and optimizer by a :class:`~hpcbench.diag.step_breakdown.StepTimer`
around the same code (on CPU it only reads ``perf_counter``; on a GPU it records events, and
resolves them after the step's clock has stopped), with each rank's step-time jitter. A
compression hook's own work inside backward (quantising, its collectives) counts in
``backward``; ``comm_wait`` is what is left after the last gradient.
"""

from __future__ import annotations

import contextlib
import copy
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from hpcbench.core.errors import ConfigError
from hpcbench.core.results import RecordWriter
from hpcbench.diag.records import record_same_start, record_tf32
from hpcbench.diag.step_breakdown import StepTimer, write_breakdown
from hpcbench.dist.topology import Topology
from hpcbench.cluster.link_phase import SteeredLink
from hpcbench.experiments.gradient_compression.config import (BASELINE, GUIDE_REGIME, NO_FEEDBACK, REACHED_METRIC,
                                                              TECHNIQUE, CompressionConfig)
from hpcbench.models import MODELS, ModelSpec
from hpcbench.parallel.compression import (COMPRESSIONS, allreduce_bytes_sent, apply_compression, decode_message,
                                           encode_message, is_skipped, quantize_with_feedback)
from hpcbench.parallel.hooks import BucketLog, HierarchicalState, hierarchical_allreduce_, padded_length
from hpcbench.parallel.modes import parallelize
from hpcbench.scale.regime import Calibration, busy_share, judged_rate_bps, regime_facts, write_calibration
from hpcbench.system.facts import write_facts

#: Distinct training batches per rank, cycled: enough that the loss is not one batch memorised.
TRAIN_BATCHES = 8
#: Seed offsets: the held-out batch is the same on every rank; the check batch is each rank's own.
HELD_OUT_SEED, CHECK_SEED = 7_777_777, 5_555_555
#: Repetitions of the codec timing (median kept).
CODEC_REPEATS = 5
#: WireStats counters turned into per-step records (name in the records, counter).
COUNTERS = (("compressed", "compressed_bytes", "fp32_bytes"), ("plain", "plain_bytes", "fp32_plain_bytes"))
#: Why the step breakdown has no data wait here.
NO_DATA_WAIT = "synthetic batches are made on the device before timing: no data loading in this experiment"


@dataclass
class Series:
    """One way of training the same model, alive for one (model, mode)."""

    name: str
    model: Any
    optimizer: Any
    state: Any = None
    """the compression hook's state (its ``stats``), None for the no-op run and hierarchical ``none``"""
    bucket_log: BucketLog | None = None
    times: list[float] = field(default_factory=list)
    bytes: list[dict[str, float]] = field(default_factory=list)
    """per timed step: WireStats counters' increase"""
    timer: StepTimer | None = None
    """the phases of every step (warm-up included) timed with :func:`_timed_step`"""


def _snapshot(series: Series) -> dict[str, float]:
    stats = getattr(series.state, "stats", None)
    if stats is None:
        return {}
    d = stats.as_dict()
    return {k: float(d[k]) for k in ("compressed_bytes", "plain_bytes", "fp32_bytes", "fp32_plain_bytes",
                                     "intra_node_bytes", "compressed_elements", "plain_elements")}


def _timed_step(series: Series, spec: ModelSpec, batch: tuple[Any, Any], sync: Callable[[], None]) -> float:
    """One training step: its wall time (host clock between two device syncs); ``series.timer`` gets its phases."""
    x, y = batch
    timer = series.timer
    sync()
    t0 = time.perf_counter()
    with timer.phase("forward"):
        loss = spec.loss(series.model(x), y)
    timer.backward(loss)
    with timer.phase("optimizer"):
        series.optimizer.step()
        series.optimizer.zero_grad(set_to_none=True)
    sync()
    elapsed = time.perf_counter() - t0
    timer.end_step()  # after the clock: on a GPU it waits for the step's last event
    return elapsed


def _flat(tensors: list[Any]) -> Any:
    import torch

    return torch.cat([t.detach().reshape(-1).float() for t in tensors])


def params_max_diff(module: Any) -> float:
    """Largest difference of any parameter between ranks (0.0 when all ranks hold the same bits)."""
    import torch.distributed as dist

    flat = _flat(list(module.parameters()))
    high, low = flat.clone(), flat.clone()
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    return float((high - low).max()) if flat.numel() else 0.0


def _grads_by_name(module: Any) -> dict[str, Any]:
    import torch

    return {n: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
            for n, p in module.named_parameters()}


def gradient_check(series: Series, spec: ModelSpec, batch: tuple[Any, Any], *, hier: HierarchicalState | None,
                   skip: tuple[str, ...]) -> tuple[float, bool | None]:
    """One step's averaged gradients against the exact float32 average, and the skipped ones' bits.

    Returns:
        (relative error ``||g - exact|| / ||exact||``, skipped gradients bit-identical to a plain
        reduction of the same values; None for series that skip nothing on purpose).
    """
    import torch
    import torch.distributed as dist

    x, y = batch
    world = dist.get_world_size()
    local = copy.deepcopy(series.model.module)
    local.zero_grad(set_to_none=True)
    spec.loss(local(x), y).backward()
    local_grads = _grads_by_name(local)
    names = list(local_grads)
    exact = _flat([local_grads[n] for n in names])
    dist.all_reduce(exact)
    exact /= world
    series.model.zero_grad(set_to_none=True)
    spec.loss(series.model(x), y).backward()
    got_by_name = _grads_by_name(series.model.module)
    got = _flat([got_by_name[n] for n in names])
    rel = float((got - exact).norm() / exact.norm()) if float(exact.norm()) > 0 else float("nan")
    skip_exact = None
    state = series.state
    if state is not None and hasattr(state, "layouts"):
        # The hook gathers the skipped gradients of each bucket in bucket order, divides by the world,
        # then reduces them as the mode does: the same on the local gradients must give the same bits.
        name_of = {id(p): n for n, p in series.model.module.named_parameters()}
        same = True
        for index in sorted(state.layouts):
            ids = state.layouts[index][0]
            mine = [name_of[i] for i in ids if is_skipped(state.param_names[i][0], skip, state.param_names[i][1])]
            if not mine:
                continue
            want = _flat([local_grads[n] for n in mine]).div_(world)
            if hier is None:
                dist.all_reduce(want)
            else:
                hierarchical_allreduce_(want, hier)
            same = same and bool(torch.equal(_flat([got_by_name[n] for n in mine]), want))
        flag = torch.tensor([1.0 if same else 0.0], device=exact.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        skip_exact = bool(flag.item() == 1.0)
    series.model.zero_grad(set_to_none=True)
    return rel, skip_exact


def codec_seconds(elements: int, world: int, chunk_size: int, *, device: Any, sync: Callable[[], None],
                  repeats: int = CODEC_REPEATS) -> float:
    """Seconds of the 2-bit exchange's own arithmetic for ``elements`` values over ``world`` ranks, no wire.

    One step's compressed elements are timed as one vector; DDP hands them over in buckets of
    ``bucket_cap_mb``, and every stage is linear in the elements, so the sum is about the same.

    The same steps as :func:`hpcbench.parallel.compression.compressed_allreduce` around its two
    collectives: quantise the world's parts with feedback, encode, decode what the all-to-all
    would deliver (world rows) and sum, re-quantise the owned part with feedback, encode, decode
    the all-gathered rows. Median of ``repeats``.
    """
    import torch

    if elements <= 0:
        return 0.0
    part = padded_length(-(-elements // world), 4)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(world, part, generator=gen).to(device)
    residual = torch.zeros_like(x)
    server = torch.zeros(1, part, device=device)
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        codes, scales, residual = quantize_with_feedback(x, residual, chunk_size)
        mine = decode_message(encode_message(codes, scales), part, chunk_size).sum(0)
        s_codes, s_scales, server = quantize_with_feedback(mine.unsqueeze(0), server, chunk_size)
        gathered = encode_message(s_codes, s_scales).expand(world, -1).contiguous()
        decode_message(gathered, part, chunk_size)
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def hierarchical_plain_bytes(bucket_bytes: list[int], topo: Topology) -> float:
    """Inter-node bytes one rank sends per step in the two-level float32 reduction of these buckets.

    The mode's own hook counts nothing, so the count is its data flow's: each rank all-reduces
    its shard (``ceil(elements / ranks_per_node)``, padded) among the ``nodes`` ranks of equal local
    rank, a ring all-reduce of ``4 x shard`` bytes (see :mod:`hpcbench.parallel.hooks`).
    """
    per = topo.ranks_per_node
    return sum(allreduce_bytes_sent(4 * padded_length(b // 4, per) // per, topo.nodes) for b in bucket_bytes)


def _build(cfg: CompressionConfig, name: str, base: Any, mode: str, topo: Topology, device: Any,
           hier: HierarchicalState | None) -> Series:
    """The series ``name`` on a fresh copy of ``base``; raises ConfigError where it cannot run with ``mode``."""
    import torch

    compression, options = cfg.options_for(name)
    common = dict(bucket_cap_mb=cfg.bucket_cap_mb, device=device, state=hier)
    if name == BASELINE:
        model = parallelize(copy.deepcopy(base), mode, topo, **common)
        # parallelize(compression="none") keeps DDP's own sums and counts nothing; PyTorch's
        # allreduce_hook (the same sums) counted on the flat mode's model gives the baseline's bytes.
        state = apply_compression(model, BASELINE) if mode == "ddp" else None
    else:
        model = parallelize(copy.deepcopy(base), mode, topo, compression=compression, compression_options=options,
                            **common)
        state = model.compression_state
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    return Series(name, model, opt, state)


def calibrate_mode(cfg: CompressionConfig, base: Any, spec: ModelSpec, mode: str, topo: Topology, device: Any,
                   hier: HierarchicalState | None, batches: list, steer: SteeredLink, *, lead: bool,
                   sync: Callable[[], None]) -> Any:
    """Shape the link to the rate at which ``none`` is as busy as the case's original (collective).

    ``none`` and its no-op twin are built afresh from ``base`` for the calibration and thrown
    away after it, so that the timed series still start from the same weights and train on the
    same samples (the loss check compares them). Both are timed, interleaved, for
    ``calibration_steps`` steps (after one untimed) at each of ``calibration_rates``, the slowest
    rank's times counting; :func:`hpcbench.scale.regime.calibrate_on_ranks` fits, solves and
    leaves the links at the solved rate.
    """
    import torch
    import torch.distributed as dist

    from hpcbench.dist.worker import progress
    from hpcbench.scale.regime import calibrate_on_ranks

    quiet = parallelize(copy.deepcopy(base), mode, topo, bucket_cap_mb=cfg.bucket_cap_mb, device=device, state=hier,
                        comm="noop")
    pair = [_build(cfg, BASELINE, base, mode, topo, device, hier),
            Series("noop", quiet, torch.optim.SGD(quiet.parameters(), lr=cfg.lr, momentum=cfg.momentum))]
    for s in pair:
        s.timer = StepTimer(device, annotate=False)
    drawn = iter(range(1 << 30))

    def measure() -> float:
        times: dict[str, list[float]] = {s.name: [] for s in pair}
        for i in range(1 + cfg.calibration_steps):
            batch = batches[next(drawn) % len(batches)]
            for s in pair:
                dist.barrier()
                t = _timed_step(s, spec, batch, sync)
                if i:  # the first step at a new rate is untimed
                    times[s.name].append(t)
        slowest = torch.tensor(times[BASELINE] + times["noop"], dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        n = cfg.calibration_steps
        return busy_share(slowest[:n].tolist(), slowest[n:].tolist())

    return calibrate_on_ranks(steer, measure, cfg.calibration_rates, GUIDE_REGIME.target_busy, lead=lead,
                              device=device, baseline=BASELINE, progress=progress)


@dataclass
class RegimeReached:
    """One calibrated (model, mode): its calibration and the regime its judged steps reached."""

    series: str  # "<model> <mode>", as the calibration's sentence names it
    calibration: Calibration
    labels: dict
    busy: float  # none's busy share over the judged steps (slowest rank's times)
    link_rate_bps: float | None  # the rate the judged steps ran at, None where the link was not shaped


def write_regime(writer: RecordWriter, reached: list[RegimeReached]) -> None:
    """Each calibration's points and sentence, and the launch's regime facts (``fact.regime.*``).

    A launch holds one set of facts: with several calibrated (model, mode)s they are those of the
    one farthest from the case's regime, so that a launch counts as in the regime only if all were
    (the C8 rule still judges each pair on its own busy share).
    """
    for r in reached:
        write_calibration(writer, r.calibration, f"{r.series}: {BASELINE}", labels=r.labels, judged_busy=r.busy,
                          target_busy=GUIDE_REGIME.target_busy)
        # the pair's own reached regime, as the facts' estimator gives it: the C8 rule judges each pair on it
        writer.add(REACHED_METRIC, r.busy, "fraction", labels=r.labels,
                   text=f"{r.series}: {BASELINE}'s busy share over the judged steps (median over steps of the no-op "
                        f"twin's time over its own, slowest rank's times)")
    worst = max(reached, key=lambda r: abs(r.busy - GUIDE_REGIME.target_busy) if math.isfinite(r.busy) else math.inf)
    write_facts(writer, {**regime_facts(GUIDE_REGIME.target_busy, worst.busy, worst.link_rate_bps),
                         "regime.series": worst.series})


def run_worker(cfg: CompressionConfig, topo: Topology, writer: RecordWriter) -> None:
    """Entry point on every rank (see :func:`hpcbench.dist.launch`)."""
    import torch
    import torch.distributed as dist

    from hpcbench.dist.worker import progress, rank_setup

    rank = rank_setup(cfg, topo)
    device, sync, lead = rank.device, rank.sync, rank.lead
    world = topo.world_size
    record_tf32(writer)  # every rank: TF32 can differ between nodes
    if lead:
        writer.add("topology", None, "", text=topo.describe(),
                   labels={"nodes": topo.nodes, "ranks_per_node": topo.ranks_per_node, "emulated": topo.emulated})
    hier = HierarchicalState.from_topology(topo) if "hierarchical" in cfg.modes else None
    skip = tuple(cfg.skip)

    steer = SteeredLink() if cfg.regime == "guide" else None
    reached: list[RegimeReached] = []  # one per calibrated (model, mode)
    with steer if steer is not None else contextlib.nullcontext():
        for model_name in cfg.models:
            spec = MODELS.get(model_name)
            torch.manual_seed(cfg.seed)
            base = spec.build().to(device)
            # Before DDP (which would broadcast rank 0's weights and hide a rank seeded differently).
            record_same_start(writer, base, lead=lead, labels={"model": model_name})
            shape = dict(image_size=cfg.image_size, seq_len=cfg.seq_len)
            batches = [spec.synthetic_batch(cfg.batch_size, device=device,
                                            seed=cfg.seed * 100003 + topo.rank * 1009 + k, **shape)
                       for k in range(TRAIN_BATCHES)]
            held_out = spec.synthetic_batch(cfg.batch_size, device=device, seed=cfg.seed + HELD_OUT_SEED, **shape)
            check_batch = spec.synthetic_batch(cfg.batch_size, device=device,
                                               seed=cfg.seed + CHECK_SEED + topo.rank, **shape)
            items = cfg.batch_size * spec.items_per_sample(seq_len=cfg.seq_len)
            samples_trained = (cfg.warmup_steps + cfg.steps) * cfg.batch_size * world
            if lead:
                skipped = []
                for mod_name, mod in base.named_modules():
                    for p_name, _ in mod.named_parameters(recurse=False):
                        full = f"{mod_name}.{p_name}" if mod_name else p_name
                        if is_skipped(full, skip, type(mod).__name__):
                            skipped.append(full)
                writer.add("skipped_params", len(skipped), "", labels={"model": model_name},
                           text=", ".join(skipped) or "none: the skip list matches no parameter of the model")
            for mode in cfg.modes:
                base_labels = {"model": model_name, "mode": mode, "device": device.type, "emulated": topo.emulated,
                               "nodes": topo.nodes, "ranks_per_node": topo.ranks_per_node}
                log = BucketLog()
                quiet = parallelize(copy.deepcopy(base), mode, topo, bucket_cap_mb=cfg.bucket_cap_mb, device=device,
                                    state=hier, comm="noop", bucket_log=log)
                noop = Series("noop", quiet, torch.optim.SGD(quiet.parameters(), lr=cfg.lr, momentum=cfg.momentum),
                              bucket_log=log)
                runs = [noop]
                for name in cfg.series():
                    try:
                        runs.append(_build(cfg, name, base, mode, topo, device, hier))
                    except ConfigError as exc:
                        if exc.field != "hierarchical":
                            raise
                        if lead:  # fp16 / bf16 / powersgd have no two-level composition: said, never a number
                            labels = {**base_labels, "compression": name}
                            for metric, unit in (("throughput", spec.throughput_unit), ("step_time", "s"),
                                                 ("wire_bytes", "B"), ("final_loss", "")):
                                writer.add(metric, None, unit, labels=labels, text=f"not applicable: {exc}")
                        progress(f"{model_name} / {mode} / {name}: not applicable")
                calibration = None
                if steer is not None:
                    calibration = calibrate_mode(cfg, base, spec, mode, topo, device, hier, batches, steer,
                                                 lead=lead, sync=sync)
                for s in runs:
                    s.timer = StepTimer(device, annotate=False)

                for i in range(cfg.warmup_steps + cfg.steps):
                    batch = batches[i % len(batches)]
                    for s in runs:  # interleaved: every series sees the same machine state
                        dist.barrier()
                        before = _snapshot(s)
                        t = _timed_step(s, spec, batch, sync)
                        if i >= cfg.warmup_steps:
                            s.times.append(t)
                            after = _snapshot(s)
                            s.bytes.append({k: after[k] - before[k] for k in after})
                # A step lasts as long as its slowest rank: one reduction after the loop.
                flat = torch.tensor([t for s in runs for t in s.times], dtype=torch.float64, device=device)
                dist.all_reduce(flat, op=dist.ReduceOp.MAX)
                flat = flat.cpu()
                slow = {s.name: flat[j * cfg.steps:(j + 1) * cfg.steps].tolist() for j, s in enumerate(runs)}
                if calibration is not None:
                    reached.append(RegimeReached(f"{model_name} {mode}", calibration, base_labels,
                                                 busy_share(slow[BASELINE], slow["noop"]),
                                                 judged_rate_bps(steer, calibration, steer.current)))
                layout = log.layout()
                # This rank's own phases of the timed steps (a faster rank waits longer for the others).
                for s in runs:
                    write_breakdown(writer, s.timer.steps[cfg.warmup_steps:], {**base_labels, "compression": s.name},
                                    not_measured={"data_wait": NO_DATA_WAIT})

                checks = {}
                for s in runs[1:]:
                    diff = params_max_diff(s.model.module)
                    with torch.no_grad():
                        loss = float(spec.loss(s.model.module(held_out[0]), held_out[1]))
                    rel, skip_exact = gradient_check(s, spec, check_batch,
                                                     hier=hier if mode == "hierarchical" else None, skip=skip)
                    codec = None
                    if s.name in (TECHNIQUE, NO_FEEDBACK) and s.bytes:
                        # the elements this rank's exchanges took per step (two-level: its shard, among the nodes)
                        per_step = statistics.median(b["compressed_elements"] for b in s.bytes)
                        group = topo.nodes if mode == "hierarchical" else world
                        codec = codec_seconds(int(per_step), group, cfg.chunk_size, device=device, sync=sync)
                    checks[s.name] = (diff, loss, rel, skip_exact, codec)
                progress(f"{model_name} / {mode}: " + ", ".join(
                    f"{s.name} {sorted(slow[s.name])[len(slow[s.name]) // 2] * 1e3:.1f} ms" for s in runs))
                if lead:
                    _write(writer, cfg, spec, topo, base_labels, runs, slow, checks, layout, items, samples_trained)
                del runs, noop, quiet
            del base
        dist.barrier()  # every rank done with its timed steps before rank 0 puts the links back
    if lead and reached:
        write_regime(writer, reached)


def _write(writer: RecordWriter, cfg: CompressionConfig, spec: ModelSpec, topo: Topology, base_labels: dict,
           runs: list[Series], slow: dict[str, list[float]], checks: dict, layout: list[int], items: int,
           samples_trained: int) -> None:
    """The lead rank's records of one (model, mode): per step, then once per series."""
    world = topo.world_size
    noop_labels = {**base_labels, "compression": "noop"}
    if layout:
        writer.add("bucket_count", len(layout), "", labels=noop_labels,
                   text="bucket bytes in reduction order: " + ",".join(map(str, layout)))
    for step, t in enumerate(slow["noop"]):
        writer.add("step_time", t, "s", step=step, labels=noop_labels)
    hier_plain = (hierarchical_plain_bytes(layout, topo)
                  if base_labels["mode"] == "hierarchical" and topo.nodes > 1 else None)
    for s in runs[1:]:
        labels = {**base_labels, "compression": s.name}
        compression, _ = cfg.options_for(s.name)
        bits = COMPRESSIONS.get(compression).wire_bits
        if bits is not None:
            writer.add("wire_bits", bits, "bit", labels=labels,
                       text=COMPRESSIONS.get(compression).wire_dtype)
        for step, t in enumerate(slow[s.name]):
            writer.add("step_time", t, "s", step=step, labels=labels)
            writer.add("throughput", world * items / t, spec.throughput_unit, step=step, labels=labels)
            writer.add("comm_time", t - slow["noop"][step], "s", step=step, labels=labels)
            counted = s.bytes[step] if s.bytes else {}
            if counted:
                for part, sent, fp32 in COUNTERS:
                    writer.add("wire_bytes", counted[sent], "B", step=step, labels={**labels, "part": part})
                    writer.add("fp32_bytes", counted[fp32], "B", step=step, labels={**labels, "part": part})
                if counted["fp32_bytes"] > 0:
                    writer.add("wire_ratio", counted["compressed_bytes"] / counted["fp32_bytes"], "fraction",
                               step=step, labels=labels)
                if counted["intra_node_bytes"]:
                    writer.add("intra_node_bytes", counted["intra_node_bytes"], "B", step=step, labels=labels)
                if step == 0:
                    writer.add("compressed_elements", counted["compressed_elements"], "", labels=labels)
                    writer.add("plain_elements", counted["plain_elements"], "", labels=labels)
            elif hier_plain is not None:
                why = "computed from the bucket layout: the two-level hook counts nothing"
                for part, value in (("compressed", 0.0), ("plain", hier_plain)):
                    writer.add("wire_bytes", value, "B", step=step, labels={**labels, "part": part}, text=why)
                    writer.add("fp32_bytes", value, "B", step=step, labels={**labels, "part": part}, text=why)
        diff, loss, rel, skip_exact, codec = checks[s.name]
        writer.add("params_max_diff", diff, "", labels=labels)
        writer.add("params_agree", 1.0 if diff == 0.0 else 0.0, "bool", labels=labels,
                   text="every rank's parameters bit-identical after training")
        writer.add("final_loss", loss, "", labels=labels,
                   text=f"held-out batch after {samples_trained} samples ({cfg.warmup_steps + cfg.steps} steps)")
        writer.add("grad_rel_err", rel, "fraction", labels=labels,
                   text="||g - exact fp32 average|| / ||exact||, one step after training")
        if skip_exact is not None:
            writer.add("skip_exact", 1.0 if skip_exact else 0.0, "bool", labels=labels,
                       text="skipped gradients bit-identical to a plain reduction of the same values")
        if codec is not None:
            writer.add("codec_time", codec, "s", labels=labels,
                       text="quantise + encode + decode of one step's compressed elements, no collective")
