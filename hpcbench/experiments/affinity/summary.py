"""One ``affinity`` launch's records -> its summary (read by the notebook, the report and the cost verdicts)."""

from __future__ import annotations

import math
from typing import Any

from hpcbench.core.results import expand_labels, json_object
from hpcbench.core.sanity import Verification
from hpcbench.experiments.affinity.config import MISTAKES, AffinityConfig

MISTAKE, RIGHT = "mistake", "right"
SETTINGS = (MISTAKE, RIGHT)
SUMMARY_KEYS = ["mistake", "setting"]
METRICS = ["step_time", "setting_applied", "huge_page_share", "not_applicable"]
#: What each mistake is, in the guide's terms (section 2.3: wrong CPU affinity, NUMA, huge pages ignored).
TITLES = {"oversubscription": "thread oversubscription (ranks x intra-op threads above the cores)",
          "binding": "ranks left unbound (wrong CPU affinity)",
          "loader": "DataLoader worker on the rank's compute cores",
          "hugepages": "transparent huge pages ignored (TLB-bound step)",
          "numa": "memory on the remote NUMA node"}


def summarize(records: Any) -> Any:
    """One row per (mistake, setting), mistakes in :data:`MISTAKES` order, the mistake's setting first.

    Columns: ``what`` the setting was, step time p50 / p99 (ms) and its steps; ``samples``: the
    per-step seconds (what the cost verdicts pair); ``applied``: every rank's check that it really
    ran the setting (threads, CPUs, the worker's CPUs, huge pages, pages per node) held;
    ``huge_page_share`` (hugepages only); ``not_applicable``: why the mistake cannot be tested
    here, or ""; ``ok`` False when either setting of the pair failed its check (``problem`` says
    how): such a pair never counts. A mistake recorded as not applicable and not timed has one
    row with an empty setting.
    """
    import pandas as pd

    columns = SUMMARY_KEYS + ["what", "step_p50_ms", "step_p99_ms", "steps", "samples", "applied",
                              "huge_page_share", "not_applicable", "ok", "problem"]
    rows = records[(records["experiment"] == "affinity") & records["metric"].isin(METRICS)]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    out = []
    for mistake in [m for m in MISTAKES if m in {json_object(t).get("mistake") for t in rows["labels"]}]:
        mine = rows[[json_object(t).get("mistake") == mistake for t in rows["labels"]]]
        why_not = "; ".join(sorted(set(mine.loc[mine["metric"] == "not_applicable", "text"].dropna())))
        wide = expand_labels(mine)
        checks = wide[wide["metric"] == "setting_applied"]
        failed = checks[checks["value"] < 1.0]
        problem = "; ".join(f"{mistake}, {r.setting} setting, local rank {int(r.local_rank)}: {r.text}"
                            for r in failed.itertuples(index=False))
        timed = False
        for setting in SETTINGS:
            if "setting" not in wide.columns:
                break
            steps = wide[(wide["metric"] == "step_time") & (wide["setting"] == setting)].sort_values("step")
            mine_checks = checks[checks["setting"] == setting]
            share = wide[(wide["metric"] == "huge_page_share") & (wide["setting"] == setting)]["value"]
            if steps.empty and mine_checks.empty:
                continue
            timed = timed or not steps.empty
            values = steps["value"].astype(float)
            out.append({
                "mistake": mistake, "setting": setting,
                "what": str(steps["what"].iloc[0]) if len(steps) else "",
                "step_p50_ms": float(values.median()) * 1e3 if len(values) else math.nan,
                "step_p99_ms": float(values.quantile(0.99)) * 1e3 if len(values) else math.nan,
                "steps": len(values), "samples": tuple(float(v) for v in values),
                "applied": bool(mine_checks["value"].min() == 1.0) if len(mine_checks) else None,
                "huge_page_share": float(share.iloc[0]) if len(share) else math.nan,
                "not_applicable": why_not, "ok": not problem, "problem": problem,
            })
        if not timed and why_not:
            out.append({"mistake": mistake, "setting": "", "what": "", "step_p50_ms": math.nan,
                        "step_p99_ms": math.nan, "steps": 0, "samples": (), "applied": None,
                        "huge_page_share": math.nan, "not_applicable": why_not, "ok": True, "problem": ""})
    return pd.DataFrame(out, columns=columns)


def costs(summary: Any) -> Any:
    """Per mistake of one launch: step p50 of the mistake over the right way's (> 1: the mistake is slower)."""
    import pandas as pd

    rows = []
    for mistake in [m for m in MISTAKES if m in set(summary["mistake"])]:
        g = summary[summary["mistake"] == mistake].set_index("setting")
        if MISTAKE in g.index and RIGHT in g.index:
            wrong, right = g.loc[MISTAKE], g.loc[RIGHT]
            ratio = wrong["step_p50_ms"] / right["step_p50_ms"]
            rows.append({"mistake": mistake, "mistake_setting": wrong["what"], "right_setting": right["what"],
                         "mistake_p50_ms": wrong["step_p50_ms"], "right_p50_ms": right["step_p50_ms"],
                         "slowdown": ratio, "ok": bool(wrong["ok"]), "not_applicable": wrong["not_applicable"]})
        else:
            first = g.iloc[0]
            rows.append({"mistake": mistake, "mistake_setting": "", "right_setting": "", "mistake_p50_ms": math.nan,
                         "right_p50_ms": math.nan, "slowdown": math.nan, "ok": bool(first["ok"]),
                         "not_applicable": first["not_applicable"]})
    return pd.DataFrame(rows, columns=["mistake", "mistake_setting", "right_setting", "mistake_p50_ms",
                                       "right_p50_ms", "slowdown", "ok", "not_applicable"])


def findings(summary: Any) -> list[str]:
    """One sentence per mistake of one launch: how much slower the mistake was, or why it was not timed."""
    lines = []
    for r in costs(summary).itertuples(index=False):
        head = f"{r.mistake} ({TITLES[r.mistake]})"
        if math.isnan(r.slowdown):
            lines.append(f"{head}: not timed; not applicable: {r.not_applicable}")
            continue
        text = (f"{head}: {r.mistake_setting} took {r.mistake_p50_ms:.3g} ms per step (p50) against "
                f"{r.right_p50_ms:.3g} ms for {r.right_setting}: slower by {r.slowdown:.3g}x")
        if not r.ok:
            text += " (a setting was not really applied: does not count)"
        if r.not_applicable:
            text += f" (not applicable: {r.not_applicable})"
        lines.append(text)
    return lines


_PASSED = ("every pair timed both settings for the configured steps, and every rank really ran each setting "
           "(threads, CPUs, the worker's CPUs, huge pages or pages per node as intended), or said why the mistake "
           "does not apply here")


def verify_records(records: Any, cfg: AffinityConfig) -> Verification:
    """Every mistake of the config timed as a pair with its steps and its checks passed, or recorded as not
    applicable."""
    problems = []
    summary = summarize(records)
    for mistake in cfg.mistakes:
        g = summary[summary["mistake"] == mistake]
        if g.empty:
            problems.append(f"{mistake} has no records")
            continue
        timed = g[g["setting"] != ""]
        if timed.empty:
            continue  # recorded as not applicable, with the reason
        for setting in SETTINGS:
            row = timed[timed["setting"] == setting]
            if row.empty or row["steps"].iloc[0] != cfg.steps:
                got = 0 if row.empty else row["steps"].iloc[0]
                problems.append(f"{mistake} / {setting}: {got} timed steps, expected {cfg.steps}")
        if not g["ok"].all():
            problems.append(g["problem"].iloc[0])
    return Verification(problems, passed=_PASSED)
