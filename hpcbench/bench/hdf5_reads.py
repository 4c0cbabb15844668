"""HDF5 readers against a plain sequential read of the same files: block reads vs one call per sample.

Run: ``hpcbench bench hdf5-reads [--steps 384] [--images 2000] [--cache cold,warm] [--root DIR]``

Two data sets, generated under ``--root`` (default: a temporary folder under ./results, on
this disk: /tmp may be a tmpfs, where "cold" means nothing):

* the weather data set (``data_prep/make_weather.py``: ``fields[time, channel, lat, lon]``
  float32, default grid 8 x 121 x 240, 32 steps per shard), read by
  :class:`hpcbench.data.readers.weather.WeatherDataset` in blocks of each of
  ``--block-sizes`` pairs with its defaults (one ``preadv`` per block at the chunk offsets
  HDF5's index gives, one block read ahead by a thread); at the default block size also
  without the read ahead, and with one HDF5 hyperslab call per block instead of ``preadv``;
  and one HDF5 call per pair, no read ahead (what a naive per-sample reader does);
  and, as each block variant's like-for-like twin, the same reader with blocks of one pair
  (``block_size=1``: every pair shuffled on its own, the same read kind and read ahead);
* ImageNet-like JPEGs in HDF5 shards (``--shard-size``), read by
  :class:`hpcbench.data.readers.hdf5.HDF5Dataset` as zero-copy batches of 128 (``batch_in_worker``:
  each sample ``preadv``-ed from the file straight into its batch's tensor), as runs of neighbouring
  samples each read in one call (``order="runs"``), with block reads (``block_bytes``, the per-sample
  default) and sample by sample (``block_bytes = 0``, the former path).

Every row and ratio states its order: ``runs of K`` (weather blocks of K consecutive pairs shuffled as units,
the pairs shuffled inside each: a batch holds neighbours; the images' runs of 32 neighbouring samples) or
``per-sample`` (weather pairs one by one; the other image paths: each sample its own unit in a shuffle buffer
over shuffled shards). Each runs path is set beside its per-sample twin: what the coarser order buys, read
for read.

Each reader runs alone (one process, no DataLoader, raw data: no JPEG decoding, shards
checked by size, shuffled) for one epoch, and every sample must arrive exactly once. The reader
object lives across rounds, as in training (its shard indexes, open files and read buffers are
kept; a first, untimed epoch builds them): a reader made afresh for each epoch would time its
buffers' allocation, which with transparent huge pages can include the kernel compacting memory
(up to 0.5 s of an epoch's 60 ms here). In the
same round, a plain sequential read of the very same files (8 MiB ``readinto`` calls, one
stream, into a page-aligned buffer) is timed with the page cache in the same state: ``cold`` evicts the files before
each timed read (:mod:`hpcbench.data.page_cache`, checked with mincore), ``warm`` reads them
once untimed first. Throughput is the data set's file bytes over the wall time, for both.
Rounds interleave the readers and alternate which of reader and sequential read goes first;
the share printed is the median over rounds of (sequential time / reader time), so drift
on a shared machine hits both sides alike (min-max: its range over rounds). CPU ms: the
process's CPU time per epoch (median), which other load on the machine disturbs less than
wall time. ``of cat``: the reader against GNU ``cat`` on the same files in the same round and cache state
(:func:`~hpcbench.data.page_cache.cat_read`; 128 KiB reads, slower than the 8 MiB ones: warm 9.2 GB/s
against 15.7 GB/s on this VM). Target: block paths >= 70 % of the sequential read.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from hpcbench.bench.result import BenchResult, Ratio
from hpcbench.core.config import parse_bytes
from hpcbench.core.errors import ConfigError, HpcbenchError
from hpcbench.data.generators.images import ImageSpec, make_images
from hpcbench.data.generators.weather import WeatherSpec, make_weather
from hpcbench.data.manifest import load_manifest, shard_paths
from hpcbench.data.page_cache import cat_read, prepare_cache, sequential_read
from hpcbench.data.readers.hdf5 import HDF5Dataset
from hpcbench.data.readers.weather import BLOCK_SIZE, READAHEAD, WeatherDataset
from hpcbench.data.scratch import disk_scratch
from hpcbench.data.writers import convert

SHARE_TARGET = 0.70
#: Samples per batch of the zero-copy path (the io_formats benchmark's DataLoader batch).
IMAGE_BATCH = 128
CACHES = ("cold", "warm")
#: A run of seconds for tests/test_bench.py: every path of the benchmark at toy size; its figures mean nothing.
TOY_ARGS = ["--steps", "16", "--steps-per-shard", "8", "--block-sizes", "4,8", "--images", "24", "--shard-size", "200K",
            "--rounds", "1"]


@dataclass
class Subject:
    """One reader configuration over one data set."""

    data: str
    path: str
    files: list[Path]
    open: Callable[[], object]
    expected: int
    block: bool
    """A block-read path (the target applies to it)."""
    twin: str | None = None
    """The ``path`` of its per-sample twin (the same reader, pair by pair), where it reads coarser."""
    kept: object = field(default=None, repr=False)

    def dataset(self) -> object:
        """The reader, opened once and kept across epochs as a training job keeps it (its shard indexes,
        open files and read buffers are its own to keep)."""
        if self.kept is None:
            self.kept = self.open()
        return self.kept

    @property
    def order(self) -> str:
        """The order its reader reads an epoch in, as the reader states it (``order_label``)."""
        return self.dataset().order_label


def timed(fn: Callable[[], object]) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of this process, result) of ``fn()``."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def add_round_arguments(ap: argparse.ArgumentParser, cache: str) -> None:
    """The options every reader-against-sequential-read benchmark takes: ``--cache`` (default ``cache``),
    ``--rounds`` and ``--root``."""
    ap.add_argument("--cache", default=cache, help=f"page-cache states, subset of {list(CACHES)}")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians are printed")
    ap.add_argument("--root", default=None, help="where the data sets go (default: a temporary folder under "
                                                 "./results, removed afterwards); kept and reused when given")


def cache_states(text: str) -> list[str]:
    """``--cache``'s comma-separated states, checked against :data:`CACHES`."""
    caches = [c.strip() for c in text.split(",") if c.strip()]
    if unknown := set(caches) - set(CACHES):
        raise ConfigError(f"unknown {sorted(unknown)}; allowed: {list(CACHES)}", field="--cache")
    return caches


