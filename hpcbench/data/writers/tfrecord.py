"""TFRecord shards: one ``tf.train.Example`` per image with ``image`` (bytes), ``label`` (int64)
and ``key`` (bytes), framed with masked CRC-32C (see :mod:`hpcbench.data.tfrecord_format`)."""

from __future__ import annotations

from pathlib import Path

from hpcbench.data.tfrecord_format import encode_example, encode_record
from hpcbench.data.writers.base import ShardWriter, SourceSample, register_writer


@register_writer
class TFRecordWriter(ShardWriter):
    format = "tfrecord"
    suffix = "tfrecord"

    def open_shard(self, path: Path) -> None:
        self._fh = open(path, "wb")

    def write(self, sample: SourceSample) -> int:
        record = encode_record(encode_example({"image": sample.data, "label": sample.label,
                                               "key": sample.key.encode()}))
        self._fh.write(record)
        return len(record)

    def close_shard(self) -> None:
        self._fh.close()
