"""The ``weather_case`` experiment on one rank: the guide's tuning case as an ablation (T-case, C7).

Every stage of :data:`~hpcbench.experiments.weather_case.stages.STAGES` that the config names
starts from the same initial weights and sees the same micro-batches on the same ranks:

1. **Loss check** (untimed, one stage at a time): train on ``loss_samples`` samples per rank in
   the same order — k micro-batches per optimizer step in the no_sync stages, 1 in the others,
   SGD at ``k x lr`` so that every stage moves the same per sample — then evaluate the mean squared
   error on :data:`EVAL_SAMPLES` held-out pairs per rank (averaged over ranks), and check that
   every rank holds bit-identical parameters.
2. **Timing** (all stages interleaved step by step, so that a slow spell of a shared machine
   falls on every stage alike): each stage's optimizer step, and beside it the same step of a
   twin whose gradient communication is :func:`~hpcbench.parallel.hooks.noop_hook` (its
   compute). Per step: time per micro-step = step time / k (an optimizer step of k micro-steps
   covers k micro-batches, so stages compare per sample), and busy share = t(no-op twin) /
   t(stage), the analogue of the guide's GPU utilisation.
   With ``regime="guide"`` the timing runs in the guide's regime: first ``original`` and its twin
   are timed at each of ``calibration_rates`` (rank 0 reshaping every node link,
   :class:`~hpcbench.cluster.link_phase.SteeredLink`), busy = c / (c + a + B / rate) is fitted and
   solved for the guide's 61 % (:mod:`hpcbench.scale.regime`), the links are shaped to that rate
   for the timed steps and put back afterwards; ``original``'s busy share in the timed steps is
   recorded as ``fact.regime.reached_busy`` beside ``fact.regime.target_busy`` and
   ``fact.regime.link_rate_bps``, which the C7 rule reads.
3. **Bytes across nodes** per micro-step and node, from the hooks' counts
   (:mod:`~hpcbench.experiments.weather_case.traffic` says how each is counted).

Data are read (or made) before any of this: the steps time compute and communication, not I/O.

Diagnostics (T-diag, :mod:`hpcbench.diag`): every rank records its TF32 settings and checks that
every rank built the same initial weights. The timed steps run through
:func:`~hpcbench.parallel.overlap.accumulation_step` on pairs read beforehand, which a phase timer
cannot wrap without changing the code measured; so after the timing each stage takes
:data:`~hpcbench.diag.records.BREAKDOWN_STEPS` extra, untimed optimizer steps whose micro-batches
come from the real loader as they go (:func:`batch_reader`: the HDF5 set read with
WeatherDataset), each split into data wait, forward, backward, exposed communication wait and
optimizer (:func:`~hpcbench.diag.records.phase_accumulation_step`), with each rank's jitter. With
``trace`` the first stage is profiled for a few more such steps and each rank's Chrome trace is
written to ``<task dir>/trace/<rank>.json``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import math
from pathlib import Path
from typing import Any, Callable, Iterator

from hpcbench.cluster.link_phase import SteeredLink
from hpcbench.core.errors import ConfigError
from hpcbench.core.results import RecordWriter
from hpcbench.diag.records import (BREAKDOWN_STEPS, phase_accumulation_step, record_same_start, record_tf32,
                                   record_trace)
from hpcbench.diag.step_breakdown import StepTimer, write_breakdown
from hpcbench.dist.topology import Topology
from hpcbench.experiments.weather_case.config import GUIDE_REGIME, WeatherCaseConfig
from hpcbench.experiments.weather_case.stages import BASELINE, STAGES, Stage
from hpcbench.experiments.weather_case.traffic import (compressed_node_bytes, flat_node_bytes,
                                                       hierarchical_node_bytes)
from hpcbench.scale.regime import (Calibration, busy_share, calibrate_on_ranks, judged_rate_bps, regime_facts,
                                   write_calibration)
from hpcbench.system.facts import write_facts

#: Held-out pairs per rank on which each stage's final loss is evaluated (after its training samples).
EVAL_SAMPLES = 8
#: Time steps per generated shard (63 forecasting pairs each with lead 1).
STEPS_PER_SHARD = 64


# -- data -------------------------------------------------------------------------------------

def pairs_per_rank(cfg: WeatherCaseConfig) -> int:
    """Forecasting pairs each rank needs: its training samples, then its held-out ones."""
    return cfg.loss_samples + EVAL_SAMPLES


def prepare_data(cfg: WeatherCaseConfig, out_dir: str | Path) -> str | None:
    """The data set folder the ranks read: ``cfg.data``, or one generated into ``out_dir/data``.

    Runs in the driver (the notebook), before the ranks start. The generated set is the model's
    grid and channels, deterministic in ``cfg.seed``, sized for every rank's pairs; a folder
    already holding one made with the same parameters is reused.

    Returns:
        The folder, or None for ``data_source="synthetic"``.
    """
    if cfg.data_source == "synthetic":
        return None
    if cfg.data:
        if not (Path(cfg.data) / "manifest.json").is_file():
            raise ConfigError(f"{cfg.data} holds no manifest.json (make one with data_prep/make_weather.py)",
                              field="data", config="WeatherCaseConfig")
        return cfg.data
    from hpcbench.data.generators.weather import WeatherSpec, make_weather
    from hpcbench.data.manifest import load_manifest
    from hpcbench.models import MODELS

    spec = MODELS.get(cfg.model)
    pairs = cfg.nodes * cfg.ranks_per_node * pairs_per_rank(cfg)
    shards = -(-pairs // (STEPS_PER_SHARD - 1))
    want = WeatherSpec(steps=shards * STEPS_PER_SHARD, channels=spec.channels, lat=spec.grid[0], lon=spec.grid[1],
                       steps_per_shard=STEPS_PER_SHARD, seed=cfg.seed)
    folder = Path(out_dir) / "data"
    if (folder / "manifest.json").is_file():
        try:
            if load_manifest(folder)[0].params == dataclasses.asdict(want):
                return str(folder)
        except Exception:  # noqa: BLE001 - an unreadable leftover is simply made again
            pass
    make_weather(folder, want, command="hpcbench weather_case (generated for the task)")
    return str(folder)


def launch_case(task: Any):
    """Prepare the data in the driver, then run :func:`run_worker` on the task's ranks.

    The ranks get the data folder through their config's ``data``; the records keep the task's
    own parameters (``data=""`` for a generated set), so that launches stay comparable.
    """
    folder = prepare_data(task.config, task.out_dir)
    ranks_cfg = dataclasses.replace(task.config, data=folder) if folder else task.config
    return dataclasses.replace(task, config=ranks_cfg).launch(run_worker)


def load_pairs(cfg: WeatherCaseConfig, spec: Any, topo: Topology, n: int) -> tuple[Any, Any, str]:
    """``n`` forecasting pairs ``(x, y)`` for this rank, stacked ``(n, channels, lat, lon)``, and what they are.

    HDF5: this rank's slice of the data set, epoch after epoch until ``n`` pairs (the same
    shuffle seed on every rank, so the ranks' slices do not overlap within an epoch).
    Synthetic: :meth:`~hpcbench.models.ModelSpec.synthetic_batch`, seeded per rank.
    """
    import torch

    if cfg.data_source == "synthetic":
        x, y = spec.synthetic_batch(n, device="cpu", seed=cfg.seed * 100003 + topo.rank)
        return x, y, f"synthetic travelling waves, {n} pairs per rank"
    ds = _dataset(cfg, spec, topo)
    xs, ys, epoch = [], [], 0
    while len(xs) < n:
        ds.set_epoch(epoch)
        for item in ds:
            xs.append(item["x"])
            ys.append(item["y"])
            if len(xs) == n:
                break
        epoch += 1
    return (torch.stack(xs), torch.stack(ys),
            f"weather HDF5 set {cfg.data}: {ds.pairs} pairs, {n} per rank read in blocks of {ds.block_size} "
            f"({epoch} epoch(s))")


def _dataset(cfg: WeatherCaseConfig, spec: Any, topo: Topology) -> Any:
    """This rank's WeatherDataset of ``cfg.data``, checked against the model's grid."""
    from hpcbench.data.readers.weather import WeatherDataset

    # verify="size": the data are the workload's input, not under test; a full hash per shard
    # would only lengthen the start-up.
    ds = WeatherDataset(cfg.data, rank=topo.rank, world_size=topo.world_size, seed=cfg.seed, verify="size")
    want = (spec.channels, *spec.grid)
    if ds.sample_shape != want:
        raise ConfigError(f"{cfg.data} holds (channels, lat, lon) = {ds.sample_shape}, {cfg.model} needs {want}",
                          field="data", config="WeatherCaseConfig")
    if len(ds) == 0:
        raise ConfigError(f"{cfg.data} has {ds.pairs} pairs: none for rank {topo.rank} of {topo.world_size}",
                          field="data", config="WeatherCaseConfig")
    return ds


def batch_reader(cfg: WeatherCaseConfig, spec: Any, topo: Topology, device: Any) -> Callable[[int], tuple[Any, Any]]:
    """Micro-batches of ``micro_batch`` pairs read while the steps run: the loader the breakdown's data wait times.

    HDF5: this rank's WeatherDataset, epoch after epoch (blocks are read, with the reader's
    read-ahead, as the pairs are consumed), each micro-batch stacked and moved to ``device``.
    Synthetic: each micro-batch made on the call (making it is that source's loading).

    Returns:
        ``read(i)`` -> ``(x, y)``; ``i`` (the micro-step) is not used: every call gives the next batch.
    """
    import torch

    if cfg.data_source == "synthetic":
        calls = itertools.count(1)

        def make(_: int) -> tuple[Any, Any]:
            return spec.synthetic_batch(cfg.micro_batch, device=device,
                                        seed=cfg.seed * 100003 + topo.rank + 7919 * next(calls))
        return make
    ds = _dataset(cfg, spec, topo)

    def pairs() -> Iterator[dict[str, Any]]:
        epoch = 0
        while True:
            ds.set_epoch(epoch)
            yield from ds
            epoch += 1

    stream = pairs()

    def read(_: int) -> tuple[Any, Any]:
        items = [next(stream) for _ in range(cfg.micro_batch)]
        return (torch.stack([it["x"] for it in items]).to(device), torch.stack([it["y"] for it in items]).to(device))
    return read


# -- one stage ---------------------------------------------------------------------------------

@dataclasses.dataclass
class StageRun:
    """What one stage needs on this rank: how to wrap a model, and its k."""

    stage: Stage
    k: int
    bucket_cap_mb: float | None
    options: dict[str, Any]


def stage_run(cfg: WeatherCaseConfig, name: str) -> StageRun:
    """Stage ``name`` resolved against the config: its k, its bucket size and its compression options."""
    from hpcbench.parallel.compression import COMPRESSIONS

    stage = STAGES.get(name)
    options: dict[str, Any] = {}
    if stage.compression != "none":
        options = {"compression": stage.compression}
        if "skip" in COMPRESSIONS.get(stage.compression).options:  # a compression with a skip list takes ours
            options["compression_options"] = {"skip": tuple(cfg.skip_compression)}
    return StageRun(stage, stage.micro_steps(cfg.micro_steps), stage.bucket_cap_mb(cfg.tuned_bucket_mb), options)


def _micro_batches(x: Any, y: Any, size: int) -> list[tuple[Any, Any]]:
    """``x``, ``y`` cut into batches of ``size`` along the first dimension (the last one may be shorter)."""
    return [(x[i:i + size], y[i:i + size]) for i in range(0, x.shape[0], size)]


def _eval_loss(model: Any, spec: Any, batches: list[tuple[Any, Any]], device: Any) -> float:
    """Mean loss over this rank's held-out batches, averaged over the ranks (collective)."""
    import torch
    import torch.distributed as dist

    module = getattr(model, "module", model)
    with torch.no_grad():
        total = sum(float(spec.loss(module(x), y)) * x.shape[0] for x, y in batches)
        count = sum(x.shape[0] for x, _ in batches)
    t = torch.tensor([total, float(count)], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t[0] / t[1])


def _stepper(model: Any, opt: Any, groups: list[list[tuple[Any, Any]]], loss_fn: Any, no_sync: bool) -> Any:
    """One optimizer step per call, over the next group of micro-batches (cycling)."""
    from hpcbench.parallel.overlap import accumulation_step

    count = 0

    def step() -> None:
        nonlocal count
        accumulation_step(model, groups[count % len(groups)], loss_fn, opt, no_sync=no_sync)
        count += 1

    return step


# -- the guide's regime ---------------------------------------------------------------------------

def calibrate_regime(cfg: WeatherCaseConfig, fns: dict[str, Any], steer: SteeredLink, *, lead: bool, device: Any,
                     sync: Any) -> Calibration:
    """Shape the link to the rate at which ``original`` is as busy as the guide's original (collective).

    ``original`` and its no-op twin are timed, interleaved, for ``calibration_steps`` steps (after
    one untimed) at each of ``calibration_rates``; :func:`hpcbench.scale.regime.calibrate` fits and
    solves; the links are left at the solved rate
    (:func:`hpcbench.scale.regime.calibrate_on_ranks`).
    """
    from hpcbench.dist.worker import progress
    from hpcbench.parallel.overlap import interleaved_step_times

    pair = {BASELINE: fns[BASELINE], f"{BASELINE}/noop": fns[f"{BASELINE}/noop"]}

    def measure() -> float:
        t = interleaved_step_times(pair, device=device, steps=cfg.calibration_steps, warmup=1, sync=sync)
        return busy_share(t[BASELINE], t[f"{BASELINE}/noop"])

    return calibrate_on_ranks(steer, measure, cfg.calibration_rates, GUIDE_REGIME.target_busy, lead=lead,
                              device=device, baseline=BASELINE, progress=progress)


def write_regime(writer: RecordWriter, calibration: Calibration, steer: SteeredLink,
                 times: dict[str, list[float]], judged_at: str | None) -> None:
    """The calibration's points and the regime facts the C7 rule reads (``fact.regime.*``).

    ``judged_at``: the link rate the judged steps ran at, read before the link was put back.
    """
    reached = busy_share(times[BASELINE], times[f"{BASELINE}/noop"])
    write_calibration(writer, calibration, BASELINE, judged_busy=reached, target_busy=GUIDE_REGIME.target_busy)
    write_facts(writer, regime_facts(GUIDE_REGIME.target_busy, reached,
                                     judged_rate_bps(steer, calibration, judged_at)))


# -- the experiment -----------------------------------------------------------------------------

def run_worker(cfg: WeatherCaseConfig, topo: Topology, writer: RecordWriter) -> None:
    """Entry point on every rank (see :func:`hpcbench.dist.launch`)."""
    import torch
    import torch.distributed as dist

    from hpcbench.dist.worker import progress, rank_setup
    from hpcbench.models import MODELS
    from hpcbench.parallel.hooks import BucketLog, HierarchicalState
    from hpcbench.parallel.modes import MODES, parallelize
    from hpcbench.parallel.overlap import accumulation_step, interleaved_step_times, ranks_agree

    rank = rank_setup(cfg, topo)
    device, lead = rank.device, rank.lead
    spec = MODELS.get(cfg.model)
    record_tf32(writer)  # every rank: TF32 can differ between nodes
    if lead:
        writer.add("topology", None, "", text=topo.describe(),
                   labels={"nodes": topo.nodes, "ranks_per_node": topo.ranks_per_node, "emulated": topo.emulated})
    x, y, about = load_pairs(cfg, spec, topo, pairs_per_rank(cfg))
    x, y = x.to(device), y.to(device)
    train = _micro_batches(x[:cfg.loss_samples], y[:cfg.loss_samples], cfg.micro_batch)
    held_out = _micro_batches(x[cfg.loss_samples:], y[cfg.loss_samples:], cfg.micro_batch)
    if lead:
        writer.add("data", None, "", text=about)
    torch.manual_seed(cfg.seed)
    base = spec.build().to(device)
    # Before DDP (which would broadcast rank 0's weights and hide a rank seeded differently).
    record_same_start(writer, base, lead=lead, labels={"model": cfg.model})
    runs = [stage_run(cfg, name) for name in cfg.stages]
    # Creating process groups is collective: one state, shared by every hierarchical stage.
    state = HierarchicalState.from_topology(topo) if any(MODES.get(r.stage.mode).uses_groups for r in runs) else None

    def wrap(run: StageRun, comm: str = "mode", log: BucketLog | None = None) -> tuple[Any, Any]:
        """(the stage's DDP model, the hierarchical state its hook counts bytes in, or None)."""
        own = None
        if MODES.get(run.stage.mode).uses_groups:
            # The process groups are shared; the counters are the model's own, so that stages timed
            # side by side do not add into each other's bytes.
            own = dataclasses.replace(state, buckets_reduced=0, bytes_reduced=0, padded_elements=0, _executor=None)
        model = parallelize(copy.deepcopy(base), run.stage.mode, topo, bucket_cap_mb=run.bucket_cap_mb, device=device,
                            state=own, comm=comm, bucket_log=log, **run.options)
        return model, own

    initial = _eval_loss(base, spec, held_out, device)
    if lead:
        writer.add("loss_initial", initial, "MSE", text=f"held-out loss of the initial weights, "
                                                       f"{EVAL_SAMPLES} pairs per rank")

    # 1. the loss check, one stage at a time
    for run in runs:
        name = run.stage.name
        model, _ = wrap(run)
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr * run.k)
        for i in range(0, len(train), run.k):
            accumulation_step(model, train[i:i + run.k], spec.loss, opt, no_sync=run.stage.no_sync)
        final = _eval_loss(model, spec, held_out, device)
        agree = ranks_agree(model)
        progress(f"{name}: loss {initial:.4g} -> {final:.4g} after {cfg.loss_samples} samples per rank")
        if lead:
            labels = {"stage": name}
            writer.add("micro_steps", run.k, "", labels=labels,
                       text=run.stage.setup(cfg.tuned_bucket_mb, cfg.micro_steps, cfg.skip_compression))
            writer.add("loss_final", final, "MSE", labels=labels,
                       text=f"after {cfg.loss_samples} samples per rank ({len(train) // run.k} optimizer steps at "
                            f"lr {cfg.lr * run.k:g}), on {EVAL_SAMPLES} held-out pairs per rank")
            writer.add("ranks_agree", 1.0 if agree else 0.0, "bool", labels=labels,
                       text="every rank held bit-identical parameters after the loss check's training")
        del model, opt

    # 2. timing: every stage and its no-op twin, interleaved step by step
    timed: dict[str, dict[str, Any]] = {}
    fns: dict[str, Any] = {}
    for run in runs:
        name = run.stage.name
        log = BucketLog()
        (model, own), (twin, _) = wrap(run), wrap(run, "noop", log)
        timed[name] = {"run": run, "model": model, "state": own, "log": log}
        groups = [train[i:i + run.k] for i in range(0, len(train) - run.k + 1, run.k)]
        for label, m in ((name, model), (f"{name}/noop", twin)):
            fns[label] = _stepper(m, torch.optim.SGD(m.parameters(), lr=cfg.lr * run.k), groups, spec.loss,
                                  run.stage.no_sync)
    steer = SteeredLink() if cfg.regime == "guide" else None
    with steer if steer is not None else contextlib.nullcontext():
        calibration = None
        if steer is not None:
            calibration = calibrate_regime(cfg, fns, steer, lead=lead, device=device, sync=rank.sync)
        progress(f"timing {len(runs)} stage(s) and their no-op twins, interleaved: {cfg.warmup_steps} + {cfg.steps} "
                 f"steps")
        times = interleaved_step_times(fns, device=device, steps=cfg.steps, warmup=cfg.warmup_steps, sync=rank.sync)
        judged_at = steer.current if steer is not None else None  # before leaving the block puts the link back
        dist.barrier()  # every rank done with the judged steps before rank 0 puts the links back
    if steer is not None and lead:
        write_regime(writer, calibration, steer, times, judged_at)
    syncs = cfg.warmup_steps + cfg.steps  # every stage synchronises once per optimizer step

    for name, entry in timed.items():
        run: StageRun = entry["run"]
        layout = entry["log"].layout()
        sync_bytes, across, how = _bytes_across(run, entry, layout, topo, syncs)
        wire = getattr(entry["model"], "compression_state", None)
        stage_t, noop_t = times[name], times[f"{name}/noop"]
        progress(f"{name}: micro-step p50 {sorted(stage_t)[len(stage_t) // 2] / run.k * 1e3:.1f} ms")
        if not lead:
            continue
        labels = {"stage": name}
        writer.add("bucket_count", len(layout), "", labels=labels,
                   text="bucket bytes in reduction order: " + ",".join(map(str, layout)))
        writer.add("sync_bytes", sync_bytes, "B", labels=labels,
                   text="gradient bytes reduced per synchronisation, counted by the stage's hooks")
        writer.add("bytes_across_nodes", across / run.k, "B", labels=labels,
                   text=f"per micro-step and node: {how}; one synchronisation per {run.k} micro-step(s)")
        if wire is not None:
            writer.add("wire_ratio", wire.stats.total_ratio, "", labels=labels,
                       text="bytes sent / a float32 all-reduce of the same gradients (WireStats.total_ratio)")
        for step, (t, t0) in enumerate(zip(stage_t, noop_t)):
            writer.add("step_time", t, "s", step=step, labels={**labels, "comm": "stage"})
            writer.add("step_time", t0, "s", step=step, labels={**labels, "comm": "noop"})
            writer.add("micro_step_time", t / run.k, "s", step=step, labels=labels)
            writer.add("busy_share", t0 / t if t > 0 else math.nan, "fraction", step=step, labels=labels)

    # 3. diagnostics: extra, untimed steps with the loader in the loop (every counter above is read already)
    read = batch_reader(cfg, spec, topo, device)
    for name, entry in timed.items():
        run = entry["run"]
        model = entry["model"]
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr * run.k)

        def step(timer: StepTimer, model: Any = model, opt: Any = opt, run: StageRun = run) -> None:
            dist.barrier()  # every rank the same steps, lined up like the timed ones
            phase_accumulation_step(timer, model, spec.loss, opt, k=run.k, batch=read, data_wait=True,
                                    no_sync=run.stage.no_sync)

        timer = StepTimer(device, annotate=False)
        for _ in range(BREAKDOWN_STEPS):
            step(timer)
        # This rank's own phases (a faster rank waits longer for the others' buckets).
        write_breakdown(writer, timer.steps, {"stage": name})
        if cfg.trace and name == runs[0].stage.name:
            record_trace(writer, step, device=device, rank=topo.rank, labels={"stage": name})


