"""Read every records file of one or more run directories on a dask cluster and reduce them.

Each run directory is one *source* (a cluster, a date...). Its Parquet files are read
in batches of ``files_per_partition`` (one dask task per batch: one task per small
file costs more in scheduling than in reading), into one dask DataFrame with a
``source`` column. On that frame the cluster computes, in one pass:

* statistics over the raw samples of each series, a series being one
  (source, experiment, variant, metric, unit, labels) where ``labels`` is the
  canonical JSON of the labels (grouping by it is grouping by every label key):
  n, mean, p50, p99, std (ddof=1), min, max, and the spread over repetitions, the
  per-repetition means' (max - min) / mean in % with the number of repetitions;
* the text rows (NaN value with a text: "not applicable: ...", versions), kept as text;
* the raw rows of the experiments that need them (claims, inventories);
* the rows the gate before scaling out reads (:data:`hpcbench.practice.gates.GATE_METRICS`), of
  every experiment: :func:`gates_on_cluster` then evaluates the gate per task, one task per source.

A file that :func:`hpcbench.core.results.read_records` rejects (corrupt, truncated, a
foreign Parquet file) is set aside with its reason; it never fails its partition.
:meth:`Aggregate.experiment_stats` expands the labels into columns, per experiment.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from hpcbench.core.errors import HpcbenchError, ResultsError
from hpcbench.core.results import COLUMNS, empty_frame, expand_labels, find_record_files, read_records
from hpcbench.practice.gates import GATE_METRICS, task_gates
from hpcbench.run.rundir import effective_state

#: The columns a series is identified by (``labels`` is canonical JSON). ``node`` keeps
#: one node's samples apart from another's, so that a slow node shows as its own row.
SERIES_KEYS = ["source", "experiment", "variant", "node", "metric", "unit", "labels"]
STAT_COLUMNS = ["n", "mean", "p50", "p99", "std", "min", "max", "repetitions", "spread_pct"]
TEXT_COLUMNS = ["source", "experiment", "variant", "task_id", "repetition", "node", "rank",
                "metric", "unit", "labels", "text"]
TASK_STATES = ("done", "failed", "interrupted", "stale", "pending", "running")


@dataclass(frozen=True)
class Unreadable:
    """An input that could not be used, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class TaskStatus:
    """One task's ``status.json``, as the report needs it."""

    source: str
    task_id: str
    experiment: str
    variant: str
    repetition: int | None
    state: str
    error: str | None
    notebook: Path | None
    duration_s: float | None


@dataclass
class Source:
    """One run directory: its label in the report, ``run.json`` and its files."""

    label: str
    run_dir: Path
    info: dict[str, Any]
    tasks: list[TaskStatus] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    unreadable: list[Unreadable] = field(default_factory=list)
    not_counted: list[TaskStatus] = field(default_factory=list)
    """Tasks whose records are left out: a task that did not finish measured nothing to trust."""

    def count(self, state: str) -> int:
        return sum(1 for t in self.tasks if t.state == state)


