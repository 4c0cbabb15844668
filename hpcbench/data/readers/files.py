"""The small-file baseline: one JPEG per file in class folders (one open per sample)."""

from __future__ import annotations

from typing import Iterator

from hpcbench.data.readers.base import ShardedImageDataset, register_reader
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
