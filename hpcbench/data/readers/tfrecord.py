"""TFRecord shards: records read in sequence, each CRC-checked and parsed as a tf.train.Example.

Zero-copy batches (:meth:`TFRecordDataset.sample_extents`): a shard is indexed once per file
version in a reader process (each record's offset and length, where the ``image`` value lies in
it, the label), and from then on each sample is one ``preadv`` of its whole record into a small
scratch buffer, both CRC-32Cs checked as on the per-sample path, and its image bytes copied into
the batch: a copy of ~110 KB that is still in the CPU's cache. No Example is parsed again.

Run reads (``order="runs"``): a run of records is read in one call straight into the batch, framing
included; each record's two CRC-32Cs are checked where it lies, and the batch's ``image_spans`` point at
the image bytes inside the records. One copy per byte, as the other formats.
"""

from __future__ import annotations

import os
from typing import BinaryIO, Iterator

import numpy as np

from hpcbench.data.errors import CorruptRecordError
from hpcbench.data.readers.base import SampleExtents, ShardedImageDataset, register_reader
from hpcbench.data.resilience import OpenedShard
from hpcbench.data.tfrecord_format import (FOOTER_BYTES, HEADER_BYTES, bytes_feature_span, check_record,
                                           decode_example, read_record, skip_record)


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

    def shard_index(self, fh: BinaryIO, shard: OpenedShard) -> tuple[np.ndarray, ...]:
        """Per record: its offset, the image's length, the label, the record's data length, the
        image's offset in the data. Every record is read and checked once here."""
        where = str(shard.path)
        rows = []
        offset = 0
        while (data := read_record(fh, where=where)) is not None:
            span = bytes_feature_span(data, "image")
            try:
                label = int(decode_example(data)["label"][0])
            except (KeyError, IndexError):
                span = None
            if span is None:
                raise CorruptRecordError(f"record {len(rows)} lacks 'image' or 'label'", path=where)
            rows.append((offset, span[1], label, len(data), span[0]))
            offset += HEADER_BYTES + len(data) + FOOTER_BYTES
        table = np.asarray(rows, dtype=np.int64).reshape(-1, 5)
        return tuple(table[:, i].copy() for i in range(5))

    def sample_extents(self, shard: OpenedShard, start: int, stop: int) -> SampleExtents | None:
        ext = self.indexed_extents(shard, start, stop)
        if ext is None:
            return None
        where, lengths, inside = str(shard.path), ext.extra[0].tolist(), ext.extra[1].tolist()
        starts, data, fd = ext.starts.tolist(), ext.data, ext.fd
        # From the file, one record at a time into a scratch buffer that stays in the CPU's cache
        # for the copy out of it; from a shard in memory, the record is a view of it.
        scratch = None if fd is None else memoryview(bytearray(HEADER_BYTES + max(lengths, default=0)
                                                                + FOOTER_BYTES))

        def read(out: memoryview, k: int) -> int:
            total = HEADER_BYTES + lengths[k] + FOOTER_BYTES
            if fd is None:
                record = data[starts[k]:starts[k] + total]
            else:
                record = scratch[:total]
                got = os.preadv(fd, (record,), starts[k])
                if got != total:
                    raise CorruptRecordError(f"record {k} of the piece is cut short ({got} of {total} bytes)",
                                             path=where)
            check_record(record, lengths[k], where=where)
            at = HEADER_BYTES + inside[k]
            out[:] = record[at:at + len(out)]
            return len(out)
        ext.read = read
        # Run reads (order="runs"): whole records end to end, each checked where it lies in the batch.
        record_len = ext.extra[0]
        ext.records = (ext.starts, ext.starts + HEADER_BYTES + record_len + FOOTER_BYTES,
                       ext.starts + HEADER_BYTES + ext.extra[1])
        ext.check = lambda record, k: check_record(record, lengths[k], where=where)
        return ext
