"""Storage formats side by side: shards against small files, and against the disk's own limit.

Run: ``hpcbench bench io-formats [--images 2000] [--workers 2] [--root DIR]``

One data set (default 2,000 ImageNet-like JPEGs, ~110 KB mean) stored as small files and as
HDF5, TFRecord and tar shards (``--shard-size``). By default every epoch starts with the data set's files
evicted from the page cache (checked with mincore) and reads through a DataLoader with
``--workers`` persistent workers (started by an untimed warm-up epoch), no emulated compute,
along two loading paths (``--paths``), printed side by side:

* ``per-sample``: the reader yields single samples, the DataLoader batches them
  (``batch_size``, ``collate_samples`` in the worker; raw bytes travel as a pickled list);
* ``batched``: the reader yields whole batches (``batch_in_worker``, raw bytes packed into one
  shared-memory tensor), the DataLoader runs with ``batch_size=None``. Same samples, same
  batches; only the worker-to-main transfer differs.
* ``runs``: whole batches as ``batched``, in ``order="runs"``: runs of up to 32 consecutive samples of
  a shard shuffled as units, each run one read straight into the batch's shared-memory tensor (raw
  bytes only: not in the ``decoded`` mode, whose cells say ``n/a``);
* ``runs+ring``: ``runs``, each worker's batches in a ring of reused shared-memory buffers
  (``batch_ring``: the prefetch + 4) instead of fresh shared memory per batch; every step checks its
  batch was not overwritten (raw bytes only).

Three modes, formats and paths interleaved in each round:

* ``storage``: raw JPEG bytes (no decoding), shards checked by size: what storage delivers;
* ``storage+sha256``: the same with every shard hashed against the manifest (resilient reading);
* ``decoded``: JPEG decoding to tensors (torchvision) as training would do it.

In the ``decoded`` mode, the small-file folder is also read by the widely used recipe side by side: a plain
map-style dataset that opens each file with PIL, converts it to RGB and resizes it as the readers do
(torchvision's ``ImageFolder`` way), batched by the DataLoader with the same workers, batch size and prefetch
(:class:`PilFolder`); target: the files reader's best path >= it in samples/s.

Then each reader alone (one process, no DataLoader), a plain open+read+close loop over the
small files (what one open costs this disk, the files reader's floor) and a plain sequential
read (8 MiB ``read`` calls into a page-aligned buffer, one stream, cold) of the best format's shard files: the limit of
this disk for those bytes. Printed side by side, with the targets (batched path, storage mode):
best shard format >= 3x the small-file folder in samples/s, and the best format's MB/s >= 60 %
of the plain sequential read. ``--cache warm`` reads every file once before each epoch and before
the sequential read instead of evicting it: the second epoch of a job, or a staged data set, where
the loader's own CPU work is the limit (target there: >= 50 % of the warm sequential read). Warm, each
format's epoch is also set beside the same read into 4 batch-sized buffers (memory like that the batches
occupy) and beside GNU ``cat`` on the same files (:func:`hpcbench.data.page_cache.cat_read`), each paired
per round: the 8 MiB buffer stays in the CPU's cache, so it is the strictest of the three.
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
from hpcbench.data.readers import loader_options, open_dataset
from hpcbench.data.scratch import disk_scratch
from hpcbench.data.writers import convert
from hpcbench.experiments.io_formats.worker import CONSUMER_HOLDS, measure_epoch

FORMATS = ("files", "hdf5", "tfrecord", "tar")
MODES = {"storage": dict(decode=False, verify="size"),
         "storage+sha256": dict(decode=False, verify="sha256"),
         "decoded": dict(decode=True, verify="size", image_size=224)}
#: The DataLoader's prefetch_factor in every timed epoch.
PREFETCH = 2
#: Each loading path's reader options, given the batch size.
PATH_OPTIONS = {"per-sample": lambda n: {},
                "batched": lambda n: {"batch_in_worker": n},
                "runs": lambda n: {"batch_in_worker": n, "order": "runs"},
                "runs+ring": lambda n: {"batch_in_worker": n, "order": "runs", "batch_ring": PREFETCH + CONSUMER_HOLDS}}
#: Paths that hand out raw bytes only (no decoded mode).
RAW_ONLY = ("runs", "runs+ring")
PATHS = tuple(PATH_OPTIONS)
SPEEDUP_TARGET = 3.0
DISK_SHARE_TARGET = 0.60
WARM_SHARE_TARGET = 0.50
#: A run of seconds for tests/test_bench.py: every path of the benchmark at toy size; its figures mean nothing.
#: One mode: the others differ only in the reader's options, and each mode starts a worker per format and path.
#: Warm: its paired sequential reads are the bench's own code; the cold eviction is the experiment's (tested there).
TOY_ARGS = ["--images", "24", "--classes", "2", "--workers", "1", "--batch-size", "8", "--shard-size", "200K",
            "--rounds", "1", "--modes", "storage", "--cache", "warm"]


class PilFolder(Dataset):
    """The widely used reader of a folder of JPEGs, as the baseline for the files reader: one file per item,
    opened with PIL, converted to RGB and resized to ``image_size`` as :func:`hpcbench.data.readers.decode_jpeg`
    resizes, the DataLoader's default collation batching them (torchvision's ``ImageFolder`` recipe)."""

    def __init__(self, folder: Path, image_size: int):
        manifest, root = load_manifest(folder)
        self.paths = [root / s.path for s in manifest.shards]
        self.labels = [s.label for s in manifest.shards]
        self.image_size = image_size

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> dict:
        from PIL import Image
        from torchvision.transforms.v2 import functional as F

        with Image.open(self.paths[i]) as image:
            tensor = F.pil_to_tensor(image.convert("RGB"))
        return {"image": F.resize(tensor, [self.image_size, self.image_size], antialias=True),
                "label": self.labels[i], "index": i}


def pil_folder_epochs(folder: Path, *, image_size: int, workers: int, batch_size: int, rounds: int) -> list[float]:
    """Seconds per epoch of :class:`PilFolder` over ``folder`` through a DataLoader with persistent workers
    (started by an untimed warm-up epoch, as the readers' are), shuffled, ``rounds`` epochs."""
    ds = PilFolder(folder, image_size)
    loader = DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                        prefetch_factor=PREFETCH if workers else None, persistent_workers=workers > 0)
    for _ in loader:
        pass
    walls = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in loader:
            pass
        walls.append(time.perf_counter() - t0)
    return walls


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
                                                             "targets use the last one given")
    ap.add_argument("--root", default=None, help="where the data sets go (default: a temporary folder under "
                                                 "./results, removed afterwards); kept when given")


