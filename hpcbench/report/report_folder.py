"""The report's output folder: checked before the work, replaced whole at the end.

``hpcbench report ... --out FOLDER`` accepts a FOLDER that does not exist, an empty one,
or a previous hpcbench report, recognised by its ``report.json`` (the metadata every
report writes, see :mod:`hpcbench.report.publish`). Anything else (a file, a folder of
other things, a run directory given as ``--out`` by mistake) is refused before a dask
cluster starts, so nothing of the user's is ever overwritten.

The report is written into a hidden sibling, ``.<name>.building-<pid>-<random>``, and
swapped in by renames once complete: a failure or an interrupt (Ctrl-C) leaves the
previous report as it was. Renames within one folder never cross a file system, so the
swap is a matter of microseconds; there is no atomic exchange of two non-empty folders
in POSIX, so for that instant ``FOLDER`` is absent, never half-written.

Files of the run that the page links (a failed task's notebook, a rank's profiler trace)
are copied into ``FOLDER/files/`` by :class:`LinkedFiles` while the folder is built, and
linked by relative paths: the folder is self-contained, and ``hpcbench publish`` or a plain
copy carries them along.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import urllib.parse
import uuid
from pathlib import Path
from typing import Callable, Iterator, Sequence

from hpcbench.core.atomic import atomic_write
from hpcbench.core.errors import HpcbenchError
from hpcbench.core.units import format_bytes
from hpcbench.report.kit import Cell, Table
from hpcbench.report.publish import REPORT_JSON

#: Kept on failure when it holds files: the dask-slurm job logs an error message names.
KEEP_ON_FAILURE = "dask-slurm"
#: The report's copies of linked files: ``files/<source>/<task id>/<name>``.
FILES_SUBDIR = "files"
#: A linked file larger than this is not copied (its link stays absolute). A torch.profiler
#: trace of a few steps is a few MiB to a few tens; a report is copied whole at every
#: publication and each one is kept, so one huge trace would be multiplied.
MAX_LINKED_FILE_BYTES = 50 << 20
#: All copied files of one report together: ten files at the per-file cap.
MAX_LINKED_FILES_TOTAL_BYTES = 500 << 20
#: What a kept absolute link adds to its reason.
ONLY_HERE = "the link works only on the machine that ran it"
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
#: Names stay well below the 255 bytes file systems allow.
_MAX_NAME = 120


def is_report_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a report hpcbench wrote: a ``report.json`` object with its ``runs``."""
    try:
        data = json.loads((folder / REPORT_JSON).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and isinstance(data.get("runs"), list)


def check_report_folder(out: Path) -> None:
    """Refuse an output folder the report must not replace.

    Raises:
        HpcbenchError: naming ``out`` when it is a file (or another non-folder), or a
            non-empty folder without an hpcbench ``report.json``.
    """
    if out.exists() and not out.is_dir():
        raise HpcbenchError(f"report folder {out} is a file, not a folder; give a new folder, an empty one "
                            "or an earlier report's")
    if out.is_dir() and any(out.iterdir()) and not is_report_folder(out):
        raise HpcbenchError(f"report folder {out} is not empty and holds no {REPORT_JSON} of an earlier "
                            "hpcbench report; refusing to replace it (give a new folder, an empty one "
                            "or an earlier report's)")


@contextlib.contextmanager
def replacing_report_folder(out: Path, warn: Callable[[str], None]) -> Iterator[Path]:
    """Yield a fresh hidden sibling of ``out`` to write the report into; on success it becomes ``out``.

    On an exception (an interrupt included) ``out`` is left as it was and the sibling is
    removed, unless it holds dask-slurm logs, which are kept and named through ``warn``.

    Raises:
        HpcbenchError: from :func:`check_report_folder`, or naming the parent folder when
            the sibling cannot be created there.
    """
    check_report_folder(out)
    # Resolved: a symbolic link to the report keeps pointing at the new one, and the
    # sibling lies next to the folder that is replaced, on its file system.
    target = out.resolve()
    token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    building = target.with_name(f".{target.name}.building-{token}")
    try:
        building.mkdir(parents=True)  # mode 0o777 & ~umask, like any folder (mkdtemp's would be 0700)
    except OSError as exc:
        raise HpcbenchError(f"report folder {out}: cannot write next to it in {target.parent} ({exc})") from None
    try:
        yield building
        _swap_in(building, target)
    except BaseException:
        logs = building / KEEP_ON_FAILURE
        if logs.is_dir() and any(logs.iterdir()):
            warn(f"the report was not written; {out} is unchanged; the dask-slurm logs are kept in {logs}")
        else:
            shutil.rmtree(building, ignore_errors=True)
        raise


def _swap_in(building: Path, target: Path) -> None:
    """Rename ``building`` to ``target``; an existing ``target`` is set aside first, then removed."""
    if not target.exists():
        os.rename(building, target)  # also replaces a folder made empty in the meantime
        return
    old = target.with_name(f".{target.name}.replaced-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    os.rename(target, old)
    try:
        os.rename(building, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


# -- linked files -------------------------------------------------------------------

def safe_file_name(text: str) -> str:
    """``text`` as one safe path segment: ``[A-Za-z0-9._-]`` only, never hidden, ``.`` or ``..``.

    Long names keep their end (the suffix says what the file is). Returns ``"file"`` when
    nothing is left.
    """
    name = _UNSAFE_CHARS.sub("_", str(text)).lstrip(".")
    if len(name) > _MAX_NAME:
        name = name[:_MAX_NAME // 2] + "_" + name[-(_MAX_NAME // 2 - 1):]
    return name or "file"


class LinkedFiles:
    """Copies the files table cells link (:func:`hpcbench.report.kit.file_link`) into a report folder.

    Each file is copied once (by its resolved path) to ``files/<folder...>/<name>``, names
    made safe (:func:`safe_file_name`) and unique, each written atomically
    (:func:`hpcbench.core.atomic.atomic_write`); its cell then links the copy by that
    relative path. The folder ``files/`` appears only when something is copied.

    A file is not copied, and its cell keeps the absolute ``file:`` link with the reason and
    :data:`ONLY_HERE`, when it is larger than ``max_file_bytes``, would take the copies past
    ``max_total_bytes``, lies outside every run directory of the report (a path in a record
    must not pull, say, a private key into a published page), cannot be read, or there is no
    report folder (``report_dir`` None: a page rendered on its own). A file that does not
    exist says "missing", without a link.

    Args:
        report_dir: the folder ``index.html`` is written to (the hidden one being built), or None.
        roots: the report's run directories; only files inside them are copied.
        max_file_bytes: the cap per file (default :data:`MAX_LINKED_FILE_BYTES`).
        max_total_bytes: the cap on all copies together (default :data:`MAX_LINKED_FILES_TOTAL_BYTES`).
    """

    def __init__(self, report_dir: Path | None, roots: Sequence[Path], *, max_file_bytes: int | None = None,
                 max_total_bytes: int | None = None) -> None:
        self.report_dir = report_dir
        self.roots = [Path(r).resolve() for r in roots]
        # Read at construction, not at definition: a test (or a site) may lower the constants.
        self.max_file_bytes = MAX_LINKED_FILE_BYTES if max_file_bytes is None else max_file_bytes
        self.max_total_bytes = MAX_LINKED_FILES_TOTAL_BYTES if max_total_bytes is None else max_total_bytes
        self.copied_bytes = 0
        self.copies: dict[Path, str] = {}
        """Resolved source path -> the copy's path relative to the report folder."""
        self.not_copied: dict[Path, str] = {}
        """Resolved source path -> why its link stays absolute."""

    def resolve_tables(self, tables: Sequence[Table]) -> None:
        """Replace, in place, every cell of ``tables`` that links a file (see :meth:`resolve`)."""
        for table in tables:
            table.rows = [[self.resolve(cell) for cell in row] for row in table.rows]

    def resolve(self, cell: Cell) -> Cell:
        """The cell as the page shows it: its file copied and linked relatively, or the reason why not.

        A cell without a file comes back as it is, with its ``parts`` resolved (a part that
        becomes two lines, link and reason, is spliced in: the page shows one level of parts).
        """
        if cell.file is None:
            if not cell.parts:
                return cell
            parts: list[Cell] = []
            for part in map(self.resolve, cell.parts):
                parts.extend(part.parts or (part,))
            return dataclasses.replace(cell, parts=tuple(parts))
        path = Path(os.path.abspath(cell.file.path))
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError):  # missing, a dangling link, a link loop
            return self._with_reason(cell, "missing", href=None)
        if not real.is_file():
            return self._with_reason(cell, "missing: not a file", href=None)
        if real not in self.copies and real not in self.not_copied:
            reason = self._copy(real, cell.file.folder)
            if reason is not None:
                self.not_copied[real] = reason
        if real in self.copies:
            return Cell(cell.text, cell.cls, href=self.copies[real])
        return self._with_reason(cell, self.not_copied[real], href=real.as_uri())

    def _copy(self, real: Path, folder: Sequence[str]) -> str | None:
        """Copy ``real`` into the report; None when done, else why not."""
        if self.report_dir is None:
            return "not copied: the page was rendered without a report folder"
        if not any(real.is_relative_to(root) for root in self.roots):
            return "not copied: outside the report's run directories"
        size = real.stat().st_size
        if size > self.max_file_bytes:
            return f"not copied: {_size(size)} > {format_bytes(self.max_file_bytes)} cap per file"
        if self.copied_bytes + size > self.max_total_bytes:
            return (f"not copied: {_size(size)} more would pass the {format_bytes(self.max_total_bytes)} "
                    "cap on the report's linked files")
        relative = self._free_name(real.name, folder)
        try:
            with open(real, "rb") as src, atomic_write(self.report_dir / relative, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except OSError as exc:
            return f"not copied: {exc.strerror or exc}"
        self.copied_bytes += size
        self.copies[real] = urllib.parse.quote(relative.as_posix())
        return None

    def _free_name(self, name: str, folder: Sequence[str]) -> Path:
        """``files/<folder...>/<name>`` made safe, with ``-2``, ``-3``... before the suffix if taken."""
        assert self.report_dir is not None
        parent = Path(FILES_SUBDIR, *map(safe_file_name, folder))
        stem, dot, suffix = safe_file_name(name).partition(".")
        candidate, k = parent / f"{stem}{dot}{suffix}", 2
        while (self.report_dir / candidate).exists():
            candidate, k = parent / f"{stem}-{k}{dot}{suffix}", k + 1
        return candidate

    @staticmethod
    def _with_reason(cell: Cell, reason: str, href: str | None) -> Cell:
        note = reason if href is None else f"{reason}; {ONLY_HERE}"
        return Cell(cls=cell.cls, parts=(Cell(cell.text, href=href), Cell(note, "detail warn")))


def _size(n: int) -> str:
    """A file size for people: ``62.3 MiB``, ``4.0 KiB``, ``512 B``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


__all__ = ["FILES_SUBDIR", "MAX_LINKED_FILES_TOTAL_BYTES", "MAX_LINKED_FILE_BYTES", "LinkedFiles",
           "check_report_folder", "is_report_folder", "replacing_report_folder", "safe_file_name"]
