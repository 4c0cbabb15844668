"""Every image shard format's reader paths against a plain sequential read of the same files, one process.

Run: ``hpcbench bench shard-reads [--images 2000] [--cache warm,cold] [--rounds 5] [--root DIR]``

One data set (ImageNet-like JPEGs, ~110 KB mean) stored as HDF5, TFRecord and tar shards
(``--shard-size``). Each format is read alone (one process, no DataLoader, raw bytes: no JPEG
decoding, shards checked by size, shuffled) for one epoch along three paths:

* ``zero-copy runs``: ``order="runs"``, runs of up to ``--run-samples`` consecutive samples of a
  shard shuffled as units (their boundaries re-drawn each epoch; FFCV's quasi-random order trades
  shuffle quality for read size the same way), each run one read straight into the batch tensor,
  the framing between samples included (TFRecord's records CRC-checked in place);
* ``zero-copy batches``: ``batch_in_worker=--batch`` (each sample read from its shard straight
  into the batch tensor; TFRecord's records read whole, CRC-checked, the image copied out);
* ``per sample``: the reader yields single samples as ``bytes``;

and the widely used reader of each format on the same files, in file order as they read:

* HDF5: h5py's ``read_direct`` of each sample's byte range into one preallocated buffer;
* TFRecord: tf.data (``TFRecordDataset(num_parallel_reads=1)`` -> ``batch(--batch)`` -> ``parse_example``,
  its guide's vectorized parse; its record reader checks both CRC-32Cs of every record, as ours do) when
  TensorFlow is installed (not a dependency: ``pip install tensorflow-cpu`` to compare), else the PyPI
  ``tfrecord`` package's ``tfrecord_loader``, which reads the CRC fields but checks neither: it is spared
  the CRC work ours does on every byte;
* tar: WebDataset (``WebDataset(urls).to_tuple("jpg", "cls")``);

and, in the same round and page-cache state, three plain sequential reads of the very same files:

* ``seq``, the reference of the targets: 8 MiB ``readinto`` calls, one stream, into one page-aligned
  buffer, as ``dd bs=8M`` reads (:func:`hpcbench.data.page_cache.sequential_read`). Warm, that buffer
  stays in the CPU's last-level cache and the copy never writes to DRAM: the strictest of the three;
* ``share (batch buffers)``: the same read into 4 batch-sized buffers in turn, memory like that a
  loader's batches occupy while the consumer holds them (slower than one buffer that stays in cache);
* ``of cat``: GNU ``cat`` itself, output to ``/dev/null``, its start-up subtracted
  (:func:`hpcbench.data.page_cache.cat_read`): 128 KiB reads, the reference a user would reach for.

Every row and ratio states its order: ``runs of K`` (the runs path), ``per-sample`` (the other two: each
sample its own unit in a shuffle buffer of 64 samples over shuffled shards, as tf.data's and WebDataset's
shuffles give) or ``none`` (the reference readers, in file order). The runs path's figures each have a
like-for-like twin, the zero-copy batches in per-sample order on the same transport, and their ratio is
what the coarser order buys; each format's best path and its best per-sample path are both set against
its reference reader (which reads in file order, an order coarser still: against it, the per-sample twin's
ratio is the conservative one).

A VM's memory bandwidth can move between states from one hour to the next, and a reader's share of ``seq``
moves with it: compare shares measured in the same round, never figures taken hours apart.
The readers' runs land as the file's bytes lie within a cache line
(:data:`hpcbench.data.readers.base.COPY_ALIGN`), and TFRecord's are read in pieces of ~1 MiB of whole
records, each checked as it arrives. The dataset object lives across rounds, as in training (its shard
indexes and read buffers are kept; the first, untimed epoch builds them). ``warm`` reads the files once
untimed before each timed read; ``cold`` evicts them (checked with mincore). Share: the median over
rounds of reference time / reader time, rounds alternating which goes first. CPU ms: the process's CPU
time per epoch (median), which other load on the machine disturbs less than wall time.
Targets (warm): each format's best path >= 70 % of ``seq``, and >= its reference reader.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Callable

from hpcbench.bench.hdf5_reads import add_round_arguments, cache_states, paired_rounds, timed
from hpcbench.bench.result import BenchResult, Ratio
from hpcbench.core.config import parse_bytes
from hpcbench.core.errors import HpcbenchError
from hpcbench.data.generators.images import ImageSpec, make_images
from hpcbench.data.manifest import load_manifest, shard_paths
from hpcbench.data.readers import open_dataset
from hpcbench.data.scratch import disk_scratch
from hpcbench.data.writers import convert

FORMATS = ("hdf5", "tfrecord", "tar")
SHARE_TARGET = 0.70
#: The runs path's like-for-like twin: the same batches and transport, each sample shuffled on its own.
RUNS, TWIN = "zero-copy runs", "zero-copy batches"
#: The order the reference readers read in (file order, no shuffle).
FILE_ORDER = "none"
#: A run of seconds for tests/test_bench.py: every path at toy size; its figures mean nothing.
TOY_ARGS = ["--images", "24", "--shard-size", "200K", "--rounds", "1", "--batch", "8", "--run-samples", "4"]


def prepare(root: Path, images: int, shard_size: str) -> dict[str, Path]:
    """The JPEG folder converted to every format (reused when ``root`` already holds them)."""
    files = root / "images-files"
    try:
        reuse = load_manifest(files)[0].samples == images
    except Exception:  # noqa: BLE001 - anything unusable is simply regenerated
        reuse = False
    if not reuse:
        make_images(files, ImageSpec(images, 10))
    out = {}
    for fmt in FORMATS:
        folder = root / f"images-{fmt}-{shard_size}"
        try:
            ok = reuse and load_manifest(folder)[0].samples == images
        except Exception:  # noqa: BLE001
            ok = False
        if not ok:
            convert(files, folder, fmt, shard_bytes=parse_bytes(shard_size))
        out[fmt] = folder
    return out


def reference_reader(fmt: str, files: list[Path], batch: int = 128) -> tuple[str, Callable[[], int]] | None:
    """(name, one epoch over ``files`` returning the samples read) of the format's widely used reader
    (``batch``: records per step where the reader batches, as tf.data's guide recommends)."""
    names = [str(p) for p in files]
    if fmt == "hdf5":
        import h5py
        import numpy as np

        def h5py_read_direct() -> int:
            n, buffer = 0, np.empty(1 << 20, dtype=np.uint8)
            for name in names:
                with h5py.File(name, "r") as f:
                    offsets, jpeg = f["offsets"][()], f["jpeg"]
                    for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
                        if b - a > len(buffer):
                            buffer = np.empty(b - a, dtype=np.uint8)
                        jpeg.read_direct(buffer, np.s_[a:b], np.s_[0:b - a])
                        n += 1
            return n
        return "h5py read_direct per sample", h5py_read_direct
    if fmt == "tar":
        import webdataset as wds

        def webdataset_epoch() -> int:
            return sum(1 for _ in wds.WebDataset(names, shardshuffle=False).to_tuple("jpg", "cls"))
        return "WebDataset", webdataset_epoch
    if fmt == "tfrecord":
        try:
            import tensorflow as tf
        except ImportError:
            from tfrecord.reader import tfrecord_loader

            def tfrecord_package() -> int:
                return sum(1 for name in names
                           for _ in tfrecord_loader(name, None, {"image": "byte", "label": "int"}))
            return "tfrecord (PyPI, no CRC check; tf.data: TensorFlow not installed)", tfrecord_package
        features = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
        # tf.data's own advice: batch before map and parse the batch in one vectorized op; a Python loop
        # over single records would time eager-tensor overhead (~tens of us a record), not the reader.
        ds = tf.data.TFRecordDataset(names, num_parallel_reads=1).batch(batch).map(
            lambda r: tf.io.parse_example(r, features))

        def tf_data() -> int:
            return sum(int(b["label"].shape[0]) for b in ds)
        return f"tf.data (batches of {batch}, parse_example)", tf_data
    return None


def epoch(ds, n: int, number: int) -> tuple[float, float]:
    """(wall s, CPU s) of one epoch of ``ds``; every sample exactly once."""
    ds.set_epoch(number)
    wall, cpu, items = timed(lambda: [item["index"] for item in ds])
    seen = sorted(i for x in items for i in (x.tolist() if hasattr(x, "tolist") else [x]))
    if seen != list(range(n)):
        raise HpcbenchError(f"{ds.format}: the epoch lost or repeated samples")
    return wall, cpu


def _reference_epoch(run: Callable[[], int], n: int) -> tuple[float, float]:
    wall, cpu, got = timed(run)
    if got != n:
        raise HpcbenchError(f"a reference reader read {got} samples of {n}")
    return wall, cpu


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """This benchmark's options (``hpcbench bench shard-reads --help``)."""
    ap.add_argument("--images", type=int, default=2000, help="JPEGs of ~110 KB")
    ap.add_argument("--shard-size", default="32M")
    ap.add_argument("--batch", type=int, default=128, help="samples per batch of the zero-copy paths")
    ap.add_argument("--run-samples", type=int, default=32, help="the longest run of the runs path")
    add_round_arguments(ap, cache="warm")


def run(args: argparse.Namespace) -> BenchResult:
    """Every format's paths and its reference reader against the plain reads of the same files: one row per
    path and cache; each row's shares as ratios, each format's best path judged against :data:`SHARE_TARGET`
    and against its reference reader."""
    caches = cache_states(args.cache)

    with disk_scratch(args.root, "bench-shard-reads-") as root:
        folders = prepare(root, args.images, args.shard_size)
        paths = {RUNS: {"batch_in_worker": args.batch, "order": "runs", "run_samples": args.run_samples},
                 TWIN: {"batch_in_worker": args.batch}, "per sample": {}}
        subjects = []  # (format, path, files, one epoch: number -> (wall s, CPU s), ours, order)
        for fmt, folder in folders.items():
            files = shard_paths(*load_manifest(folder))
            for path, options in paths.items():
                ds = open_dataset(folder, decode=False, verify="size", seed=0, **options)
                epoch(ds, args.images, 0)  # untimed: the shard indexes and read buffers a training run keeps
                subjects.append((fmt, path, files, lambda number, ds=ds: epoch(ds, args.images, number), True,
                                 ds.order_label))
            name, ref_epoch = reference_reader(fmt, files, args.batch)
            ref_epoch()  # untimed, as ours: imports and first-use set-up
            subjects.append((fmt, name, files, lambda number, ref_epoch=ref_epoch: _reference_epoch(ref_epoch, args.images),
                             False, FILE_ORDER))
        rows = []
        # a batch's bytes: the second reference reads into 4 buffers of this size in turn
        manifest = load_manifest(folders["hdf5"])[0]
        batch_bytes = args.batch * manifest.bytes // max(manifest.samples, 1)
        for cache in caches:
            t = paired_rounds([files for _, _, files, *_ in subjects],
                              lambda k, rnd: subjects[k][3](rnd + 1), args.rounds, cache, batch_bytes=batch_bytes,
                              cat=True)
            for k, (fmt, path, files, _, ours, order) in enumerate(subjects):
                nbytes = sum(p.stat().st_size for p in files)
                rows.append({"cache": cache, "format": fmt, "path": path, "order": order, "ours": ours, "bytes": nbytes,
                             "reader_MB_per_s": nbytes / statistics.median(t[k]["reader"]) / 1e6,
                             "sequential_MB_per_s": nbytes / statistics.median(t[k]["seq"]) / 1e6,
                             "share": statistics.median(t[k]["share"]), "share_min": min(t[k]["share"]),
                             "share_max": max(t[k]["share"]), "shares": t[k]["share"],
                             "share_batch_buffers": statistics.median(t[k]["share_batch"]),
                             "share_of_cat": statistics.median(t[k]["share_cat"]),
                             "reader_cpu_ms": statistics.median(t[k]["reader_cpu"]) * 1e3})
    ratios = []
    for cache in caches:
        for fmt in FORMATS:
            mine = [r for r in rows if r["cache"] == cache and r["format"] == fmt]
            best = max((r for r in mine if r["ours"]), key=lambda r: r["share"])
            twin = max((r for r in mine if r["ours"] and r["order"] == "per-sample"), key=lambda r: r["share"])
            ref = next(r for r in mine if not r["ours"])
            by_path = {r["path"]: r for r in mine}
            for r in mine:
                where = (f"{cache} cache, {fmt}, {r['path']} ({r['order']})"
                         + (" (best path)" if r is best else " (best per-sample path)" if r is twin else ""))
                ratios.append(Ratio(f"{where}: reader / plain sequential read", "reader MB/s",
                                    "sequential read MB/s", r["share"], SHARE_TARGET if r is best else None))
                ratios.append(Ratio(f"{where}: reader / read into batch-sized buffers", "reader MB/s",
                                    "sequential read into 4 batch buffers MB/s", r["share_batch_buffers"]))
                ratios.append(Ratio(f"{where}: reader / cat", "reader MB/s", "GNU cat MB/s", r["share_of_cat"]))
            # the best per-sample path against the reference too, unless it is the best path itself
            for r, kind, target in [(best, "best path", 1.0)] + ([(twin, "best per-sample path", None)]
                                                                    if twin is not best else []):
                ratios.append(Ratio(f"{cache} cache, {fmt}, {kind} ({r['path']}, {r['order']}) / {ref['path']} "
                                    f"({ref['order']})", f"{r['path']} MB/s", f"{ref['path']} MB/s",
                                    r["reader_MB_per_s"] / ref["reader_MB_per_s"], target))
            if RUNS in by_path and TWIN in by_path:
                runs, per_sample = by_path[RUNS], by_path[TWIN]
                ratios.append(Ratio(f"{cache} cache, {fmt}: {RUNS} ({runs['order']}) / its per-sample twin {TWIN} "
                                    f"({per_sample['order']})", f"{RUNS} MB/s", f"{TWIN} MB/s",
                                    runs["reader_MB_per_s"] / per_sample["reader_MB_per_s"]))
    return BenchResult("shard-reads", rows=rows, ratios=ratios, notes=[
        f"{args.images} JPEGs in {args.shard_size} shards per format; one process, no DataLoader, raw bytes, "
        f"shuffled, verify=size; median of {args.rounds} rounds (share: of the paired per-round ratios, min-max "
        f"their range)",
        f"order: {RUNS} in runs of up to {args.run_samples} neighbours shuffled as units; {TWIN} (its like-for-like "
        f"twin) and per sample: per-sample, each sample its own unit in a shuffle buffer of 64 over shuffled shards; "
        f"the reference readers: none (file order)"])