@dataclass
class Aggregate:
    """What the cluster computed, as small pandas frames."""

    sources: list[Source]
    stats: pd.DataFrame           # SERIES_KEYS + STAT_COLUMNS
    text_rows: pd.DataFrame       # TEXT_COLUMNS
    unreadable: list[Unreadable]
    tasks: list[TaskStatus]
    records_by_source: dict[str, pd.DataFrame]  # schema columns, raw rows of the requested experiments
    summaries_by_source: dict[str, dict[str, pd.DataFrame]] = field(default_factory=dict)
    """source -> experiment -> every launch's summary (the experiment's ``summarize``, run on the workers)."""
    gates: pd.DataFrame = field(default_factory=pd.DataFrame)
    """The gate before scaling out (C12) per task that has step records, every source
    (:func:`hpcbench.practice.gates.task_gates` with a ``source`` column)."""

    def summaries(self, experiment: str) -> pd.DataFrame:
        """One experiment's launch summaries of all sources, with a ``source`` column."""
        frames = [by_exp[experiment].assign(source=label) for label, by_exp in self.summaries_by_source.items()
                  if experiment in by_exp and len(by_exp[experiment])]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    @property
    def labels(self) -> list[str]:
        return [s.label for s in self.sources]

    def experiments(self) -> list[str]:
        names = set(self.stats["experiment"]) | set(self.text_rows["experiment"])
        return sorted(str(n) for n in names)

    def experiment_stats(self, experiment: str) -> pd.DataFrame:
        """The statistics of one experiment with its label keys as columns."""
        return expand_labels(self.stats[self.stats["experiment"] == experiment])

    def experiment_text(self, experiment: str) -> pd.DataFrame:
        return expand_labels(self.text_rows[self.text_rows["experiment"] == experiment])

    def experiment_gates(self, experiment: str) -> pd.DataFrame:
        """The gate per task of one experiment (empty when none of its tasks has step records)."""
        if self.gates.empty or "experiment" not in self.gates.columns:
            return self.gates.iloc[0:0]
        return self.gates[self.gates["experiment"] == experiment].reset_index(drop=True)


# -- sources ---------------------------------------------------------------------

def print_warning(message: str) -> None:
    """The report's default for warnings: one line on stderr, as the CLI prints its errors."""
    print(f"hpcbench: warning: {message}", file=sys.stderr)


def load_sources(run_dirs: Sequence[str | Path], warn: Callable[[str], None] = print_warning) -> list[Source]:
    """Check every run directory, read ``run.json`` and the task statuses, list the files.

    A run directory given twice (``R`` and ``./R/``, or through a symbolic link) is one
    directory: it is read once, and ``warn`` says so.

    Raises:
        HpcbenchError: naming the first path that does not exist or is not a directory.
    """
    if not run_dirs:
        raise HpcbenchError("no run directory given")
    for d in map(Path, run_dirs):
        if not d.exists():
            raise HpcbenchError(f"run directory {d} does not exist")
        if not d.is_dir():
            raise HpcbenchError(f"run directory {d} is not a directory")
    dirs = _distinct_dirs(run_dirs, warn)
    sources: list[Source] = []
    used: set[str] = set()
    for d in dirs:
        unreadable: list[Unreadable] = []
        info = _read_json(d / "run.json", unreadable) or {}
        label = _unique(str(info.get("run_id") or d.resolve().name), used)
        source = Source(label=label, run_dir=d, info=info, unreadable=unreadable)
        source.tasks = _read_statuses(source)
        # A run dir's measurements live under tasks/; superseded attempts (attempts/)
        # are kept as evidence but not counted. Hand-made dirs are read whole.
        source.files = find_record_files(d / "tasks") if (d / "tasks").is_dir() else find_record_files(d)
        # Records of a task that failed (or never finished) are no measurement: neither the
        # tables nor the ledger read them; the report lists the task instead.
        unfinished = {t.task_id for t in source.tasks if t.state != "done"}
        if unfinished:
            source.not_counted = [t for t in source.tasks if t.task_id in unfinished]
            source.files = [f for f in source.files if not _in_task(f, d / "tasks", unfinished)]
        sources.append(source)
    return sources


def _distinct_dirs(run_dirs: Sequence[str | Path], warn: Callable[[str], None]) -> list[Path]:
    """The run dirs without those that resolve to one already listed (its first spelling kept)."""
    first: dict[Path, str | Path] = {}
    for d in run_dirs:
        key = Path(d).resolve()
        if key in first:
            warn(f"run directory {d} is {first[key]} again (both are {key}); it is counted once")
        else:
            first[key] = d
    return [Path(d) for d in first.values()]


