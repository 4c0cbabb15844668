"""Tar shards in WebDataset layout: ``KEY.jpg`` + ``KEY.cls`` members, read in sequence.

Zero-copy batches (:meth:`TarDataset.sample_extents`): a member's bytes lie at its header's
``offset_data``, so a shard's headers give every sample's extent. Walking them costs Python time per
member, so the index is kept per shard file version in the reader process
(:meth:`~hpcbench.data.readers.base.ShardedImageDataset.indexed_extents`): a persistent DataLoader
worker walks a shard once, not every epoch (WebDataset's indexed reader keeps an index file for this).
"""

from __future__ import annotations

import tarfile
from typing import BinaryIO, Iterator

import numpy as np

from hpcbench.data.errors import CorruptRecordError
from hpcbench.data.readers.base import SampleExtents, ShardedImageDataset, register_reader
from hpcbench.data.resilience import OpenedShard


@register_reader
class TarDataset(ShardedImageDataset):
    format = "tar"

    def read_range(self, shard: OpenedShard, start: int, stop: int) -> Iterator[tuple[bytes, int]]:
        where = str(shard.path)
        try:
            with shard.open_file() as fh, tarfile.open(fileobj=fh, mode="r:") as tar:
                pos, key, parts = 0, None, {}
                for member in tar:
                    base, _, ext = member.name.rpartition("/")[2].partition(".")
                    if key is not None and base != key:
                        if pos >= start:
                            yield self._sample(parts, where, pos)
                        pos += 1
                        parts = {}
                        if pos >= stop:
                            return
                    key = base
                    if pos >= start and member.isfile():
                        parts[ext] = tar.extractfile(member).read()
                if key is not None and pos < stop:
                    if pos >= start:
                        yield self._sample(parts, where, pos)
                    pos += 1
                if pos < stop:
                    raise CorruptRecordError(f"holds {pos} samples, the manifest says at least {stop}", path=where)
        except tarfile.TarError as exc:
            raise CorruptRecordError(f"unreadable tar ({exc})", path=where) from None

    @staticmethod
    def _sample(parts: dict[str, bytes], where: str, pos: int) -> tuple[bytes, int]:
        try:
            return parts["jpg"], int(parts["cls"])
        except (KeyError, ValueError):
            raise CorruptRecordError(f"sample {pos} lacks a .jpg or a valid .cls member", path=where) from None

    def sample_extents(self, shard: OpenedShard, start: int, stop: int) -> SampleExtents | None:
        return self.indexed_extents(shard, start, stop)

    def shard_index(self, fh: BinaryIO, shard: OpenedShard) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every sample's ``.jpg`` extent and ``.cls`` label, from the members' headers."""
        where = str(shard.path)
        starts, sizes, labels = [], [], []
        try:
            with tarfile.open(fileobj=fh, mode="r:") as tar:
                members = tar.getmembers()  # every header first: the label reads below move fh
        except tarfile.TarError as exc:
            raise CorruptRecordError(f"unreadable tar ({exc})", path=where) from None
        key, parts = None, {}
        for member in [*members, None]:
            base, _, ext = ("", "", "") if member is None else member.name.rpartition("/")[2].partition(".")
            if key is not None and (member is None or base != key):
                try:
                    (offset, size), (cls_at, cls_size) = parts["jpg"], parts["cls"]
                    fh.seek(cls_at)
                    labels.append(int(fh.read(cls_size)))
                except (KeyError, ValueError):
                    raise CorruptRecordError(f"sample {len(starts)} lacks a .jpg or a valid .cls member",
                                             path=where) from None
                starts.append(offset)
                sizes.append(size)
                parts = {}
            if member is None:
                break
            key = base
            if member.isfile():
                parts[ext] = (member.offset_data, member.size)
        return np.asarray(starts, np.int64), np.asarray(sizes, np.int64), np.asarray(labels, np.int64)
