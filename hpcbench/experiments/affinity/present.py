"""The report section of ``affinity``: the binding plan next to what not following it costs, per mistake."""

from __future__ import annotations

import pandas as pd

from hpcbench.core.results import expand_labels
from hpcbench.experiments.affinity.rules import COST_REFERENCE, MIN_COST, judge_costs
from hpcbench.experiments.affinity.summary import MISTAKE, RIGHT, TITLES, costs
from hpcbench.judge.evidence import evidence_for
from hpcbench.present.kit import (Cell, ExperimentData, Figure, Section, Table, evidence_tables, fmt_number, image_of,
                                  present_stats, summary_presenter)

#: Plan records in the order the section shows them, with their headings.
PLAN_PARTS = {"plan.table": "plan (per local rank)", "plan.rank": "numactl and environment",
              "plan.srun": "srun arguments", "plan.notes": "notes", "plan.sbatch": "sbatch script"}
VERDICT_CLASS = {"reproduced": "fail", "not reproduced": "ok"}  # a costly mistake is what the reader must avoid


@summary_presenter("mistake")
def present_affinity(data: ExperimentData, s: pd.DataFrame) -> list[Section]:
    """Per source: the cost table (slowdown with interval and verdict), the plan, what each rank got, the figure."""
    if data.raw is None:
        return present_stats(data)
    section = Section(title="Affinity: the binding plan, and what each common mistake costs", id="exp-affinity")
    section.notes.append(Cell(
        f"T-affinity (guide 2.3) is a technique, not a numbered claim: no ledger row. Each mistake was timed against "
        f"the right way, interleaved step by step in the same launch; slower by = median step time mistake / right, "
        f"geometric mean over launches with its 95 % interval; verdict against {COST_REFERENCE.describe()} "
        f"({COST_REFERENCE.source}): reproduced = it costs at least {MIN_COST:g}x here."))
    for source in data.sources:
        mine = s[s["source"] == source]
        raw = data.raw[data.raw["source"] == source]
        if mine.empty:
            continue
        judgements = judge_costs(evidence_for("affinity", raw, summaries=mine))
        section.add(_cost_table(source, mine, judgements), _plan_table(source, raw), _observed_table(source, raw),
                    _figure(source, mine, judgements))
    section.tables += evidence_tables(data, ["mistake", "setting", "what", "step_p50_ms", "steps", "applied",
                                             "huge_page_share", "not_applicable", "ok"])
    return [section]


def _medians(summaries: pd.DataFrame) -> pd.DataFrame:
    """:func:`costs` of every launch, then the median over launches per mistake."""
    per_launch = [costs(g).assign(launch=str(key)) for key, g in summaries.groupby(["run_id", "task_id"])]
    frame = pd.concat(per_launch, ignore_index=True) if per_launch else costs(summaries.iloc[0:0])
    if frame.empty:
        return frame
    return (frame.groupby("mistake", sort=False)
            .agg(mistake_setting=("mistake_setting", "first"), right_setting=("right_setting", "first"),
                 mistake_p50_ms=("mistake_p50_ms", "median"), right_p50_ms=("right_p50_ms", "median"),
                 slowdown=("slowdown", "median"), not_applicable=("not_applicable", "first"),
                 launches=("launch", "nunique"))
            .reset_index())


def _cost_table(source: str, summaries: pd.DataFrame, judgements) -> Table:
    med = _medians(summaries)
    rows, classes = [], []
    for r in med.itertuples(index=False):
        judged = judgements.get(r.mistake)
        verdict = judged.verdict if judged else "inconclusive"
        why = (f"not applicable: {r.not_applicable}" if r.not_applicable else "")
        rows.append([Cell(r.mistake), Cell(TITLES[r.mistake]), Cell(r.mistake_setting or "–"),
                     Cell(r.right_setting or "–"), Cell(fmt_number(r.mistake_p50_ms, 3)),
                     Cell(fmt_number(r.right_p50_ms, 3)), Cell(str(r.launches)),
                     Cell(judged.measured if judged else "—"), Cell(verdict, VERDICT_CLASS.get(verdict, "")),
                     Cell(why)])
        classes.append("")
    return Table(columns=["mistake", "what it is", "mistake's setting", "right way", "step p50 mistake (ms)",
                          "step p50 right (ms)", "launches", "slower by (mistake / right)", "costs >= "
                          f"{MIN_COST:g}x here?", "note"],
                 rows=rows, row_classes=classes, id="affinity-costs",
                 caption=f"{source}: median over launches of each launch's p50; slower by with its 95 % interval "
                         f"over launches (n < 5 launches x 5 steps: inconclusive)")


def _plan_table(source: str, raw: pd.DataFrame) -> Table | None:
    rows = raw[raw["metric"].isin(list(PLAN_PARTS)) & raw["text"].notna()]
    if rows.empty:
        return None
    first = rows[(rows["run_id"] == rows["run_id"].iloc[0]) & (rows["task_id"] == rows["task_id"].iloc[0])]
    wide = expand_labels(first)
    out = []
    for metric, heading in PLAN_PARTS.items():
        for r in wide[wide["metric"] == metric].itertuples(index=False):
            plan = getattr(r, "plan", "")
            name = heading if plan in ("", "ranks") or pd.isna(plan) else f"{heading} ({plan} pair)"
            out.append([Cell(name), Cell(str(r.text))])
    return Table(columns=["part", "text"], rows=out, id="affinity-plan",
                 caption=f"{source}: the binding plan for this node as the job script carries it (first launch); "
                         f"the cost table above is what not following it costs")


def _observed_table(source: str, raw: pd.DataFrame) -> Table | None:
    rows = raw[raw["metric"] == "setting_applied"]
    if rows.empty:
        return None
    wide = expand_labels(rows)
    wide = wide.drop_duplicates(["mistake", "setting", "local_rank", "value", "text"])
    out, classes = [], []
    for r in wide.sort_values(["mistake", "setting", "local_rank"]).itertuples(index=False):
        ok = r.value == 1.0
        out.append([Cell(str(r.mistake)), Cell(str(r.setting)), Cell(str(r.local_rank)),
                    Cell("yes" if ok else "NO"), Cell(str(r.text))])
        classes.append("" if ok else "fail")
    return Table(columns=["mistake", "setting", "local rank", "applied", "what the rank really got"], rows=out,
                 row_classes=classes, id="affinity-observed", collapsed=True,
                 caption=f"{source}: what every rank really ran each setting with (distinct outcomes over launches); "
                         f"a setting not applied takes its pair out of the verdict")


def _figure(source: str, summaries: pd.DataFrame, judgements) -> Figure:
    from matplotlib.figure import Figure as MplFigure

    from hpcbench.experiments.affinity.plot import draw_slowdowns, draw_step_times, slowdown_rows

    med = _medians(summaries)
    fig = MplFigure(figsize=(11, 4.0))
    left, right = fig.subplots(1, 2)
    draw_step_times(left, med)
    draw_slowdowns(right, slowdown_rows(med, judgements), MIN_COST)
    fig.tight_layout()
    return Figure(title=f"{source}: step time with each mistake and the right way; the slowdown with its interval",
                  data=image_of(fig),
                  alt=f"bars of step time per mistake ({MISTAKE} vs {RIGHT}) and the slowdown per mistake with its "
                      f"95 % interval against the {MIN_COST:g}x bound")
