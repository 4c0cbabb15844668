"""The report section of ``scaling``: per stage, efficiency and the gate, and how each launch ended."""

from __future__ import annotations

import pandas as pd

from hpcbench.experiments.scaling.summary import SUMMARY_KEYS
from hpcbench.present.kit import (Cell, ExperimentData, Figure, Section, Table, evidence_tables, fmt_number, image_of,
                                  summary_presenter, text_table)

#: Summary column -> table heading; each cell is the median over the launches of a source and variant.
COLUMNS = {"throughput_p50": "throughput p50 (total)", "per_node_p50": "per node p50", "efficiency": "efficiency",
           "step_p50_ms": "step p50 (ms)", "noop_p50_ms": "no-op step p50 (ms)", "step_time_cv": "step-time CV",
           "comm_share": "comm share"}


def _gate_counts(g: pd.DataFrame) -> str:
    counts = {"passed": int((g["gate"] == True).sum()), "failed": int((g["gate"] == False).sum())}  # noqa: E712
    return f"{counts['passed']} pass, {counts['failed']} fail of {len(g)}"


@summary_presenter(*SUMMARY_KEYS)
def present_scaling(data: ExperimentData, s: pd.DataFrame) -> list[Section]:
    """One table per source and variant (stages, medians over launches, the gate's counts), the figure, outcomes."""
    section = Section(title="Scaling: 1 -> 2 -> 4 nodes, the gate before each step out", id="exp-scaling")
    ran = s[s["ran"] == True]  # noqa: E712
    rows, classes = [], []
    for (source, variant, stage, nodes), g in ran.groupby(["source", "variant", *SUMMARY_KEYS], sort=True):
        rows.append([Cell(str(source)), Cell(str(variant)), Cell(str(stage)), Cell(str(nodes)),
                     Cell(str(g["run_id"].nunique())), *(Cell(fmt_number(g[c].median(), 3)) for c in COLUMNS),
                     Cell(_gate_counts(g))])
        classes.append("fail" if (g["gate"] == False).any() else "")  # noqa: E712
    unit = str(ran["unit"].iloc[0]) if len(ran) else ""
    section.tables.append(Table(
        columns=["source", "variant", "stage", "nodes", "launches", *COLUMNS.values(), "gate (launches)"],
        rows=rows, row_classes=classes, id="scaling-stages",
        caption=f"Medians over launches; throughput in {unit} (the slowest rank's step), efficiency = per-node "
                f"throughput / 1 node's; the gate (C12) on each stage's records"))
    ends = s.drop_duplicates(["source", "run_id", "task_id"])
    section.tables.append(Table(
        columns=["source", "task", "how the run ended"],
        rows=[[Cell(str(r["source"])), Cell(str(r["task_id"])), Cell(str(r["outcome"]))]
              for r in ends.to_dict("records")],
        caption="Each launch: the stages it ran, or after which stage the gate stopped it and why", collapsed=True))
    section.figures.append(_figure(ran))
    table = text_table(data.text, caption="Text records")
    if table is not None:
        section.tables.append(table)
    section.tables += evidence_tables(data, ["stage", "nodes", "ran", "per_node_p50", "efficiency", "gate",
                                             "gate_failed", "cleared", "stopped_here", "steps"])
    return [section]


def _figure(ran: pd.DataFrame) -> Figure:
    from matplotlib.figure import Figure as MplFigure

    from hpcbench.experiments.scaling.plot import draw_efficiency
    from hpcbench.experiments.scaling.claims import C13_MIN_EFFICIENCY

    med = (ran.groupby(["source", "variant", "nodes"], sort=True)
           .agg(efficiency=("efficiency", "median"), gate=("gate", lambda g: bool((g == True).all())))  # noqa: E712
           .reset_index())
    several = med[["source", "variant"]].drop_duplicates().shape[0] > 1
    med = med.assign(ran=True, label=[(f"{src} · {var}\n" if several else "") + f"{n} node(s)"
                                      for src, var, n in zip(med["source"], med["variant"], med["nodes"])])
    fig = MplFigure(figsize=(max(6.0, 1.2 * len(med)), 3.8))
    draw_efficiency(fig.subplots(), med, reference=C13_MIN_EFFICIENCY)
    fig.tight_layout()
    return Figure(title="per-node efficiency per stage (median over launches)", data=image_of(fig),
                  alt="bars per stage of per-node throughput relative to one node, coloured by the gate")
