"""One ``fault_tolerance`` launch's records -> its summary, and the correctness check.

The summary has one row per measured series, keyed by ``phase`` (``train``, ``compression``,
``save``, ``stall``, ``recovery``, ``failure``, ``overhead``, ``survival``, ``repair``) and the
labels that apply to it (``model``, ``dtype``, ``tier``, ``level``, ``mode``; the survival arms are
``mode`` ``wrapper`` and ``single``); the other columns are empty where a phase has no such
quantity. ``samples`` holds each row's per-sample values of its main quantity (the rules' input):
the overhead share of each save, each stall, each recovery, the work lost at each failure (wall
time, scaled to the guide's interval), each survival job's outcome (1 = the job failed after all
its tries) and each repair check (1 = the damaged shards were repaired before the next try).
``p_try``, on both survival rows, is the launch's share of failed tries over both arms.

A launch counts only when every correctness check held: each restored state equal to the
saved one, checkpoint names carrying host and job id, a torn newest checkpoint skipped by
recovery. ``ok``/``problem`` say so on every row (a launch that restored wrong state proves
nothing about its timings either).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hpcbench.core.results import expand_labels

EXPERIMENT = "fault_tolerance"
KEYS = ["phase", "model", "dtype", "tier", "level", "mode"]
#: The pass/fail records (1 = passed) and what a failure means.
CHECKS = {
    "restore_equal": "a restored state differed from the saved one",
    "checkpoint_named": "a checkpoint name lacked the host or the job id",
    "torn_checkpoint_skipped": "recovery did not skip a torn newest checkpoint",
}


def _expand(records: Any) -> Any:
    rows = expand_labels(records[records["experiment"] == EXPERIMENT])
    for key in KEYS + ["tries", "interval_s", "cadence_s"]:
        if key not in rows.columns:
            rows[key] = None
    return rows


def check_problems(records: Any) -> list[str]:
    """What failed among the launch's correctness checks (empty: all passed)."""
    return _problems(_expand(records))


def _problems(rows: Any) -> list[str]:
    problems = []
    for metric, what in CHECKS.items():
        checks = rows[rows["metric"] == metric]
        bad = checks[~(checks["value"] >= 1)]
        if len(bad):
            where = sorted({str(p) for p in bad["phase"].dropna()})
            problems.append(f"{what} ({len(bad)} of {len(checks)} checks{', ' + ', '.join(where) if where else ''})")
    if not (rows["metric"] == "restore_equal").any():
        problems.append("no restored state was compared with the saved one")
    return problems


class _Series:
    """One series' values by metric, and its other labels (first value seen)."""

    def __init__(self) -> None:
        self.lists: dict[str, list[float]] = {}
        self.labels: dict[str, Any] = {}

    def add(self, metric: str, value: float, labels: dict[str, Any]) -> None:
        if value == value:  # not NaN
            self.lists.setdefault(metric, []).append(value)
        for k, v in labels.items():
            if k not in self.labels and v is not None and v == v:
                self.labels[k] = v

    def values(self, metric: str) -> Any:
        return np.asarray(self.lists.get(metric, ()), dtype=float)

    def median(self, metric: str) -> float:
        v = self.values(metric)
        return float(np.median(v)) if len(v) else math.nan

    def mean(self, metric: str) -> float:
        v = self.values(metric)
        return float(v.mean()) if len(v) else math.nan


