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
are copied into ``FOLDER/files/`` by :class:`LinkedFiles` while the folder is built, each
content once, and linked by relative paths: the folder is self-contained, and ``hpcbench
publish`` or a plain copy carries them along. Profiler traces are copied only when asked
(``hpcbench report --traces``): a few MiB per rank, they made most of a report's size.

A report is exactly :data:`REPORT_CONTENT` (:func:`report_files`): what ``hpcbench publish``
copies and what the size printed at the end counts. The logs of dask workers started as
SLURM jobs are written beside the folder, never in it (:func:`dask_slurm_log_dir`), so that
they are not published.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

from hpcbench.core.atomic import atomic_write
from hpcbench.core.errors import HpcbenchError
from hpcbench.core.results import resolve_stored_path
from hpcbench.core.units import format_bytes
from hpcbench.present.kit import Cell, LinkedFile, Table

#: The page.
INDEX_HTML = "index.html"
#: The report's metadata as data (its shape is :mod:`hpcbench.report.publish`'s).
REPORT_JSON = "report.json"
#: The report's copies of linked files: ``files/<source>/<task id>/<name>``.
FILES_SUBDIR = "files"
#: Everything a report consists of; anything else in its folder (a user's notes, an older
#: report's dask-slurm logs) is not part of it and is never published.
REPORT_CONTENT = (INDEX_HTML, REPORT_JSON, FILES_SUBDIR)
#: What a trace's cell says when the report leaves traces out.
TRACES_LEFT_OUT = "not included: `hpcbench report --traces` copies the profiler traces into the report"
#: A linked file larger than this is not copied (its link stays absolute). A torch.profiler
#: trace of a few steps is a few MiB to a few tens; a report is copied whole at every
#: publication and each one is kept, so one huge trace would be multiplied.
MAX_LINKED_FILE_BYTES = 50 << 20
#: All copied files of one report together: ten files at the per-file cap.
MAX_LINKED_FILES_TOTAL_BYTES = 500 << 20
#: What a kept absolute link adds to its reason.
ONLY_HERE = "the link works only on the machine that ran it"
#: What a file left out of a published report says instead of a link (which would name the machine).
NOT_IN_REPORT = "not in the report, it stays with the run"
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


def report_files(folder: Path) -> list[Path]:
    """The files of the report in ``folder``: :data:`REPORT_CONTENT`, regular files only, sorted.

    Hidden names (temporary files of an interrupted copy) and symbolic links (which could
    point anywhere on the machine) are left out at every level.
    """
    found: list[Path] = []
    for name in REPORT_CONTENT:
        top = folder / name
        if top.is_symlink():
            continue
        if top.is_file():
            found.append(top)
        elif top.is_dir():
            for root, dirs, files in os.walk(top):
                def kept(name: str, root: str = root) -> bool:
                    return not name.startswith(".") and not os.path.islink(os.path.join(root, name))

                dirs[:] = sorted(filter(kept, dirs))  # pruned in place: os.walk then skips the others
                found += [Path(root, f) for f in sorted(filter(kept, files))]
    return found


def report_size(folder: Path) -> tuple[int, int]:
    """The report's total size in bytes and its number of files (:func:`report_files`)."""
    files = report_files(folder)
    return sum(f.stat().st_size for f in files), len(files)


def describe_report(index: Path) -> str:
    """``index.html`` with the report's size for people: ``reports/x/index.html (3.2 MiB, 14 files)``."""
    size, count = report_size(index.parent)
    return f"{index} ({_size(size)}, {count} file{'s' if count != 1 else ''})"


