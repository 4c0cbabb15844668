"""The report section of ``batch_scaling``."""

from __future__ import annotations

import math

import pandas as pd

from hpcbench.experiments.batch_scaling.claims import GUIDE_C2_GAIN
from hpcbench.present.kit import (Cell, ExperimentData, Figure, Section, Table, evidence_tables, fmt_number, image_of,
                                  legend_below, pick, present_stats, source_variants, text_table)


def present_batch_scaling(data: ExperimentData) -> list[Section]:
    """Per-rank throughput, its gain over 1x, and memory per regime and batch factor."""
    stats = data.stats
    if not len(stats) or not {"regime", "factor"} <= set(stats.columns):
        return present_stats(data)
    stats = stats[stats["factor"].notna()].copy()
    stats["factor"] = stats["factor"].astype(int)
    section = Section(title="Batch scaling: per-rank throughput", id="exp-batch-scaling")
    pairs = source_variants(stats, data.sources)
    tput = pick(stats, "throughput_per_rank")
    mem = pick(stats, "memory_per_rank")
    base = tput.loc[tput.groupby(["source", "variant", "regime"])["factor"].idxmin()].set_index(
        ["source", "variant", "regime"])["p50"] if len(tput) else pd.Series(dtype=float)
    tput = tput.assign(gain=[r.p50 / base.get((r.source, r.variant, r.regime), math.nan) for r in tput.itertuples()])
    keys = sorted({(r.regime, r.factor) for r in stats.itertuples()})
    rows = []
    for regime, factor in keys:
        row = [Cell(regime), Cell(f"{factor}x")]
        for src, var in pairs:
            t = tput[(tput["source"] == src) & (tput["variant"] == var) & (tput["regime"] == regime)
                     & (tput["factor"] == factor)]
            m = mem[(mem["source"] == src) & (mem["variant"] == var) & (mem["regime"] == regime)
                    & (mem["factor"] == factor)]
            row += [Cell(fmt_number(t["p50"].iloc[0] if len(t) else math.nan)),
                    Cell(fmt_number(t["gain"].iloc[0] if len(t) else math.nan, 3)),
                    Cell(fmt_number(m["max"].iloc[0] if len(m) else math.nan))]
        rows.append(row)
    columns = ["regime", "batch"] + [c for _ in pairs for c in ("throughput/rank p50", "gain vs smallest",
                                                                "memory/rank (MiB)")]
    groups = [("series", 2)] + [(f"{s} · {v}", 3) for s, v in pairs]
    section.tables.append(Table(columns=columns, rows=rows, groups=groups, id="batch-scaling-comparison",
                                caption="per-rank throughput (p50 over steps), gain over the regime's smallest batch "
                                        "(the guide: +220 % = 3.2x at > 4x), peak memory per rank"))
    if len(tput):
        import seaborn as sns
        from matplotlib.figure import Figure as MplFigure

        plot = tput.assign(series=[f"{s} · {v}" for s, v in zip(tput["source"], tput["variant"])])
        fig = MplFigure(figsize=(6.5, 3.6))
        ax = fig.subplots()
        sns.lineplot(data=plot, x="factor", y="gain", hue="regime", style="series", markers=True, ax=ax)
        ax.axhline(1 + GUIDE_C2_GAIN, color="red", ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch factor (dotted: the guide's 3.2x)")
        ax.set_ylabel("throughput per rank / smallest batch")
        ax.grid(True, alpha=0.3)
        legend_below(ax)
        fig.tight_layout()
        section.figures.append(Figure(title="per-rank throughput gain against the batch factor",
                                      data=image_of(fig), alt="lines of throughput gain per batch factor"))
    table = text_table(data.text, caption="Facts and values not measured")
    if table is not None:
        section.tables.append(table)
    section.tables += evidence_tables(data, ["regime", "factor", "accumulation", "batch_per_step", "throughput_p50", "steps"])
    return [section]
