"""HDF5 shards: the JPEG bytes of all samples concatenated in one chunked ``uint8`` dataset,
with ``offsets`` (n + 1, int64), ``labels`` (int64) and ``keys``.

One flat byte array rather than a variable-length dataset: vlen data lives in HDF5's global
heap, outside the chunks, so chunking (and chunk caching) would not apply to it. Chunks of
512 KiB hold a few images each; no compression (JPEG is compressed already).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hpcbench.data.writers.base import ShardWriter, SourceSample, register_writer

CHUNK_BYTES = 512 << 10


@register_writer
class HDF5Writer(ShardWriter):
    format = "hdf5"
    suffix = "h5"

    def open_shard(self, path: Path) -> None:
        self._path = path
        self._parts: list[bytes] = []
        self._labels: list[int] = []
        self._keys: list[str] = []

    def write(self, sample: SourceSample) -> int:
        self._parts.append(sample.data)
        self._labels.append(sample.label)
        self._keys.append(sample.key)
        return len(sample.data)

    def close_shard(self) -> None:
        import h5py

        sizes = np.fromiter((len(p) for p in self._parts), dtype=np.int64, count=len(self._parts))
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        data = np.frombuffer(b"".join(self._parts), dtype=np.uint8)
        with h5py.File(self._path, "w") as f:
            f.create_dataset("jpeg", data=data, chunks=(max(1, min(CHUNK_BYTES, len(data))),))
            f.create_dataset("offsets", data=offsets)
            f.create_dataset("labels", data=np.asarray(self._labels, dtype=np.int64))
            f.create_dataset("keys", data=np.asarray(self._keys, dtype="S"))
            f.attrs["layout"] = "jpeg[offsets[i]:offsets[i+1]] is sample i"
        self._parts, self._labels, self._keys = [], [], []
