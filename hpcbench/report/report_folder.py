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
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Callable, Iterator

from hpcbench.core.errors import HpcbenchError
from hpcbench.report.publish import REPORT_JSON

#: Kept on failure when it holds files: the dask-slurm job logs an error message names.
KEEP_ON_FAILURE = "dask-slurm"


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


__all__ = ["check_report_folder", "is_report_folder", "replacing_report_folder"]