def paired_rounds(files: list[list[Path]], reader: Callable[[int, int], tuple[float, float]], rounds: int,
                  cache: str, notes: set[str] | None = None,
                  batch_bytes: int | None = None, cat: bool = False) -> list[dict[str, list[float]]]:
    """Each subject's reader and a plain sequential read of the same files, round after round.

    Subject ``k``'s files are ``files[k]``; ``reader(k, round)`` runs one epoch and returns (wall s,
    CPU s). Before each side the files are put in the page-cache state ``cache``. Rounds alternate
    the subjects' order and which side goes first, so drift on a shared machine and one side's
    pages favour neither. Returns per subject the lists ``reader``, ``reader_cpu``, ``seq``,
    ``seq_cpu`` and ``share`` (sequential time / reader time, per round); ``notes`` collects what
    was done to the cache. With ``batch_bytes``, also ``seq_batch`` and ``share_batch``: the same
    sequential read into 4 buffers of ``batch_bytes`` in turn, memory a loader's batches occupy
    (:func:`~hpcbench.data.page_cache.sequential_read`). With ``cat``, also ``cat`` and ``share_cat``: GNU
    ``cat`` on the same files (:func:`~hpcbench.data.page_cache.cat_read`).
    """
    keys = ["reader", "reader_cpu", "seq", "seq_cpu", "share"] + (["seq_batch", "share_batch"] if batch_bytes else [])
    keys += ["cat", "share_cat"] if cat else []
    times = [{key: [] for key in keys} for _ in files]
    sides = ("reader", "seq") + (("seq_batch",) if batch_bytes else ()) + (("cat",) if cat else ())
    for rnd in range(rounds):
        order = range(len(files)) if rnd % 2 == 0 else reversed(range(len(files)))
        for k in order:
            pair: dict[str, float] = {}
            for side in (sides if rnd % 2 == 0 else sides[::-1]):
                note = prepare_cache(files[k], cache)
                if notes is not None:
                    notes.add(note.split(":")[0])
                if side == "seq":
                    pair["seq"], pair["seq_cpu"], _ = timed(lambda: sequential_read(files[k]))
                elif side == "seq_batch":
                    pair["seq_batch"], _, _ = timed(lambda: sequential_read(files[k], batch_bytes, buffers=4))
                elif side == "cat":
                    pair["cat"] = cat_read(files[k])
                else:
                    pair["reader"], pair["reader_cpu"] = reader(k, rnd)
            for key, value in pair.items():
                times[k][key].append(value)
            times[k]["share"].append(pair["seq"] / pair["reader"])
            if batch_bytes:
                times[k]["share_batch"].append(pair["seq_batch"] / pair["reader"])
            if cat:
                times[k]["share_cat"].append(pair["cat"] / pair["reader"])
    return times


