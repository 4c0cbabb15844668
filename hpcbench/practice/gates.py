"""The gate before scaling out (guide C12), evaluated on any task's step records.

The guide (sec. 6): "check that the step-time standard deviation is below 5 %, the
communication share below 30 % and the storage read latency P99 below 100 ms". The three limits
are data (:data:`GATE_THRESHOLDS`; the figures, :data:`GATE_STEP_TIME_CV_MAX`,
:data:`GATE_COMM_SHARE_MAX` and :data:`GATE_READ_P99_MAX_S`, are this technique's defaults,
defined here; the claim that quotes them is declared in :mod:`hpcbench.experiments.practice.claims`); each is measured by
one function registered under the threshold's name (:data:`MEASURES`), from records in the one
results schema (:mod:`hpcbench.core.results`). A check that these records cannot measure is
*absent* (``passed is None``) with the reason, never guessed.

How each value is computed (the rules, stated once):

* Rows are read if their value is finite and, with ``labels=``, their labels hold every given
  key with that value (compared as strings).
* A *series* is one (task, repetition, labels) combination; a *no-op series* is one whose labels
  hold a value ``"noop"`` (or ending in ``"/noop"``): the twin step run under a no-op
  communication hook that the timing experiments interleave. It measures compute only, so it is
  never judged as a step time itself.
* ``step_time_cv``: ``step_time`` rows in ``s``, outside no-op series. Per rank and series, the
  sample standard deviation over the mean of its steps (:func:`hpcbench.diag.step_breakdown.jitter`,
  >= 2 steps); per series the median over ranks (every DDP rank waits for the slowest, so the
  ranks see one step time; the median keeps one rank's timer noise from deciding); the value is
  the worst (largest) series: a gate passes a task only if every configuration it ran would.
* ``comm_share``: communication seconds over step seconds, per step, from the first of these
  the records hold (precedence: the most direct measurement first):

  1. ``comm_time`` rows (``s``) paired with the ``step_time`` row of the same rank and step whose
     labels equal theirs, or else the only one whose labels hold all of theirs (a worker may label
     its steps with a key its ``comm_time`` rows lack, such as ``comm="mode"``);
  2. interleaved no-op twins: ``(t_step - t_noop) / t_step`` with the no-op ``step_time`` row of
     the same rank and step whose labels differ only in the no-op key;
  3. ``comm_share`` rows (``fraction``) the worker computed itself.

  Per rank and series the median over steps, per series the median over ranks, the value the
  worst series. A negative share (a no-op twin slower than its step: noise) is kept as measured.
* ``read_p99``: ``read_time`` rows in ``s``, pooled over ranks and series (a read's labels may
  carry its size, so every read is its own series), the 99th percentile
  (:func:`hpcbench.core.metrics.percentile`). With fewer than 100 reads it is close to the
  slowest read; the detail gives the count.

A value passes when it is strictly below its limit, as the guide words it.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

import pandas as pd

from hpcbench.core.errors import ConfigError
from hpcbench.core.metrics import percentile
from hpcbench.core.registry import Registry
from hpcbench.diag.step_breakdown import jitter

__all__ = ["GATE_METRICS", "GATE_THRESHOLDS", "GATE_COMM_SHARE_MAX", "GATE_READ_P99_MAX_S",
           "GATE_STEP_TIME_CV_MAX", "GateCheck", "GateResult", "GateThreshold", "MEASURES", "NOOP", "TASK_KEYS",
           "evaluate_gate", "gate_thresholds", "is_noop_labels", "task_gates"]

# -- the guide's three gate limits (C12, guide sec. 6, "Best practices"): this technique's defaults, each a strict "<"
#: "step-time standard deviation < 5 %" (of the mean step time).
GATE_STEP_TIME_CV_MAX = 0.05
#: "communication share < 30 %".
GATE_COMM_SHARE_MAX = 0.30
#: "storage read latency P99 < 100 ms", in seconds.
GATE_READ_P99_MAX_S = 0.100

#: The label value that marks a no-op communication twin (``comm="noop"``, ``compression="noop"``).
NOOP = "noop"
_SOURCE = "guide C12 (sec. 6)"


@dataclass(frozen=True)
class GateThreshold:
    """One limit of the gate, as data."""

    name: str
    """the measure it limits: a name in :data:`MEASURES`"""
    limit: float
    """the value must be strictly below it"""
    unit: str
    """unit of the value and the limit ("" for a fraction)"""
    description: str
    """the guide's words, for tables"""
    source: str
    """where the figure comes from"""


