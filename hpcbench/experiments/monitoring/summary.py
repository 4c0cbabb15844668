"""One ``monitoring`` launch's records -> its summary: per fault, what utilisation showed and what C6 caught.

Read by the notebook, the report and the C6 rule alike. A fault phase's row says:

* whether the fault was really applied (``injected``; the injector's log or why not);
* the training it hurt: step time p50 (slowest rank per step) and its ratio to the baseline;
* what plain utilisation showed: ``gpu_utilization`` where a GPU was sampled, else the
  ranks' own ``rank_cpu_utilization``, else the host's ``cpu_utilization`` (the median over
  the phase's samples or ranks; :data:`UTILISATION_PREFERENCE`), and whether it lay in the
  healthy band (:data:`UTIL_HEALTHY_MIN`, fixed in advance);
* the C6 metrics (:data:`hpcbench.monitor.thresholds.C6_THRESHOLDS`): each one's worst
  value in the phase, or "absent" with the sampler's reason; the alerts
  (:func:`~hpcbench.monitor.thresholds.evaluate`, ``sustain`` samples in a row, any node);
* ``caught``: an alert of one of the fault's own C6 metrics fired (True; ``own_metrics``,
  :data:`~hpcbench.experiments.monitoring.config.FAULT_METRICS`; the baseline's are all four),
  none did though one of them was recorded (False), or all of them were recorded absent
  (None: neither caught nor missed). Alerts of other metrics are shown but do not count.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hpcbench.core.sanity import Verification
from hpcbench.experiments.monitoring.config import FAULT_METRICS, NO_FAULT, MonitoringConfig
from hpcbench.fault.phases import NO_INJECTION_RECORD, phase_problems
from hpcbench.monitor.thresholds import ALERT_SM_EFFICIENCY_MIN

EXPERIMENT = "monitoring"
#: Plain utilisation "looks healthy" at or above this share (our bound, fixed before any run): the
#: bar the guide sets for the GPU metric of the same claim (SM efficiency > 80 %), applied to what an
#: operator watching only utilisation sees. Below it, utilisation itself shows that something is wrong.
UTIL_HEALTHY_MIN = ALERT_SM_EFFICIENCY_MIN
#: Sampled utilisation, per device or host.
UTILISATION_METRICS = ("gpu_utilization", "cpu_utilization")
#: Each rank's own CPU busy share per phase, recorded by the worker (not sampled).
RANK_UTILISATION = "rank_cpu_utilization"
#: The "plain utilisation" an operator watches, in order of preference: the GPU's where one was
#: sampled; else the training processes' own CPU share (the host-wide figure also counts every other
#: process on the node, on the emulated cluster the other nodes' ranks); the host's as a last resort.
UTILISATION_PREFERENCE = ("gpu_utilization", RANK_UTILISATION, "cpu_utilization")
TRAINING_METRICS = ("step_time", "read_time", "fault_injected", "fault_tcp_retransmitted", "phase", RANK_UTILISATION)


def in_window(frame: Any, start: float, end: float, interval_s: float) -> Any:
    """The sampler rows of one phase: samples taken in ``[start + interval_s, end]``.

    A sample's rates cover the interval before it, so the first one wholly inside the phase is
    taken one interval after its start.
    """
    import pandas as pd

    t = (pd.to_datetime(frame["time"], utc=True) - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)
    return frame[(t >= start + interval_s) & (t <= end)]


def phase_windows(rows: Any) -> dict[str, tuple[float, float]]:
    """fault -> (start, end) epoch seconds, from the lead rank's ``phase`` records."""
    out = {}
    for labels, text in zip(rows.loc[rows["metric"] == "phase", "labels"], rows.loc[rows["metric"] == "phase", "text"]):
        try:
            window = json.loads(text)
            out[_labels(labels)["fault"]] = (float(window["start"]), float(window["end"]))
        except (TypeError, ValueError, KeyError):
            continue
    return out


def _labels(value: Any) -> dict:
    if isinstance(value, dict):
        return value
    try:
        return json.loads(value or "{}")
    except (TypeError, ValueError):
        return {}


def _params(records: Any) -> dict:
    try:
        return json.loads(records["params"].iloc[0]) if len(records) else {}
    except (TypeError, ValueError, KeyError):
        return {}


def _thresholds():
    from hpcbench.monitor.thresholds import C6_THRESHOLDS

    return C6_THRESHOLDS


def _worst(values: Any, op: str) -> float:
    if not len(values):
        return math.nan
    return float(values.min() if op in (">", ">=") else values.max())