def reader_epoch(subject: Subject, epoch: int) -> tuple[float, float, int]:
    """One epoch of the subject's (kept) reader: (wall s, CPU s, reads of this epoch); every sample exactly once."""
    ds = subject.dataset()
    ds.set_epoch(epoch)
    before = ds.reads
    # A batch's "index" is a tensor of its samples' positions; a sample's, one int.
    wall, cpu, items = timed(lambda: [item["index"] for item in ds])
    seen = [i for x in items for i in (x.tolist() if hasattr(x, "tolist") else [x])]
    if sorted(seen) != list(range(subject.expected)):
        raise HpcbenchError(f"{subject.data} {subject.path}: the epoch lost or repeated samples")
    return wall, cpu, ds.reads - before


def prepare(root: Path, args: argparse.Namespace) -> tuple[Path, Path]:
    """The weather data set and the image HDF5 shards (reused when ``--root`` already holds them)."""
    weather, files, hdf5 = root / "weather", root / "images-files", root / "images-hdf5"
    spec = WeatherSpec(steps=args.steps, steps_per_shard=args.steps_per_shard)
    try:
        reuse = load_manifest(weather)[0].params == asdict(spec)
    except Exception:  # noqa: BLE001 - anything unusable is simply regenerated
        reuse = False
    if not reuse:
        make_weather(weather, spec, command="hpcbench bench hdf5-reads")
    try:
        reuse = load_manifest(hdf5)[0].samples == args.images
    except Exception:  # noqa: BLE001
        reuse = False
    if not reuse:
        make_images(files, ImageSpec(args.images, 10))
        convert(files, hdf5, "hdf5", shard_bytes=parse_bytes(args.shard_size))
    return weather, hdf5


def subjects(weather_dir: Path, hdf5: Path, block_sizes: list[int]) -> list[Subject]:
    """The reader paths: weather blocks (direct, HDF5) and per pair, images blocks and per sample."""
    w_files = shard_paths(*load_manifest(weather_dir))
    i_files = shard_paths(*load_manifest(hdf5))
    pairs = WeatherDataset(weather_dir, verify="size").pairs
    images = load_manifest(hdf5)[0].samples

    def image_reader(block_bytes: int, batch: int | None = None, order: str = "samples") -> Callable[[], HDF5Dataset]:
        def make() -> HDF5Dataset:
            ds = HDF5Dataset(hdf5, decode=False, verify="size", seed=0, batch_in_worker=batch, order=order)
            ds.block_bytes = block_bytes
            return ds
        return make

    def name(block: int, direct: bool, ahead: int) -> str:
        if (block, direct, ahead) == (1, False, 0):
            return "per pair, HDF5 call (naive)"
        return f"{'per pair' if block == 1 else f'block {block}'}, {'direct' if direct else 'HDF5 call'}, {ahead} ahead"

    def weather(block: int, direct: bool, ahead: int, target: bool = True) -> Subject:
        return Subject("weather", name(block, direct, ahead), w_files, lambda: WeatherDataset(
            weather_dir, verify="size", seed=0, block_size=block, direct=direct, readahead=ahead), pairs,
            target and block > 1, twin=name(1, direct, ahead) if block > 1 else None)

    # Every block size with the reader's defaults, then the default size without each of its parts; then each
    # one's per-pair twin (the same read kind and read ahead), the naive reader among them.
    specs = [(b, True, READAHEAD) for b in block_sizes]
    specs += [(BLOCK_SIZE, True, 0), (BLOCK_SIZE, False, READAHEAD), (BLOCK_SIZE, False, 0)]
    specs = list(dict.fromkeys(specs))
    twins = [(1, direct, ahead) for direct, ahead in dict.fromkeys((d, a) for _, d, a in specs)]
    return [
        *(weather(*spec) for spec in specs),
        *(weather(*spec, target=False) for spec in twins if spec not in specs),
        # runs of neighbouring samples, each read in one call into the batch: the images' coarser order,
        # beside its per-sample twin (the zero-copy batches)
        Subject("images", f"zero-copy runs, batches of {IMAGE_BATCH}", i_files,
                image_reader(HDF5Dataset.block_bytes, IMAGE_BATCH, order="runs"), images, True,
                twin=f"zero-copy batches of {IMAGE_BATCH}"),
        Subject("images", f"zero-copy batches of {IMAGE_BATCH}", i_files,
                image_reader(HDF5Dataset.block_bytes, IMAGE_BATCH), images, True),
        Subject("images", f"block (<= {HDF5Dataset.block_bytes >> 20} MiB/read)", i_files,
                image_reader(HDF5Dataset.block_bytes), images, True),
        Subject("images", "per sample (before)", i_files, image_reader(0), images, False),
    ]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """This benchmark's options (``hpcbench bench hdf5-reads --help``)."""
    ap.add_argument("--steps", type=int, default=384, help="weather time steps (8 x 121 x 240 float32: 0.93 MB each)")
    ap.add_argument("--steps-per-shard", type=int, default=32)
    ap.add_argument("--block-sizes", default=f"8,{BLOCK_SIZE},32", help="weather pairs per read, compared")
    ap.add_argument("--images", type=int, default=2000, help="JPEGs of ~110 KB in the image HDF5 shards")
    ap.add_argument("--shard-size", default="32M")
    add_round_arguments(ap, cache=",".join(CACHES))


