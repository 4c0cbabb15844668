"""Two-tier checkpoints on disk: when to write, how to write safely, which one to resume from.

The field guide's best practice (C11): the full state every hour, a light checkpoint every
ten minutes, Zstandard compression; its first level of fault tolerance (guide sec. 2.5) names
checkpoints by host and SLURM job id. :class:`CheckpointPolicy` holds those intervals (in
wall time or steps), the retention and the compression level; :class:`CheckpointManager`
writes, lists, validates and loads checkpoints in one folder.

On disk a checkpoint is a directory ``<tier>-<host>-job<SLURM_JOB_ID|local>-step<step:08d>``
holding ``state.pt.zst`` (``state.pt`` at level 0) and ``manifest.json`` (tier, step, host,
job id, creation time, each file's sha256 and size, codec and level, torch version).

Why a checkpoint is never half there:

* the directory is built under a hidden temporary name (``.<name>.<random>.tmp``), each file
  through :func:`hpcbench.core.atomic.atomic_write` (temporary file, fsync, rename), the
  manifest last; the directory is fsynced, renamed to its final name, and the parent folder
  is fsynced so that the rename itself survives a power loss;
* a checkpoint is valid only when its manifest is readable and every file it lists has the
  listed size (cheap, checked by :meth:`CheckpointManager.list`) and sha256 (checked before
  a checkpoint is resumed from, by :meth:`~CheckpointManager.latest_valid` and
  :meth:`~CheckpointManager.load`). A SIGKILL mid-write leaves only a hidden temporary
  directory; storage that loses or corrupts bytes later is caught by the sizes and hashes;
* retention deletes old checkpoints only after the new one is in place, and deletes by
  renaming to a hidden name first, so a kill mid-delete leaves nothing that looks valid;
* a full disk (ENOSPC, or EDQUOT on a quota) raises :class:`CheckpointError` naming the
  folder and the bytes needed, after removing the partial directory; earlier checkpoints are
  untouched.

Loading always uses ``torch.load(weights_only=True)``: a checkpoint is data, and one that
holds pickled objects (code) is refused.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import logging
import os
import pickle
import re
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Literal

from hpcbench.core.atomic import atomic_write, current_umask, fsync_dir
from hpcbench.core.config import Config, param
from hpcbench.core.errors import CheckpointError
from hpcbench.data.manifest import sha256_file

__all__ = ["CheckpointPolicy", "CheckpointManager", "CheckpointInfo", "SavedCheckpoint", "CheckpointError",
           "Tier", "TIERS", "checkpoint_name", "compress_bytes", "write_compressed", "decompress_bytes", "remove_torn",
           "MANIFEST", "MANIFEST_FORMAT"]

log = logging.getLogger(__name__)

Tier = Literal["full", "light"]
TIERS: tuple[str, ...] = ("full", "light")
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "hpcbench.fault.checkpoint/1"
_NAME_RE = re.compile(r"^(?P<tier>full|light)-(?P<host>[A-Za-z0-9._-]+?)-job(?P<job>[A-Za-z0-9._]+)"
                      r"-step(?P<step>\d{8,})$")
#: Hidden leftovers: a write in progress or killed (``.tmp``), a delete in progress (``.trash``).
_HIDDEN_RE = re.compile(r"^\.(full|light)-.*\.(tmp|trash)$")
#: Levels accepted by the policy. zstd itself goes further down (to -131072), but below -7
#: the ratio on float tensors is ~1 and the level only costs a field nobody should set.
ZSTD_MIN_LEVEL, ZSTD_MAX_LEVEL = -7, 22


@dataclass
class CheckpointPolicy(Config):
    """When to write which tier, how many to keep, how hard to compress (C11)."""

    full_every_s: float = param(3600.0, "seconds between full checkpoints (C11: the full state every hour); "
                                "0 = not by time", min=0)
    full_every_steps: int = param(0, "optimizer steps between full checkpoints; 0 = not by steps", min=0)
    light_every_s: float = param(600.0, "seconds between light checkpoints (C11: a light checkpoint every "
                                 "10 minutes); a full one resets this clock too; 0 = not by time", min=0)
    light_every_steps: int = param(0, "optimizer steps between light checkpoints; 0 = not by steps", min=0)
    keep_full: int = param(2, "full checkpoints kept (the newest by step); 2, so one survives if the newest "
                           "turns out damaged", min=1)
    keep_light: int = param(3, "light checkpoints kept (the newest by step)", min=1)
    zstd_level: int = param(3, "Zstandard level (C11 recommends zstd); 0 = no compression; negative = zstd's "
                            "fast levels; 3 is zstd's own default, the usual speed/ratio balance",
                            min=ZSTD_MIN_LEVEL, max=ZSTD_MAX_LEVEL)
    zstd_threads: int = param(0, "zstd worker threads; 0 = compress in the calling thread, -1 = one per core",
                              min=-1, max=256)
    async_light: bool = param(False, "write light checkpoints from a background thread after a CPU snapshot "
                              "(hpcbench.fault.async_save); full ones stay synchronous")

    config_name = "CheckpointPolicy"


@dataclass(frozen=True)
class SavedCheckpoint:
    """What one save wrote and what it cost."""

    path: Path
    tier: str
    step: int
    bytes_raw: int
    """Serialized (``torch.save``) size before compression."""
    bytes_written: int
    """Size of the data file on disk (compressed when zstd is on)."""
    seconds_serialize: float
    seconds_compress: float
    seconds_write: float
    """What writing (with its sha256), the fsyncs and the renames added beyond compressing: the write runs
    beside the compression (:func:`write_compressed`)."""
    sha256: str


@dataclass(frozen=True)
class CheckpointInfo:
    """One checkpoint directory as found on disk, valid or not (``reason`` says why not)."""

    path: Path
    tier: str
    step: int
    host: str
    job_id: str
    valid: bool
    reason: str = ""
    manifest: dict | None = None

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def created(self) -> float:
        """Creation time (unix seconds) from the manifest; 0 when there is none."""
        return float((self.manifest or {}).get("created_unix", 0.0))

    def _order(self) -> tuple:
        # newest = highest step; at one step a full beats a light (it holds more), then the later write
        return (self.step, self.tier == "full", self.created, self.name)


def checkpoint_name(tier: str, step: int, host: str, job_id: str) -> str:
    """``<tier>-<host>-job<job>-step<step:08d>``, with unsafe characters in host/job replaced by ``_``."""
    if tier not in TIERS:
        raise CheckpointError(f"tier must be one of {list(TIERS)}, got {tier!r}")
    if not isinstance(step, int) or step < 0:
        raise CheckpointError(f"step must be an int >= 0, got {step!r}")
    host = re.sub(r"[^A-Za-z0-9._-]", "_", host) or "unknown"
    job_id = re.sub(r"[^A-Za-z0-9._]", "_", job_id) or "local"
    return f"{tier}-{host}-job{job_id}-step{step:08d}"


class _BufferSink(io.RawIOBase):
    """A write-only file over a ``bytearray`` that it grows only when a save is larger than the last.

    Why not ``io.BytesIO``: memory the process has not touched yet must be faulted in page by page
    (and ``BytesIO`` regrows, copying). On the reference VM GPT-2 124M's 1.5 GB light state took
    4-6 s to serialize into new memory on every save, against 0.7 s into the memory the previous save
    used (the same bytes either way); its compression into a new output buffer 10 s against 2.8 s.
    """

    def __init__(self, buf: bytearray) -> None:
        super().__init__()
        self.buf = buf
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        with memoryview(b) as view:
            n = view.nbytes
            end = self.size + n
            if end > len(self.buf):
                self.buf.extend(bytes(max(end - len(self.buf), len(self.buf) // 2)))
            self.buf[self.size:end] = view.cast("B")
        self.size = end
        return n

    def tell(self) -> int:
        return self.size


def _tensor_bytes(obj: Any) -> int:
    """Bytes of the tensors in ``obj`` (nested dicts, lists, tuples): a serialized size's lower bound."""
    if hasattr(obj, "untyped_storage"):
        return obj.untyped_storage().nbytes()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