#: The guide's three limits (C12), in the order the guide lists them.
GATE_THRESHOLDS: tuple[GateThreshold, ...] = (
    GateThreshold("step_time_cv", GATE_STEP_TIME_CV_MAX, "", "step-time standard deviation / mean < 5 %",
                  _SOURCE),
    GateThreshold("comm_share", GATE_COMM_SHARE_MAX, "", "communication share of the step < 30 %", _SOURCE),
    GateThreshold("read_p99", GATE_READ_P99_MAX_S, "s", "storage read latency P99 < 100 ms", _SOURCE),
)


@dataclass(frozen=True)
class GateCheck:
    """One threshold checked on one set of records."""

    name: str
    value: float | None
    limit: float
    unit: str
    passed: bool | None
    """None: not measurable from these records (``detail`` says why)"""
    detail: str
    """how the value was computed, or why it is absent"""

    def describe(self) -> str:
        """``"step_time_cv 0.12 > 0.05 (...)"`` or ``"read_p99 not measured (...)"``."""
        if self.passed is None or self.value is None:
            return f"{self.name} not measured ({self.detail})"
        unit = f" {self.unit}" if self.unit else ""
        sign = "<" if self.passed else ">="
        return f"{self.name} {self.value:.3g}{unit} {sign} {self.limit:g}{unit} ({self.detail})"


@dataclass(frozen=True)
class GateResult:
    """The gate on one set of records: one check per threshold."""

    checks: tuple[GateCheck, ...]

    @property
    def passed(self) -> bool | None:
        """False if any check failed; True if at least one was measured and none failed; None if none measured."""
        states = [c.passed for c in self.checks]
        if any(s is False for s in states):
            return False
        if any(s is True for s in states):
            return True
        return None

    @property
    def failed(self) -> tuple[str, ...]:
        """Names of the failed checks, in threshold order."""
        return tuple(c.name for c in self.checks if c.passed is False)

    def check(self, name: str) -> GateCheck:
        """The check named ``name`` (KeyError listing the names if absent)."""
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"no gate check {name!r}; checks: {', '.join(c.name for c in self.checks)}")

    def explain(self) -> str:
        """One line: the verdict, then the failed checks (or every check when none failed)."""
        state = {True: "passes", False: "fails", None: "not measured"}[self.passed]
        shown = [c for c in self.checks if c.passed is False] or list(self.checks)
        return f"{state}: " + "; ".join(c.describe() for c in shown)


# -- reading the records ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Row:
    series: tuple[str, str, str]   # task, repetition, canonical labels JSON
    rank: int
    step: int
    value: float
    labels: dict[str, Any]


def _canonical(labels: Mapping[str, Any]) -> str:
    return json.dumps(dict(labels), sort_keys=True, default=str)


def is_noop_labels(labels: Mapping[str, Any]) -> str | None:
    """The key marking a no-op twin series (its value ``"noop"`` or ``".../noop"``), else None."""
    for key, value in labels.items():
        if isinstance(value, str) and (value == NOOP or value.endswith("/" + NOOP)):
            return key
    return None


def _rows(records: pd.DataFrame, metric: str, unit: str | None, labels: Mapping[str, str] | None) -> list[_Row]:
    """The finite rows of ``metric`` (in ``unit`` when given) whose labels match ``labels``."""
    if records.empty or "metric" not in records.columns:
        return []
    frame = records[records["metric"] == metric]
    if unit is not None and "unit" in frame.columns:
        frame = frame[frame["unit"] == unit]
    out = []
    for row in frame.itertuples(index=False):
        value = float(row.value) if row.value is not None else math.nan
        if not math.isfinite(value):
            continue
        raw = getattr(row, "labels", "{}")
        parsed = json.loads(raw) if isinstance(raw, str) and raw else dict(raw or {})
        if labels and any(str(parsed.get(k)) != str(v) for k, v in labels.items()):
            continue
        series = (str(getattr(row, "task_id", "")), str(getattr(row, "repetition", 0)), _canonical(parsed))
        out.append(_Row(series, int(getattr(row, "rank", 0)), int(getattr(row, "step", 0)), value, parsed))
    return out


def _worst_series(per_rank: Mapping[tuple[tuple[str, str, str], int], float]) -> tuple[float, str, int]:
    """Median over ranks per series, then the largest: (value, "worst of N series (labels): " or "", ranks in it)."""
    by_series: dict[tuple[str, str, str], list[float]] = {}
    for (series, _), v in per_rank.items():
        by_series.setdefault(series, []).append(v)
    medians = {s: statistics.median(vs) for s, vs in by_series.items()}
    worst = max(medians, key=lambda s: medians[s])
    which = f"worst of {len(medians)} series ({worst[2]}): " if len(medians) > 1 else ""
    return medians[worst], which, len(by_series[worst])


def _absent(threshold: GateThreshold, why: str) -> GateCheck:
    return GateCheck(threshold.name, None, threshold.limit, threshold.unit, None, why)


def _measured(threshold: GateThreshold, value: float, detail: str) -> GateCheck:
    return GateCheck(threshold.name, value, threshold.limit, threshold.unit, value < threshold.limit, detail)