def check_sources(sources: Sequence[Source], warn: Callable[[str], None] = print_warning) -> None:
    """Refuse a source with nothing to report; warn about one whose tasks have no records yet.

    Raises:
        HpcbenchError: naming the first folder that has no task (no ``tasks/*/status.json``)
            and no records file: an empty folder or a typo, not a run directory.
    """
    for source in sources:
        if not source.tasks and not source.files:
            what = ("a run directory without any task" if source.info or (source.run_dir / "run.json").exists()
                    else "not an hpcbench run directory")
            raise HpcbenchError(f"run directory {source.run_dir}: {what} (no tasks/*/status.json and "
                                "no records files): nothing to report")
    for source in sources:
        if not source.files:
            states = ", ".join(f"{n} {state}" for state, n in _state_counts(source.tasks).items())
            warn(f"run directory {source.run_dir}: none of its {len(source.tasks)} task(s) has records "
                 f"to report yet ({states}); the report shows their states only")


def _state_counts(tasks: Sequence[TaskStatus]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t.state] = counts.get(t.state, 0) + 1
    return counts


def _in_task(path: Path, tasks_dir: Path, task_ids: set[str]) -> bool:
    try:
        return path.relative_to(tasks_dir).parts[0] in task_ids
    except ValueError:
        return False


def _unique(label: str, used: set[str]) -> str:
    candidate, k = label, 2
    while candidate in used:
        candidate, k = f"{label} ({k})", k + 1
    used.add(candidate)
    return candidate


def _read_json(path: Path, unreadable: list[Unreadable]) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        unreadable.append(Unreadable(str(path), f"not readable JSON ({exc})"))
        return None
    if not isinstance(data, dict):
        unreadable.append(Unreadable(str(path), "not a JSON object"))
        return None
    return data


def _read_statuses(source: Source) -> list[TaskStatus]:
    tasks = []
    for path in sorted((source.run_dir / "tasks").glob("*/status.json")):
        data = _read_json(path, source.unreadable)
        task_dir = path.parent
        if data is None:
            tasks.append(TaskStatus(source.label, task_dir.name, "", "", None, "unknown",
                                    "status.json is unreadable", None, None))
            continue
        notebook = data.get("notebook")
        rep = data.get("repetition")
        duration = data.get("duration_s")
        error = data.get("error")
        state = str(data.get("state") or "unknown")
        # A `running` task whose process is gone (its runner was killed) is shown as
        # stale, with why, instead of "running" forever and "no task failed".
        shown, why = effective_state(SimpleNamespace(state=state, pid=data.get("pid"), host=data.get("host"),
                                                     pid_started=data.get("pid_started")))
        if why:
            state, error = shown, why
        tasks.append(TaskStatus(
            source=source.label,
            task_id=str(data.get("task_id") or task_dir.name),
            experiment=str(data.get("experiment") or ""),
            variant=str(data.get("variant") or ""),
            repetition=int(rep) if isinstance(rep, (int, float)) else None,
            state=state,
            error=None if error is None else str(error),
            notebook=(task_dir / str(notebook)) if notebook else None,
            duration_s=float(duration) if isinstance(duration, (int, float)) else None,
        ))
    return tasks


# -- what runs on the workers ----------------------------------------------------

def _canonical_labels(frame: pd.DataFrame) -> pd.Series:
    """Labels JSON with sorted keys, so equal labels group together whoever wrote them."""
    mapping = {}
    for text in frame["labels"].unique():
        try:
            mapping[text] = json.dumps(json.loads(text), sort_keys=True)
        except (TypeError, json.JSONDecodeError):
            mapping[text] = text
    return frame["labels"].map(mapping).astype(frame["labels"].dtype)


def read_batch(paths: Sequence[str], source: str) -> tuple[pd.DataFrame, list[Unreadable]]:
    """Read one partition's files; a file read_records rejects is returned, not raised."""
    frames, bad = [], []
    for path in paths:
        try:
            frames.append(read_records(path))
        except ResultsError as exc:
            # str(exc) starts with the path; keep only the reason.
            reason = str(exc)
            prefix = f"{path}: "
            bad.append(Unreadable(str(path), reason[len(prefix):] if reason.startswith(prefix) else reason))
    frames = [f for f in frames if len(f)]
    frame = pd.concat(frames, ignore_index=True) if frames else empty_frame()
    frame.insert(0, "source", pd.Series([source] * len(frame), dtype=frame["run_id"].dtype, index=frame.index))
    if len(frame):
        frame["labels"] = _canonical_labels(frame)
    return frame, bad


