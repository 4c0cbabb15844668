"""Storage I/O formats (T-io, claims C4 and C5): the same images as small files and as shards.

One run, for every format in ``formats`` (``files``: one JPEG per file; ``hdf5``,
``tfrecord``, ``tar``: shards holding the very same JPEG bytes), every DataLoader
``workers`` value and, with workers, every ``prefetch_factor`` of the sweep:

* one or more epochs (rounds), each arm — a format at a workers/prefetch setting — read once per
  round in an order drawn anew per round and per launch (:func:`arm_order`, recorded), each after evicting the data set's files from the page cache
  (:mod:`hpcbench.data.page_cache`; the record says whether eviction worked), through
  ``DataLoader`` -> device prefetcher -> an emulated accelerator step of ``compute_ms``
  per batch (a sleep, as DLIO emulates compute); with ``worker_batching`` (the default) each
  worker reads and collates whole batches, raw bytes packed in one shared-memory tensor, and
  the DataLoader runs with ``batch_size=None`` (same samples and batches as the per-sample path);
* records: samples/s, MB/s (JPEG bytes delivered / wall time), samples/s and idle share per
  batch (one training step: the verdicts' unit inside a launch), epoch time, file opens per
  epoch (every ``open`` the readers made, summed over workers), per-sample read latency (raw,
  one row per sample), accelerator utilisation = compute time / wall time (DLIO's AU) and
  idle share = 1 - AU, and whether the epoch delivered every sample exactly once.

Then node-local staging (parallel, sha256-checked copy; its time against the cold-epoch
read time it saves) and a resilience epoch on the staged copy with ``corrupt_shards``
corrupted shards: repairs are counted and every sample must still arrive exactly once.

Without a ``dataset`` the run generates its own ImageNet-like images under the task's
output folder (removed afterwards unless ``keep_data``).
"""

from __future__ import annotations

import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcbench.core.results import RecordWriter
from hpcbench.experiments.io_formats.config import IoFormatsConfig
from hpcbench.system.facts import filesystem_of

#: Batches measure_epoch's consumer holds at once: the device prefetcher's queue of 2, the one its thread waits to
#: put, and the step's own. A worker's ring buffer must not come round before the consumer is done with it.
CONSUMER_HOLDS = 4

# -- measuring one epoch ----------------------------------------------------------------

@dataclass
class EpochResult:
    samples: int
    payload_bytes: int
    wall_s: float
    compute_s: float
    opens: int
    read_s: list[float]
    missing: int
    repeated: int
    eviction: Any = None
    steps: list[tuple[int, float, float]] = field(default_factory=list)
    """Per batch: (samples, seconds since the previous batch was done, seconds of emulated compute)."""

    @property
    def exact(self) -> bool:
        return self.missing == 0 and self.repeated == 0