def serialize_state(state: Any, buf: bytearray | None = None) -> tuple[bytearray, int]:
    """``torch.save(state)`` into ``buf`` (reused, grown if needed; a new one sized from the tensors when None).

    Returns the buffer and how many of its bytes the save wrote: ``buf[:n]`` holds what an
    ``io.BytesIO`` would.
    """
    import torch

    if buf is None:
        buf = bytearray(_tensor_bytes(state) + (1 << 20))  # sized once: no regrowth copies during the save
    sink = _BufferSink(buf)
    torch.save(state, sink)
    return sink.buf, sink.size


@contextlib.contextmanager
def _view(buf: bytearray, n: int):
    """``buf[:n]`` without a copy, released on exit (a bytearray with a live view cannot grow)."""
    whole = memoryview(buf)
    part = whole[:n]
    try:
        yield part
    finally:
        part.release()
        whole.release()


#: Input slice fed to the streaming zstd compressor at a time; up to _WRITE_QUEUE compressed slices wait for
#: the writer thread.
_COMPRESS_SLICE = 8 << 20
_WRITE_QUEUE = 4


def write_compressed(data: memoryview, level: int, fh: Any, threads: int = 0) -> tuple[int, str, float]:
    """Zstandard-compress ``data`` at ``level`` (>= 1 or negative) into the open file ``fh``, slice by slice, each
    compressed slice hashed and written by a second thread while the next one is compressed.

    Why two threads: zstd and the file write (a copy into the page cache, in the kernel) both release the GIL,
    so on two cores they overlap. What it saves is the part of the write that compression can hide: a gain
    only while the disk is slower than the compression (compare the two ways alternated in one process).

    Returns:
        (bytes written, their sha256, seconds spent compressing). The frame records the content size,
        as :func:`compress_bytes` writes, so a truncated file is refused on load.

    Raises:
        The writer's error (a full disk: OSError ENOSPC) once compression stops; nothing is left running.
    """
    import queue

    if level == 0:
        raise CheckpointError("zstd level 0 means no compression: nothing to compress")
    cobj = _compressor(level, threads).compressobj(size=data.nbytes)
    digest = hashlib.sha256()
    pending: queue.Queue = queue.Queue(maxsize=_WRITE_QUEUE)
    failed: list[BaseException] = []
    written = 0

    def drain() -> None:
        nonlocal written
        while (chunk := pending.get()) is not None:
            if failed:
                continue  # keep taking slices so that the compressing thread never blocks on a full queue
            try:
                digest.update(chunk)
                fh.write(chunk)
                written += len(chunk)
            except BaseException as exc:  # handed to the caller's thread below
                failed.append(exc)

    writer = threading.Thread(target=drain, name="checkpoint-writer", daemon=True)
    writer.start()
    compressing = 0.0
    try:
        for start in range(0, data.nbytes, _COMPRESS_SLICE):
            if failed:
                break
            t0 = time.perf_counter()
            chunk = cobj.compress(data[start:start + _COMPRESS_SLICE])
            compressing += time.perf_counter() - t0
            if chunk:
                pending.put(chunk)
        if not failed:
            pending.put(cobj.flush())
    finally:
        pending.put(None)  # also after an exception in this thread (a signal): the writer ends, then it is raised
        writer.join()
    if failed:
        raise failed[0]
    return written, digest.hexdigest(), compressing