def run(args: argparse.Namespace) -> BenchResult:
    """Every reader path against the plain sequential read and ``cat`` of its files, per cache state: one row
    per path and cache, each path's two shares as ratios (block paths judged against :data:`SHARE_TARGET`)."""
    caches = cache_states(args.cache)

    with disk_scratch(args.root, "bench-hdf5-reads-") as root:
        weather, hdf5 = prepare(root, args)
        runs = subjects(weather, hdf5, [int(b) for b in args.block_sizes.split(",")])
        for s in runs:
            reader_epoch(s, epoch=0)  # untimed: the reader's indexes and buffers, built once as in training
        rows: list[dict] = []
        notes: set[str] = set()
        for cache in caches:
            reads: dict[int, int] = {}

            def reader(k: int, rnd: int) -> tuple[float, float]:
                wall, cpu, reads[k] = reader_epoch(runs[k], epoch=rnd)
                return wall, cpu

            times = paired_rounds([s.files for s in runs], reader, args.rounds, cache, notes, cat=True)
            for k, s in enumerate(runs):
                nbytes = sum(p.stat().st_size for p in s.files)
                t = times[k]
                rows.append({"cache": cache, "data": s.data, "path": s.path, "order": s.order, "block": s.block,
                             "samples": s.expected, "bytes": nbytes, "reads": reads[k],
                             "reader_MB_per_s": nbytes / statistics.median(t["reader"]) / 1e6,
                             "sequential_MB_per_s": nbytes / statistics.median(t["seq"]) / 1e6,
                             "share": statistics.median(t["share"]), "share_min": min(t["share"]),
                             "share_max": max(t["share"]), "shares": t["share"],
                             "share_of_cat": statistics.median(t["share_cat"]),
                             "reader_cpu_ms": statistics.median(t["reader_cpu"]) * 1e3,
                             "sequential_cpu_ms": statistics.median(t["seq_cpu"]) * 1e3})
    ratios = []
    for r in rows:
        where = f"{r['cache']} cache, {r['data']} {r['path']} ({r['order']})"
        ratios.append(Ratio(f"{where}: reader / plain sequential read", "reader MB/s", "sequential read MB/s",
                            r["share"], SHARE_TARGET if r["block"] else None))
        ratios.append(Ratio(f"{where}: reader / cat", "reader MB/s", "GNU cat MB/s", r["share_of_cat"]))
    # What the coarser order buys: each block path against its per-pair twin, the same data set and cache.
    twin_of = {s.path: s.twin for s in runs if s.twin}
    for r in rows:
        twin = next((t for t in rows if t["cache"] == r["cache"] and t["data"] == r["data"]
                     and t["path"] == twin_of.get(r["path"])), None)
        if twin is not None:
            ratios.append(Ratio(f"{r['cache']} cache, {r['data']} {r['path']} ({r['order']}) / its per-sample twin "
                                f"{twin['path']} ({twin['order']})", "reader pairs/s", "twin pairs/s",
                                r["reader_MB_per_s"] / twin["reader_MB_per_s"]))
    return BenchResult("hdf5-reads", rows=rows, ratios=ratios, notes=[
        f"weather: {args.steps} steps of 8x121x240 float32 in shards of {args.steps_per_shard}; images: "
        f"{args.images} JPEGs in {args.shard_size} HDF5 shards; one process, no DataLoader, shuffled, verify=size; "
        f"page cache: {', '.join(sorted(notes))}; median of {args.rounds} rounds (share: of the paired per-round "
        f"ratios, min-max their range; target on block paths only)",
        "order: weather blocks of K pairs are runs of K (shuffled as units, pairs shuffled inside), each beside its "
        "per-pair twin (per-sample: every pair on its own); the image paths are per-sample (a shuffle buffer of "
        "64 samples over shuffled shards)"])