def measure_epoch(dataset, *, epoch: int, workers: int, prefetch_factor: int, batch_size: int,
                  compute_s: float, device_prefetch: bool, evict_paths: list[Path] | None,
                  expected: int | None = None, loader=None) -> EpochResult:
    """One epoch of ``dataset`` through a DataLoader and an emulated step of ``compute_s`` per batch.

    Args:
        evict_paths: files to drop from the page cache first (None: warm cache).
        expected: samples the epoch must deliver (default ``len(dataset)``).
        loader: an existing DataLoader over ``dataset`` (e.g. with persistent workers, whose
            start-up then is not part of the epoch); default: a new one for this epoch.

    Returns:
        Counts, times and the per-sample read latencies of the epoch.
    """
    import torch
    from torch.utils.data import DataLoader

    from hpcbench.data.page_cache import evict
    from hpcbench.data.prefetch import DevicePrefetcher
    from hpcbench.data.errors import DataError
    from hpcbench.data.readers import batch_is_current, loader_options

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dataset.set_epoch(epoch)
    eviction = evict(evict_paths) if evict_paths else None
    if loader is None:
        # A dataset opened with batch_in_worker yields whole batches (DataLoader batch_size=None).
        loader = DataLoader(dataset, num_workers=workers, prefetch_factor=prefetch_factor if workers else None,
                            pin_memory=device.type == "cuda", **loader_options(dataset, batch_size))
    batches = DevicePrefetcher(loader, device, depth=2) if device_prefetch else loader
    indices: list[int] = []
    read_s: list[float] = []
    nbytes = opens = 0
    compute = 0.0
    steps: list[tuple[int, float, float]] = []
    t0 = last = time.perf_counter()
    for batch in batches:
        c0 = time.perf_counter()
        if compute_s > 0:
            time.sleep(compute_s)  # the emulated accelerator step (DLIO's sleep)
        c1 = time.perf_counter()
        compute += c1 - c0
        # One training step = waiting for the batch + computing on it: the unit the verdicts
        # resample inside a launch (an epoch is too coarse to have 10 of).
        steps.append((len(batch["index"]), c1 - last, c1 - c0))
        last = c1
        indices += batch["index"].tolist()
        read_s += batch["read_s"].tolist()
        nbytes += int(batch["nbytes"].sum())
        opens += int(batch["opens"].sum())
        if not batch_is_current(batch):  # its worker's ring buffer came round before the step was done with it
            raise DataError(f"a batch's shared memory was reused by its worker before its step ended: the ring of "
                            f"{dataset.batch_ring} buffers is too small for prefetch_factor={prefetch_factor} and "
                            f"this consumer")
    wall = time.perf_counter() - t0
    n = len(dataset) if expected is None else expected
    unique = set(indices)
    return EpochResult(samples=len(indices), payload_bytes=nbytes, wall_s=wall, compute_s=compute, opens=opens,
                       read_s=read_s, missing=n - len(unique), repeated=len(indices) - len(unique),
                       eviction=eviction, steps=steps)


def record_epoch(writer: RecordWriter, r: EpochResult, labels: dict[str, Any], step: int,
                 latency_step0: int) -> None:
    """The rows of one measured epoch (see the module docstring)."""
    from hpcbench.core.metrics import accelerator_utilisation

    writer.add("samples_per_s", r.samples / r.wall_s, "samples/s", step=step, labels=labels)
    writer.add("mb_per_s", r.payload_bytes / r.wall_s / 1e6, "MB/s", step=step, labels=labels)
    writer.add("epoch_time", r.wall_s, "s", step=step, labels=labels)
    writer.add("file_opens", r.opens, "count", step=step, labels=labels)
    util = accelerator_utilisation(r.compute_s, r.wall_s)
    if r.compute_s > 0:
        writer.add("accelerator_util", util, "ratio", step=step, labels=labels)
        writer.add("accelerator_idle", 1.0 - util, "ratio", step=step, labels=labels)
    else:
        why = "not applicable: compute_ms = 0, no emulated accelerator step"
        writer.add("accelerator_util", None, "ratio", step=step, labels=labels, text=why)
        writer.add("accelerator_idle", None, "ratio", step=step, labels=labels, text=why)
    text = None if r.exact else f"{r.missing} samples missing, {r.repeated} repeated"
    writer.add("exactly_once", 1.0 if r.exact else 0.0, "bool", step=step, labels=labels, text=text)
    if r.eviction is not None:
        value = r.eviction.resident_after
        writer.add("page_cache_resident", value, "ratio", step=step, labels=labels, text=r.eviction.describe())
    else:
        writer.add("page_cache_resident", None, "ratio", step=step, labels=labels,
                   text="not applicable: cold_cache is off (warm page cache)")
    for k, (samples, seconds, compute_s) in enumerate(r.steps):
        step_labels = {**labels, "epoch": step}
        writer.add("step_samples_per_s", samples / seconds, "samples/s", step=k, labels=step_labels)
        if compute_s > 0:
            writer.add("step_idle", 1.0 - compute_s / seconds, "ratio", step=k, labels=step_labels)
    for k, seconds in enumerate(r.read_s):
        writer.add("read_latency", seconds, "s", step=latency_step0 + k, labels=labels)


# -- the run ----------------------------------------------------------------------------

