"""One ``advisor`` launch's records -> its summary (read by the notebook, the report and the rule).

One row per (regime, technique), the baseline included. The advisor's columns are the same on
every row of a regime and come from the **baseline's records only**
(:func:`baseline_records`: the rows labelled ``technique=baseline`` of that regime, the
phase's link and the launch's facts), never from a technique's run.
"""

from __future__ import annotations

import math
from typing import Any

from hpcbench.advise import AdviceError, advise
from hpcbench.core.results import json_object
from hpcbench.core.sanity import Verification
from hpcbench.experiments.advisor.config import BASELINE, REGIME_NAMES, TECHNIQUES, AdvisorConfig

SUMMARY_KEYS = ["regime", "technique"]
#: Row order of the techniques: the baseline first, then C14's order.
SERIES = (BASELINE, *TECHNIQUES)
#: The advice's figures copied into the summary, by figure name.
ADVICE_FIGURES = {"communication share": "comm_share", "byte share": "byte_share", "latency share": "latency_share"}


def _where(rows: Any, **labels: Any) -> Any:
    """The rows whose labels hold every given value (an index-aligned mask: empty frames stay frames)."""
    import pandas as pd

    mask = pd.Series([all(json_object(t).get(k) == v for k, v in labels.items()) for t in rows["labels"]],
                     index=rows.index, dtype=bool)
    return rows[mask]


def _phase(records: Any, regime: str, metric: str, **labels: Any) -> Any:
    return _where(records[records["metric"] == metric], regime=regime, **labels)


def baseline_records(records: Any, regime: str) -> Any:
    """The rows the advisor may read for ``regime``: its baseline's, its phase's link, and the launch's facts.

    A row belongs when its labels name no other regime and no technique but the baseline.
    """
    keep = []
    for text in records["labels"]:
        labels = json_object(text)
        keep.append(labels.get("regime", regime) == regime and labels.get("technique", BASELINE) == BASELINE)
    return records[keep]


def advice_for(records: Any, regime: str):
    """(the advisor's :class:`~hpcbench.advise.Advice` for the regime's baseline, or None; why not)."""
    try:
        return advise(baseline_records(records, regime), series={"regime": regime, "technique": BASELINE},
                      where=f"regime {regime!r}"), ""
    except AdviceError as exc:
        return None, str(exc)


def _median(values: Any) -> float:
    return float(values.median()) if len(values) else math.nan


def summarize(records: Any) -> Any:
    """One row per (regime, technique), regimes in run order, the baseline first.

    Columns: the phase (model, batch, bucket cap, the link rate it ran on and whether the link was
    shaped for it); ``steps``; step and per-sample time p50 (ms); ``gain_p50`` = the baseline's
    median time per sample / this series' (> 1: faster); ``samples`` (the per-step times per
    sample in seconds: the rule's input); ``params_agree``; the advisor's ``advisor_regime``,
    ``pick``, ``predicted_best`` (the option the scale model predicts best), ``advice_reason``,
    ``comm_share``, ``byte_share``, ``latency_share``, ``link_fit`` and this technique's
    ``predicted_gain`` (or ``advice_problem``); ``ok`` False where the
    ranks' parameters differed (``problem`` says so): such a row never counts.
    """
    import pandas as pd

    rows = records[records["experiment"] == "advisor"] if len(records) else records
    timed = rows[rows["metric"] == "time_per_sample"] if len(rows) else rows
    if timed is None or timed.empty:
        return pd.DataFrame(columns=SUMMARY_KEYS + ["samples"])
    parsed = [json_object(t) for t in timed["labels"]]
    out = []
    regimes = [r for r in REGIME_NAMES if any(p.get("regime") == r for p in parsed)]
    for regime in regimes:
        advice, problem = advice_for(rows, regime)
        rate = _phase(rows, regime, "link_rate_bps")["value"].dropna()
        shaped = _phase(rows, regime, "link_shaped")["value"].dropna()
        per = {technique: _where(timed, regime=regime, technique=technique, comm="mode").sort_values("step")
               for technique in SERIES}
        base = _median(per[BASELINE]["value"])
        for technique in SERIES:
            g = per[technique]
            if g.empty:
                continue
            first = json_object(g["labels"].iloc[0])
            step = _phase(rows, regime, "step_time", technique=technique, comm="mode")["value"]
            agree = _phase(rows, regime, "params_agree", technique=technique)["value"]
            median = _median(g["value"])
            row = {"regime": regime, "technique": technique, "model": first.get("model"),
                   "batch_size": first.get("batch_size"), "bucket_cap_mb": first.get("bucket_cap_mb"),
                   "link_rate_bps": float(rate.iloc[-1]) if len(rate) else math.nan,
                   "shaped": bool(shaped.iloc[-1]) if len(shaped) else None,
                   "steps": len(g), "step_p50_ms": _median(step) * 1e3, "sample_p50_ms": median * 1e3,
                   "gain_p50": base / median if median > 0 else math.nan,
                   "samples": tuple(float(v) for v in g["value"]),
                   "params_agree": bool(agree.min() == 1.0) if len(agree) else None,
                   "advisor_regime": advice.regime if advice else None, "pick": advice.pick if advice else None,
                   "predicted_best": advice.predicted_best if advice else None,
                   "advice_reason": advice.reason if advice else "", "link_fit": advice.link if advice else None,
                   "predicted_gain": (1.0 if technique == BASELINE else advice.option(technique).predicted_gain)
                   if advice else math.nan,
                   "advice_problem": problem}
            figures = {f.name: f.value for f in advice.figures} if advice else {}
            row.update({col: figures.get(name, math.nan) for name, col in ADVICE_FIGURES.items()})
            row["ok"] = row["params_agree"] is not False
            row["problem"] = "" if row["ok"] else f"{regime} / {technique}: the ranks' parameters differ after training"
            out.append(row)
    return pd.DataFrame(out)