# -- the measures ----------------------------------------------------------------------------------

Measure = Callable[["pd.DataFrame", GateThreshold, "Mapping[str, str] | None"], GateCheck]
#: Threshold name -> how its value is measured from records (the module docstring states each rule).
MEASURES: Registry[Measure] = Registry("gate measure")


def _step_time_cv(records: pd.DataFrame, threshold: GateThreshold, labels: Mapping[str, str] | None) -> GateCheck:
    steps = [r for r in _rows(records, "step_time", "s", labels) if is_noop_labels(r.labels) is None]
    if not steps:
        return _absent(threshold, "no step_time rows (s) outside no-op series")
    grouped: dict[tuple[tuple[str, str, str], int], list[float]] = {}
    for r in steps:
        grouped.setdefault((r.series, r.rank), []).append(r.value)
    # a non-positive mean is no step time (jitter refuses it); such a series is skipped, not judged
    per_rank = {k: jitter(v) for k, v in grouped.items() if len(v) >= 2 and statistics.fmean(v) > 0}
    if not per_rank:
        return _absent(threshold, "fewer than 2 steps in every series: no spread to measure")
    value, which, n_ranks = _worst_series(per_rank)
    n_steps = min(len(v) for v in grouped.values() if len(v) >= 2)
    return _measured(threshold, value, f"{which}median over {n_ranks} rank(s) of the sample std / mean of "
                                       f">= {n_steps} steps")


def _comm_share_from_comm_time(steps: list[_Row], comm: list[_Row]) -> dict:
    at: dict[tuple, list[_Row]] = {}
    for r in steps:
        at.setdefault((r.series[0], r.series[1], r.rank, r.step), []).append(r)
    shares: dict[tuple, list[float]] = {}
    for c in comm:
        here = at.get((c.series[0], c.series[1], c.rank, c.step), [])
        # the step row with the same labels; else the only one whose labels hold all of the comm row's
        # (a step may carry a label its comm_time rows lack, such as comm="mode")
        match = [r for r in here if r.series[2] == c.series[2]] or \
            [r for r in here if all(r.labels.get(k) == v for k, v in c.labels.items())]
        if len(match) == 1 and match[0].value > 0:
            shares.setdefault((c.series, c.rank), []).append(c.value / match[0].value)
    return shares


def _comm_share_from_noop(steps: list[_Row], noops: list[_Row]) -> dict:
    twins: dict[tuple, float] = {}
    keys = set()
    for r in noops:
        key = str(is_noop_labels(r.labels))
        keys.add(key)
        base = _canonical({k: v for k, v in r.labels.items() if k != key})
        twins[(r.series[0], r.series[1], r.rank, r.step, key, base)] = r.value
    shares: dict[tuple, list[float]] = {}
    for r in steps:
        for key in keys:
            base = _canonical({k: v for k, v in r.labels.items() if k != key})
            t0 = twins.get((r.series[0], r.series[1], r.rank, r.step, key, base))
            if t0 is not None and r.value > 0:
                shares.setdefault((r.series, r.rank), []).append((r.value - t0) / r.value)
                break
    return shares


def _comm_share(records: pd.DataFrame, threshold: GateThreshold, labels: Mapping[str, str] | None) -> GateCheck:
    all_steps = _rows(records, "step_time", "s", labels)
    steps = [r for r in all_steps if is_noop_labels(r.labels) is None]
    noops = [r for r in all_steps if is_noop_labels(r.labels) is not None]
    sources: Iterable[tuple[str, Callable[[], dict]]] = (
        ("comm_time / step_time", lambda: _comm_share_from_comm_time(steps, _rows(records, "comm_time", "s", labels))),
        ("(step - no-op twin) / step", lambda: _comm_share_from_noop(steps, noops)),
        ("comm_share rows", lambda: _grouped(_rows(records, "comm_share", "fraction", labels))),
    )
    for how, shares_of in sources:
        shares = shares_of()
        if shares:
            per_rank = {k: statistics.median(v) for k, v in shares.items()}
            value, which, n_ranks = _worst_series(per_rank)
            return _measured(threshold, value, f"{how}; {which}median over {n_ranks} rank(s) of the median step")
    return _absent(threshold, "no comm_time rows, no no-op twin step_time rows and no comm_share rows to pair "
                              "with the steps")


def _grouped(rows: list[_Row]) -> dict:
    out: dict[tuple, list[float]] = {}
    for r in rows:
        out.setdefault((r.series, r.rank), []).append(r.value)
    return out


def _read_p99(records: pd.DataFrame, threshold: GateThreshold, labels: Mapping[str, str] | None) -> GateCheck:
    reads = _rows(records, "read_time", "s", labels)
    if not reads:
        return _absent(threshold, "no read_time rows (s): the task reads no data it times")
    ranks = len({r.rank for r in reads})
    value = percentile([r.value for r in reads], 99)
    return _measured(threshold, value, f"P99 of {len(reads)} reads pooled over {ranks} rank(s)")