def summarize(records: Any) -> Any:
    """One row per fault phase, in run order (see the module docstring for the columns)."""
    import pandas as pd

    from hpcbench.monitor.thresholds import DEFAULT_SUSTAIN, evaluate

    rows = records[records["experiment"] == EXPERIMENT] if "experiment" in records.columns else records.iloc[0:0]
    thresholds = _thresholds()
    c6 = [t.metric for t in thresholds]
    wanted = set(c6) | set(UTILISATION_METRICS) | set(TRAINING_METRICS)
    rows = rows[rows["metric"].isin(wanted)]
    if rows.empty:
        return pd.DataFrame(columns=["fault", "injected", "caught", "util_healthy"])
    params = _params(rows)
    # the few columns read below: every selection copies the rows, and the schema's strings are wide
    rows = rows[[c for c in ("metric", "value", "unit", "step", "time", "labels", "text", "node") if c in rows.columns]]
    sustain = int(params.get("sustain") or DEFAULT_SUSTAIN)
    interval = float(params.get("interval_s") or 1.0)
    order = list(params.get("faults") or [])
    windows = phase_windows(rows)
    monitor_metrics = set(c6) | set(UTILISATION_METRICS)
    sampled = rows[rows["metric"].isin(monitor_metrics) & rows["value"].notna()]
    # what the sampler could not give holds for the whole task: it is recorded once, at its start
    absent_rows = rows[rows["metric"].isin(monitor_metrics) & rows["value"].isna()]
    rows = rows[~rows["metric"].isin(monitor_metrics)]
    rows = rows.assign(fault=rows["labels"].map(lambda lab: _labels(lab).get("fault")))
    rows = rows[rows["fault"].notna()]
    per_phase = [in_window(sampled, start, end, interval).assign(fault=fault)
                 for fault, (start, end) in windows.items()]
    if per_phase:
        rows = pd.concat([rows, *per_phase, absent_rows.assign(fault=None)], ignore_index=True)
    faults = order + sorted(set(rows["fault"]) - set(order))
    base_step = math.nan
    out = []
    for fault in faults:
        g = pd.concat([rows[rows["fault"] == fault], rows[rows["fault"].isna()]], ignore_index=True)
        if not (g["fault"] == fault).any():
            continue
        inj = g[g["metric"] == "fault_injected"]
        injected = None if fault == NO_FAULT else bool(len(inj) and (inj["value"] == 1.0).any())
        injection = "; ".join(t for t in inj["text"].dropna()) if len(inj) else NO_INJECTION_RECORD
        steps = g[(g["metric"] == "step_time") & g["value"].notna()]
        slowest = steps.groupby("step")["value"].max() if len(steps) else pd.Series(dtype=float)
        step_p50 = float(slowest.median()) * 1e3 if len(slowest) else math.nan
        if fault == NO_FAULT:
            base_step = step_p50
        reads = g[(g["metric"] == "read_time") & g["value"].notna()]["value"]
        util_metric = next((m for m in UTILISATION_PREFERENCE if g[(g["metric"] == m)]["value"].notna().any()), None)
        util = g[(g["metric"] == util_metric)]["value"].dropna() if util_metric else pd.Series(dtype=float)
        utilisation = float(util.median()) if len(util) else math.nan
        monitor = g[g["metric"].isin(c6)]
        recorded, absent, worst = [], [], {}
        for t in thresholds:
            m = monitor[monitor["metric"] == t.metric]
            values = m["value"].dropna()
            worst[t.metric] = _worst(values, t.op)
            if len(values):
                recorded.append(t.metric)
            elif len(m):
                reason = m["text"].dropna()
                absent.append(f"{t.metric}: {reason.iloc[0] if len(reason) else 'no value'}")
        alerts = evaluate(monitor.drop(columns=["fault"]), thresholds, sustain=sustain) if recorded else []
        alerting = sorted({a.metric for a in alerts})
        # A fault is judged by its own metrics only (config.FAULT_METRICS); the baseline by all four.
        own = FAULT_METRICS.get(fault, tuple(c6))
        own_recorded = [m for m in recorded if m in own]
        absent = [a for a in absent if a.split(":")[0] in own]
        out.append({
            "fault": fault, "injected": injected, "injection": injection,
            "steps": int(slowest.size), "step_p50_ms": step_p50,
            "slowdown": step_p50 / base_step if base_step and math.isfinite(base_step) else math.nan,
            "read_p99_ms": float(reads.quantile(0.99)) * 1e3 if len(reads) else math.nan,
            "util_metric": util_metric or "", "utilisation": utilisation,
            "util_healthy": None if math.isnan(utilisation) else bool(utilisation >= UTIL_HEALTHY_MIN),
            **{f"{m}_worst": v for m, v in worst.items()},
            "c6_recorded": tuple(recorded), "c6_absent": tuple(absent),
            "alerts": tuple(alerting), "alert_text": "; ".join(a.describe() for a in alerts),
            "own_metrics": own,
            "caught": (bool(set(alerting) & set(own)) if own_recorded else None),
            "samples": tuple(float(v) for v in slowest),
            "ok": True, "problem": "",
        })
    return pd.DataFrame(out)


def verdict_line(row: Any) -> str:
    """One fault in words: what utilisation showed, what C6 did."""
    if row.fault == NO_FAULT:
        alarms = ", ".join(row.alerts) if row.alerts else "none"
        return (f"baseline: {row.util_metric} {row.utilisation:.0%}, step p50 {row.step_p50_ms:.0f} ms; "
                f"C6 alerts (false alarms): {alarms}")
    if not row.injected:
        return f"{row.fault}: not injected here ({row.injection})"
    looks = ("looked healthy" if row.util_healthy else "showed it" if row.util_healthy is False else "not sampled")
    if row.caught is None:
        c6 = f"none of its C6 metrics ({', '.join(row.own_metrics)}) recorded: neither caught nor missed"
    else:
        own = [a for a in row.alerts if a in row.own_metrics]
        c6 = f"caught by {', '.join(own)}" if row.caught else f"missed by its recorded C6 metrics ({', '.join(row.own_metrics)})"
    return (f"{row.fault}: step p50 {row.step_p50_ms:.0f} ms ({row.slowdown:.2f}x the baseline); "
            f"{row.util_metric} {row.utilisation:.0%} ({looks}, band >= {UTIL_HEALTHY_MIN:.0%}); {c6}")


def findings(summary: Any) -> list[str]:
    """One sentence per phase (:func:`verdict_line`)."""
    return [verdict_line(r) for r in summary.itertuples(index=False)]


_PASSED = "every phase trained its steps with the sampler on every node, and every fault was applied or its reason recorded"


def verify_records(records: Any, cfg: MonitoringConfig) -> Verification:
    """Every phase measured its steps; every fault injected or recorded as not injectable; samplers ran."""
    problems = phase_problems(summarize(records), cfg,
                              lambda r: [] if r.util_metric else ["the sampler recorded no utilisation"])
    return Verification(problems, passed=_PASSED)