@dataclass
class IoRun:
    """Where the data of a run lives (removed afterwards unless ``keep_data``)."""

    folders: dict[str, Path] = field(default_factory=dict)
    cleanup: list[Path] = field(default_factory=list)


def prepare_data(cfg: IoFormatsConfig, out_dir: Path, writer: RecordWriter) -> IoRun:
    """The source image folder (given or generated) and one converted copy per shard format."""
    from hpcbench.data.generators.images import ImageSpec, make_images
    from hpcbench.data.manifest import load_manifest
    from hpcbench.data.writers import convert

    run = IoRun()
    data = out_dir / "data"
    if cfg.dataset:
        source = Path(cfg.dataset)
        load_manifest(source)  # a clear error before anything else
    else:
        source = data / "files"
        t0 = time.perf_counter()
        make_images(source, ImageSpec(cfg.images, cfg.classes, int(cfg.mean_image_kb * 1000), cfg.seed))
        writer.add("generate_time", time.perf_counter() - t0, "s", labels={"format": "files"})
        run.cleanup.append(data)
    manifest, source = load_manifest(source)
    writer.add("dataset_samples", manifest.samples, "samples")
    writer.add("dataset_bytes", manifest.bytes, "B")
    fstype, mount = filesystem_of(source)
    writer.add("storage.filesystem", None, "", text=f"{fstype} at {mount}")
    run.folders["files"] = source
    for fmt in cfg.formats:
        if fmt == "files":
            continue
        t0 = time.perf_counter()
        converted = convert(source, data / fmt, fmt, shard_bytes=cfg.shard_size)
        writer.add("convert_time", time.perf_counter() - t0, "s", labels={"format": fmt})
        writer.add("shards", len(converted.shards), "count", labels={"format": fmt})
        run.folders[fmt] = data / fmt
        if data not in run.cleanup:
            run.cleanup.append(data / fmt)
    return run


def _settings(cfg: IoFormatsConfig) -> list[tuple[int, int]]:
    """(workers, prefetch_factor) pairs: without workers there is no DataLoader prefetching (0)."""
    out = []
    for w in cfg.workers:
        out += [(0, 0)] if w == 0 else [(w, p) for p in cfg.prefetch_factors]
    return list(dict.fromkeys(out))


def _labels(fmt: str, workers: int, prefetch: int, cfg: IoFormatsConfig, phase: str) -> dict[str, Any]:
    from hpcbench.data.prefetch import buffer_samples

    return {"format": fmt, "workers": workers, "prefetch_factor": prefetch, "batch_size": cfg.batch_size,
            "buffer_samples": buffer_samples(workers, cfg.batch_size, prefetch), "phase": phase,
            "worker_batching": cfg.worker_batching, "read_order": cfg.read_order,
            "reuse_batch_memory": cfg.reuse_batch_memory, "jpeg_decode": cfg.jpeg_decode}


def _open(folder: Path, cfg: IoFormatsConfig, **extra: Any):
    from hpcbench.data.readers import open_dataset

    options = dict(seed=cfg.seed, decode=cfg.decode, image_size=cfg.image_size or None, verify=cfg.verify,
                   jpeg_decode=cfg.jpeg_decode,
                   batch_in_worker=cfg.batch_size if cfg.worker_batching else None, order=cfg.read_order,
                   # a worker's buffer comes round after the DataLoader's prefetch and what the consumer holds
                   batch_ring=max(cfg.prefetch_factors) + CONSUMER_HOLDS if cfg.reuse_batch_memory else 0)
    options.update(extra)
    if not options["batch_in_worker"]:  # a per-sample read (the ordered reference pass) has no runs, no ring
        options.update(order="samples", batch_ring=0)
    return open_dataset(folder, **options)


