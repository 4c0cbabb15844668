"""The report section of ``scale_model``: the residual table and figure, the fits, C1's per-phase quantity."""

from __future__ import annotations

import math

import pandas as pd

from hpcbench.experiments.scale_model.rules import pct
from hpcbench.experiments.scale_model.summary import TOLERANCE
from hpcbench.present.kit import (Cell, ExperimentData, Figure, Section, Table, evidence_tables, fmt_number, image_of,
                                  summary_presenter, text_table)

KEYS = ["source", "variant", "link_rate"]


def _ms(value: float) -> str:
    return fmt_number(value, 4)


def _residual_table(steps: pd.DataFrame) -> Table:
    med = (steps.groupby([*KEYS, "mode"], sort=False)
           .agg(rate_bps=("rate_bps", "first"), launches=("run_id", "size"),
                measured=("measured_p50_ms", "median"), low=("measured_ci_low_ms", "median"),
                high=("measured_ci_high_ms", "median"), predicted=("predicted_ms", "median"),
                compute=("compute_ms", "median"), hook=("hook_cpu_ms", "median"), comm=("predicted_comm_ms", "median"),
                hidden=("hidden_share", "median"),
                residual=("residual", "median"), within=("within_tolerance", lambda v: int(sum(bool(x) for x in v))))
           .reset_index())
    rows, classes = [], []
    for r in med.to_dict("records"):
        ci = f"[{_ms(r['low'])}, {_ms(r['high'])}]" if math.isfinite(r["low"]) else "–"
        res = f"{pct(r['residual'], signed=True, digits=1)}" if math.isfinite(r["residual"]) else "–"
        rows.append([Cell(str(r["source"])), Cell(str(r["variant"])), Cell(str(r["link_rate"])), Cell(r["mode"]),
                     Cell(str(r["launches"])), Cell(_ms(r["measured"])), Cell(ci), Cell(_ms(r["predicted"])),
                     Cell(_ms(r["compute"])), Cell(_ms(r["hook"])), Cell(_ms(r["comm"])),
                     Cell(pct(r["hidden"]) if math.isfinite(r["hidden"]) else "–"), Cell(res),
                     Cell(f"{r['within']}/{r['launches']}")])
        classes.append("" if math.isfinite(r["residual"]) and abs(r["residual"]) <= TOLERANCE else "fail")
    return Table(columns=["source", "variant", "link rate", "mode", "launches", "measured p50 (ms)",
                          "95 % CI of p50 (ms)", "predicted (ms)", "compute (ms)", "hook work (ms)",
                          "exposed comm. (ms)", "hidden share",
                          "residual", f"within {pct(TOLERANCE)}"],
                 rows=rows, row_classes=classes, id="scale-model-residuals",
                 caption=f"medians over launches; predicted = measured no-op step (compute) + the comm hook's own "
                         f"work in a step (hierarchical and 2-bit: steps with the real hook and local copies for its "
                         f"collectives, minus the no-op step) + the exposed part of the alpha-beta model's "
                         f"communication from this phase's "
                         f"collective fits: buckets reduced in order, each from when the no-op twin's backward made "
                         f"it ready (measured overlap windows), what runs past the end of backward exposed; residual "
                         f"= (predicted - measured) / measured, target +-{pct(TOLERANCE)}; CI: order statistics of "
                         f"each launch's steps")


def _fit_table(fits: pd.DataFrame) -> Table:
    med = (fits.groupby([*KEYS, "op", "group"], sort=False)
           .agg(alpha=("alpha_s", "median"), alpha_err=("alpha_err_s", "median"), bw=("bandwidth_Bps", "median"),
                beta_err=("beta_err", "median"), beta=("beta_s_per_byte", "median"), r2=("r2", "median"),
                eff=("efficiency", "median"), launches=("run_id", "size"))
           .reset_index())
    rows = []
    for r in med.to_dict("records"):
        bw_err = r["beta_err"] / r["beta"] * r["bw"] if r["beta"] > 0 else math.nan  # relative errors agree
        rows.append([Cell(str(r["source"])), Cell(str(r["variant"])), Cell(str(r["link_rate"])), Cell(r["op"]),
                     Cell(r["group"]),
                     Cell(f"{fmt_number(r['alpha'] * 1e6, 3)} ± {fmt_number(r['alpha_err'] * 1e6, 2)}"),
                     Cell(f"{fmt_number(r['bw'] / 1e6, 4)} ± {fmt_number(bw_err / 1e6, 2)}"),
                     Cell(fmt_number(r["r2"], 4)), Cell(fmt_number(r["eff"], 3)), Cell(str(r["launches"]))])
    return Table(columns=["source", "variant", "link rate", "op", "group", "alpha (µs/step)", "bandwidth (MB/s)",
                          "r2", "link efficiency", "launches"], rows=rows, id="scale-model-fits", collapsed=True,
                 caption="alpha-beta fits of each phase's collectives (± standard errors; "
                         "bandwidth per rank for world and intra-node groups, per node for inter-node groups); "
                         "link efficiency = the inter-node fit's bandwidth / the shaped rate")


