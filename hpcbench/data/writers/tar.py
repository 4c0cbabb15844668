"""Tar shards in WebDataset layout: per sample ``KEY.jpg`` (the JPEG bytes) then ``KEY.cls``
(the label as ASCII digits), consecutive members sharing a dot-free key."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from hpcbench.data.writers.base import ShardWriter, SourceSample, register_writer

# Fixed member metadata, so that the same samples always give the same bytes.
_MTIME = 0


@register_writer
class TarWriter(ShardWriter):
    format = "tar"
    suffix = "tar"

    def open_shard(self, path: Path) -> None:
        self._tar = tarfile.open(path, "w", format=tarfile.USTAR_FORMAT)

    def _add(self, name: str, data: bytes) -> int:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), _MTIME, 0o444
        self._tar.addfile(info, io.BytesIO(data))
        return tarfile.BLOCKSIZE + -(-len(data) // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE

    def write(self, sample: SourceSample) -> int:
        return self._add(f"{sample.key}.jpg", sample.data) + self._add(f"{sample.key}.cls",
                                                                        str(sample.label).encode())

    def close_shard(self) -> None:
        self._tar.close()