def run(cfg: IoFormatsConfig, writer: RecordWriter, out_dir: str | os.PathLike,
        progress=print) -> dict[str, Any]:
    """Run the whole experiment, writing every measurement to ``writer``.

    Returns:
        A small dict of what was done (for the notebook's printout).
    """
    from hpcbench.data.manifest import shard_paths

    out_dir = Path(out_dir)
    io = prepare_data(cfg, out_dir, writer)
    compute_s = cfg.compute_ms / 1000.0
    latency_step = 0
    epoch_times: dict[tuple[str, int, int], float] = {}
    try:
        _warm_up(io.folders["files"], cfg)
        opened = {fmt: _open(folder, cfg) for fmt, folder in io.folders.items()}
        evict = {fmt: shard_paths(ds.manifest, ds.folder) if cfg.cold_cache else None for fmt, ds in opened.items()}
        arms = [(fmt, workers, prefetch) for fmt in opened for workers, prefetch in _settings(cfg)]
        for epoch in range(cfg.epochs):
            # Interleaved: every arm reads once per round, in an order drawn anew per round and per
            # launch, so that the machine's drift inside a launch (other load, the page cache's
            # state, a warming disk) falls on every arm alike instead of on whichever ran last.
            for fmt, workers, prefetch in arm_order(arms, writer, epoch):
                r = measure_epoch(opened[fmt], epoch=epoch, workers=workers, prefetch_factor=prefetch or 2,
                                  batch_size=cfg.batch_size, compute_s=compute_s,
                                  device_prefetch=cfg.device_prefetch, evict_paths=evict[fmt])
                record_epoch(writer, r, _labels(fmt, workers, prefetch, cfg, "sweep"), epoch, latency_step)
                latency_step += len(r.read_s)
                epoch_times.setdefault((fmt, workers, prefetch), r.wall_s)
                progress(f"epoch {epoch} {fmt:9s} workers={workers} prefetch_factor={prefetch}: "
                         f"{r.samples / r.wall_s:8.1f} samples/s, {r.opens} opens, "
                         f"accelerator idle {1 - r.compute_s / r.wall_s:.0%}")
        for fmt, ds in opened.items():
            _record_repairs(writer, ds, fmt, "sweep")
        if cfg.stage:
            _staging(cfg, io, writer, epoch_times, latency_step, progress)
    finally:
        if not cfg.keep_data:
            for path in io.cleanup:
                shutil.rmtree(path, ignore_errors=True)
    return {"formats": list(io.folders), "settings": _settings(cfg)}


def arm_order(arms: list[tuple[str, int, int]], writer: RecordWriter, epoch: int) -> list[tuple[str, int, int]]:
    """The arms of one round in a random order, seeded by the launch (run, task, repetition) and the round.

    The order is written as a record (``arm_order``), so a report can show what ran when.
    """
    import random

    ctx = writer.context
    rng = random.Random(f"{ctx.run_id}/{ctx.task_id}/{ctx.repetition}/{epoch}")
    order = list(arms)
    rng.shuffle(order)
    writer.add("arm_order", None, "", step=epoch,
               text=", ".join(f"{fmt} w{workers} p{prefetch}" for fmt, workers, prefetch in order))
    return order


def _warm_up(folder: Path, cfg: IoFormatsConfig) -> None:
    """Decode one batch untimed: imports and decoder set-up must not land in the first measured epoch."""
    ds = _open(folder, cfg, shuffle=False, batch_in_worker=None)
    for k, _ in enumerate(ds):
        if k + 1 >= cfg.batch_size:
            break


def _record_repairs(writer: RecordWriter, ds, fmt: str, phase: str) -> tuple[int, int]:
    repairs, lost = ds.repairs(), ds.lost()
    labels = {"format": fmt, "phase": phase}
    writer.add("repairs", len(repairs), "count", labels=labels)
    writer.add("lost_samples", sum(e["samples"] for e in lost), "samples", labels=labels)
    for e in repairs:
        writer.add("repair", None, "", labels=labels, text=f"repaired {e['shard']} from {e['source']} ({e['reason']})")
    for e in ds.events.read("repair_failed"):
        writer.add("repair_failed", None, "", labels=labels, text=f"{e['shard']}: {e['why']} ({e['reason']})")
    return len(repairs), len(lost)