def dask_slurm_log_dir(out: Path) -> Path:
    """Where dask workers started as SLURM jobs for the report ``out`` write their logs.

    A hidden sibling, ``.<name>.dask-slurm``: beside the report on the same (shared) file
    system the nodes write to, but outside it, so publishing the report never publishes them.
    """
    target = Path(out).resolve()
    return target.with_name(f".{target.name}.dask-slurm")


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
    removed; dask-slurm logs this build wrote (:func:`dask_slurm_log_dir`) are named through
    ``warn``.

    Raises:
        HpcbenchError: from :func:`check_report_folder`, or naming the parent folder when
            the sibling cannot be created there.
    """
    check_report_folder(out)
    # Resolved: a symbolic link to the report keeps pointing at the new one, and the
    # sibling lies next to the folder that is replaced, on its file system.
    target = out.resolve()
    token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    started = time.time() - 1  # file times can lag the clock by a tick
    building = target.with_name(f".{target.name}.building-{token}")
    try:
        building.mkdir(parents=True)  # mode 0o777 & ~umask, like any folder (mkdtemp's would be 0700)
    except OSError as exc:
        raise HpcbenchError(f"report folder {out}: cannot write next to it in {target.parent} ({exc})") from None
    try:
        yield building
        swap_in(building, target)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        logs = dask_slurm_log_dir(out)
        if _written_since(logs, started):
            warn(f"the report was not written; {out} is unchanged; the dask-slurm logs are in {logs}")
        raise


def _written_since(folder: Path, when: float) -> bool:
    """Whether a file of ``folder`` was written at ``when`` or later (False when it cannot be read)."""
    try:
        return any(p.stat().st_mtime >= when for p in folder.iterdir() if p.is_file())
    except OSError:  # never hide the failure being reported behind another
        return False


def swap_in(building: Path, target: Path) -> None:
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
    """Copies the files table cells link (:func:`hpcbench.present.kit.file_link`) into a report folder.

    Where a file is: a cell's path is resolved against the run directory of its source, the
    first part of its ``folder`` (:func:`hpcbench.core.results.resolve_stored_path`): records
    store paths relative to their run directory, and an absolute path recorded before is
    looked for in the run directory as it is now, so a run directory moved or copied since
    the run still gives working links.

    Each file is copied once to ``files/<folder...>/<name>``, names made safe
    (:func:`safe_file_name`) and unique, each written atomically
    (:func:`hpcbench.core.atomic.atomic_write`); files of the same content (by SHA-256) are
    stored once, every cell linking the first copy, by its path relative to the report folder.
    The folder ``files/`` appears only when something is copied. Cells of profiler traces
    (:attr:`~hpcbench.present.kit.LinkedFile.optional`) are left out, saying so, unless ``traces``.

    A file is not copied, and its cell keeps the absolute ``file:`` link with the reason and
    :data:`ONLY_HERE` (without ``local_links``: no link, the reason and :data:`NOT_IN_REPORT`), when
    it is larger than ``max_file_bytes``, would take the copies past ``max_total_bytes``, lies
    outside every run directory of the report (a path in a record must not pull, say, a private key
    into a published page), cannot be read, or there is no report folder (``report_dir`` None: a
    page rendered on its own). A file that does not exist says "missing", without a link.

    Args:
        report_dir: the folder ``index.html`` is written to (the hidden one being built), or None.
        roots: the report's run directories by source label (or a list of them; a relative path
            is then resolved only when there is one); only files inside them are copied.
        traces: copy the profiler traces too.
        max_file_bytes: the cap per file (default :data:`MAX_LINKED_FILE_BYTES`).
        max_total_bytes: the cap on all copies together (default :data:`MAX_LINKED_FILES_TOTAL_BYTES`).
        redact: what a copy holds, from the file's bytes and name (a report passes
            :meth:`hpcbench.report.redact.Redactor.file_bytes`, so that no copy names the machine);
            default: the bytes as they are.
        local_links: a file left out keeps its absolute ``file:`` link; a report that is published
            passes False, since such a link names the machine and works only there.
    """

    def __init__(self, report_dir: Path | None, roots: Mapping[str, Path] | Sequence[Path], *,
                 traces: bool = False, max_file_bytes: int | None = None,
                 max_total_bytes: int | None = None, redact: Callable[[bytes, str], bytes] | None = None,
                 local_links: bool = True) -> None:
        self.report_dir = report_dir
        self.sources = ({str(label): Path(run_dir) for label, run_dir in roots.items()}
                        if isinstance(roots, Mapping) else {})
        self.roots = [Path(r).resolve() for r in (roots.values() if isinstance(roots, Mapping) else roots)]
        self.traces = traces
        self.redact = redact
        self.local_links = local_links
        # Read at construction, not at definition: a test (or a site) may lower the constants.
        self.max_file_bytes = MAX_LINKED_FILE_BYTES if max_file_bytes is None else max_file_bytes
        self.max_total_bytes = MAX_LINKED_FILES_TOTAL_BYTES if max_total_bytes is None else max_total_bytes
        self.copied_bytes = 0
        self.copies: dict[Path, str] = {}
        """Resolved source path -> the copy's path relative to the report folder (URL-quoted)."""
        self.by_content: dict[str, str] = {}
        """SHA-256 of a copied file -> its copy's path, for files of the same content."""
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
        if cell.file.optional and not self.traces:
            return Cell(cls=cell.cls, parts=(Cell(cell.text), Cell(TRACES_LEFT_OUT, "detail")))
        try:
            real = self.locate(cell.file).resolve(strict=True)
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
        if not self.local_links:
            return self._with_reason(cell, f"{self.not_copied[real]}; {NOT_IN_REPORT}", href=None)
        return self._with_reason(cell, self.not_copied[real], href=real.as_uri())

    def locate(self, file: LinkedFile) -> Path:
        """Where ``file`` is now: under its source's run directory (see the class), else as given."""
        run_dir = self.sources.get(file.folder[0]) if file.folder else None
        if run_dir is None and not self.sources and len(self.roots) == 1:
            run_dir = self.roots[0]
        here = Path(os.path.abspath(file.path))
        if run_dir is None:
            return here
        # A relative path is either one the report built from the run directory as given (relative
        # to the current directory, like a failed task's notebook) or one a record stored (relative
        # to the run directory): the first when such a file exists inside the run directory.
        if not Path(file.path).is_absolute() and here.is_relative_to(os.path.abspath(run_dir)) and here.exists():
            return here
        return resolve_stored_path(file.path, run_dir)

    def _copy(self, real: Path, folder: Sequence[str]) -> str | None:
        """Copy ``real`` into the report (or find its content there); None when done, else why not."""
        if self.report_dir is None:
            return "not copied: the page was rendered without a report folder"
        if not any(real.is_relative_to(root) for root in self.roots):
            return "not copied: outside the report's run directories"
        size = real.stat().st_size
        if size > self.max_file_bytes:
            return f"not copied: {_size(size)} > {format_bytes(self.max_file_bytes)} cap per file"
        try:
            digest = _sha256(real)
        except OSError as exc:
            return f"not copied: {exc.strerror or exc}"
        if digest in self.by_content:  # the same bytes from another task: one copy, two links
            self.copies[real] = self.by_content[digest]
            return None
        if self.copied_bytes + size > self.max_total_bytes:
            return (f"not copied: {_size(size)} more would pass the {format_bytes(self.max_total_bytes)} "
                    "cap on the report's linked files")
        relative = self._free_name(real.name, folder)
        try:
            if self.redact is None:
                with open(real, "rb") as src, atomic_write(self.report_dir / relative, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            else:  # at most max_file_bytes, read whole
                content = self.redact(real.read_bytes(), real.name)
                with atomic_write(self.report_dir / relative, "wb") as dst:
                    dst.write(content)
        except OSError as exc:
            return f"not copied: {exc.strerror or exc}"
        self.copied_bytes += size
        self.copies[real] = self.by_content[digest] = urllib.parse.quote(relative.as_posix())
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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _size(n: int) -> str:
    """A file size for people: ``62.3 MiB``, ``4.0 KiB``, ``512 B``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


__all__ = ["FILES_SUBDIR", "INDEX_HTML", "MAX_LINKED_FILES_TOTAL_BYTES", "MAX_LINKED_FILE_BYTES", "NOT_IN_REPORT",
           "ONLY_HERE", "REPORT_CONTENT",
           "REPORT_JSON", "LinkedFiles", "check_report_folder", "dask_slurm_log_dir",
           "describe_report", "is_report_folder", "replacing_report_folder", "report_files", "report_size",
           "safe_file_name", "swap_in"]
