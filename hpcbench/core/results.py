"""The one results schema: long format, one row per measured value.

Every experiment, every rank, every repetition writes rows of the same shape::

    run_id suite experiment variant task_id repetition params node rank world_size
    metric value unit step time labels text

* ``params`` is the task's full resolved parameter set as JSON, so any row can be
  traced back to the exact configuration that produced it.
* ``labels`` is JSON for the dimensions *inside* a task (collective op, message
  size, process group...). The aggregator expands them into columns.
* ``value`` is a float in ``unit`` (units are explicit: ``GB/s`` means 1e9 B/s);
  ``text`` carries non-numeric facts (a version string) or the reason a value is
  absent ("not applicable: ..."), in which case ``value`` is NaN. Nothing is
  ever faked to fill a number.
* Raw samples are kept (one row per iteration); statistics are the aggregator's job.
* A ``text`` naming a file of the run (unit ``path``) holds it relative to the run
  directory, so that a run directory can be moved (:func:`stored_path`).

Each writer owns one Parquet file and writes it atomically (temporary file in the
same directory, fsync, rename), so parallel tasks and ranks never clobber each other
and a killed writer leaves no half-written file behind; the file gets the mode the
umask asks for, so a project group can read it (:mod:`hpcbench.core.atomic`).
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    import pandas as pd

# pandas is imported where a frame is made, not here: every rank imports this module to write its
# records, and pandas would add ~0.4 s of CPU to each rank's start (records are written through pyarrow).

from hpcbench.core.atomic import atomic_write
from hpcbench.core.errors import ResultsError

SCHEMA_VERSION = "1"

SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("suite", pa.string(), nullable=False),
        pa.field("experiment", pa.string(), nullable=False),
        pa.field("variant", pa.string(), nullable=False),
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("repetition", pa.int32(), nullable=False),
        pa.field("params", pa.string(), nullable=False),
        pa.field("node", pa.string(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("world_size", pa.int32(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=True),
        pa.field("unit", pa.string(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("labels", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=True),
    ],
    metadata={"hpcbench.schema_version": SCHEMA_VERSION},
)
COLUMNS = SCHEMA.names
RECORDS_SUBDIR = "records"
#: A run directory holds one folder per task here: ``RUN/tasks/<task id>/records/*.parquet``.
TASKS_SUBDIR = "tasks"
#: The ``unit`` of a text row whose ``text`` is a path of a file of the run (a profiler trace),
#: stored by :func:`stored_path` and read back by :func:`resolve_stored_path`.
PATH_UNIT = "path"


@dataclass(frozen=True)
class RecordContext:
    """Who wrote a row: the identity columns shared by all rows of one writer."""

    run_id: str = "interactive"
    suite: str = ""
    experiment: str = ""
    variant: str = "default"
    task_id: str = ""
    repetition: int = 0
    params: Mapping[str, Any] = field(default_factory=dict)
    node: str = field(default_factory=socket.gethostname)
    rank: int = 0
    world_size: int = 1

    def for_rank(self, *, node: str, rank: int, world_size: int) -> "RecordContext":
        return replace(self, node=node, rank=rank, world_size=world_size)

    def to_json(self) -> str:
        data = asdict(self)
        data["params"] = dict(self.params)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RecordContext":
        return cls(**json.loads(text))


class RecordWriter:
    """Collects rows in memory and writes them to one Parquet file on ``close()``.

    Use as a context manager; rows added before an exception are still written
    (a partial run is better evidence than none), and the file appears only
    once complete.
    """

    def __init__(self, path: str | os.PathLike, context: RecordContext):
        self.path = Path(path)
        self.context = context
        self._rows: list[dict[str, Any]] = []
        self._params_json = json.dumps(dict(context.params), sort_keys=True, default=str)
        self.closed = False

    def add(self, metric: str, value: float | None, unit: str, *, step: int = 0,
            labels: Mapping[str, Any] | None = None, text: str | None = None,
            when: float | None = None) -> None:
        """Add one measured value (``value=None`` with a ``text`` for absent values)."""
        if self.closed:
            raise ResultsError("writer is closed", path=str(self.path))
        if value is not None and not isinstance(value, (int, float)):
            raise TypeError(f"metric {metric!r}: value must be a number, got {type(value).__name__}")
        self._rows.append({
            "metric": metric,
            "value": float("nan") if value is None else float(value),
            "unit": unit,
            "step": int(step),
            # microseconds since the epoch: the schema's timestamp("us", UTC), as pyarrow takes it
            "time": round((when if when is not None else time.time()) * 1e6),
            "labels": json.dumps(dict(labels or {}), sort_keys=True, default=str),
            "text": text,
        })

    def __len__(self) -> int:
        return len(self._rows)

    def close(self) -> Path:
        """Write the file atomically and return its path."""
        if self.closed:
            return self.path
        self.closed = True
        ctx = self.context
        n = len(self._rows)
        base = {
            "run_id": ctx.run_id, "suite": ctx.suite, "experiment": ctx.experiment,
            "variant": ctx.variant, "task_id": ctx.task_id, "repetition": ctx.repetition,
            "params": self._params_json, "node": ctx.node, "rank": ctx.rank,
            "world_size": ctx.world_size,
        }
        columns = {name: [base[name]] * n for name in base}
        for name in ("metric", "value", "unit", "step", "time", "labels", "text"):
            columns[name] = [row[name] for row in self._rows]
        table = pa.Table.from_arrays([arrow_column(f.type, columns[f.name]) for f in SCHEMA], schema=SCHEMA)
        write_table_atomic(table, self.path)
        return self.path

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def arrow_column(kind: pa.DataType, values: list[Any]) -> pa.Array:
    """``values`` as an Arrow array of ``kind`` (a string or a fixed-width type of :data:`SCHEMA`), built from
    its buffers.

    Why not ``pa.array``: every conversion of Python or numpy values makes pyarrow import pandas (its pandas
    shim checks for a Series first), ~0.4 s of CPU in each rank that writes its records and never uses pandas.
    Strings may be None (a null); the numbers are never null (an absent value is NaN, as the schema says).
    """
    import numpy as np

    n = len(values)
    if pa.types.is_string(kind):
        data = [b"" if v is None else str(v).encode() for v in values]
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum([len(d) for d in data], out=offsets[1:])
        present = np.fromiter((v is not None for v in values), dtype=bool, count=n)
        nulls = n - int(present.sum())
        validity = pa.py_buffer(np.packbits(present, bitorder="little")) if nulls else None
        return pa.Array.from_buffers(kind, n, [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))],
                                     null_count=nulls)
    fixed = {"int32": np.int32, "int64": np.int64, "double": np.float64}
    # a timestamp("us") is its int64 microseconds; another type is not in the schema (a KeyError names it)
    dtype = np.int64 if pa.types.is_timestamp(kind) else fixed[str(kind)]
    return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(np.asarray(values, dtype=dtype))])


def write_table_atomic(table: pa.Table, path: Path) -> None:
    """Write ``table`` to ``path`` atomically, mode ``0o666 & ~umask`` (see :mod:`hpcbench.core.atomic`)."""
    with atomic_write(path) as fh:
        pq.write_table(table, fh)


def read_records(path: str | os.PathLike) -> pd.DataFrame:
    """Read one records file and check it follows the schema.

    Raises:
        ResultsError: naming the file when it is not Parquet, is truncated, or
            lacks schema columns (a foreign file).
    """
    path = Path(path)
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise ResultsError(f"not a readable Parquet file ({exc})", path=str(path)) from None
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise ResultsError(f"not an hpcbench records file: missing columns {missing}", path=str(path))
    try:
        table = table.select(COLUMNS).cast(SCHEMA)
    except (pa.ArrowException, ValueError) as exc:
        raise ResultsError(f"columns have the wrong types ({exc})", path=str(path)) from None
    return table.to_pandas()


def find_record_files(root: str | os.PathLike) -> list[Path]:
    """All ``*.parquet`` files below ``root`` (temporary files are skipped)."""
    root = Path(root)
    return sorted(p for p in root.rglob("*.parquet") if not p.name.startswith("."))


# -- paths of the run's files in rows ------------------------------------------------
#
# A row that names a file of the run (a rank's profiler trace) stores its path relative to the
# run directory, with ``/`` separators (``tasks/comm_modes.default.r0/trace/0.json``): the run
# directory may be moved or copied to another machine before the report is built, and an
# absolute path would name the old place. Rows written before this convention hold absolute
# paths; :func:`resolve_stored_path` reads both.

def run_dir_of(records_file: str | os.PathLike) -> Path:
    """The run directory a records file belongs to (absolute).

    ``RUN/tasks/<task>/records/<file>.parquet`` gives ``RUN``; a task folder outside a run
    (a notebook run by hand into ``OUT/records/``) is its own run directory, ``OUT``.
    """
    folder = Path(os.path.abspath(records_file)).parent
    task = folder.parent if folder.name == RECORDS_SUBDIR else folder
    return task.parent.parent if task.parent.name == TASKS_SUBDIR else task


def stored_path(path: str | os.PathLike, records_file: str | os.PathLike) -> str:
    """``path`` as a row stores it: relative to the run directory of ``records_file`` (see
    :func:`run_dir_of`), ``/``-separated; absolute when it lies outside that directory (a trace
    written to a scratch folder), since no relative path would survive a move then either.

    Args:
        path: a file the writer's task wrote.
        records_file: the writer's records file (``RecordWriter.path``).
    """
    # Resolved both: a run directory reached through a symbolic link still contains its files.
    path = Path(path).resolve()
    run_dir = run_dir_of(Path(records_file).resolve())
    return path.relative_to(run_dir).as_posix() if path.is_relative_to(run_dir) else str(path)


def resolve_stored_path(stored: str | os.PathLike, run_dir: str | os.PathLike) -> Path:
    """Where the file a row names is now, given the run directory as it is now (absolute).

    A relative path (:func:`stored_path`) lies under ``run_dir``. An absolute one (rows written
    before paths were stored relative, or a file outside the run) is looked for under
    ``run_dir`` first, by the part of it below the run directory's name (the run was moved or
    copied since); otherwise it is returned as recorded. Whether the file exists is the
    caller's question.
    """
    run_dir = Path(os.path.abspath(run_dir))
    path = Path(stored)
    if not path.is_absolute():
        return run_dir / path
    parts = path.parts
    for i in range(len(parts) - 2, 0, -1):  # the deepest match first; parts[0] is "/"
        if parts[i] == run_dir.name and (moved := run_dir.joinpath(*parts[i + 1:])).exists():
            return moved
    return path


def empty_frame() -> pd.DataFrame:
    return SCHEMA.empty_table().to_pandas()


def is_missing(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def iter_labels(frame: pd.DataFrame) -> Iterable[dict[str, Any]]:
    return (json.loads(s) for s in frame["labels"])


def json_object(text: Any) -> dict[str, Any]:
    """A record's ``labels`` or ``params`` (JSON text) as a dict; {} when missing, unreadable or not an object."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def expand_labels(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with one column per label key (a key that clashes becomes ``label.KEY``)."""
    import pandas as pd

    frame = frame.reset_index(drop=True)
    labels = pd.DataFrame([json_object(text) for text in frame["labels"]], index=frame.index)
    labels.columns = [f"label.{c}" if c in frame.columns else str(c) for c in labels.columns]
    out = pd.concat([frame, labels], axis=1)
    out.attrs["label_keys"] = list(labels.columns)
    return out


def label_keys(frame: pd.DataFrame) -> list[str]:
    """The label columns :func:`expand_labels` added to ``frame``."""
    return list(frame.attrs.get("label_keys", []))