def compress_bytes(data: bytes | memoryview, level: int, threads: int = 0) -> bytes | memoryview:
    """Zstandard-compress ``data`` at ``level``; level 0 returns ``data`` unchanged (no copy).

    The frame records the content size, so :func:`decompress_bytes` detects a truncated frame.
    """
    if level == 0:
        return data
    return _compressor(level, threads).compress(data)


def _compressor(level: int, threads: int):
    """A zstd compressor at ``level`` (not 0), refusing a level zstd does not have."""
    import zstandard

    if not ZSTD_MIN_LEVEL <= level <= ZSTD_MAX_LEVEL:
        raise CheckpointError(f"zstd level {level} is out of range {ZSTD_MIN_LEVEL}..{ZSTD_MAX_LEVEL}")
    return zstandard.ZstdCompressor(level=level, threads=threads)


def decompress_bytes(data: bytes | memoryview) -> bytes:
    """Inverse of :func:`compress_bytes` for a zstd frame; raises CheckpointError on a damaged one."""
    import zstandard

    try:
        if zstandard.get_frame_parameters(data).content_size != _ZSTD_CONTENTSIZE_UNKNOWN:
            # a known size lets zstd itself refuse a truncated frame
            return zstandard.ZstdDecompressor().decompress(data)
        obj = zstandard.ZstdDecompressor().decompressobj()  # a streamed frame: check that it ended
        out = obj.decompress(data)
        if not obj.eof:
            raise CheckpointError("zstd frame is truncated")
        return out
    except zstandard.ZstdError as exc:
        raise CheckpointError(f"not a complete zstd frame: {exc}") from exc