def _staging(cfg: IoFormatsConfig, io: IoRun, writer: RecordWriter, epoch_times: dict, latency_step: int,
             progress) -> None:
    """Stage one format node-locally; compare its cold epoch with the original's; then resilience."""
    from hpcbench.data.manifest import shard_paths
    from hpcbench.data.staging import node_local_dir, stage_dataset

    fmt = next((f for f in io.folders if f != "files"), "files")
    base, why = (Path(cfg.stage_dir), "stage_dir") if cfg.stage_dir else node_local_dir()
    dest = base / f"hpcbench-staged-{fmt}-{os.getpid()}-{int(time.time())}"
    io.cleanup.append(dest)
    labels = {"format": fmt, "phase": "staging", "stage_dir": str(base), "chosen_by": why}
    result = stage_dataset(io.folders[fmt], dest)
    writer.add("staging_time", result.seconds, "s", labels=labels)
    writer.add("staging_mb_per_s", result.bytes / result.seconds / 1e6, "MB/s", labels=labels)
    workers = max(cfg.workers)
    prefetch = 0 if workers == 0 else min(cfg.prefetch_factors)
    ds = _open(dest, cfg)
    paths = shard_paths(ds.manifest, ds.folder) if cfg.cold_cache else None
    r = measure_epoch(ds, epoch=0, workers=workers, prefetch_factor=prefetch or 2, batch_size=cfg.batch_size,
                      compute_s=cfg.compute_ms / 1000.0, device_prefetch=cfg.device_prefetch, evict_paths=paths)
    run_labels = {**_labels(fmt, workers, prefetch, cfg, "staged")}
    record_epoch(writer, r, run_labels, 0, latency_step)
    latency_step += len(r.read_s)
    original = epoch_times.get((fmt, workers, prefetch))
    same = "source and staging folder are on the same device, so staging cannot save device reads here"
    if original is not None:
        saved = original - r.wall_s
        writer.add("staging_saved_per_epoch", saved, "s", labels=labels, text=same if result.same_device else None)
        if saved > 0:
            writer.add("staging_break_even", result.seconds / saved, "epochs", labels=labels)
        else:
            writer.add("staging_break_even", None, "epochs", labels=labels,
                       text=f"not applicable: the staged epoch was not faster ({saved * 1e3:+.0f} ms)"
                            + (f"; {same}" if result.same_device else ""))
    progress(f"staging {fmt}: {result.seconds:.2f} s for {result.bytes / 1e6:.1f} MB to {base} ({why}); "
             f"cold epoch {r.wall_s:.2f} s staged vs {original if original is not None else math.nan:.2f} s")
    if cfg.corrupt_shards:
        _resilience(cfg, dest, fmt, writer, latency_step, progress)


def _resilience(cfg: IoFormatsConfig, folder: Path, fmt: str, writer: RecordWriter, latency_step: int,
                progress) -> None:
    from hpcbench.data.manifest import load_manifest
    from hpcbench.fault.inject.data import corrupt_shard

    manifest, _ = load_manifest(folder)
    victims = [folder / s.path for s in manifest.shards[: cfg.corrupt_shards]]
    for path in victims:
        corrupt_shard(path, how="flip", at=0.5)  # one byte in the middle: a bit rot the manifest's sha256 catches
    ds = _open(folder, cfg)
    workers = max(cfg.workers)
    r = measure_epoch(ds, epoch=0, workers=workers, prefetch_factor=min(cfg.prefetch_factors),
                      batch_size=cfg.batch_size, compute_s=0.0, device_prefetch=False, evict_paths=None,
                      expected=manifest.samples)
    labels = {"format": fmt, "phase": "resilience", "corrupted_shards": len(victims)}
    text = None if r.exact else f"{r.missing} samples missing, {r.repeated} repeated"
    writer.add("exactly_once", 1.0 if r.exact else 0.0, "bool", labels=labels, text=text)
    writer.add("samples_delivered", r.samples, "samples", labels=labels)
    repairs, _ = _record_repairs(writer, ds, fmt, "resilience")
    progress(f"resilience: {len(victims)} corrupted {fmt} shard(s), {repairs} repair(s), "
             f"{r.samples}/{manifest.samples} samples delivered, exactly once: {r.exact}")


# -- reading the records ----------------------------------------------------------------


