"""A cold page cache for every measured epoch: evict a data set's files, then check it worked.
Also the plain sequential read that benchmarks compare readers with, which warms a cache too
(:func:`sequential_read`, :func:`prepare_cache`), and GNU ``cat`` timed on the same files (:func:`cat_read`).

Eviction: ``fsync`` (dirty pages cannot be dropped) then ``posix_fadvise(POSIX_FADV_DONTNEED)``
per file: no root needed, only this data set's pages go (``echo 1 > drop_caches`` would
empty the whole machine's cache). The kernel may ignore the advice (some network and
overlay file systems do), so residency is measured afterwards with ``mincore(2)`` over a
read-only mapping of each file: the fraction of the data set's pages still in memory.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

#: Eviction counts as having worked when at most this share of pages stays resident.
RESIDENT_LIMIT = 0.05

_PAGE = os.sysconf("SC_PAGE_SIZE")
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
_MAP_FAILED = ctypes.c_void_p(-1).value


@dataclass(frozen=True)
class Eviction:
    files: int
    pages: int
    resident_before: float | None
    """Share of pages resident before eviction (None where mincore is unavailable)."""
    resident_after: float | None
    method: str

    @property
    def worked(self) -> bool | None:
        return None if self.resident_after is None else self.resident_after <= RESIDENT_LIMIT

    def describe(self) -> str:
        if self.resident_after is None:
            return f"{self.method} on {self.files} files; residency unknown (mincore unavailable)"
        state = "evicted" if self.worked else "NOT evicted"
        return (f"{state}: {self.resident_after:.1%} of {self.pages} pages resident after {self.method} "
                f"on {self.files} files (before: {self.resident_before:.1%})")


def resident_pages(path: str | os.PathLike) -> tuple[int, int] | None:
    """(resident pages, total pages) of a file via mincore; None if it cannot be checked."""
    size = os.path.getsize(path)
    if size == 0:
        return 0, 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            return None
        try:
            pages = (size + _PAGE - 1) // _PAGE
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, size, vec) != 0:
                return None
            return sum(b & 1 for b in vec), pages
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def residency(paths: Iterable[Path]) -> tuple[float | None, int]:
    resident = total = 0
    for p in paths:
        r = resident_pages(p)
        if r is None:
            return None, 0
        resident += r[0]
        total += r[1]
    return (resident / total if total else 0.0), total


def evict(paths: Iterable[str | os.PathLike]) -> Eviction:
    """Drop ``paths`` from the page cache and measure how much stayed."""
    paths = [Path(p) for p in paths]
    before, _ = residency(paths)
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    after, pages = residency(paths)
    return Eviction(len(paths), pages, before, after, "posix_fadvise(DONTNEED)")


_READ_BUFFERS: dict[tuple[int, int], list[memoryview]] = {}


def aligned_buffer(nbytes: int) -> mmap.mmap:
    """``nbytes`` of page-aligned private memory, every page faulted in, in huge pages where the kernel has them.

    Page-aligned, as GNU ``cat`` and ``dd`` align their read buffers: the kernel's copy out of the page cache
    is fastest when source and destination lie alike within a cache line, and a file's offset ``x`` lies at
    ``x`` modulo the page. Private, as ``mmap``'s default (shared) memory is shmem, which this kind of VM keeps
    in 4 KiB pages (a reader's batches cost more CPU time in it); huge pages asked for as numpy
    asks for them for its large arrays (transparent huge pages are often "madvise" only).
    """
    memory = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        memory.madvise(mmap.MADV_HUGEPAGE)
    memory.write(bytes(nbytes))  # fault every page in now, not in a timed read
    return memory


def _read_buffers(chunk: int, n: int) -> list[memoryview]:
    """``n`` buffers of ``chunk`` bytes, made (and so faulted in) once per process: a timed read pays no
    allocation. The 4 sizes asked for last are kept (a benchmark alternates two).

    :func:`aligned_buffer`, as the readers' own buffers: a ``bytearray``'s place is the allocator's, and on this
    project's VM an 8 MiB one 16 bytes off a line read a warm file at 6.3 GB/s, an aligned one at 9.9 GB/s,
    8 bytes off 2.7 GB/s.
    """
    key = (chunk, n)
    if key not in _READ_BUFFERS:
        while len(_READ_BUFFERS) >= 4:
            del _READ_BUFFERS[next(iter(_READ_BUFFERS))]
        _READ_BUFFERS[key] = [memoryview(aligned_buffer(chunk)) for _ in range(n)]
    return _READ_BUFFERS[key]


def sequential_read(paths: Iterable[str | os.PathLike], chunk: int = 8 << 20, buffers: int = 1) -> int:
    """Read ``paths`` in order, one stream of ``chunk``-sized ``readinto`` calls; returns the bytes read.

    The limit a reader of the same files is measured against: one copy out of the page cache (or
    the disk) into one reused buffer, nothing done per byte. On a warm cache one 8 MiB buffer
    stays in a server CPU's last-level cache, so the copy never writes to DRAM; a loader's batches
    must live in memory a consumer holds. ``buffers`` > 1 reads into that many buffers in turn:
    with batch-sized buffers, the same copy into memory a loader's batches would occupy. The
    buffers are made once per process and kept, so that no read pays for their page faults.
    """
    bufs = _read_buffers(chunk, max(1, buffers))
    total = turn = 0
    for p in paths:
        with open(p, "rb", buffering=0) as fh:
            while n := fh.readinto(bufs[turn]):
                total += n
                turn = (turn + 1) % len(bufs)
    return total


_CAT_START: dict[str, float] = {}


def cat_read(paths: Iterable[str | os.PathLike]) -> float:
    """Seconds the system's ``cat`` takes to read ``paths`` in one process, output to ``/dev/null``, its
    start-up subtracted: the "plain sequential read" most engineers would time by hand.

    GNU ``cat`` reads 128 KiB at a time into one reused buffer (``strace`` shows it), more calls than
    :func:`sequential_read`'s 8 MiB: on this project's VM, warm, 9.2 GB/s against 15.7 GB/s on the same files.
    The start-up (``cat /dev/null``, the fastest of 5, measured once per process: ~1.1 ms here) is the
    process's exec and loading, not reading.

    Raises:
        FileNotFoundError: no ``cat`` on PATH, or a file of ``paths`` is missing (named).
    """
    paths = [os.fspath(p) for p in paths]
    for p in paths:
        if not os.path.isfile(p):
            raise FileNotFoundError(f"cat_read: no such file: {p}")
    cat = shutil.which("cat")
    if cat is None:
        raise FileNotFoundError("cat_read: no `cat` on PATH (coreutils)")

    def run(args: list[str]) -> float:
        t0 = time.perf_counter()
        subprocess.run([cat, *args], stdout=subprocess.DEVNULL, check=True)
        return time.perf_counter() - t0

    if cat not in _CAT_START:
        _CAT_START[cat] = min(run([os.devnull]) for _ in range(5))
    return max(run(paths) - _CAT_START[cat], 0.0)


def prepare_cache(paths: list[Path], cache: str) -> str:
    """Put ``paths`` in the page-cache state ``cache`` (``cold``: evicted; ``warm``: read once);
    returns what was done (the eviction's note, or ``warm``)."""
    if cache == "cold":
        return evict(paths).describe()
    sequential_read(paths)
    return "warm"