#: What zstandard reports as the content size of a frame that does not record it (ZSTD_CONTENTSIZE_UNKNOWN).
_ZSTD_CONTENTSIZE_UNKNOWN = 2**64 - 1


def _hostname() -> str:
    return socket.gethostname() or "unknown"


def _delete_dir(path: Path) -> None:
    """Rename to a hidden ``.trash`` name, then remove: a kill mid-delete leaves nothing visible."""
    trash = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.trash")
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def _inspect(path: Path, verify: bool) -> CheckpointInfo | None:
    """A :class:`CheckpointInfo` for a directory named like a checkpoint, else None."""
    m = _NAME_RE.match(path.name)
    if not m or not path.is_dir():
        return None
    tier, step = m["tier"], int(m["step"])

    def info(valid: bool, reason: str = "", manifest: dict | None = None) -> CheckpointInfo:
        return CheckpointInfo(path=path, tier=tier, step=step, host=m["host"], job_id=m["job"], valid=valid,
                              reason=reason, manifest=manifest)

    mpath = path / MANIFEST
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return info(False, "manifest.json missing (torn write)")
    except (OSError, ValueError) as exc:
        return info(False, f"manifest.json unreadable: {exc}")
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        return info(False, f"manifest.json is not a {MANIFEST_FORMAT} manifest")
    if manifest.get("tier") != tier or manifest.get("step") != step:
        return info(False, f"manifest says {manifest.get('tier')} step {manifest.get('step')}, the name says "
                           f"{tier} step {step}", manifest)
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return info(False, "manifest lists no files", manifest)
    for fname, entry in files.items():
        fpath = path / fname
        try:
            size = fpath.stat().st_size
        except FileNotFoundError:
            return info(False, f"{fname} missing", manifest)
        if size != entry.get("bytes"):
            return info(False, f"{fname} has {size} bytes, the manifest says {entry.get('bytes')} (truncated)",
                        manifest)
        if verify and sha256_file(fpath) != entry.get("sha256"):
            return info(False, f"{fname} sha256 does not match the manifest (corrupted)", manifest)
    return info(True, "", manifest)


