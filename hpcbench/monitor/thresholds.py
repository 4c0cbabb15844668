"""Alert thresholds as data, and the alerts a records frame raises against them.

:data:`C6_THRESHOLDS` are the guide's four (guide sec. 2.4, C6: the figures are this technique's
defaults, :data:`ALERT_SM_EFFICIENCY_MIN` .. :data:`ALERT_CACHE_HIT_MIN`, defined here; the
claim that quotes them is declared in :mod:`hpcbench.experiments.monitoring.claims`) plus ``tcp_retransmission_rate < 0.1 %``: our stand-in for the
InfiniBand rate on Ethernet clusters (the emulated one included), with the guide's IB
figure, since TCP has no fabric-level retransmission of its own and a degraded link shows
up there instead. A threshold states the *healthy* condition (``sm_activity > 0.80``);
an alert is a run of at least ``sustain`` consecutive samples of one series (same node,
metric and labels) that break it, so a single noisy second does not page anyone.

Overrides (:func:`load_thresholds`) come as a mapping or a YAML file::

    sm_activity: {op: ">", value: 0.7}     # change a figure
    gpu_utilization: "< 0.5"               # add one on any known metric (op and value)
    cpu_cache_hit_rate: null               # drop one
    sm_efficiency: "> 0.75"                # the guide's name for sm_activity is accepted
"""

from __future__ import annotations

import json
import math
import operator
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from hpcbench.core.errors import ConfigError
from hpcbench.monitor.sources import METRICS

# -- the guide's four alert thresholds (C6, guide sec. 2.4, "Wrong monitoring metrics"): this technique's defaults --
#: "GPU SM efficiency (DCGM) > 80 %".
ALERT_SM_EFFICIENCY_MIN = 0.80
#: "IB retransmission rate (ibmonitor) < 0.1 %".
ALERT_IB_RETRANS_MAX = 0.001
#: "storage latency P99 (Lustre monitoring) < 50 ms", in seconds.
ALERT_STORAGE_P99_MAX_S = 0.050
#: "CPU cache hit rate (perf) > 90 %".
ALERT_CACHE_HIT_MIN = 0.90

OPS: dict[str, Callable[[float, float], bool]] = {"<": operator.lt, ">": operator.gt, "<=": operator.le,
                                                  ">=": operator.ge}
ALERT_METRIC = "monitor_alert"
DEFAULT_SUSTAIN = 3             # samples: 3 s at 1 Hz, long enough to skip one-off spikes
#: The guide's words for our metrics, accepted as override keys.
ALIASES = {"sm_efficiency": "sm_activity"}


@dataclass(frozen=True)
class Threshold:
    """The healthy condition ``metric op value`` (e.g. ``sm_activity > 0.80``).

    Attributes:
        metric: a metric from :data:`hpcbench.monitor.sources.METRICS`.
        op: one of ``<``, ``>``, ``<=``, ``>=``.
        value: the figure, in ``unit``.
        unit: the metric's unit.
        source: where the figure comes from ("guide C6 (sec. 2.4)", an override file).
    """

    metric: str
    op: str
    value: float
    unit: str
    source: str

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ConfigError(f"unknown metric {self.metric!r}; known: {', '.join(sorted(METRICS))}",
                              field="metric", config="Threshold")
        if self.op not in OPS:
            raise ConfigError(f"op must be one of {list(OPS)}, got {self.op!r}", field="op", config="Threshold")
        if not isinstance(self.value, (int, float)) or isinstance(self.value, bool) or not math.isfinite(self.value):
            raise ConfigError(f"value must be a finite number, got {self.value!r}", field="value",
                              config="Threshold")

    def holds(self, observed: float) -> bool:
        """True when ``observed`` is healthy."""
        return OPS[self.op](observed, self.value)

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.value:g} {self.unit}".rstrip()


