"""The report section of ``weather_case``: the guide's table beside ours, and the speed-up bars."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from hpcbench.core.units import format_bytes
from hpcbench.diag.report import diagnostics_tables, without_diagnostics
from hpcbench.experiments.weather_case.plot import draw_speedups, speedup_frame
from hpcbench.experiments.weather_case.stages import STAGE_ORDER
from hpcbench.present.kit import (Cell, ExperimentData, Figure, Section, Table, evidence_tables, fmt_number, image_of,
                                  source_variants, summary_presenter, text_table)

#: Columns pooled over launches as the median of the per-launch values.
MEDIAN_COLUMNS = ("micro_step_p50_ms", "busy_share_p50", "bytes_across_nodes", "loss_vs_original")


def pool_launches(summaries: pd.DataFrame) -> pd.DataFrame:
    """One row per (source, variant, stage): medians over launches, and the speed-up as the ledger pools it
    (geometric mean over launches of each launch's original / stage ratio); ``launches`` counted ones."""
    rows = []
    keys = [k for k in ("source", "variant") if k in summaries.columns]
    for key, g in summaries.groupby(keys + ["stage"], sort=False):
        counted = g[g["ok"] != False]  # noqa: E712 - None (no check possible) counts
        speedups = [v for v in counted["speedup_vs_original"] if isinstance(v, float) and v > 0 and math.isfinite(v)]
        first = g.iloc[0]
        rows.append({**dict(zip(keys + ["stage"], key)),
                     **{c: float(pd.to_numeric(counted[c], errors="coerce").median()) if len(counted) else math.nan
                        for c in MEDIAN_COLUMNS},
                     "speedup_vs_original": float(np.exp(np.mean(np.log(speedups)))) if speedups else math.nan,
                     "guide_ms": first["guide_ms"], "guide_util": first["guide_util"],
                     "guide_speedup": first["guide_speedup"], "launches": len(counted), "dropped": len(g) - len(counted),
                     "order": first["order"], "ok": bool(len(counted))})
    return pd.DataFrame(rows)


def _percent(value: object) -> str:
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "–"
    return "–" if math.isnan(x) else f"{x:.0%}"


@summary_presenter("stage")
def present_weather_case(data: ExperimentData, summaries: pd.DataFrame) -> list[Section]:
    """Per source and variant: the guide's table (stage, ms, utilisation) beside ours, then the bars."""
    if "source" not in summaries.columns:
        summaries = summaries.assign(source=data.sources[0] if data.sources else "")
    pooled = pool_launches(summaries)
    section = Section(title="The tuning case (C7): original -> communication-tuned -> full", id="exp-weather-case")
    pairs = list(dict.fromkeys(zip(pooled["source"], pooled["variant"])))
    stages = [s for s in STAGE_ORDER if s in set(pooled["stage"])] + sorted(set(pooled["stage"]) - set(STAGE_ORDER))
    rows = []
    for stage in stages:
        sel = pooled[pooled["stage"] == stage]
        first = sel.iloc[0]
        row = [Cell(stage), Cell(fmt_number(first["guide_ms"])), Cell(_percent(first["guide_util"])),
               Cell(fmt_number(first["guide_speedup"], 3))]
        for src, var in pairs:
            r = sel[(sel["source"] == src) & (sel["variant"] == var)]
            if not len(r):
                row += [Cell("–")] * 6
                continue
            r = r.iloc[0]
            nbytes = r["bytes_across_nodes"]
            row += [Cell(fmt_number(r["micro_step_p50_ms"])), Cell(_percent(r["busy_share_p50"])),
                    Cell(fmt_number(r["speedup_vs_original"], 3)),
                    Cell(format_bytes(nbytes) if isinstance(nbytes, float) and math.isfinite(nbytes) else "–"),
                    Cell(fmt_number(r["loss_vs_original"], 3)),
                    Cell(f"{r['launches']}" + (f" ({r['dropped']} dropped)" if r["dropped"] else ""),
                         "fail" if r["dropped"] else "")]
        rows.append(row)
    columns = ["stage", "guide ms/step", "guide GPU util.", "guide speed-up"] + [
        c for _ in pairs for c in ("time / micro-step p50 (ms)", "busy share", "speed-up", "bytes across nodes "
                                   "/ micro-step", "loss vs original", "launches")]
    groups = [("the guide", 4)] + [(f"{s} · {v}", 6) for s, v in pairs]
    section.tables.append(Table(
        columns=columns, rows=rows, groups=groups, id="weather-case-ablation",
        caption="Time per micro-step = optimizer step / k (k = 4 micro-steps under no_sync in full and no_sync_only, "
                "1 elsewhere), so stages compare per sample; median over steps per launch, median over launches. "
                "Busy share = t(same step with a no-op comm hook) / t(stage): the analogue of the guide's GPU "
                "utilisation. Speed-up = original / stage, geometric mean over launches (the ledger's intervals are "
                "in C7's row). Bytes leaving one node per micro-step, from the hooks' counts (flat ring 2(N-1)/N S, "
                "hierarchical 2(M-1)/M S, quant2bit as sent). Loss vs original: final loss after the same samples "
                "from the same seed; a stage more than 5 % off is dropped."))
    frame = pd.concat([speedup_frame(pooled[(pooled["source"] == s) & (pooled["variant"] == v)], f"ours · {s} · {v}")
                       for s, v in pairs], ignore_index=True).drop_duplicates(["stage", "series"])
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(9, 4))
    draw_speedups(fig.subplots(), frame, STAGE_ORDER)
    fig.tight_layout()
    section.figures.append(Figure(title="speed-up of each stage over original: the guide's and ours",
                                  data=image_of(fig),
                                  alt="bars per stage of original's time over the stage's, the guide's beside ours"))
    if len(data.stats):
        section.tables += diagnostics_tables(
            data.stats, data.text, source_variants(data.stats, data.sources), ["stage"], prefix="weather-case",
            series=[(s,) for s in stages],
            caption="where an optimizer step's time goes: extra, untimed steps per stage after the timing (the "
                    "timed steps cannot be wrapped without changing them), their micro-batches read from the "
                    "loader as they go (data_wait: the HDF5 reads), each phase summed over the k micro-steps, "
                    "every rank's")
    section.add(text_table(without_diagnostics(data.text), caption="Facts, stage set-ups and how bytes were counted"))
    section.tables += evidence_tables(data, ["stage", "micro_step_p50_ms", "busy_share_p50", "speedup_vs_original",
                                             "bytes_across_nodes", "loss_vs_original", "steps"])
    return [section]
