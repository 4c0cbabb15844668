"""Every image shard format's reader paths against a plain sequential read of the same files, one process.

Run: ``python -m hpcbench.bench.shard_reads [--images 2000] [--cache warm,cold] [--rounds 5] [--root DIR]``

One data set (ImageNet-like JPEGs, ~110 KB mean) stored as HDF5, TFRecord and tar shards
(``--shard-size``). Each format is read alone (one process, no DataLoader, raw bytes: no JPEG
decoding, shards checked by size, shuffled) for one epoch along two paths:

* ``zero-copy batches``: ``batch_in_worker=--batch`` (each sample read from its shard straight
  into the batch tensor; TFRecord's records read whole, CRC-checked, the image copied out);
* ``per sample``: the reader yields single samples as ``bytes``;

and, in the same round and page-cache state, a plain sequential read of the very same files
(8 MiB ``readinto`` calls, one stream: :func:`hpcbench.bench.hdf5_reads.sequential_read`). The
dataset object lives across rounds, as in training (its shard indexes and read buffers are kept;
the first, untimed epoch builds them). ``warm`` reads the files once untimed before each timed
read; ``cold`` evicts them (checked with mincore). Share: the median over rounds of sequential
time / reader time, rounds alternating which goes first. CPU ms: the process's CPU time per
epoch (median), which other load on the machine disturbs less than wall time.
Target (warm): each format's best path >= 70 % of the sequential read.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from hpcbench.bench.hdf5_reads import prepare_cache, sequential_read, timed
from hpcbench.core.config import parse_bytes
from hpcbench.data.generators.images import ImageSpec, make_images
from hpcbench.data.manifest import load_manifest, shard_paths
from hpcbench.data.readers import open_dataset
from hpcbench.data.scratch import disk_scratch
from hpcbench.data.writers import convert

FORMATS = ("hdf5", "tfrecord", "tar")
CACHES = ("warm", "cold")
SHARE_TARGET = 0.70
#: A run of seconds for tests/test_bench.py: every path at toy size; its figures mean nothing.
TOY_ARGS = ["--images", "24", "--shard-size", "200K", "--rounds", "1", "--batch", "8"]


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


def epoch(ds, n: int, number: int) -> tuple[float, float]:
    """(wall s, CPU s) of one epoch of ``ds``; every sample exactly once."""
    ds.set_epoch(number)
    wall, cpu, items = timed(lambda: [item["index"] for item in ds])
    seen = sorted(i for x in items for i in (x.tolist() if hasattr(x, "tolist") else [x]))
    if seen != list(range(n)):
        raise SystemExit(f"{ds.format}: the epoch lost or repeated samples")
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=2000, help="JPEGs of ~110 KB")
    ap.add_argument("--shard-size", default="32M")
    ap.add_argument("--batch", type=int, default=128, help="samples per batch of the zero-copy path")
    ap.add_argument("--cache", default="warm", help=f"page-cache states, subset of {list(CACHES)}")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians are printed")
    ap.add_argument("--root", default=None, help="where the data sets go (default: a temporary folder under "
                                                 "./results, removed afterwards); kept and reused when given")
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    caches = [c.strip() for c in args.cache.split(",") if c.strip()]
    if unknown := set(caches) - set(CACHES):
        raise SystemExit(f"--cache: unknown {sorted(unknown)}; allowed: {list(CACHES)}")

    with disk_scratch(args.root, "bench-shard-reads-") as root:
        folders = prepare(root, args.images, args.shard_size)
        paths = {"zero-copy batches": args.batch, "per sample": None}
        subjects = []
        for fmt, folder in folders.items():
            files = shard_paths(*load_manifest(folder))
            for path, batch in paths.items():
                ds = open_dataset(folder, decode=False, verify="size", seed=0, batch_in_worker=batch)
                epoch(ds, args.images, 0)  # untimed: the shard indexes and read buffers a training run keeps
                subjects.append((fmt, path, files, ds))
        rows = []
        for cache in caches:
            t = {k: {"reader": [], "reader_cpu": [], "seq": [], "share": []} for k in range(len(subjects))}
            for rnd in range(args.rounds):
                order = range(len(subjects)) if rnd % 2 == 0 else reversed(range(len(subjects)))
                for k in order:
                    fmt, path, files, ds = subjects[k]
                    pair = {}
                    for side in (("reader", "seq") if rnd % 2 == 0 else ("seq", "reader")):
                        prepare_cache(files, cache)
                        if side == "seq":
                            pair["seq"], _, _ = timed(lambda: sequential_read(files))
                        else:
                            pair["reader"], pair["reader_cpu"] = epoch(ds, args.images, rnd + 1)
                    for key, value in pair.items():
                        t[k][key].append(value)
                    t[k]["share"].append(pair["seq"] / pair["reader"])
            for k, (fmt, path, files, _) in enumerate(subjects):
                nbytes = sum(p.stat().st_size for p in files)
                rows.append({"cache": cache, "format": fmt, "path": path, "bytes": nbytes,
                             "reader_MB_per_s": nbytes / statistics.median(t[k]["reader"]) / 1e6,
                             "sequential_MB_per_s": nbytes / statistics.median(t[k]["seq"]) / 1e6,
                             "share": statistics.median(t[k]["share"]), "shares": t[k]["share"],
                             "reader_cpu_s": statistics.median(t[k]["reader_cpu"])})
        print(f"\n{args.images} JPEGs in {args.shard_size} shards per format; one process, no DataLoader, raw "
              f"bytes, shuffled, verify=size; median of {args.rounds} rounds\n")
        print(f"{'cache':5s} {'format':9s} {'path':18s} {'reader MB/s':>11s} {'seq MB/s':>9s} {'share':>6s} "
              f"{'min-max':>11s} {'CPU ms':>7s}")
        for r in rows:
            print(f"{r['cache']:5s} {r['format']:9s} {r['path']:18s} {r['reader_MB_per_s']:11.0f} "
                  f"{r['sequential_MB_per_s']:9.0f} {r['share']:6.0%} {min(r['shares']):5.0%}-{max(r['shares']):<5.0%} "
                  f"{r['reader_cpu_s'] * 1e3:7.0f}")
        print()
        for cache in caches:
            for fmt in FORMATS:
                best = max((r for r in rows if r["cache"] == cache and r["format"] == fmt), key=lambda r: r["share"])
                verdict = "MET" if best["share"] >= SHARE_TARGET else "MISSED"
                print(f"target ({cache} cache, {fmt}, best path: {best['path']}): {best['share']:.0%} of the plain "
                      f"sequential read (target >= {SHARE_TARGET:.0%}: {verdict})")
        if args.json:
            Path(args.json).write_text(json.dumps({"rows": rows, "args": vars(args)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
