"""Tar shards in WebDataset layout: ``KEY.jpg`` + ``KEY.cls`` members, read in sequence."""

from __future__ import annotations

import tarfile
from typing import Iterator

from hpcbench.data.errors import CorruptRecordError
from hpcbench.data.readers.base import ShardedImageDataset, register_reader
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