_GUIDE = "guide C6 (sec. 2.4)"
C6_THRESHOLDS: tuple[Threshold, ...] = (
    Threshold("sm_activity", ">", ALERT_SM_EFFICIENCY_MIN, "fraction", _GUIDE + ": GPU SM efficiency"),
    Threshold("ib_retransmission_rate", "<", ALERT_IB_RETRANS_MAX, "fraction",
              _GUIDE + ": IB retransmission rate"),
    Threshold("storage_read_p99", "<", ALERT_STORAGE_P99_MAX_S, "s", _GUIDE + ": storage latency P99"),
    Threshold("cpu_cache_hit_rate", ">", ALERT_CACHE_HIT_MIN, "fraction", _GUIDE + ": CPU cache hit rate"),
    Threshold("tcp_retransmission_rate", "<", ALERT_IB_RETRANS_MAX, "fraction",
              "hpcbench: the guide's IB figure applied to TCP, our stand-in on Ethernet"),
)


def load_thresholds(spec: Mapping[str, Any] | str | os.PathLike | None,
                    base: Iterable[Threshold] = C6_THRESHOLDS) -> list[Threshold]:
    """``base`` with the overrides in ``spec`` applied (see the module docstring).

    Args:
        spec: a mapping ``metric -> {op, value[, unit]} | "op value" | None``, a YAML file
            path holding one, or None (no overrides).
        base: the thresholds overridden (the C6 ones by default).
    Returns:
        One threshold per metric, in ``base`` order, added ones after.
    Raises:
        ConfigError: naming the key: an unknown metric, a bad op or value, an unknown field.
    """
    where = "thresholds"
    if spec is None:
        return list(base)
    if not isinstance(spec, Mapping):
        import yaml

        where = str(spec)
        try:
            spec = yaml.safe_load(Path(spec).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read thresholds: {exc}", config=where) from None
        if not isinstance(spec, Mapping):
            raise ConfigError("must be a mapping of metric -> threshold", config=where)
    out = {t.metric: t for t in base}
    for metric, entry in spec.items():
        metric = ALIASES.get(metric, metric)
        if metric not in METRICS:
            from hpcbench.core.registry import did_you_mean

            hint = did_you_mean(str(metric), METRICS)
            raise ConfigError(f"unknown metric; known: {', '.join(sorted(METRICS))}" + (f"; {hint}" if hint else ""),
                              field=str(metric), config=where)
        if entry is None:
            out.pop(metric, None)
            continue
        out[metric] = _parse_entry(str(metric), entry, where, out.get(metric))
    return list(out.values())


def _parse_entry(metric: str, entry: Any, where: str, old: Threshold | None) -> Threshold:
    if isinstance(entry, str):
        parts = entry.split()
        if len(parts) != 2:
            raise ConfigError(f"expected 'op value' like '> 0.8', got {entry!r}", field=metric, config=where)
        entry = {"op": parts[0], "value": parts[1]}
    if not isinstance(entry, Mapping):
        raise ConfigError(f"expected a mapping {{op, value}}, a string 'op value' or null, got {entry!r}",
                          field=metric, config=where)
    unknown = sorted(set(entry) - {"op", "value", "unit", "source"})
    if unknown:
        raise ConfigError(f"unknown fields {unknown}; valid: op, value, unit, source", field=metric, config=where)
    op = entry.get("op", old.op if old else None)
    if op not in OPS:
        raise ConfigError(f"op must be one of {list(OPS)}, got {op!r}", field=f"{metric}.op", config=where)
    try:
        value = float(entry.get("value", old.value if old else float("nan")))
    except (TypeError, ValueError):
        raise ConfigError(f"value must be a number, got {entry.get('value')!r}", field=f"{metric}.value",
                          config=where) from None
    if not math.isfinite(value):
        raise ConfigError("value must be a finite number", field=f"{metric}.value", config=where)
    unit = entry.get("unit", METRICS[metric][0])
    if unit != METRICS[metric][0]:
        raise ConfigError(f"unit must be {METRICS[metric][0]!r} (the metric's unit), got {unit!r}",
                          field=f"{metric}.unit", config=where)
    return Threshold(metric, op, value, unit, str(entry.get("source", f"override ({where})")))


@dataclass(frozen=True)
class Alert:
    """A sustained breach of one threshold by one series.

    Attributes:
        metric: the metric.
        labels: the series' labels (with ``node`` when the frame has that column).
        threshold: the threshold broken.
        observed: the worst value in the run (lowest for ``>``/``>=``, highest for ``<``/``<=``).
        first_time, last_time: the first and last breaching samples' times.
        samples: how many samples in a row broke it.
    """

    metric: str
    labels: dict[str, str]
    threshold: Threshold
    observed: float
    first_time: Any
    last_time: Any
    samples: int

    def describe(self) -> str:
        where = ", ".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        return (f"{self.metric} = {self.observed:.4g} {self.threshold.unit} breaks {self.threshold} "
                f"for {self.samples} samples" + (f" ({where})" if where else "") + f"; from {self.threshold.source}")


def evaluate(samples_frame: Any, thresholds: Iterable[Threshold] = C6_THRESHOLDS, *,
             sustain: int = DEFAULT_SUSTAIN) -> list[Alert]:
    """The alerts in a frame of monitor records.

    Args:
        samples_frame: rows in the results schema (at least ``metric``, ``value``,
            ``labels`` as JSON or dicts, and ``time`` or ``step`` for order); NaN values
            ("not available") are skipped, never counted as breaches.
        thresholds: what to check.
        sustain: consecutive breaching samples needed for an alert (>= 1).
    Returns:
        One alert per run of breaches, ordered by metric, series and time.
    """
    if sustain < 1:
        raise ConfigError(f"must be >= 1, got {sustain}", field="sustain", config="evaluate")
    frame = samples_frame
    by_metric = {t.metric: t for t in thresholds}
    frame = frame[frame["metric"].isin(list(by_metric)) & frame["value"].notna()]
    order = [c for c in ("time", "step") if c in frame.columns]
    alerts: list[Alert] = []
    if frame.empty:
        return alerts
    keys = frame["labels"].map(lambda v: json.dumps(v if isinstance(v, dict) else json.loads(v or "{}"),
                                                    sort_keys=True))
    frame = frame.assign(_series=keys, _node=frame["node"] if "node" in frame.columns else "")
    for (metric, node, series), rows in frame.groupby(["metric", "_node", "_series"], sort=True):
        threshold = by_metric[metric]
        rows = rows.sort_values(order, kind="stable") if order else rows
        labels = json.loads(series)
        if node:
            labels = {"node": str(node), **labels}
        when = rows[order[0]].tolist() if order else list(range(len(rows)))
        run: list[int] = []
        values = rows["value"].tolist()
        for i, value in enumerate(values + [None]):   # the sentinel closes a run at the end
            if value is not None and not threshold.holds(value):
                run.append(i)
                continue
            if len(run) >= sustain:
                worst = (min if threshold.op in (">", ">=") else max)(values[j] for j in run)
                alerts.append(Alert(metric, labels, threshold, worst, when[run[0]], when[run[-1]], len(run)))
            run = []
    return alerts


def alert_records(alerts: Iterable[Alert]) -> list[dict[str, Any]]:
    """Rows for :meth:`hpcbench.core.results.RecordWriter.add` (``writer.add(**row)``), one per alert.

    ``metric`` is ``monitor_alert``, ``value`` the observed worst value in the threshold's
    unit; the labels name the alerting metric, the threshold and the run; ``text`` is the
    sentence for the report.
    """
    rows = []
    for a in alerts:
        first = _seconds(a.first_time)
        labels = {**a.labels, "alert_metric": a.metric, "op": a.threshold.op, "threshold": f"{a.threshold.value:g}",
                  "threshold_source": a.threshold.source, "samples": str(a.samples),
                  "first_time": str(a.first_time), "last_time": str(a.last_time)}
        rows.append({"metric": ALERT_METRIC, "value": float(a.observed), "unit": a.threshold.unit,
                     "labels": labels, "text": a.describe(), "when": first})
    return rows


def _seconds(when: Any) -> float | None:
    """A pandas/py timestamp as epoch seconds (None for a step number: the writer uses now)."""
    if hasattr(when, "timestamp"):
        return float(when.timestamp())
    return None
