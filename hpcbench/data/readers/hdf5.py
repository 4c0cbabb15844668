"""HDF5 shards: sample ``i`` is ``jpeg[offsets[i]:offsets[i+1]]`` (see the HDF5 writer).

Block reads: the JPEG bytes of consecutive samples lie end to end in ``jpeg``, so
a range of samples is read with one HDF5 call per block of up to :attr:`HDF5Dataset.block_bytes`
(``jpeg[offsets[k]:offsets[j]]``) and cut into samples in numpy. One HDF5 call per sample
(the former path, kept for comparison with ``block_bytes = 0``) pays HDF5's selection and
chunk-lookup overhead per ~110 KB image; a block pays it once per several MB.

Zero-copy batches (:meth:`HDF5Dataset.sample_extents`): the writer stores ``jpeg`` in unfiltered
chunks allocated in order, so the whole array is one byte range of the file and sample ``i`` is
``offsets[i+1] - offsets[i]`` bytes at ``start of jpeg + offsets[i]``; HDF5's chunk index says
where (read once per shard file in a reader process), and the batch path reads each sample from
there with ``preadv``, HDF5 out of the loop. A shard whose chunks are filtered or out of order is
read through HDF5 instead.
"""

from __future__ import annotations

import io
from typing import BinaryIO, Callable, ClassVar, Iterator

import numpy as np

from hpcbench.data.errors import CorruptRecordError
from hpcbench.data.readers.base import SampleExtents, ShardedImageDataset, register_reader
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

    def read_range(self, shard: OpenedShard, start: int, stop: int) -> Iterator[tuple[bytes, int]]:
        where = str(shard.path)
        try:
            # A block spans whole chunks, read once each: no cache, HDF5 reads into the result.
            cache = CHUNK_CACHE_BYTES if self.block_bytes <= 0 else 0
            with _open(shard, cache) as f:
                offsets, labels, jpeg = _index(f, start, stop, where)
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

    def sample_extents(self, shard: OpenedShard, start: int, stop: int) -> SampleExtents | None:
        return self.indexed_extents(shard, start, stop)

    def shard_index(self, fh: BinaryIO, shard: OpenedShard) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        import h5py

        with h5py.File(fh, "r", rdcc_nbytes=0) as f:
            return self._contiguous_index(f, shard)

    def open_indexed(self, shard: OpenedShard) -> tuple[tuple[np.ndarray, ...] | None, int, Callable[[], None]]:
        # HDF5 reads its metadata through its own C driver from the path: many small reads that
        # through a Python file object cost ~25 ms per shard. Its descriptor then serves the samples.
        import h5py

        try:
            f = h5py.File(shard.path, "r", rdcc_nbytes=0)
        except (KeyError, ValueError) as exc:
            raise CorruptRecordError(f"not an HDF5 file ({exc})", path=str(shard.path)) from None
        try:
            return self._contiguous_index(f, shard), f.id.get_vfd_handle(), f.close
        except BaseException:
            f.close()
            raise

    def _contiguous_index(self, f, shard: OpenedShard) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        where, n = str(shard.path), self.manifest.shards[shard.index].samples
        try:
            offsets, labels, jpeg = _index(f, 0, n, where)
            first = contiguous_start(jpeg)
        except (KeyError, ValueError) as exc:
            raise CorruptRecordError(f"not an hpcbench image shard ({exc})", path=where) from None
        if first is None:
            return None
        return first + offsets[:-1], np.diff(offsets), labels


def _open(shard: OpenedShard, cache: int):
    """The shard as an h5py File: from memory after a sha256 check, else from its path (a counted open)."""
    import h5py

    if shard.data is not None:
        return h5py.File(io.BytesIO(shard.data), "r", rdcc_nbytes=cache)
    shard.access.opens += 1
    try:
        return h5py.File(shard.path, "r", rdcc_nbytes=cache)
    except (KeyError, ValueError) as exc:
        raise CorruptRecordError(f"not an HDF5 file ({exc})", path=str(shard.path)) from None


def _index(f, start: int, stop: int, where: str) -> tuple[np.ndarray, np.ndarray, object]:
    """``offsets[start:stop + 1]``, ``labels[start:stop]`` and the ``jpeg`` dataset, checked."""
    offsets = f["offsets"][start:stop + 1]
    labels = f["labels"][start:stop]
    jpeg = f["jpeg"]
    if len(offsets) != stop - start + 1 or len(labels) != stop - start:
        raise CorruptRecordError(f"holds fewer samples than the manifest's {stop}", path=where)
    # A damaged index would otherwise cut silently wrong (numpy slices never fail).
    if (np.diff(offsets) < 0).any() or offsets[0] < 0 or offsets[-1] > jpeg.shape[0]:
        raise CorruptRecordError("its offsets are not increasing or point past the jpeg bytes", path=where)
    return offsets, labels, jpeg


def contiguous_start(dataset) -> int | None:
    """The file offset of a 1-D uint8 dataset stored as one byte range, or None.

    One byte range: contiguous layout, or unfiltered chunks of full size that follow each other
    in the file in index order (what writing the array in one call allocates).
    """
    if dataset.dtype != np.uint8 or dataset.ndim != 1 or dataset.id.get_create_plist().get_nfilters():
        return None
    if dataset.chunks is None:
        return dataset.id.get_offset()  # None when no storage is allocated (an empty array)
    chunk, first = dataset.chunks[0], None
    chunks = dataset.id.get_num_chunks()
    if chunks != -(-dataset.shape[0] // chunk):  # a chunk never written has no storage
        return None
    for i in range(chunks):
        info = dataset.id.get_chunk_info(i)
        if first is None:
            first = info.byte_offset
        if (info.chunk_offset[0] != i * chunk or info.filter_mask or info.size != chunk
                or info.byte_offset != first + i * chunk):
            return None
    return first


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