class CheckpointManager:
    """Writes, lists, validates and loads the checkpoints of one run folder.

    One writer per folder (rank 0); every rank may list and load. In a multi-rank run the
    ranks must agree on :meth:`due` (it reads a wall clock): let rank 0 decide and broadcast,
    as :mod:`hpcbench.fault.train` does.

    Args:
        root: the checkpoint folder (created).
        policy: intervals, retention and compression.
        host: the name's host part (default: this host's name).
        job_id: the name's job part (default: ``$SLURM_JOB_ID``, else ``local``).
        clock: seconds, for the wall-time intervals (injectable for tests).
        warn: called with one line per invalid checkpoint skipped (default: ``logging``).
    """

    def __init__(self, root: str | os.PathLike, policy: CheckpointPolicy | None = None, *,
                 host: str | None = None, job_id: str | None = None,
                 clock: Callable[[], float] = time.monotonic, warn: Callable[[str], None] | None = None):
        self.root = Path(root)
        self.policy = policy if policy is not None else CheckpointPolicy()
        self.host = host or _hostname()
        self.job_id = job_id or os.environ.get("SLURM_JOB_ID") or "local"
        self.clock = clock
        self.warn = warn or log.warning
        #: the invalid checkpoints the last :meth:`latest_valid` skipped
        self.skipped: list[CheckpointInfo] = []
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointError(f"cannot create the checkpoint folder: {exc}", path=self.root) from exc
        now = clock()
        self._last_full = now
        self._last_any = now
        self._async = None  # an AsyncCheckpointer, made on the first async light save
        # reused by every save (see save()): the largest state saved so far stays allocated
        self._raw_buf: bytearray | None = None
        self._buffers_lock = threading.Lock()

    # -- when -----------------------------------------------------------------
    def due(self, step: int) -> Tier | None:
        """Which tier is due after ``step`` completed optimizer steps, or None.

        By steps: a multiple of ``*_every_steps``. By time: ``*_every_s`` since the last
        save of that tier (for light: of either tier, since a full one holds a light one).
        A full checkpoint wins when both are due.
        """
        p, now = self.policy, self.clock()
        if _hit(step, p.full_every_steps) or (p.full_every_s > 0 and now - self._last_full >= p.full_every_s):
            return "full"
        if _hit(step, p.light_every_steps) or (p.light_every_s > 0 and now - self._last_any >= p.light_every_s):
            return "light"
        return None

    def mark_saved(self, tier: str) -> None:
        """Restart the interval clocks as of now (called when a state is captured)."""
        now = self.clock()
        self._last_any = now
        if tier == "full":
            self._last_full = now

    def maybe_save(self, step: int, full_state_fn: Callable[[], dict], light_state_fn: Callable[[], dict]
                   ) -> SavedCheckpoint | None:
        """Save the tier :meth:`due` names, capturing its state only then.

        Returns:
            What was written; None when nothing was due, or when the light checkpoint went to
            the background writer (``policy.async_light``; its result: ``self.wait()``).
        """
        tier = self.due(step)
        if tier is None:
            return None
        if tier == "light" and self.policy.async_light:
            self._async_writer().save("light", step, light_state_fn())
            return None
        # a full write must not race an in-flight light one (retention, disk space, ordering)
        self.wait()
        return self.save(tier, step, full_state_fn() if tier == "full" else light_state_fn())

    def wait(self) -> SavedCheckpoint | None:
        """Wait for a background light write, if any; re-raises its error. Returns its result."""
        return self._async.wait() if self._async is not None else None

    def _async_writer(self):
        if self._async is None:
            from hpcbench.fault.async_save import AsyncCheckpointer

            self._async = AsyncCheckpointer(self)
        return self._async

    # -- write ----------------------------------------------------------------
    def name_for(self, tier: str, step: int) -> str:
        return checkpoint_name(tier, step, self.host, self.job_id)

    def save(self, tier: str, step: int, state: dict, *, mark: bool = True) -> SavedCheckpoint:
        """Write one checkpoint atomically, then apply retention to its tier.

        Args:
            tier: ``"full"`` or ``"light"``.
            step: completed optimizer steps (part of the name).
            state: a dict of tensors and plain types (see :mod:`hpcbench.fault.state`).
            mark: restart the interval clocks (a background writer passes False: it marked
                them when it took the snapshot).

        Raises:
            CheckpointError: the folder is full (names it and the bytes needed) or unwritable;
                no partial checkpoint is left behind and earlier ones are untouched.
        """
        name = self.name_for(tier, step)
        if mark:
            self.mark_saved(tier)
        level, threads = self.policy.zstd_level, self.policy.zstd_threads
        import torch  # here, not at the top: the job wrapper's repair step (remove_torn) needs no torch

        # The serialized state's buffer is reused from save to save: a save into memory the last one touched
        # pays no page faults (see _BufferSink). The lock keeps a background light write and a direct save
        # from sharing it.
        with self._buffers_lock:
            t0 = time.perf_counter()
            self._raw_buf, n_raw = serialize_state(state, self._raw_buf)
            t1 = time.perf_counter()
            fname = "state.pt.zst" if level != 0 else "state.pt"
            with _view(self._raw_buf, n_raw) as raw:

                def write_data(fh) -> tuple[int, str, float]:
                    if level != 0:
                        return write_compressed(raw, level, fh, threads)
                    fh.write(raw)
                    return n_raw, hashlib.sha256(raw).hexdigest(), 0.0

                def manifest_of(n_data: int, digest: str, compressing: float) -> dict:
                    now = time.time()
                    return {
                        "format": MANIFEST_FORMAT,
                        "tier": tier,
                        "step": step,
                        "host": self.host,
                        "job_id": self.job_id,
                        "created": datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="milliseconds"),
                        "created_unix": now,
                        "files": {fname: {"sha256": digest, "bytes": n_data}},
                        "compression": {"codec": "zstd" if level != 0 else "none", "level": level,
                                        "bytes_raw": n_raw},
                        "seconds": {"serialize": t1 - t0, "compress": compressing},
                        "torch_version": torch.__version__,
                    }

                final = self.root / name
                n_data, digest, compressing = self._write_dir(final, fname, write_data, manifest_of, n_raw)
            t3 = time.perf_counter()
        saved = SavedCheckpoint(path=final, tier=tier, step=step, bytes_raw=n_raw, bytes_written=n_data,
                                seconds_serialize=t1 - t0, seconds_compress=compressing,
                                seconds_write=max(0.0, t3 - t1 - compressing),
                                sha256=digest)
        self._retain(tier)
        return saved

    def _write_dir(self, final: Path, fname: str, write_data: Callable[[Any], tuple[int, str, float]],
                   manifest_of: Callable[..., dict], at_most: int) -> tuple[int, str, float]:
        """``write_data(fh)`` into ``fname`` and ``manifest_of(*what it returned)`` beside it, in a temporary
        directory renamed to ``final`` (see the module docstring); returns what ``write_data`` returned.
        ``at_most``: the data's size before compression, what a full disk's message names as needed."""
        tmp: Path | None = None
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=self.root))
            # mkdtemp's 0700 would survive the rename: colleagues sharing the folder could not resume
            os.chmod(tmp, 0o777 & ~current_umask())
            with atomic_write(tmp / fname, "wb") as fh:
                result = write_data(fh)
            manifest = manifest_of(*result)
            # the manifest last: its presence and validity are what make the checkpoint count
            with atomic_write(tmp / MANIFEST, "w") as fh:
                json.dump(manifest, fh, indent=1)
                fh.write("\n")
            fsync_dir(tmp)
            if final.exists():
                # the same step saved again (a rerun of the same job): swap, then drop the old one
                _delete_dir(final)
            os.rename(tmp, final)
            tmp = None
            fsync_dir(self.root)
            return result
        except OSError as exc:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                # zstd's output size is known only once written: the uncompressed size bounds it
                needed = f"up to {at_most + 4096}"
                try:
                    free = f"{shutil.disk_usage(self.root).free} bytes free"
                except OSError:
                    free = "free space unknown"
                raise CheckpointError(
                    f"no space left for checkpoint {final.name}: it needs {needed} bytes, {free} "
                    f"({os.strerror(exc.errno)}); the partial write was removed, earlier checkpoints are intact",
                    path=self.root) from exc
            raise CheckpointError(f"cannot write checkpoint {final.name}: {exc}", path=self.root) from exc
        except BaseException:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _retain(self, tier: str) -> None:
        keep = self.policy.keep_full if tier == "full" else self.policy.keep_light
        mine = sorted((i for i in self.list() if i.tier == tier and i.valid), key=CheckpointInfo._order)
        for old in mine[:-keep]:
            _delete_dir(old.path)

    # -- read -----------------------------------------------------------------
    def list(self, *, verify: bool = False) -> list[CheckpointInfo]:
        """Every checkpoint directory in the folder, oldest first, valid and invalid.

        Args:
            verify: also check each file's sha256 (reads every byte); without it, the
                manifest and the file sizes are checked.
        """
        infos = []
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return []
        for entry in entries:
            info = _inspect(Path(entry.path), verify)
            if info is not None:
                infos.append(info)
        return sorted(infos, key=CheckpointInfo._order)

    def latest_valid(self) -> CheckpointInfo | None:
        """The newest checkpoint of either tier (by step) whose manifest, sizes and sha256 check out.

        Invalid ones are skipped, named through ``warn`` and kept in ``self.skipped``.
        """
        self.skipped = []
        infos = self.list()
        for info in infos:
            if not info.valid:
                self._skip(info)
        for info in reversed([i for i in infos if i.valid]):
            checked = _inspect(info.path, verify=True)
            if checked is not None and checked.valid:
                return checked
            if checked is not None:
                self._skip(checked)
        return None

    def _skip(self, info: CheckpointInfo) -> None:
        self.skipped.append(info)
        self.warn(f"skipping invalid checkpoint {info.path}: {info.reason}")

    def load(self, info: CheckpointInfo | str | os.PathLike) -> dict:
        """Verify, decompress and ``torch.load(weights_only=True)`` one checkpoint (tensors on CPU).

        Raises:
            CheckpointError: invalid (reason given), sha256 mismatch, or refused by
                ``weights_only`` (it holds pickled objects, not just tensors and plain data).
        """
        path = info.path if isinstance(info, CheckpointInfo) else Path(info)
        checked = _inspect(path, verify=False)
        if checked is None:
            raise CheckpointError("not a checkpoint directory", path=path)
        if not checked.valid:
            raise CheckpointError(f"invalid checkpoint: {checked.reason}", path=path)
        manifest = checked.manifest
        ((fname, entry),) = manifest["files"].items()
        data = (path / fname).read_bytes()
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise CheckpointError(f"{fname} sha256 does not match the manifest (corrupted)", path=path)
        if manifest["compression"]["codec"] == "zstd":
            data = decompress_bytes(data)
        import torch

        try:
            return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
        except pickle.UnpicklingError as exc:
            raise CheckpointError(f"refused by torch.load(weights_only=True): it holds more than tensors and "
                                  f"plain data ({exc})", path=path) from exc
        except Exception as exc:  # a damaged archive that still matched its hash: torch says why
            raise CheckpointError(f"torch.load failed: {exc}", path=path) from exc


