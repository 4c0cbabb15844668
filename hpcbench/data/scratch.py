"""A benchmark's scratch folder on this disk: the one given (kept), or a new one under ./results (removed).

Under ./results rather than /tmp: /tmp may be a tmpfs, where a cold page cache and an fsync mean
nothing, and the benchmarks that use it measure both.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def disk_scratch(root: str | Path | None, prefix: str) -> Iterator[Path]:
    """``root`` (created if missing, kept afterwards), or a new ``results/<prefix>*`` folder removed afterwards.

    Args:
        root: the folder the caller asked for (``--root``); None or empty for a temporary one.
        prefix: name prefix of the temporary folder.
    """
    if root:
        path = Path(root)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    Path("results").mkdir(exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="results"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
