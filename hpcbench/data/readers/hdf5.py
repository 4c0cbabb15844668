"""HDF5 shards: sample ``i`` is ``jpeg[offsets[i]:offsets[i+1]]`` (see the HDF5 writer).

Block reads: the JPEG bytes of consecutive samples lie end to end in ``jpeg``, so
a range of samples is read with one HDF5 call per block of up to :attr:`HDF5Dataset.block_bytes`
(``jpeg[offsets[k]:offsets[j]]``) and cut into samples in numpy. One HDF5 call per sample
(the former path, kept for comparison with ``block_bytes = 0``) pays HDF5's selection and
chunk-lookup overhead per ~110 KB image; a block pays it once per several MB.
"""

from __future__ import annotations

import io
from typing import ClassVar, Iterator

import numpy as np

from hpcbench.data.errors import CorruptRecordError
from hpcbench.data.readers.base import ShardedImageDataset, register_reader
from hpcbench.data.resilience import OpenedShard

#: HDF5's chunk cache per open file: a few 512 KiB chunks, so consecutive samples reuse them
#: on the per-sample path (a block read spans whole chunks and needs no cache).
CHUNK_CACHE_BYTES = 4 << 20

#: Bytes per block read: a few MB amortise HDF5's per-call cost (hpcbench.bench.hdf5_reads)
#: while keeping a reader process's memory small; a sample larger than this is read alone.
BLOCK_BYTES = 8 << 20


@register_reader
class HDF5Dataset(ShardedImageDataset):
    format = "hdf5"

    block_bytes: ClassVar[int] = BLOCK_BYTES
    """Upper bound of one HDF5 read in bytes; ``0`` reads sample by sample (the former path).
    Set it on the class or on an instance (it travels to DataLoader workers with the dataset)."""

    reads: int = 0
    """HDF5 data reads made by this process (blocks, or samples when ``block_bytes == 0``)."""

    def read_range(self, shard: OpenedShard, start: int, stop: int) -> Iterator[tuple[bytes, int]]:
        import h5py

        where = str(shard.path)
        if shard.data is not None:
            source = io.BytesIO(shard.data)
        else:
            shard.access.opens += 1
            source = shard.path
        try:
            # A block spans whole chunks, read once each: no cache, HDF5 reads into the result.
            cache = CHUNK_CACHE_BYTES if self.block_bytes <= 0 else 0
            with h5py.File(source, "r", rdcc_nbytes=cache) as f:
                offsets = f["offsets"][start:stop + 1]
                labels = f["labels"][start:stop]
                jpeg = f["jpeg"]
                if len(offsets) != stop - start + 1 or len(labels) != stop - start:
                    raise CorruptRecordError(f"holds fewer samples than the manifest's {stop}", path=where)
                # A damaged index would otherwise cut silently wrong (numpy slices never fail).
                if (np.diff(offsets) < 0).any() or offsets[0] < 0 or offsets[-1] > jpeg.shape[0]:
                    raise CorruptRecordError("its offsets are not increasing or point past the jpeg bytes",
                                             path=where)
                if self.block_bytes <= 0:
                    for k in range(stop - start):
                        self.reads += 1
                        yield jpeg[offsets[k]:offsets[k + 1]].tobytes(), int(labels[k])
                    return
                # One buffer for all blocks of the range: every sample leaves it as a bytes
                # copy, and a fresh multi-MB array per block would cost its page faults each time.
                buffer = np.empty(0, dtype=np.uint8)
                for a, b in _blocks(offsets, self.block_bytes):
                    base, size = int(offsets[a]), int(offsets[b] - offsets[a])
                    if size > len(buffer):
                        buffer = np.empty(size, dtype=np.uint8)
                    if size:
                        jpeg.read_direct(buffer, np.s_[base:base + size], np.s_[0:size])
                    self.reads += 1
                    for k in range(a, b):
                        yield buffer[offsets[k] - base:offsets[k + 1] - base].tobytes(), int(labels[k])
        except (KeyError, ValueError) as exc:
            raise CorruptRecordError(f"not an hpcbench image shard ({exc})", path=where) from None


def _blocks(offsets: np.ndarray, limit: int) -> Iterator[tuple[int, int]]:
    """Cut samples ``0 .. len(offsets)-2`` into runs ``[a, b)`` of at most ``limit`` bytes (at least one sample)."""
    n = len(offsets) - 1
    a = 0
    while a < n:
        # The last sample whose end stays within the limit; a sample larger than it is read alone.
        b = int(np.searchsorted(offsets, offsets[a] + limit, side="right")) - 1
        b = min(max(b, a + 1), n)
        yield a, b
        a = b