def measured_best(summary: Any) -> dict[str, str]:
    """Per regime, the technique with the highest median gain in this one launch (no interval: see rules)."""
    out = {}
    for regime, g in summary[summary["technique"] != BASELINE].groupby("regime", sort=False):
        g = g[g["gain_p50"].notna()]
        if len(g):
            out[regime] = str(g.loc[g["gain_p50"].idxmax(), "technique"])
    return out


def findings(summary: Any) -> list[str]:
    """One sentence per regime: what the advisor saw and picked, and each technique's measured gain."""
    lines = []
    best = measured_best(summary)
    for regime, g in summary.groupby("regime", sort=False):
        first = g.iloc[0]
        gains = ", ".join(f"{r.technique} {r.gain_p50:.3g}x (predicted {r.predicted_gain:.3g}x)"
                          for r in g.itertuples(index=False) if r.technique != BASELINE)
        link = (f"link {first.link_rate_bps / 1e6:.0f} Mbit/s" if first.shaped
                else "link not shaped (see the link records)")
        if first.pick:
            said = (f"advisor: {first.advisor_regime} (communication share {first.comm_share:.0%}, bytes "
                    f"{first.byte_share:.0%}, latency {first.latency_share:.0%}) -> {first.pick}")
        else:
            said = f"advisor: no advice ({first.advice_problem})"
        lines.append(f"{regime} ({link}): {said}; measured gains per sample vs baseline: {gains}; best in this "
                     f"launch: {best.get(regime, '-')}")
    return lines


_PASSED = ("every regime ran the baseline, its no-op twin and every technique for the configured steps, every "
           "technique's ranks ended with identical parameters, and the advisor gave a pick from the baseline's "
           "records")


def verify_records(records: Any, cfg: AdvisorConfig) -> Verification:
    """Every regime and technique measured for ``cfg.steps``, parameters agreeing, an advice per regime."""
    problems = []
    summary = summarize(records)
    seen = {(r.regime, r.technique): r for r in summary.itertuples(index=False)}
    noop = records[records["metric"] == "step_time"]
    noop_regimes = {labels.get("regime") for labels in map(json_object, noop["labels"]) if labels.get("comm") == "noop"}
    for regime in cfg.regimes:
        if regime not in noop_regimes:
            problems.append(f"{regime}: no no-op step (the baseline's compute) recorded")
        for technique in SERIES:
            r = seen.get((regime, technique))
            if r is None:
                problems.append(f"{regime} / {technique} has no records")
                continue
            if r.steps != cfg.steps:
                problems.append(f"{regime} / {technique}: {r.steps} timed steps, expected {cfg.steps}")
            if not r.ok:
                problems.append(r.problem)
        first = seen.get((regime, BASELINE))
        if first is not None and not first.pick:
            problems.append(f"{regime}: the advisor gave no pick: {first.advice_problem}")
    return Verification(problems, passed=_PASSED)
