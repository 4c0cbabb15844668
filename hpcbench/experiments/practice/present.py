"""The report section of ``practice``: per fault, over launches, the gate's values, what it caught and missed."""

from __future__ import annotations

import pandas as pd

from hpcbench.experiments.practice.config import NO_FAULT
from hpcbench.present.kit import (Cell, ExperimentData, Figure, Section, Table, evidence_tables, fmt_number, image_of,
                                  summary_presenter, text_table)

GATE_COLUMNS = {"step_time_cv": "step-time std/mean", "comm_share": "comm share", "read_p99_s": "read P99 (s)"}


@summary_presenter("fault")
def present_practice(data: ExperimentData, s: pd.DataFrame) -> list[Section]:
    """One row per source, variant and fault: launches applied, slowdown, gate values, caught / missed."""
    section = Section(title="Practice: the C12 gate before scaling out, on injected faults", id="exp-practice")
    rows = []
    for (source, variant, fault), g in s.groupby(["source", "variant", "fault"], sort=False):
        applied = g if fault == NO_FAULT else g[g["injected"] == True]  # noqa: E712 - True/False/None
        measured = applied[applied["gate_passed"].notna()]
        if fault == NO_FAULT:
            outcome = f"false alarms {int((measured['gate_passed'] == False).sum())}/{len(measured)}"  # noqa: E712
        else:
            caught = applied[applied["caught"].notna()]
            outcome = f"caught {int(caught['caught'].astype(bool).sum())}/{len(caught)}"
        failed = sorted({c for t in g["failed"] for c in t})
        rows.append([Cell(str(source)), Cell(str(variant)), Cell(fault), Cell(f"{len(applied)}/{len(g)}"),
                     Cell(fmt_number(applied["slowdown"].median(), 3)),
                     *(Cell(fmt_number(applied[c].median(), 3)) for c in GATE_COLUMNS),
                     Cell(outcome), Cell(", ".join(failed) or "none")])
    section.tables.append(Table(
        columns=["source", "variant", "fault", "applied", "step / baseline", *GATE_COLUMNS.values(), "gate",
                 "failed checks"], rows=rows, id="practice-faults",
        caption="medians over the launches where the fault was applied; 'caught' counts launches where the gate "
                "failed on the fault (the run would not have been scaled out); the baseline's failures are false "
                "alarms. The faults are this project's list, not a census of common problems"))
    section.figures.append(_figure(s))
    section.add(text_table(data.text, caption="Faults applied (or why not) and values not measured"))
    section.tables += evidence_tables(data, ["fault", "injected", "slowdown", *GATE_COLUMNS, "gate_passed", "caught",
                                             "steps", "ok"])
    return [section]


def _figure(s: pd.DataFrame) -> Figure:
    from matplotlib.figure import Figure as MplFigure

    from hpcbench.experiments.practice.plot import draw_practice

    def majority(values):
        known = [v for v in values if v is not None and v == v]
        return None if not known else sum(bool(v) for v in known) * 2 > len(known)

    med = (s.groupby("fault", sort=False)
           .agg(slowdown=("slowdown", "median"), **{c: (c, "median") for c in GATE_COLUMNS},
                injected=("injected", lambda v: any(x is True for x in v)), caught=("caught", majority),
                gate_passed=("gate_passed", majority))
           .reset_index())
    fig = MplFigure(figsize=(14, 4))
    draw_practice(fig.subplots(1, 4), med)
    fig.tight_layout()
    return Figure(title="step slowdown and the gate's three values per fault (medians over launches)",
                  data=image_of(fig), alt="bars per fault of step time over the baseline and of each gate "
                                              "value, red where it breaks its limit")