def _bytes_across(run: StageRun, entry: dict, layout: list[int], topo: Topology,
                  syncs: int) -> tuple[float, float, str]:
    """(bytes per synchronisation, bytes leaving one node per synchronisation, how they were counted)."""
    nodes, per = topo.nodes, topo.ranks_per_node
    wire = getattr(entry["model"], "compression_state", None)
    if wire is not None:
        stats = wire.stats
        hierarchical = run.stage.mode == "hierarchical"
        node = compressed_node_bytes(stats.compressed_bytes / syncs, stats.plain_bytes / syncs,
                                     hierarchical=hierarchical, nodes=nodes, ranks_per_node=per)
        where = ("inter-node exchange of the hierarchical composition" if hierarchical
                 else "all-to-all + all-gather over the world, the off-node share (N-r)/(N-1)")
        return (float(sum(layout)), node,
                f"{run.stage.compression} bytes sent as counted by WireStats ({where}), skipped parameters plain")
    if run.stage.mode == "hierarchical":
        counted = entry["state"].bytes_reduced / syncs
        return (counted, hierarchical_node_bytes(int(counted), nodes, per),
                "2 (M-1)/M x S over M nodes, S counted by the hierarchical hook")
    sync_bytes = float(sum(layout))
    return (sync_bytes, flat_node_bytes(sync_bytes, nodes, per),
            "flat ring: 2 (N-1)/N x S leave each node, S = the buckets DDP handed to the no-op twin's hook")