MEASURES.register("step_time_cv", _step_time_cv)
MEASURES.register("comm_share", _comm_share)
MEASURES.register("read_p99", _read_p99)


# -- the gate --------------------------------------------------------------------------------------

def gate_thresholds(overrides: Mapping[str, float] | None = None) -> tuple[GateThreshold, ...]:
    """:data:`GATE_THRESHOLDS` with some limits replaced (``{"comm_share": 0.5}``).

    Raises:
        ConfigError: an override names no threshold, or its limit is not a finite number.
    """
    overrides = dict(overrides or {})
    names = [t.name for t in GATE_THRESHOLDS]
    for name, limit in overrides.items():
        if name not in names:
            raise ConfigError(f"unknown gate threshold {name!r}; allowed: {', '.join(names)}", field="gate_limits")
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not math.isfinite(limit):
            raise ConfigError(f"{name}={limit!r} is not a finite number", field="gate_limits")
    return tuple(replace(t, limit=float(overrides[t.name]), source=f"override of {t.source}: {t.description}",
                         description=f"{t.name} < {float(overrides[t.name]):g}{' ' + t.unit if t.unit else ''}")
                 if t.name in overrides else t for t in GATE_THRESHOLDS)


def evaluate_gate(records: pd.DataFrame, thresholds: Sequence[GateThreshold] = GATE_THRESHOLDS, *,
                  labels: Mapping[str, str] | None = None) -> GateResult:
    """The gate on one task's (or one phase's) records.

    Args:
        records: rows in the results schema (``metric value unit step rank labels``, optionally
            ``task_id repetition``); other metrics are ignored.
        thresholds: the limits to check, each measured by :data:`MEASURES` under its name
            (default: the guide's three).
        labels: keep only rows whose labels hold these values, e.g. ``{"fault": "slow_link"}`` for
            one phase of a task.
    Returns:
        One :class:`GateCheck` per threshold, in the order given; the module docstring states how
        each value is computed.
    Raises:
        RegistryError: a threshold names no registered measure.
    """
    return GateResult(tuple(MEASURES.get(t.name)(records, t, labels) for t in thresholds))


#: The metrics the measures read: a query for the gate needs only these rows.
GATE_METRICS = ("step_time", "comm_time", "comm_share", "read_time")
#: The columns that make one task's records (one launch), and those shown beside them.
TASK_KEYS = ("run_id", "task_id")
TASK_INFO = ("experiment", "variant", "repetition")


def task_gates(records: pd.DataFrame, thresholds: Sequence[GateThreshold] = GATE_THRESHOLDS, *,
               keys: Sequence[str] = TASK_KEYS) -> pd.DataFrame:
    """The gate per task: one row per ``keys`` group of ``records`` that holds step records.

    Args:
        records: rows in the results schema, any number of tasks (rows of other metrics are ignored).
        thresholds: the limits checked.
        keys: the columns that make one task (default: run and task id).
    Returns:
        ``keys``, the :data:`TASK_INFO` columns present, then per threshold ``<name>`` (the value,
        NaN when absent), ``<name>_passed`` (True / False / None) and ``<name>_detail``; ``gate``
        (:attr:`GateResult.passed`), ``gate_failed`` (the failed checks' names) and ``gate_text``
        (:meth:`GateResult.explain`). A task without a ``step_time`` row gets no row: the gate is
        about runs that step.
    """
    keys = [k for k in keys if k in records.columns]
    columns = [*keys, *(c for c in TASK_INFO if c in records.columns)]
    for t in thresholds:
        columns += [t.name, f"{t.name}_passed", f"{t.name}_detail"]
    columns += ["gate", "gate_failed", "gate_text"]
    if records.empty or "metric" not in records.columns:
        return pd.DataFrame(columns=columns)
    rows = records[records["metric"].isin(GATE_METRICS)]
    out = []
    for key, task in (rows.groupby(keys, sort=True) if keys else [((), rows)]):
        if not (task["metric"] == "step_time").any():
            continue
        key = key if isinstance(key, tuple) else (key,)
        row: dict[str, Any] = dict(zip(keys, key))
        row.update({c: task[c].iloc[0] for c in TASK_INFO if c in task.columns})
        result = evaluate_gate(task, thresholds)
        for check in result.checks:
            row[check.name] = math.nan if check.value is None else check.value
            row[f"{check.name}_passed"] = check.passed
            row[f"{check.name}_detail"] = check.detail
        row.update(gate=result.passed, gate_failed=", ".join(result.failed), gate_text=result.explain())
        out.append(row)
    return pd.DataFrame(out, columns=columns)
