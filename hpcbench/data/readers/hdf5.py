"""HDF5 shards: sample ``i`` is ``jpeg[offsets[i]:offsets[i+1]]`` (see the HDF5 writer)."""

from __future__ import annotations

import io
from typing import Iterator

from hpcbench.data.errors import CorruptRecordError
from hpcbench.data.readers.base import ShardedImageDataset, register_reader
from hpcbench.data.resilience import OpenedShard

#: HDF5's chunk cache per open file: a few 512 KiB chunks, so consecutive samples reuse them.
CHUNK_CACHE_BYTES = 4 << 20


@register_reader
class HDF5Dataset(ShardedImageDataset):
    format = "hdf5"

    def read_range(self, shard: OpenedShard, start: int, stop: int) -> Iterator[tuple[bytes, int]]:
        import h5py

        where = str(shard.path)
        if shard.data is not None:
            source = io.BytesIO(shard.data)
        else:
            shard.access.opens += 1
            source = shard.path
        try:
            with h5py.File(source, "r", rdcc_nbytes=CHUNK_CACHE_BYTES) as f:
                offsets = f["offsets"][start:stop + 1]
                labels = f["labels"][start:stop]
                jpeg = f["jpeg"]
                if len(offsets) != stop - start + 1 or len(labels) != stop - start:
                    raise CorruptRecordError(f"holds fewer samples than the manifest's {stop}", path=where)
                for k in range(stop - start):
                    yield jpeg[offsets[k]:offsets[k + 1]].tobytes(), int(labels[k])
        except (KeyError, ValueError) as exc:
            raise CorruptRecordError(f"not an hpcbench image shard ({exc})", path=where) from None
