"""The small-file baseline: one JPEG per file in class folders (one open per sample)."""

from __future__ import annotations

import os
from typing import Iterator

import numpy as np

from hpcbench.data.readers.base import SampleExtents, ShardedImageDataset, register_reader
from hpcbench.data.resilience import OpenedShard


@register_reader
class FilesDataset(ShardedImageDataset):
    format = "files"

    def read_range(self, shard: OpenedShard, start: int, stop: int) -> Iterator[tuple[bytes, int]]:
        if start >= stop:
            return
        label = self.manifest.shards[shard.index].label
        if shard.data is not None:
            yield shard.data, label
            return
        with shard.open_file() as fh:
            data = fh.read()
        yield data, label

    def sample_extents(self, shard: OpenedShard, start: int, stop: int) -> SampleExtents | None:
        if start >= stop:
            return SampleExtents(*(np.zeros(0, np.int64) for _ in range(3)))
        label = np.array([self.manifest.shards[shard.index].label], dtype=np.int64)
        if shard.data is not None:
            return SampleExtents(np.zeros(1, np.int64), np.array([len(shard.data)]), label, data=memoryview(shard.data))
        shard.access.opens += 1
        fd = os.open(shard.path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
        except OSError:
            os.close(fd)
            raise
        return SampleExtents(np.zeros(1, np.int64), np.array([size]), label, fd=fd, close=lambda: os.close(fd))
