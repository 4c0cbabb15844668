"""Small synthetic data sets shared by the data tests (built once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcbench.data.generators.images import ImageSpec, make_images
from hpcbench.data.manifest import load_manifest
from hpcbench.data.writers import convert

#: 60 small JPEGs (~12 KB) in 3 classes; 150 KB shards give several shards per format.
SPEC = ImageSpec(count=60, classes=3, mean_bytes=12_000, seed=7)
SHARD_BYTES = 150_000
SHARD_FORMATS = ("hdf5", "tfrecord", "tar")


@pytest.fixture(scope="session")
def image_sets(tmp_path_factory) -> dict[str, Path]:
    """{format: folder} for files (the source folder) and every shard format."""
    root = tmp_path_factory.mktemp("datasets")
    make_images(root / "files", SPEC, processes=1)
    sets = {"files": root / "files"}
    for fmt in SHARD_FORMATS:
        convert(root / "files", root / fmt, fmt, shard_bytes=SHARD_BYTES)
        sets[fmt] = root / fmt
    return sets


def source_samples(folder: Path) -> dict[int, tuple[bytes, int]]:
    """{index: (JPEG bytes, label)} read straight from the source folder's files."""
    manifest, folder = load_manifest(folder)
    return {i: ((folder / s.path).read_bytes(), s.label) for i, s in enumerate(manifest.shards)}


def flip_unnoticed(path: Path) -> None:
    """Flip the middle byte of ``path`` in place, keeping its inode, size and mtime: an index a reader kept of
    the file still applies, so only a check made on every read (TFRecord's CRCs) can find the damage."""
    import os

    before = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with open(path, "r+b") as fh:
        fh.write(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def epoch_bytes(ds) -> dict[int, bytes]:
    """{index: JPEG bytes} of one epoch of a raw-batch reader (``batch_in_worker``, ``decode=False``)."""
    from hpcbench.data.readers import image_bytes

    return {i: data for batch in ds for i, data in zip(batch["index"].tolist(), image_bytes(batch))}