def _frame_of(part: tuple[pd.DataFrame, list[Unreadable]]) -> pd.DataFrame:
    return part[0]


def _unreadable_of(part: tuple[pd.DataFrame, list[Unreadable]]) -> pd.DataFrame:
    return pd.DataFrame({"path": pd.Series([u.path for u in part[1]], dtype="object"),
                         "reason": pd.Series([u.reason for u in part[1]], dtype="object")})


def series_stats(frame: pd.DataFrame) -> pd.DataFrame:
    """Statistics of every series in ``frame`` (rows of whole series only: see the shuffle)."""
    rows = []
    for key, group in frame.groupby(SERIES_KEYS, sort=False, observed=True):
        values = group["value"].to_numpy(dtype=float)
        rep_means = group.groupby("repetition")["value"].mean().to_numpy(dtype=float)
        overall = float(rep_means.mean())
        spread = (float((rep_means.max() - rep_means.min()) / abs(overall) * 100.0)
                  if len(rep_means) > 1 and overall != 0 else math.nan)
        rows.append((*key, len(values), float(values.mean()), float(np.percentile(values, 50)),
                     float(np.percentile(values, 99)),
                     float(values.std(ddof=1)) if len(values) > 1 else math.nan,
                     float(values.min()), float(values.max()), len(rep_means), spread))
    return _stats_frame(rows, frame)


