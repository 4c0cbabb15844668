"""The report section of ``comm_modes``."""

from __future__ import annotations

import math

import pandas as pd

from hpcbench.core.units import format_bytes
from hpcbench.diag.report import diagnostics_tables, without_diagnostics
from hpcbench.experiments.comm_modes.config import IB_MTU_BUCKET_MB
from hpcbench.present.kit import (Cell, ExperimentData, Figure, Section, Table, check_note, evidence_tables, fmt_number,
                                  image_of, legend_below, ordered, pick, present_stats, rank_in, source_variants,
                                  text_table)

MODE_ORDER = ("ddp", "hybrid_dp_ddp", "hierarchical", "hierarchical_leader")


def present_comm_modes(data: ExperimentData) -> list[Section]:
    """Modes x models x bucket sizes: throughput, step p50/p99 and communication share, sources side by side."""
    stats = data.stats
    if not len(stats) or not {"model", "mode", "bucket_cap_mb"} <= set(stats.columns):
        return present_stats(data)
    stats = stats[stats["bucket_cap_mb"].notna()].copy()
    stats["bucket_cap_mb"] = stats["bucket_cap_mb"].astype(float)
    section = Section(title="Communication modes: throughput and communication share", id="exp-comm-modes")
    pairs = source_variants(stats, data.sources)
    tput = pick(stats, "throughput", scope="total")
    step = pick(stats, "step_time", comm="mode")
    share = pick(stats, "comm_share")
    keys = sorted({(r.model, r.mode, r.bucket_cap_mb) for r in stats.itertuples()},
                  key=lambda k: (k[0], rank_in(k[1], MODE_ORDER), k[2]))

    def value(frame: pd.DataFrame, src: str, var: str, key: tuple, column: str) -> float:
        sel = frame[(frame["source"] == src) & (frame["variant"] == var) & (frame["model"] == key[0])
                    & (frame["mode"] == key[1]) & (frame["bucket_cap_mb"] == key[2])]
        return float(sel[column].iloc[0]) if len(sel) else math.nan

    rows = []
    for key in keys:
        unit = tput[tput["model"] == key[0]]["unit"]
        row = [Cell(key[0]), Cell(key[1]), Cell(format_bytes(key[2] * (1 << 20))),
               Cell(str(unit.iloc[0]) if len(unit) else "")]
        for src, var in pairs:
            row += [Cell(fmt_number(value(tput, src, var, key, "p50"))),
                    Cell(fmt_number(value(step, src, var, key, "p50") * 1e3)),
                    Cell(fmt_number(value(step, src, var, key, "p99") * 1e3)),
                    Cell(fmt_number(value(share, src, var, key, "p50"), 3))]
        rows.append(row)
    columns = ["model", "mode", "bucket", "unit"] + [c for _ in pairs for c in
                                                      ("throughput p50 (total)", "step p50 (ms)", "step p99 (ms)",
                                                       "comm share p50")]
    groups = [("series", 4)] + [(f"{s} · {v}", 4) for s, v in pairs]
    section.tables.append(Table(columns=columns, rows=rows, groups=groups, id="comm-modes-comparison",
                                caption="total throughput and step time (p50 / p99 over steps), communication share "
                                        "= 1 - t(no-op hook) / t(mode); – where a mode did not run"))
    figure = _comm_modes_figure(tput, pairs)
    if figure is not None:
        section.figures.append(figure)
    checks = pick(stats, "grad_match")
    check_note(section, checks, fail="some modes' gradients differ from plain DDP's",
                ok="every mode that ran gave plain DDP's gradients")
    section.tables += diagnostics_tables(
        data.stats, data.text, pairs, ["model", "mode", "bucket_cap_mb"], prefix="comm-modes", series=keys,
        formats={"bucket_cap_mb": lambda mb: format_bytes(mb * (1 << 20))}, breakdown_stats=stats, comm="mode",
        caption="where a step's time goes (the timed steps with the mode's communication, every rank's); no data "
                "wait: the batches are synthetic, made on the device")
    table = text_table(without_diagnostics(data.text), caption="Not measured, with the reason")
    if table is not None:
        section.tables.append(table)
    section.tables += evidence_tables(data, ["model", "mode", "bucket_cap_mb", "throughput_total_p50", "comm_share_p50", "steps"])
    return [section]


def _comm_modes_figure(tput: pd.DataFrame, pairs: list[tuple[str, str]]) -> Figure | None:
    import seaborn as sns
    from matplotlib.figure import Figure as MplFigure

    if not len(tput):
        return None
    base = tput[tput["mode"] == "ddp"].set_index(["source", "variant", "model", "bucket_cap_mb"])["p50"]
    plot = tput.assign(ratio=[r.p50 / base.get((r.source, r.variant, r.model, r.bucket_cap_mb), math.nan)
                              for r in tput.itertuples()],
                       series=[f"{s} · {v} · {m}" for s, v, m in zip(tput["source"], tput["variant"], tput["model"])])
    sweep = plot.groupby("series")["bucket_cap_mb"].transform("nunique") > 1
    fig = MplFigure(figsize=(11, 3.8))
    left, right = fig.subplots(1, 2)
    at = plot[plot["bucket_cap_mb"] == plot.groupby("series")["bucket_cap_mb"].transform("max")]
    sns.barplot(data=at, x="mode", y="ratio", hue="series", order=ordered(at["mode"], MODE_ORDER), ax=left)
    left.axhline(1.0, color="grey", lw=1)
    left.set_ylabel("throughput p50 / ddp")
    left.set_title("modes at the largest bucket", fontsize=9)
    left.tick_params(axis="x", rotation=15)
    legend_below(left, ncol=1)
    if sweep.any():
        sw = plot[sweep]
        sns.lineplot(data=sw, x="bucket_cap_mb", y="p50", hue="mode", style="series", markers=True, ax=right,
                     hue_order=ordered(sw["mode"], MODE_ORDER))
        right.set_xscale("log", base=2)
        right.axvline(IB_MTU_BUCKET_MB, color="red", ls=":", lw=1)
        right.set_yscale("log")
        legend_below(right)
    else:
        right.text(0.5, 0.5, "no bucket sweep", ha="center", va="center")
    right.set_xlabel("bucket_cap_mb (MiB; dotted: 4 KiB IB MTU)")
    right.set_ylabel("throughput p50 (total)")
    right.set_title("gradient bucket sweep", fontsize=9)
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return Figure(title="throughput against plain DDP, and against the bucket size", data=image_of(fig),
                  alt="bars of throughput relative to DDP per mode; lines of throughput against bucket size")