def summarize(records: Any) -> Any:
    """One row per series (see the module docstring), with the launch's ``ok`` and ``problem``."""
    import pandas as pd

    everything = _expand(records)
    rows = everything[everything["phase"].notna()]
    if rows.empty:
        return pd.DataFrame(columns=KEYS + ["samples", "ok", "problem"])
    problems = _problems(everything)
    # One pass in plain Python: a launch has a few thousand rows in ~100 series, where a
    # pandas group-by per series costs more than the work.
    series: dict[tuple, _Series] = {}
    extra = ["tries", "interval_s", "cadence_s"]
    columns = [rows[k].tolist() for k in KEYS + extra]
    for *values, metric, value in zip(*columns, rows["metric"].tolist(), rows["value"].tolist()):
        key = tuple("" if v is None or v != v else v for v in values[:len(KEYS)])
        series.setdefault(key, _Series()).add(metric, value, dict(zip(extra, values[len(KEYS):])))
    out = []
    for key in sorted(series, key=lambda k: tuple(str(v) for v in k)):
        s = series[key]
        row: dict[str, Any] = {k: (None if v == "" else v) for k, v in zip(KEYS, key)}
        if row["level"] is not None:
            row["level"] = int(float(row["level"]))
        phase = row["phase"]
        main = {"train": "step_time", "compression": "compression_ratio", "save": "overhead_share",
                "stall": "stall_seconds", "recovery": "recovery_seconds", "failure": "work_lost_seconds",
                "overhead": "overhead_share", "survival": "job_failed", "repair": "shard_repaired"}.get(phase)
        if main is None:
            continue
        samples = s.values(main)
        row.update(samples=tuple(float(v) for v in samples), n=len(samples))
        if phase == "train":
            row["step_p50_s"] = s.median("step_time")
        elif phase in ("compression", "save"):
            row.update(bytes_raw=s.median("bytes_raw"), bytes_written=s.median("bytes_written"),
                       ratio=s.median("compression_ratio"), compress_p50_s=s.median("compress_seconds"),
                       ratio_samples=tuple(float(v) for v in s.values("compression_ratio")))
            compress = row["compress_p50_s"]
            # level 0 stores the bytes as they are: no speed to speak of
            row["compress_MB_per_s"] = (row["bytes_raw"] / compress / 1e6 if compress > 0 and row["level"] != 0
                                        else math.nan)
            if phase == "save":
                row.update(save_p50_s=s.median("save_seconds"), serialize_p50_s=s.median("serialize_seconds"),
                           write_p50_s=s.median("write_seconds"), overhead_share_p50=s.median(main),
                           interval_s=float(s.labels.get("interval_s", math.nan)))
        elif phase == "stall":
            row["stall_p50_s"] = s.median(main)
        elif phase == "recovery":
            row["recovery_p50_s"] = s.median(main)
        elif phase == "failure":
            shares = s.values("work_lost_share")
            row.update(work_lost_mean_s=s.mean(main),
                       work_lost_max_s=float(samples.max()) if len(samples) else math.nan,
                       work_lost_share_mean=s.mean("work_lost_share"),
                       work_lost_share_max=float(shares.max()) if len(shares) else math.nan,
                       cadence_s=float(s.labels.get("cadence_s", math.nan)),
                       restored_newest_samples=tuple(float(v) for v in s.values("restored_newest")),
                       recovery_p50_s=s.median("recovery_seconds"), save_stall_p50_s=s.median("save_stall_seconds"))
        elif phase == "overhead":
            row.update(save_p50_s=s.median("save_stall_seconds"), overhead_share_p50=s.median(main),
                       interval_s=float(s.labels.get("interval_s", math.nan)),
                       bytes_written=s.median("bytes_written"))
            # the rate the whole save moved its bytes at (records of older hpcbench versions lack the bytes: nan)
            row["save_MB_per_s"] = row["bytes_written"] / row["save_p50_s"] / 1e6 if row["save_p50_s"] > 0 else math.nan
        elif phase == "survival":
            if s.labels.get("tries") is None:  # "not measured" (no wrapper script): no arm to show
                continue
            tries = int(s.labels["tries"])
            tried = s.values("try_failed")
            row.update(tries=tries, jobs=len(samples), failed=int(samples.sum()), failure_fraction=s.mean(main),
                       mean_tries=s.mean("job_tries"), tries_made=len(tried), tries_failed=int(tried.sum()),
                       policy_samples=tuple(float(v) for v in s.values("wrapper_policy_followed")))
        elif phase == "repair":
            row.update(repaired=int(samples.sum()))
        out.append(row)
    frame = pd.DataFrame(out)
    if len(frame) and (frame["phase"] == "survival").any():
        survival = frame[frame["phase"] == "survival"]
        made = survival["tries_made"].sum()
        frame["p_try"] = [survival["tries_failed"].sum() / made if made and r.phase == "survival" else math.nan
                          for r in frame.itertuples()]
    stall = frame[frame["phase"] == "stall"] if len(frame) else frame
    if len(stall):
        sync = stall[stall["mode"] == "sync"].set_index(["model", "dtype"])["stall_p50_s"]
        frame["stall_vs_sync"] = [
            r.stall_p50_s / sync.get((r.model, r.dtype), math.nan) if r.phase == "stall" else math.nan
            for r in frame.itertuples()]
    frame["ok"] = not problems
    frame["problem"] = "; ".join(problems)
    return frame


def verify_records(records: Any) -> str:
    """PASS/FAIL lines of the correctness checks, for the notebook."""
    rows = _expand(records)
    lines = []
    for metric, what in CHECKS.items():
        checks = rows[rows["metric"] == metric]
        bad = checks[~(checks["value"] >= 1)]
        ok = len(checks) and bad.empty
        lines.append(("PASS" if ok else "FAIL") + f": {metric} held in {len(checks) - len(bad)} of {len(checks)} "
                     f"checks" + ("" if ok else f" — {what}"))
    return "\n".join(lines)
