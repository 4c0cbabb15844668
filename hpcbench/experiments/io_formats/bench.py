"""Storage formats side by side: shards against small files, and against the disk's own limit.

Run: ``hpcbench bench io-formats [--images 2000] [--workers 2] [--root DIR]``

One data set (default 2,000 ImageNet-like JPEGs, ~110 KB mean) stored as small files and as
HDF5, TFRecord and tar shards (``--shard-size``). By default every epoch starts with the data set's files
evicted from the page cache (checked with mincore) and reads through a DataLoader with
``--workers`` persistent workers (started by an untimed warm-up epoch), no emulated compute,
along these loading paths (``--paths``), printed side by side:

* ``per-sample``: the reader yields single samples, the DataLoader batches them
  (``batch_size``, ``collate_samples`` in the worker; raw bytes travel as a pickled list);
* ``batched``: the reader yields whole batches (``batch_in_worker``, raw bytes packed into one
  shared-memory tensor), the DataLoader runs with ``batch_size=None``. Same samples, same
  batches; only the worker-to-main transfer differs.
* ``runs``: whole batches as ``batched``, in ``order="runs"``: runs of up to 32 consecutive samples of
  a shard shuffled as units, each run one read straight into the batch's shared-memory tensor (raw
  bytes only: not in the ``decoded`` mode);
* ``batched+ring`` and ``runs+ring``: ``batched`` and ``runs`` with each worker's batches in a ring of
  reused shared-memory buffers (``batch_ring``: the prefetch + 4) instead of fresh shared memory per
  batch; every step checks its batch was not overwritten (raw bytes only).

Every row and ratio states its order (:attr:`~hpcbench.data.readers.base.ShardedImageDataset.order_label`):
``per-sample`` (each sample its own unit in a shuffle buffer of 64 samples over shuffled shards, the kind of
shuffle tf.data and WebDataset give), ``runs of 32`` (runs of up to 32 neighbours shuffled as units, in a
buffer of 2 runs: a coarser order), or, for the PIL references, a DataLoader's global permutation. A runs
path always runs beside its per-sample twin on the same transport (:data:`PER_SAMPLE_TWIN`: ``runs`` beside
``batched``, ``runs+ring`` beside ``batched+ring``), so each of its figures has a like-for-like twin, and
their ratio is what the coarser order buys.

Three modes, formats and paths interleaved in each round:

* ``storage``: raw JPEG bytes (no decoding), shards checked by size: what storage delivers;
* ``storage+sha256``: the same with every shard hashed against the manifest (resilient reading);
* ``decoded``: JPEG decoding to 224 px tensors as training would do it, each reader path twice
  (:data:`DECODES`): decoded at the smallest DCT scale that still covers 224 px, then resized (``scaled``,
  the readers' default), and at full size, then resized (``full``); with the small-file folder also read
  by the widely used recipes in the same rounds (:data:`PIL_REFERENCES`): a plain map-style dataset that
  opens each file with PIL and resizes it, torchvision's ``ImageFolder`` way, batched by a DataLoader with
  the same workers, batch size and prefetch (:class:`PilFolder`). Targets: the files reader's scaled decode
  >= 2x the plain PIL recipe (PIL's own resize), and its full decode >= the PIL decode resized as the
  readers resize (the same pixels as the full path) in samples/s.

Then each reader alone (one process, no DataLoader), a plain open+read+close loop over the
small files (what one open costs this disk, the files reader's floor) and a plain sequential
read (8 MiB ``read`` calls into a page-aligned buffer, one stream, cold) of the best format's shard files: the limit of
this disk for those bytes. Printed side by side, with the targets (the last path given, storage mode):
best shard format >= 3x the small-file folder in samples/s, and the best format's MB/s >= 60 %
of the plain sequential read. ``--cache warm`` reads every file once before each epoch and before
the sequential read instead of evicting it: the second epoch of a job, or a staged data set, where
the loader's own CPU work is the limit (target there: >= 50 % of the warm sequential read). Warm, each
format's epoch in a raw mode is also set beside the same read into 4 batch-sized buffers (memory like that
the batches occupy) and beside GNU ``cat`` on the same files (:func:`hpcbench.data.page_cache.cat_read`), each
paired per round: the 8 MiB buffer stays in the CPU's cache, so it is the strictest of the three.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from torch.utils.data import DataLoader, Dataset

from hpcbench.core.config import parse_bytes
from hpcbench.core.errors import ConfigError, HpcbenchError
from hpcbench.data.generators.images import ImageSpec, make_images
from hpcbench.data.manifest import load_manifest, shard_paths
from hpcbench.data.page_cache import cat_read, evict, prepare_cache, sequential_read
from hpcbench.data.readers import JPEG_DECODES as DECODES
from hpcbench.data.readers import loader_options, open_dataset
from hpcbench.data.scratch import disk_scratch
from hpcbench.data.writers import convert
from hpcbench.experiments.io_formats.worker import CONSUMER_HOLDS, measure_epoch

FORMATS = ("files", "hdf5", "tfrecord", "tar")
MODES = {"storage": dict(decode=False, verify="size"),
         "storage+sha256": dict(decode=False, verify="sha256"),
         "decoded": dict(decode=True, verify="size", image_size=224)}
#: How a decoding mode decodes, each reader path both ways in the same rounds (the readers' ``jpeg_decode``).
#: The DataLoader's prefetch_factor in every timed epoch.
PREFETCH = 2
#: Each loading path's reader options, given the batch size.
PATH_OPTIONS = {"per-sample": lambda n: {},
                "batched": lambda n: {"batch_in_worker": n},
                "runs": lambda n: {"batch_in_worker": n, "order": "runs"},
                "batched+ring": lambda n: {"batch_in_worker": n, "batch_ring": PREFETCH + CONSUMER_HOLDS},
                "runs+ring": lambda n: {"batch_in_worker": n, "order": "runs", "batch_ring": PREFETCH + CONSUMER_HOLDS}}
#: Each runs path's like-for-like twin: the same transport, each sample shuffled on its own. Asking for a
#: runs path measures its twin too.
PER_SAMPLE_TWIN = {"runs": "batched", "runs+ring": "batched+ring"}
#: Paths that hand out raw bytes only (no decoded mode).
RAW_ONLY = ("runs", "batched+ring", "runs+ring")
PATHS = tuple(PATH_OPTIONS)
#: The widely used recipes for a folder of JPEGs, read in the decoded mode's rounds: name -> PilFolder's resize.
PIL_REFERENCES = {"PIL decode + the readers' resize": "torchvision", "plain PIL (decode + PIL resize)": "pil"}
#: The order a DataLoader with ``shuffle=True`` reads a map-style dataset in.
PERMUTATION = "per-sample (global permutation)"
SPEEDUP_TARGET = 3.0
DISK_SHARE_TARGET = 0.60
WARM_SHARE_TARGET = 0.50
#: The scaled decode against the plain PIL recipe in the same workers: decoding at the smallest DCT scale that
#: covers the target must at least halve what a user's plain `Image.open(...).resize(...)` loader costs.
SCALED_DECODE_TARGET = 2.0
#: A run of seconds for tests/test_bench.py: every path of the benchmark at toy size; its figures mean nothing.
#: One mode: the others differ only in the reader's options, and each mode starts a worker per format and path.
#: Warm: its paired sequential reads are the bench's own code; the cold eviction is the experiment's (tested there).
TOY_ARGS = ["--images", "24", "--classes", "2", "--workers", "1", "--batch-size", "8", "--shard-size", "200K",
            "--rounds", "1", "--modes", "storage", "--cache", "warm"]


class PilFolder(Dataset):
    """The widely used reader of a folder of JPEGs, as the baseline for the files reader: one file per item,
    opened with PIL, converted to RGB and resized to ``image_size``, the DataLoader's default collation
    batching them (torchvision's ``ImageFolder`` recipe).

    ``resize="torchvision"``: resized as :func:`hpcbench.data.readers.decode_jpeg` resizes (torchvision's
    antialiased bilinear filter), so its pixels are the readers' full decode's; ``"pil"``: the plain recipe,
    ``Image.open(f).convert("RGB").resize((s, s))`` (PIL's default filter, bicubic)."""

    def __init__(self, folder: Path, image_size: int, resize: str = "torchvision"):
        if resize not in PIL_REFERENCES.values():
            raise ConfigError(f"{resize!r}; allowed: {', '.join(map(repr, PIL_REFERENCES.values()))}", field="resize")
        manifest, root = load_manifest(folder)
        self.paths = [root / s.path for s in manifest.shards]
        self.labels = [s.label for s in manifest.shards]
        self.image_size, self.resize = image_size, resize

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> dict:
        from PIL import Image
        from torchvision.transforms.v2 import functional as F

        size = self.image_size
        with Image.open(self.paths[i]) as image:
            if self.resize == "pil":
                return {"image": F.pil_to_tensor(image.convert("RGB").resize((size, size))),
                        "label": self.labels[i], "index": i}
            tensor = F.pil_to_tensor(image.convert("RGB"))
        return {"image": F.resize(tensor, [size, size], antialias=True), "label": self.labels[i], "index": i}


def pil_folder_loader(folder: Path, *, image_size: int, workers: int, batch_size: int,
                      resize: str = "torchvision") -> DataLoader:
    """A shuffled DataLoader over :class:`PilFolder` with persistent workers, started by an untimed warm-up
    epoch (as the readers' are)."""
    loader = DataLoader(PilFolder(folder, image_size, resize), batch_size=batch_size, shuffle=True,
                        num_workers=workers, prefetch_factor=PREFETCH if workers else None,
                        persistent_workers=workers > 0)
    for _ in loader:
        pass
    return loader


def pil_epoch(loader: DataLoader) -> float:
    """Seconds of one epoch of a :func:`pil_folder_loader`."""
    t0 = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - t0


def prepare(root: Path, images: int, classes: int, shard_bytes: int) -> dict[str, Path]:
    """The image folder (reused when it already holds ``images`` images) and its shard copies."""
    folders = {"files": root / "files"}
    try:
        reuse = load_manifest(folders["files"])[0].samples == images
    except Exception:  # noqa: BLE001 - anything unusable is simply regenerated
        reuse = False
    if not reuse:
        t0 = time.perf_counter()
        make_images(folders["files"], ImageSpec(images, classes))
        print(f"generated {images} images in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    for fmt in FORMATS[1:]:
        folders[fmt] = root / fmt
        convert(folders["files"], folders[fmt], fmt, shard_bytes=shard_bytes)
    return folders


def timed_sequential_read(paths: list[Path], cache: str = "cold") -> tuple[float, int, str]:
    """A plain sequential read of ``paths`` (:func:`hpcbench.data.page_cache.sequential_read`) after putting
    them in the page-cache state ``cache``: (seconds, bytes, what was done to the cache)."""
    note = prepare_cache(paths, cache)
    t0 = time.perf_counter()
    total = sequential_read(paths)
    return time.perf_counter() - t0, total, note


def small_file_reads(paths: list[Path]) -> tuple[float, int, str]:
    """Cold open + read + close of every file, one process, no reader: (seconds, bytes, eviction note)."""
    note = evict(paths).describe()
    total = 0
    t0 = time.perf_counter()
    for p in paths:
        with open(p, "rb") as fh:
            total += len(fh.read())
    return time.perf_counter() - t0, total, note


def with_twins(paths: list[str]) -> list[str]:
    """``paths`` with each runs path's per-sample twin (:data:`PER_SAMPLE_TWIN`) measured just before it,
    where it was not asked for."""
    out: list[str] = []
    for p in paths:
        twin = PER_SAMPLE_TWIN.get(p)
        if twin is not None and twin not in paths and twin not in out:
            out.append(twin)
        if p not in out:
            out.append(p)
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """This benchmark's options (``hpcbench bench io-formats --help``)."""
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=128, help="ImageNet recipes use 128-256 per GPU")
    ap.add_argument("--shard-size", default="32M")
    ap.add_argument("--cache", choices=("cold", "warm"), default="cold",
                    help="page cache before each epoch and the sequential read: evicted (cold) or holding the "
                         "files (warm: a second epoch, a staged data set)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the median epoch is kept")
    ap.add_argument("--modes", default=",".join(MODES), help=f"subset of {list(MODES)}")
    ap.add_argument("--paths", default=",".join(PATHS), help=f"loading paths, subset of {list(PATHS)}; the "
                                                             "targets use the last one given; a runs path brings "
                                                             "its per-sample twin")
    ap.add_argument("--root", default=None, help="where the data sets go (default: a temporary folder under "
                                                 "./results, removed afterwards); kept when given")


def run(args: argparse.Namespace) -> dict:
    """Every format and loading path side by side, then the references; the result's dict form
    (``hpcbench.bench.result.BenchResult``): one row per measured configuration (``measure`` says which table,
    ``order`` how its epoch was shuffled), each ratio the text above describes, the targets on the ones they
    judge."""
    rows: list[dict] = []
    ratios: list[dict] = []
    notes: list[str] = []

    def ratio(name: str, numerator: str, denominator: str, value: float, target: float | None = None) -> None:
        ratios.append({"name": name, "numerator": numerator, "denominator": denominator, "value": value,
                       "target": target})

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    asked = [p.strip() for p in args.paths.split(",") if p.strip()]
    if unknown := set(asked) - set(PATHS):
        raise ConfigError(f"unknown {sorted(unknown)}; allowed: {list(PATHS)}", field="--paths")
    if unknown := set(modes) - set(MODES):
        raise ConfigError(f"unknown {sorted(unknown)}; allowed: {list(MODES)}", field="--modes")
    paths = with_twins(asked)
    with disk_scratch(args.root, "bench-io-formats-") as root:
        folders = prepare(root, args.images, args.classes, parse_bytes(args.shard_size))
        # a batch's bytes, the same for every format (their payload): the second warm reference's buffer size
        images = load_manifest(folders["files"])[0]
        batch_bytes = args.batch_size * images.bytes // max(images.samples, 1)
        small_files = shard_paths(*load_manifest(folders["files"]))
        # results[mode][(path, decode)][format]; decode is None in a raw mode
        results: dict[str, dict[tuple[str, str | None], dict[str, dict]]] = {m: {} for m in modes}
        references: dict[str, dict[str, dict]] = {}  # a decoding mode's PIL references, by name
        orders: dict[str, str] = {}  # each path's order, as its reader states it
        notes_cache: set[str] = set()  # what was done to the page cache
        for mode in modes:
            decoding = bool(MODES[mode].get("decode"))
            # run reads and rings hand out raw bytes: a mode that decodes has neither, and decodes each path both ways
            here = [(p, d, f) for p in paths if not (decoding and p in RAW_ONLY)
                    for d in (DECODES if decoding else (None,)) for f in FORMATS]
            paired = args.cache == "warm" and not decoding  # the plain reads only raw modes' ratios use
            walls: dict[tuple, list[float]] = {key: [] for key in here}
            seq: dict[tuple, list[float]] = {key: [] for key in here}  # warm: paired sequential reads
            seq_batch: dict[tuple, list[float]] = {key: [] for key in here}  # ... into batch-sized buffers
            cat: dict[tuple, list[float]] = {key: [] for key in here}  # ... and GNU cat on them
            info: dict[tuple, tuple[int, int, int]] = {}
            loaders = {}
            for key in here:
                path, decode, fmt = key
                options = {**PATH_OPTIONS[path](args.batch_size), **MODES[mode]}
                if decode is not None:
                    options["jpeg_decode"] = decode
                ds = open_dataset(folders[fmt], seed=0, **options)
                orders[path] = ds.order_label
                # Persistent workers, started by an untimed warm-up epoch: what a training job
                # pays once, not per epoch.
                loaders[key] = (ds, DataLoader(ds, num_workers=args.workers,
                                               prefetch_factor=PREFETCH if args.workers else None,
                                               persistent_workers=args.workers > 0,
                                               **loader_options(ds, args.batch_size)))
                for _ in loaders[key][1]:
                    pass
            # The widely used recipes for the small files, in the same rounds as the readers.
            pil = {name: pil_folder_loader(folders["files"], image_size=MODES[mode]["image_size"],
                                           workers=args.workers, batch_size=args.batch_size, resize=resize)
                   for name, resize in PIL_REFERENCES.items()} if decoding else {}
            pil_walls: dict[str, list[float]] = {name: [] for name in pil}
            subjects = [*here, *pil]
            for rnd in range(args.rounds):
                for key in (subjects if rnd % 2 == 0 else subjects[::-1]):  # drift favours no format or path
                    if key in pil:
                        notes_cache.add(prepare_cache(small_files, args.cache).split(":")[0])
                        pil_walls[key].append(pil_epoch(pil[key]))
                        continue
                    ds, loader = loaders[key]
                    files = shard_paths(ds.manifest, ds.folder)
                    if args.cache == "warm":
                        prepare_cache(files, "warm")
                    if paired:
                        # the same files read plainly, right before the epoch: its share is paired per round
                        t0 = time.perf_counter()
                        sequential_read(files)
                        seq[key].append(time.perf_counter() - t0)
                        t0 = time.perf_counter()
                        sequential_read(files, batch_bytes, buffers=4)
                        seq_batch[key].append(time.perf_counter() - t0)
                        cat[key].append(cat_read(files))
                    r = measure_epoch(ds, epoch=rnd + 1, workers=args.workers, prefetch_factor=PREFETCH,
                                      batch_size=args.batch_size, compute_s=0.0, device_prefetch=False,
                                      evict_paths=files if args.cache == "cold" else None, loader=loader)
                    if not r.exact:
                        raise HpcbenchError(f"{key}: epoch lost or repeated samples ({r.missing}, {r.repeated})")
                    notes_cache.add(r.eviction.describe().split(":")[0] if r.eviction is not None else "warm")
                    walls[key].append(r.wall_s)
                    info[key] = (r.samples, ds.manifest.bytes, r.opens)
            del loaders, pil  # stops the persistent workers
            for key in here:
                path, decode, fmt = key
                wall = statistics.median(walls[key])
                samples, nbytes, opens = info[key]
                r = results[mode].setdefault((path, decode), {})[fmt] = {
                    "wall_s": wall, "samples_per_s": samples / wall, "MB_per_s": nbytes / wall / 1e6, "opens": opens,
                    "bytes": nbytes, "walls_s": walls[key]}
                if seq[key]:
                    r["share_of_warm_sequential"] = statistics.median(s_ / w for s_, w in zip(seq[key], walls[key]))
                    r["share_of_warm_sequential_batch_buffers"] = statistics.median(
                        s_ / w for s_, w in zip(seq_batch[key], walls[key]))
                    r["share_of_warm_cat"] = statistics.median(s_ / w for s_, w in zip(cat[key], walls[key]))
            for name, w in pil_walls.items():
                references[name] = {"mode": mode, "samples_per_s": images.samples / statistics.median(w), "walls_s": w}
        notes.append(f"{args.images} images, {args.workers} DataLoader workers, batch {args.batch_size}, {args.cache} "
                     f"page cache ({', '.join(sorted(notes_cache))}), median of {args.rounds} rounds")
        twins = ", ".join(f"{p} beside {t}" for p, t in PER_SAMPLE_TWIN.items() if p in paths)
        notes.append("order: per-sample = each sample its own unit in a shuffle buffer of 64 samples over shuffled "
                     "shards; runs of 32 = runs of up to 32 neighbours shuffled as units (a coarser order)"
                     + (f"; each runs path beside its per-sample twin on the same transport ({twins})" if twins else "")
                     + "; the PIL references: a DataLoader's global permutation")
        for mode in modes:
            for (path, decode), by_format in results[mode].items():
                for fmt, r in by_format.items():
                    rows.append({"measure": "DataLoader epoch", "mode": mode, "path": path, "order": orders[path],
                                 "jpeg_decode": decode, "format": fmt, **r,
                                 "x_files": r["samples_per_s"] / by_format["files"]["samples_per_s"]})
        for name, ref in references.items():
            rows.append({"measure": f"{name} DataLoader (small files)", "mode": ref["mode"], "order": PERMUTATION,
                         "samples_per_s": ref["samples_per_s"], "walls_s": ref["walls_s"]})
        _decoded_ratios(ratio, results, references, orders)
        if args.cache == "warm" and "storage" in results:
            # Each format against a plain sequential read of its own files, paired round by round.
            notes.append("warm, storage mode: each format's epoch against a plain sequential read of its own files, "
                         "the same read into 4 batch-sized buffers, and GNU cat on the same files (median of the "
                         "rounds' ratios)")
            storage = results["storage"]
            best_path = {fmt: max(paths, key=lambda p: storage[p, None][fmt]["share_of_warm_sequential"])
                         for fmt in FORMATS[1:]}
            for p in paths:
                for fmt, st in storage[p, None].items():
                    where = f"warm, storage, {p} path ({orders[p]}), {fmt}"
                    ratio(f"{where}: epoch / sequential read", "DataLoader epoch MB/s", "plain sequential read MB/s",
                          st["share_of_warm_sequential"], WARM_SHARE_TARGET if best_path.get(fmt) == p else None)
                    ratio(f"{where}: epoch / read into batch-sized buffers", "DataLoader epoch MB/s",
                          "sequential read into 4 batch buffers MB/s", st["share_of_warm_sequential_batch_buffers"])
                    ratio(f"{where}: epoch / cat", "DataLoader epoch MB/s", "GNU cat MB/s", st["share_of_warm_cat"])
        best = path = None
        if "storage" in results:
            # The reader alone, one process, no DataLoader: separates storage + format cost from
            # the workers' inter-process transfer.
            alone: dict[str, dict[str, float]] = {p: {} for p in paths}
            for p in paths:
                for fmt in FORMATS:
                    options = PATH_OPTIONS[p](args.batch_size)
                    ds = open_dataset(folders[fmt], seed=0, **options, **MODES["storage"])
                    prepare_cache(ds.shard_paths, args.cache)
                    t0 = time.perf_counter()
                    n = sum(len(item["index"]) if options else 1 for item in ds)
                    alone[p][fmt] = n / (time.perf_counter() - t0)
                for fmt in FORMATS:
                    rows.append({"measure": f"reader alone (one process, no DataLoader, {args.cache})", "path": p,
                                 "order": orders[p], "format": fmt, "samples_per_s": alone[p][fmt],
                                 "x_files": alone[p][fmt] / alone[p]["files"]})
                    if fmt != "files":
                        ratio(f"reader alone, {p} path ({orders[p]}), {fmt} / files", f"{fmt} samples/s",
                              "files samples/s", alone[p][fmt] / alone[p]["files"])
            for p, twin in PER_SAMPLE_TWIN.items():
                if p in paths:
                    for fmt in FORMATS[1:]:
                        ratio(f"reader alone, {fmt}: {p} path ({orders[p]}) / its per-sample twin {twin} "
                              f"({orders[twin]})", f"{p} samples/s", f"{twin} samples/s",
                              alone[p][fmt] / alone[twin][fmt])
            seconds, nbytes, note = small_file_reads(small_files)
            per_file = seconds / len(small_files)
            rows.append({"measure": "plain open+read+close of the small files, one process, cold",
                         "files": len(small_files), "files_per_s": len(small_files) / seconds,
                         "us_per_file": per_file * 1e6, "MB_per_s": nbytes / seconds / 1e6})
            notes.append(f"small files before their plain reads: {note}")
            path = asked[-1]
            storage = results["storage"]
            best = max(FORMATS[1:], key=lambda f: storage[path, None][f]["samples_per_s"])
            seconds, nbytes, note = timed_sequential_read(shard_paths(*load_manifest(folders[best])), args.cache)
            disk = nbytes / seconds / 1e6
            rows.append({"measure": f"plain sequential read of the {best} shards ({args.cache})", "MB_per_s": disk})
            notes.append(f"{best} shards before their plain sequential read: {note}")
            notes.append(f"targets on the {path} path (the last given; {orders[path]}), storage mode: the best shard "
                         f"format ({best}) >= {SPEEDUP_TARGET:.0f}x the small files in samples/s, and >= "
                         f"{DISK_SHARE_TARGET:.0%} of the plain sequential read's MB/s")
            for p in paths:
                st = storage[p, None]
                b = max(FORMATS[1:], key=lambda f: st[f]["samples_per_s"])
                ratio(f"storage, {p} path ({orders[p]}), best shard format {b}: MB/s / plain sequential read's",
                      f"{b} MB/s", f"sequential read of the {best} shards MB/s", st[b]["MB_per_s"] / disk,
                      DISK_SHARE_TARGET if p == path else None)
        # Each format's samples/s against the small files' in the same mode, path and decode (the table's "x files").
        for mode in modes:
            for (p, decode), by_format in results[mode].items():
                for fmt, r in by_format.items():
                    if fmt != "files":
                        target = SPEEDUP_TARGET if (mode, p, fmt) == ("storage", path, best) else None
                        how = f", {decode} decode" if decode else ""
                        ratio(f"{mode}, {p} path ({orders[p]}{how}), {fmt} / small files", f"{fmt} samples/s",
                              "files samples/s", r["samples_per_s"] / by_format["files"]["samples_per_s"], target)
        # What the coarser order buys: each runs path against its per-sample twin, same mode, format and transport.
        for mode in modes:
            for p, twin in PER_SAMPLE_TWIN.items():
                if (p, None) in results[mode]:
                    for fmt in FORMATS[1:]:
                        ratio(f"{mode}, {fmt}: {p} path ({orders[p]}) / its per-sample twin {twin} ({orders[twin]})",
                              f"{p} samples/s", f"{twin} samples/s", results[mode][p, None][fmt]["samples_per_s"]
                              / results[mode][twin, None][fmt]["samples_per_s"])
    return {"rows": rows, "ratios": ratios, "notes": notes}


def _decoded_ratios(ratio, results: dict, references: dict[str, dict], orders: dict[str, str]) -> None:
    """A decoding mode's ratios: each path and format's scaled decode against its full one, and the files
    reader's best path, each way, against each PIL reference (the targets on two of them)."""
    for mode, by_variant in results.items():
        if not MODES[mode].get("decode"):
            continue
        size = MODES[mode]["image_size"]
        for (p, decode), by_format in by_variant.items():
            if decode == "scaled" and (p, "full") in by_variant:
                for fmt, r in by_format.items():
                    full = by_variant[p, "full"][fmt]["samples_per_s"]
                    ratio(f"{mode} {size} px, {p} path ({orders[p]}), {fmt}: scaled / full decode",
                          "scaled samples/s", "full samples/s", r["samples_per_s"] / full)
        for decode in DECODES:
            done = [p for (p, d) in by_variant if d == decode]
            if not done:
                continue
            best = max(done, key=lambda p: by_variant[p, decode]["files"]["samples_per_s"])
            ours = by_variant[best, decode]["files"]["samples_per_s"]
            for name, resize in PIL_REFERENCES.items():
                if references.get(name, {}).get("mode") != mode:
                    continue
                target = {("scaled", "pil"): SCALED_DECODE_TARGET, ("full", "torchvision"): 1.0}.get((decode, resize))
                ratio(f"{mode} {size} px, small files: the files reader, {decode} decode ({best} path, {orders[best]}) "
                      f"/ {name} ({PERMUTATION})", "files reader samples/s", f"{name} samples/s",
                      ours / references[name]["samples_per_s"], target)