def _c1_table(c1: pd.DataFrame) -> Table:
    rows = [[Cell(str(r["source"])), Cell(str(r["variant"])), Cell(str(r["link_rate"])),
             Cell(str(r["repetition"])), Cell(fmt_number(r["efficiency"], 3)),
             *[Cell(f"{pct(r[col], digits=1)}" if math.isfinite(r.get(col, math.nan)) else "–")
               for col in ("c1_busy_share", "c1_busy_share_8nics")]]
            for r in c1.to_dict("records")]
    return Table(columns=["source", "variant", "link rate", "repetition", "link efficiency",
                          "C1 busy share, 1 NIC/node", "C1 busy share, 8 NICs/node"], rows=rows, id="scale-model-c1",
                 collapsed=True,
                 caption="per launch and shaped phase: the measured inter-node link efficiency and the busy share "
                         "it gives in C1's assumed setting at 1 and 8 NICs per node (the rule's inputs; the guide "
                         "does not state the count)")


@summary_presenter("row")
def present_scale_model(data: ExperimentData, s: pd.DataFrame) -> list[Section]:
    """The residual table and figure, the fits, C1's inputs, the driver's text rows and the evidence."""
    section = Section(title="Scale model: predicted vs measured step time on the emulated cluster",
                      id="exp-scale-model")
    steps = s[s["row"] == "step"]
    if len(steps):
        section.tables.append(_residual_table(steps))
        section.figures.append(_figure(steps))
        finite = steps["residual"].dropna()
        if len(finite):
            inside = int((finite.abs() <= TOLERANCE).sum())
            section.notes.append(Cell(f"{inside} of {len(finite)} (launch, rate, mode) points within "
                                      f"{pct(TOLERANCE)}; worst residual {pct(finite.abs().max(), digits=1)}",
                                      "ok" if inside == len(finite) else "fail"))
    if (s["row"] == "fit").any():
        section.tables.append(_fit_table(s[s["row"] == "fit"]))
    if (s["row"] == "c1").any():
        section.tables.append(_c1_table(s[s["row"] == "c1"]))
    section.add(text_table(data.text, caption="Phases, link shaping and text records"))
    section.tables += evidence_tables(data, ["row", "link_rate", "mode", "measured_p50_ms", "predicted_ms", "residual",
                                             "efficiency", "c1_busy_share", "ok"])
    return [section]


def _figure(steps: pd.DataFrame) -> Figure:
    from matplotlib.figure import Figure as MplFigure

    from hpcbench.experiments.scale_model.plot import draw_predicted_vs_measured, draw_residuals

    med = (steps.groupby(["link_rate", "mode"], sort=False)
           .agg(rate_bps=("rate_bps", "first"), measured_p50_ms=("measured_p50_ms", "median"),
                measured_ci_low_ms=("measured_ci_low_ms", "median"),
                measured_ci_high_ms=("measured_ci_high_ms", "median"), predicted_ms=("predicted_ms", "median"),
                residual=("residual", "median"))
           .reset_index())
    fig = MplFigure(figsize=(11, 4.0))
    left, right = fig.subplots(1, 2)
    draw_predicted_vs_measured(left, med)
    draw_residuals(right, med)
    fig.tight_layout()
    return Figure(title="predicted vs measured step time per mode across link rates, and the residuals",
                  data=image_of(fig),
                  alt="per mode, measured median step time with its interval and the predicted line across link "
                      "rates; bars of the relative residual per rate and mode with the "
                      f"{pct(TOLERANCE)} bounds")
