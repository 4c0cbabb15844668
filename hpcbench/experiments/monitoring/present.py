"""The report section of ``monitoring``: per fault, utilisation, the C6 metrics and the alerts, over launches."""

from __future__ import annotations

import pandas as pd

from hpcbench.experiments.monitoring.summary import UTIL_HEALTHY_MIN
from hpcbench.present.kit import (Cell, ExperimentData, Figure, Section, Table, evidence_tables, fmt_number, image_of,
                                  summary_presenter, text_table)

C6_COLUMNS = {"tcp_retransmission_rate_worst": "TCP retrans. worst", "storage_read_p99_worst": "read P99 worst (s)",
              "sm_activity_worst": "SM activity worst", "cpu_cache_hit_rate_worst": "cache hit worst"}


@summary_presenter("fault")
def present_monitoring(data: ExperimentData, s: pd.DataFrame) -> list[Section]:
    """One row per source, variant and fault: launches, step slowdown, utilisation, detected / missed, alerts."""
    section = Section(title="Monitoring: what utilisation shows against the C6 alerts", id="exp-monitoring")
    rows = []
    for (source, variant, fault), g in s.groupby(["source", "variant", "fault"], sort=False):
        applied = g[g["injected"] != False]  # noqa: E712 - the baseline's is None
        hidden = applied[(applied["util_healthy"] == True) & applied["caught"].notna()]  # noqa: E712
        alerts = sorted({a for t in g["alerts"] for a in t})
        rows.append([Cell(str(source)), Cell(str(variant)), Cell(fault), Cell(f"{len(applied)}/{len(g)}"),
                     Cell(fmt_number(g["slowdown"].median(), 3)), Cell(fmt_number(g["utilisation"].median(), 3)),
                     Cell(f"{int(hidden['caught'].astype(bool).sum())}/{len(hidden)}"),
                     *(Cell(fmt_number(g[c].median(), 3)) for c in C6_COLUMNS if c in g.columns),
                     Cell(", ".join(alerts) or "none")])
    columns = ["source", "variant", "fault", "applied", "step / baseline", "utilisation",
               "caught while util. healthy", *(v for c, v in C6_COLUMNS.items() if c in s.columns), "alerts"]
    section.tables.append(Table(columns=columns, rows=rows, id="monitoring-faults",
                                caption=f"medians over launches; utilisation looks healthy at >= {UTIL_HEALTHY_MIN:.0%}; "
                                        f"'caught' counts launches where the fault was applied, utilisation looked "
                                        f"healthy and a C6 alert fired"))
    section.figures.append(_figure(s))
    section.add(text_table(data.text, caption="Faults applied, alerts and values not measured"))
    section.tables += evidence_tables(data, ["fault", "injected", "slowdown", "utilisation", "util_healthy", "caught",
                                             "steps", "ok"])
    return [section]


def _figure(s: pd.DataFrame) -> Figure:
    from matplotlib.figure import Figure as MplFigure

    from hpcbench.experiments.monitoring.plot import draw_monitoring

    med = (s.groupby("fault", sort=False)
           .agg(slowdown=("slowdown", "median"), utilisation=("utilisation", "median"),
                util_metric=("util_metric", "first"), alerts=("alerts", lambda a: tuple(sorted({x for t in a for x in t}))))
           .reset_index())
    fig = MplFigure(figsize=(10, 3.8))
    left, right = fig.subplots(1, 2)
    draw_monitoring(left, right, med)
    fig.tight_layout()
    return Figure(title="step slowdown and utilisation per fault, with the C6 alerts", data=image_of(fig),
                  alt="bars per fault of step time over the baseline, and of utilisation coloured by alert")