def _hit(step: int, every: int) -> bool:
    return every > 0 and step > 0 and step % every == 0


def remove_torn(root: str | os.PathLike, *, verify: bool = True) -> list[Path]:
    """Delete invalid checkpoint directories and hidden leftovers of killed writes or deletes.

    The job wrapper's repair step between tries; nothing may be writing to ``root`` then.

    Args:
        root: the checkpoint folder.
        verify: check sha256 too (reads every checkpoint), not only manifests and sizes.

    Returns:
        The paths removed.
    """
    root = Path(root)
    removed: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return removed
    for entry in entries:
        path = Path(entry.path)
        if _HIDDEN_RE.match(entry.name) and entry.is_dir(follow_symlinks=False):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
            continue
        info = _inspect(path, verify)
        if info is not None and not info.valid:
            log.warning("removing invalid checkpoint %s: %s", path, info.reason)
            _delete_dir(path)
            removed.append(path)
    return sorted(removed)


# The DCP comparison lives in its own module (it has its own trade-offs, see there); re-exported
# so that ``checkpoint.save_sharded`` is where the rest of the checkpoint API is.
def __getattr__(name: str):
    # Lazily (PEP 562): importing torch.distributed.checkpoint costs seconds the repair step does not have.
    if name in ("save_sharded", "load_sharded"):
        from hpcbench.fault import sharded

        return getattr(sharded, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