def _stats_frame(rows: list[tuple], like: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame(rows, columns=SERIES_KEYS + STAT_COLUMNS)
    for col in SERIES_KEYS:
        out[col] = out[col].astype(like[col].dtype)
    for col in ("n", "repetitions"):
        out[col] = out[col].astype("int64")
    for col in ("mean", "p50", "p99", "std", "min", "max", "spread_pct"):
        out[col] = out[col].astype("float64")
    return out


def _records_meta() -> pd.DataFrame:
    return read_batch([], "")[0]


# -- the driver side -------------------------------------------------------------

def aggregate(run_dirs: Sequence[str | Path] | Sequence[Source], client, files_per_partition: int = 25,
              *, raw_experiments: Iterable[str] | None = None, progress=print) -> Aggregate:
    """Load the run directories on ``client``'s cluster and compute the statistics.

    Args:
        run_dirs: run directories (or sources from :func:`load_sources`).
        client: a ``distributed.Client``; its workers must be able to import hpcbench.
        files_per_partition: files read by one task.
        raw_experiments: experiments whose raw rows come back in ``records_by_source``
            (None: all of them).
        progress: called with short progress lines.

    Returns:
        The :class:`Aggregate`.
    """
    import dask
    import dask.dataframe as dd

    if files_per_partition < 1:
        raise HpcbenchError(f"files_per_partition must be >= 1, got {files_per_partition}")
    sources = (list(run_dirs) if run_dirs and all(isinstance(s, Source) for s in run_dirs)
               else load_sources(run_dirs))
    batches = [(s.label, [str(p) for p in s.files[i:i + files_per_partition]])
               for s in sources for i in range(0, len(s.files), files_per_partition)]
    n_files = sum(len(s.files) for s in sources)
    progress(f"report: loading {n_files} records files in {len(batches)} partition(s) "
             f"from {len(sources)} source(s)...")
    meta = _records_meta()
    raw_set = None if raw_experiments is None else sorted(set(raw_experiments))
    unreadable = [u for s in sources for u in s.unreadable]
    if batches:
        parts = [dask.delayed(read_batch, pure=True)(paths, label) for label, paths in batches]
        ddf = dd.from_delayed([dask.delayed(_frame_of)(p) for p in parts], meta=meta, verify_meta=False)
        bad = dd.from_delayed([dask.delayed(_unreadable_of)(p) for p in parts],
                              meta=_unreadable_of((meta, [])), verify_meta=False)
        numeric = ddf[ddf["value"].notnull()][SERIES_KEYS + ["repetition", "value"]]
        # After a shuffle on the series keys every series lies whole in one partition,
        # so exact percentiles need no approximation; "tasks" beats p2p at this size.
        stats = numeric.shuffle(on=SERIES_KEYS, shuffle_method="tasks").map_partitions(
            series_stats, meta=_stats_frame([], meta))
        text = ddf[ddf["value"].isna() & ddf["text"].notnull()][TEXT_COLUMNS]
        raw = ddf if raw_set is None else ddf[ddf["experiment"].isin(raw_set)]
        stepping = ddf[ddf["metric"].isin(list(GATE_METRICS))]
        # One compute: the reading tasks are shared by all five results.
        futures = client.compute([stats, text, raw, bad, stepping])
        stats_df, text_df, raw_df, bad_df, gate_df = client.gather(futures)
        unreadable += [Unreadable(str(p), str(r)) for p, r in zip(bad_df["path"], bad_df["reason"])]
    else:
        stats_df, text_df, raw_df, gate_df = _stats_frame([], meta), meta[TEXT_COLUMNS], meta, meta
    stats_df = stats_df.sort_values(SERIES_KEYS, kind="stable").reset_index(drop=True)
    text_df = text_df.reset_index(drop=True)
    raw_df = raw_df.reset_index(drop=True)
    records_by_source = {s.label: raw_df[raw_df["source"] == s.label][COLUMNS].reset_index(drop=True)
                         for s in sources}
    tasks = [t for s in sources for t in s.tasks]
    summaries = summarize_on_cluster(client, records_by_source)
    gates = gates_on_cluster(client, {s.label: gate_df[gate_df["source"] == s.label] for s in sources})
    progress(f"report: {len(stats_df)} series, {len(text_df)} text rows, "
             f"{len(unreadable)} unreadable input(s), {len(tasks)} task(s)")
    return Aggregate(sources=sources, stats=stats_df, text_rows=text_df, unreadable=unreadable,
                     tasks=tasks, records_by_source=records_by_source, summaries_by_source=summaries, gates=gates)


def _summarize_experiment(records: pd.DataFrame, experiment: str) -> pd.DataFrame:
    from hpcbench.experiments import EXPERIMENTS
    from hpcbench.judge.evidence import summarize_launches

    return summarize_launches(records, EXPERIMENTS.get(experiment).summarize, experiment)


def summarize_on_cluster(client, records_by_source: dict[str, pd.DataFrame]) -> dict[str, dict[str, pd.DataFrame]]:
    """Each experiment's launch summaries per source, one dask task per (source, experiment).

    Computed once here; the report's tables, its plots and the ledger all read these frames.
    """
    from hpcbench.experiments import EXPERIMENTS

    jobs = []
    for label, frame in records_by_source.items():
        for name in sorted(set(frame["experiment"])) if len(frame) else []:
            if name in EXPERIMENTS and EXPERIMENTS.get(name).summarize is not None:
                # Scattered first: a frame embedded in the task graph would travel with the graph.
                part = client.scatter(frame[frame["experiment"] == name])
                jobs.append((label, name, client.submit(_summarize_experiment, part, name, pure=False)))
    out: dict[str, dict[str, pd.DataFrame]] = {label: {} for label in records_by_source}
    for (label, name, _), frame in zip(jobs, client.gather([f for *_, f in jobs])):
        out[label][name] = frame
    return out




def _task_gates(records: pd.DataFrame, source: str) -> pd.DataFrame:
    return task_gates(records).assign(source=source)


def gates_on_cluster(client, rows_by_source: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The gate before scaling out (C12) per task, one dask task per source; a ``source`` column first.

    Args:
        rows_by_source: each source's rows of :data:`~hpcbench.practice.gates.GATE_METRICS`, every
            experiment's (the gate applies to any run that steps).
    """
    jobs = [client.submit(_task_gates, client.scatter(frame), label, pure=False)
            for label, frame in rows_by_source.items() if len(frame)]
    frames = [f for f in client.gather(jobs) if len(f)]
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    return out[["source", *(c for c in out.columns if c != "source")]]
