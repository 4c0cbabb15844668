"""Opening shards safely: verify against the manifest, repair from the source copy, count it.

The field guide's resilient dataset (guide sec. 2.5) repairs a shard on an IOError or a
checksum error and retries the item. :class:`ShardAccess` is that logic for every reader:

* ``open(i)`` checks shard ``i`` against the manifest (``verify="sha256"``: the whole file
  is read once, hashed, and served from memory; ``"size"``: its size only; ``"none"``);
* ``repair(i, reason)`` copies the shard from the source copy (the manifest's ``source``,
  set by staging, or ``repair_from``), checks the copy's sha256, and renames it into place;
* every open is counted (``opens``: the metadata load a parallel file system feels), and
  every repair and every sample given up is appended to an :class:`EventLog`, a JSON-lines
  file that all reader processes (DataLoader workers) share, so nothing is lost silently.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

from hpcbench.core.atomic import file_mode
from hpcbench.data.manifest import Manifest, sha256_file

Verify = Literal["sha256", "size", "none"]
VERIFY_MODES = ("sha256", "size", "none")


class ShardCheckFailed(Exception):
    """Internal: a shard does not match its manifest entry (repairable)."""


def _remove_own_folder(folder: str, owner_pid: int) -> None:
    if os.getpid() == owner_pid:
        shutil.rmtree(folder, ignore_errors=True)


class EventLog:
    """Append-only JSON lines shared by processes (``O_APPEND`` writes of one short line are atomic)."""

    def __init__(self, path: str | os.PathLike | None = None):
        if path is None:
            folder = tempfile.mkdtemp(prefix="hpcbench-data-events-")
            path = Path(folder) / "events.jsonl"
            # A folder of its own: removed when the log is collected, or the interpreter exits, in the process that
            # made it (a forked DataLoader worker that exits leaves it to its parent). Before, every such log left
            # a folder in /tmp (438 after one `make test`).
            weakref.finalize(self, _remove_own_folder, folder, os.getpid())
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch()

    def add(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, "time": time.time(), "pid": os.getpid(), **fields}) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def read(self, event: str | None = None) -> list[dict[str, Any]]:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return []
        rows = [json.loads(line) for line in lines if line.strip()]
        return [r for r in rows if event is None or r["event"] == event]

    def clear(self) -> None:
        self.path.write_text("")


@dataclass
class OpenedShard:
    """A shard ready to read: its bytes in memory (after a sha256 check) or its path."""

    index: int
    path: Path
    data: bytes | None
    access: "ShardAccess"

    def open_file(self) -> BinaryIO:
        """A binary file object over the shard (a counted ``open`` unless it is in memory)."""
        if self.data is not None:
            return io.BytesIO(self.data)
        self.access.opens += 1
        return open(self.path, "rb")


class ShardAccess:
    """Verified, counted, repairable access to the shards of one data set."""

    def __init__(self, folder: Path, manifest: Manifest, *, verify: Verify = "sha256",
                 repair_from: str | os.PathLike | None = None, events: EventLog | None = None):
        if verify not in VERIFY_MODES:
            raise ValueError(f"verify={verify!r}; allowed: {list(VERIFY_MODES)}")
        self.folder = Path(folder)
        self.manifest = manifest
        self.verify = verify
        source = repair_from if repair_from is not None else manifest.source
        self.source = Path(source) if source else None
        if self.source is not None and self.source.resolve() == self.folder.resolve():
            self.source = None  # repairing a file from itself repairs nothing
        self.events = events or EventLog()
        self.opens = 0

    def path(self, i: int) -> Path:
        return self.folder / self.manifest.shards[i].path

    def open(self, i: int) -> OpenedShard:
        """Shard ``i`` after the configured check.

        Raises:
            ShardCheckFailed: size or sha256 differ from the manifest.
            OSError: the file cannot be read.
        """
        entry, path = self.manifest.shards[i], self.path(i)
        if self.verify == "sha256":
            self.opens += 1
            with open(path, "rb") as fh:
                data = fh.read()
            if len(data) != entry.bytes:
                raise ShardCheckFailed(f"{len(data)} bytes, the manifest says {entry.bytes}")
            if hashlib.sha256(data).hexdigest() != entry.sha256:
                raise ShardCheckFailed("sha256 differs from the manifest")
            return OpenedShard(i, path, data, self)
        if self.verify == "size":
            size = path.stat().st_size
            if size != entry.bytes:
                raise ShardCheckFailed(f"{size} bytes, the manifest says {entry.bytes}")
        return OpenedShard(i, path, None, self)

    def repair(self, i: int, reason: str, **where: Any) -> bool:
        """Replace shard ``i`` by the source copy when that copy is intact; log the outcome.

        Returns:
            True when the shard was replaced by a copy whose sha256 matches the manifest.
        """
        entry, target = self.manifest.shards[i], self.path(i)
        if self.source is None:
            self.events.add("repair_failed", shard=str(target), reason=reason,
                            why="no source copy to repair from (set repair_from or stage the data set)", **where)
            return False
        origin = self.source / entry.path
        try:
            if target.stat().st_size == entry.bytes and sha256_file(target) == entry.sha256:
                # Another reader process (a DataLoader worker sharing this shard) repaired it first.
                self.events.add("repaired_elsewhere", shard=str(target), reason=reason, **where)
                return True
        except OSError:
            pass
        t0 = time.perf_counter()
        tmp = None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".repair", dir=target.parent)
            os.close(fd)
            os.chmod(tmp, file_mode())  # mkstemp's 0600 would survive the rename
            shutil.copyfile(origin, tmp)
            if sha256_file(tmp) != entry.sha256:
                raise ShardCheckFailed(f"the source copy {origin} does not match the manifest either")
            os.replace(tmp, target)
            tmp = None
        except (OSError, ShardCheckFailed) as exc:
            self.events.add("repair_failed", shard=str(target), reason=reason, why=str(exc), **where)
            return False
        finally:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
        self.events.add("repair", shard=str(target), source=str(origin), reason=reason,
                        seconds=time.perf_counter() - t0, **where)
        return True


def repair_or_raise(access: ShardAccess, manifest: Manifest, folder: Path) -> None:
    """Repair every missing or wrong-sized shard of ``manifest`` up front, or name it in a ManifestError.

    What a reader does when it opens a data set: a shard that a cheap size check already finds
    wrong is copied back from its intact source through ``access``; one without such a source
    stops the run before any compute, naming the manifest and the problem.
    """
    from hpcbench.data.errors import ManifestError
    from hpcbench.data.manifest import check_files

    for problem in check_files(manifest, folder):
        path = problem.split(": ", 1)[0]
        i = next(i for i, s in enumerate(manifest.shards) if str(folder / s.path) == path)
        if not access.repair(i, problem, stage="open"):
            raise ManifestError(f"the manifest does not match the files: {problem} (no intact source "
                                f"copy to repair it from)", path=str(folder / "manifest.json"))
