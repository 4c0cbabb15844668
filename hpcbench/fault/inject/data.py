"""Data faults: a shard (or a checkpoint file) damaged in place, as bit rot or a torn write leaves it.

A flipped byte keeps the size, so only a checksum (the manifest's sha256) sees it; a cut file
is what a job killed in the middle of a write leaves behind.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from hpcbench.fault.inject.base import FaultError

#: How a file can be damaged.
DAMAGE_HOW = ("flip", "truncate")


@dataclass
class ShardDamage:
    """What :func:`corrupt_shard` did: the file, how, at which byte, its size before, and when."""

    path: str
    how: str
    offset: int
    bytes_before: int
    at: float


def corrupt_shard(path: str | os.PathLike, *, how: str = "flip", at: float = 0.5) -> ShardDamage:
    """Damage a data shard in place: flip one byte (``"flip"``) or cut the file (``"truncate"``).

    Args:
        path: the shard file.
        how: ``flip`` (size unchanged: only a sha256 check sees it) or ``truncate``.
        at: where, as a fraction of the file's size.
    """
    path = Path(path)
    size = path.stat().st_size
    offset = min(size - 1, max(0, int(size * at)))
    if how == "flip":
        with open(path, "r+b") as fh:
            fh.seek(offset)
            byte = fh.read(1)
            fh.seek(offset)
            fh.write(bytes([byte[0] ^ 0xFF]))
    elif how == "truncate":
        os.truncate(path, offset)
    else:
        raise FaultError(f"how={how!r}; allowed: {list(DAMAGE_HOW)}")
    return ShardDamage(str(path), how, offset, size, time.time())
