"""Files written whole or not at all, with the permissions the user's umask asks for.

Every file hpcbench writes for others to read (records, ``status.json``, ``run.json``,
``report.json``, a site's index) goes through :func:`atomic_write`: a temporary file in
the same directory, fsync, rename over the target. Rename is atomic within one file
system, so a reader (another rank, the report, a web server) never sees half a file and
a killed writer leaves none behind.

``tempfile.mkstemp`` creates its file ``0600`` and the rename keeps that mode, so without
care every result would be readable by its owner only, whatever the umask: colleagues in
a shared project folder (``umask 002`` and a group-owned, setgid directory) could not read
the records or build a report. :func:`atomic_write` gives the file ``0o666 & ~umask``,
the mode ``open()`` would have given it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from pathlib import Path
from typing import IO, Iterator

#: Where Linux (>= 4.7) shows a process's umask without changing it.
PROC_STATUS = Path("/proc/self/status")

_fallback_lock = threading.Lock()
_fallback_umask: int | None = None


def current_umask() -> int:
    """The process's umask, read without changing it where the kernel shows it.

    ``/proc/self/status`` is read on every call: it is race-free and cheap, and follows a
    notebook that sets ``os.umask(0o002)`` in its first cell. Elsewhere the only way is to
    set a umask and put the old one back, which a thread creating a file at that instant
    would see; that is done once per process, under a lock, and cached.

    Returns:
        The umask, e.g. ``0o022``.
    """
    try:
        with open(PROC_STATUS, encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    global _fallback_umask
    with _fallback_lock:
        if _fallback_umask is None:
            # 0o077 for the instant, not 0: a file another thread creates then gets
            # fewer permissions than asked for, never world-writable.
            old = os.umask(0o077)
            os.umask(old)
            _fallback_umask = old
        return _fallback_umask


def file_mode() -> int:
    """The mode a new regular file gets from ``open()`` here: ``0o666 & ~umask``."""
    return 0o666 & ~current_umask()


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", *, encoding: str = "utf-8") -> Iterator[IO]:
    """Write ``path`` through a temporary sibling that replaces it once complete.

    Use as ``with atomic_write(path, "w") as fh: fh.write(text)``. The parent folder is
    created. The temporary file is hidden (``.<name>.<random>.tmp``: readers that skip
    dot-files, as :func:`hpcbench.core.results.find_record_files` does, never pick it up)
    and removed when the body raises or is interrupted; ``path`` is then left as it was.

    Args:
        path: the file to create or replace.
        mode: ``"wb"`` (bytes) or ``"w"`` (text).
        encoding: for text mode.

    Yields:
        The open temporary file.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write: mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **({"encoding": encoding} if mode == "w" else {})) as fh:
            os.fchmod(fh.fileno(), file_mode())  # mkstemp's 0600 would survive the rename
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush the folder ``path`` itself to the disk: the names created, renamed or removed in it.

    A file's own fsync leaves its name in the folder to the kernel's cache; a crash can then lose a
    rename that had already returned. Needed after renaming a finished folder into place.
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["atomic_write", "current_umask", "file_mode", "fsync_dir"]