def run(args: argparse.Namespace) -> dict:
    """Every format and loading path side by side, then the references; the result's dict form
    (``hpcbench.bench.result.BenchResult``): one row per measured configuration (``measure`` says which table),
    each ratio the text above describes, the targets on the ones they judge."""
    rows: list[dict] = []
    ratios: list[dict] = []
    notes: list[str] = []

    def ratio(name: str, numerator: str, denominator: str, value: float, target: float | None = None) -> None:
        ratios.append({"name": name, "numerator": numerator, "denominator": denominator, "value": value,
                       "target": target})

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if unknown := set(paths) - set(PATHS):
        raise ConfigError(f"unknown {sorted(unknown)}; allowed: {list(PATHS)}", field="--paths")
    if unknown := set(modes) - set(MODES):
        raise ConfigError(f"unknown {sorted(unknown)}; allowed: {list(MODES)}", field="--modes")
    with disk_scratch(args.root, "bench-io-formats-") as root:
        folders = prepare(root, args.images, args.classes, parse_bytes(args.shard_size))
        runs = [(p, f) for p in paths for f in FORMATS]
        # a batch's bytes, the same for every format (their payload): the second warm reference's buffer size
        images = load_manifest(folders["files"])[0]
        batch_bytes = args.batch_size * images.bytes // max(images.samples, 1)
        results: dict[str, dict[str, dict[str, dict]]] = {m: {p: {} for p in paths} for m in modes}
        notes_cache: set[str] = set()  # what was done to the page cache
        for mode in modes:
            # run reads hand out raw bytes: a mode that decodes has no runs path
            here = [(p, f) for p, f in runs if not (p in RAW_ONLY and MODES[mode].get("decode"))]
            walls: dict[tuple[str, str], list[float]] = {key: [] for key in here}
            seq: dict[tuple[str, str], list[float]] = {key: [] for key in here}  # warm: paired sequential reads
            seq_batch: dict[tuple[str, str], list[float]] = {key: [] for key in here}  # ... into batch-sized buffers
            cat: dict[tuple[str, str], list[float]] = {key: [] for key in here}  # ... and GNU cat on them
            info: dict[tuple[str, str], tuple[int, int, int]] = {}
            loaders = {}
            for path, fmt in here:
                # Persistent workers, started by an untimed warm-up epoch: what a training job
                # pays once, not per epoch.
                ds = open_dataset(folders[fmt], seed=0, **PATH_OPTIONS[path](args.batch_size), **MODES[mode])
                loaders[path, fmt] = (ds, DataLoader(ds, num_workers=args.workers,
                                                     prefetch_factor=PREFETCH if args.workers else None,
                                                     persistent_workers=args.workers > 0,
                                                     **loader_options(ds, args.batch_size)))
                for _ in loaders[path, fmt][1]:
                    pass
            for rnd in range(args.rounds):
                order = here if rnd % 2 == 0 else here[::-1]  # drift favours no format or path
                for key in order:
                    ds, loader = loaders[key]
                    files = shard_paths(ds.manifest, ds.folder)
                    if args.cache == "warm":
                        prepare_cache(files, "warm")
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
            del loaders  # stops the persistent workers
            for path, fmt in here:
                wall = statistics.median(walls[path, fmt])
                samples, nbytes, opens = info[path, fmt]
                results[mode][path][fmt] = {"wall_s": wall, "samples_per_s": samples / wall,
                                            "MB_per_s": nbytes / wall / 1e6, "opens": opens, "bytes": nbytes,
                                            "walls_s": walls[path, fmt]}
                if seq[path, fmt]:
                    results[mode][path][fmt]["share_of_warm_sequential"] = statistics.median(
                        s_ / w for s_, w in zip(seq[path, fmt], walls[path, fmt]))
                    results[mode][path][fmt]["share_of_warm_sequential_batch_buffers"] = statistics.median(
                        s_ / w for s_, w in zip(seq_batch[path, fmt], walls[path, fmt]))
                    results[mode][path][fmt]["share_of_warm_cat"] = statistics.median(
                        s_ / w for s_, w in zip(cat[path, fmt], walls[path, fmt]))
        notes.append(f"{args.images} images, {args.workers} DataLoader workers, batch {args.batch_size}, {args.cache} "
                     f"page cache ({', '.join(sorted(notes_cache))}), median of {args.rounds} rounds")
        for mode in modes:
            for path in paths:
                for fmt in FORMATS:
                    if fmt in results[mode][path]:
                        r = results[mode][path][fmt]
                        rows.append({"measure": "DataLoader epoch", "mode": mode, "path": path, "format": fmt,
                                     **r, "x_files": r["samples_per_s"] / results[mode][path]["files"]["samples_per_s"]})
        if "decoded" in results:
            # The widely used recipe for a folder of JPEGs, side by side with the files reader's best path.
            decoded = results["decoded"]
            size = MODES["decoded"]["image_size"]
            walls = pil_folder_epochs(folders["files"], image_size=size, workers=args.workers,
                                      batch_size=args.batch_size, rounds=args.rounds)
            pil = images.samples / statistics.median(walls)
            best = max((p for p in paths if "files" in decoded[p]), key=lambda p: decoded[p]["files"]["samples_per_s"])
            ours = decoded[best]["files"]["samples_per_s"]
            rows.append({"measure": "PIL DataLoader (decoded, small files)", "samples_per_s": pil, "walls_s": walls})
            ratio(f"decoded, small files: the files reader ({best} path) / a plain DataLoader over PIL",
                  "files reader samples/s", "PIL DataLoader samples/s", ours / pil, 1.0)
        if args.cache == "warm" and "storage" in results:
            # Each format against a plain sequential read of its own files, paired round by round.
            notes.append("warm, storage mode: each format's epoch against a plain sequential read of its own files, "
                         "the same read into 4 batch-sized buffers, and GNU cat on the same files (median of the "
                         "rounds' ratios)")
            best_path = {fmt: max((p for p in paths if fmt in results["storage"][p]),
                                  key=lambda p: results["storage"][p][fmt]["share_of_warm_sequential"])
                         for fmt in FORMATS[1:]}
            for p in paths:
                for fmt, st in results["storage"][p].items():
                    where = f"warm, storage, {p} path, {fmt}"
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
                                 "format": fmt, "samples_per_s": alone[p][fmt],
                                 "x_files": alone[p][fmt] / alone[p]["files"]})
                    if fmt != "files":
                        ratio(f"reader alone, {p} path, {fmt} / files", f"{fmt} samples/s", "files samples/s",
                              alone[p][fmt] / alone[p]["files"])
            files = shard_paths(*load_manifest(folders["files"]))
            seconds, nbytes, note = small_file_reads(files)
            per_file = seconds / len(files)
            rows.append({"measure": "plain open+read+close of the small files, one process, cold",
                         "files": len(files), "files_per_s": len(files) / seconds, "us_per_file": per_file * 1e6,
                         "MB_per_s": nbytes / seconds / 1e6})
            notes.append(f"small files before their plain reads: {note}")
            path = paths[-1]
            storage = results["storage"][path]
            best = max(FORMATS[1:], key=lambda f: storage[f]["samples_per_s"])
            seconds, nbytes, note = timed_sequential_read(shard_paths(*load_manifest(folders[best])), args.cache)
            disk = nbytes / seconds / 1e6
            rows.append({"measure": f"plain sequential read of the {best} shards ({args.cache})", "MB_per_s": disk})
            notes.append(f"{best} shards before their plain sequential read: {note}")
            notes.append(f"targets on the {path} path (the last given), storage mode: the best shard format ({best}) "
                         f">= {SPEEDUP_TARGET:.0f}x the small files in samples/s, and >= {DISK_SHARE_TARGET:.0%} of "
                         f"the plain sequential read's MB/s")
            for p in paths:
                st = results["storage"][p]
                b = max(FORMATS[1:], key=lambda f: st[f]["samples_per_s"])
                ratio(f"storage, {p} path, best shard format {b}: MB/s / plain sequential read's", f"{b} MB/s",
                      f"sequential read of the {best} shards MB/s", st[b]["MB_per_s"] / disk,
                      DISK_SHARE_TARGET if p == path else None)
        # Each format's samples/s against the small files' in the same mode and path (the table's "x files").
        for mode in modes:
            for p in paths:
                for fmt, r in results[mode][p].items():
                    if fmt != "files":
                        target = SPEEDUP_TARGET if (mode, p, fmt) == ("storage", path, best) else None
                        ratio(f"{mode}, {p} path, {fmt} / small files", f"{fmt} samples/s", "files samples/s",
                              r["samples_per_s"] / results[mode][p]["files"]["samples_per_s"], target)
    return {"rows": rows, "ratios": ratios, "notes": notes}
