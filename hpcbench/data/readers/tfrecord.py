"""TFRecord shards: records read in sequence, each CRC-checked and parsed as a tf.train.Example."""

from __future__ import annotations

from typing import Iterator

from hpcbench.data.errors import CorruptRecordError
from hpcbench.data.readers.base import ShardedImageDataset, register_reader
from hpcbench.data.resilience import OpenedShard
from hpcbench.data.tfrecord_format import decode_example, read_record, skip_record


@register_reader
class TFRecordDataset(ShardedImageDataset):
    format = "tfrecord"

    def read_range(self, shard: OpenedShard, start: int, stop: int) -> Iterator[tuple[bytes, int]]:
        where = str(shard.path)
        with shard.open_file() as fh:
            for _ in range(start):
                if not skip_record(fh, where=where):
                    raise CorruptRecordError(f"ends before record {start}", path=where)
            for pos in range(start, stop):
                data = read_record(fh, where=where)
                if data is None:
                    raise CorruptRecordError(f"ends at record {pos}, the manifest says {stop}", path=where)
                example = decode_example(data)
                try:
                    yield example["image"][0], int(example["label"][0])
                except (KeyError, IndexError):
                    raise CorruptRecordError(f"record {pos} lacks 'image' or 'label'", path=where) from None
