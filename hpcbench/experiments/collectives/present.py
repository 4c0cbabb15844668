"""The report section of ``collectives``."""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

from hpcbench.core.units import format_bytes
from hpcbench.present.kit import (Cell, ExperimentData, Figure, Section, Table, evidence_tables, fmt_number, image_of,
                                  legend_below, ordered, present_stats, rank_in, text_table)

_TO_MS = {"s": 1e3, "ms": 1.0, "us": 1e-3}
OP_ORDER = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
GROUP_ORDER = ("world", "intra_node", "inter_node", "intra", "inter")
#: A node whose busbw is below this fraction of its peers' median is flagged as slow.
SLOW_NODE_FRACTION = 0.8


def _group_names(stats: pd.DataFrame) -> pd.Series:
    """The group kind, with its index when a kind has several groups (intra[0], intra[1])."""
    if "group_index" not in stats.columns:
        return stats["group"].astype(str)
    idx = pd.to_numeric(stats["group_index"], errors="coerce")
    several = stats.assign(_i=idx).groupby("group")["_i"].nunique()
    return pd.Series([f"{g}[{int(i)}]" if several.get(g, 0) > 1 and not math.isnan(i) else str(g)
                      for g, i in zip(stats["group"], idx)], index=stats.index)


def present_collectives(data: ExperimentData) -> list[Section]:
    stats = data.stats
    needed = {"op", "group", "size_bytes"}
    if not len(stats) or not needed <= set(stats.columns):
        return present_stats(data)
    stats = stats[stats["size_bytes"].notna()].copy()
    stats["size_bytes"] = stats["size_bytes"].astype("int64")
    stats["group_name"] = _group_names(stats)
    section = Section(title="Collectives: bus bandwidth", id="exp-collectives")

    pairs = [(s, v) for s in data.sources for v in ordered(stats.loc[stats["source"] == s, "variant"])]
    section.tables.append(_comparison_table(stats, pairs))
    section.add(_per_node_table(stats, pairs), _busbw_figure(stats, pairs))

    failures = _failure_table(stats, data.sources)
    if failures is not None:
        section.tables.append(failures)
        section.notes.append(Cell(f"{len(failures.rows)} correctness check series failed", "fail"))
    elif (stats["metric"] == "correct").any():
        section.notes.append(Cell("every correctness check passed", "ok"))
    else:
        section.notes.append(Cell("no correctness checks were recorded"))

    section.add(text_table(data.text, caption="Not measured"))
    section.tables += evidence_tables(data, ["op", "group", "size_bytes", "busbw_p50_GBps", "iterations"])
    return [section]


def _comparison_table(stats: pd.DataFrame, pairs: list[tuple[str, str]]) -> Table:
    """Rows (op, group kind, size); columns per (source, variant): busbw p50 and time p99.

    The groups of one kind (every node's intra-node group, every inter-node peer group)
    run at the same time, so a row pools them: the median of their busbw p50s and the
    worst of their p99 times. Per-node differences have their own table.
    """
    index = ["source", "variant", "op", "group", "size_bytes"]
    measured = stats[stats["metric"].isin(["busbw", "time"])]
    busbw = measured[measured["metric"] == "busbw"].groupby(index)["p50"].median()
    time = measured[measured["metric"] == "time"]
    to_ms = time["unit"].map(lambda u: _TO_MS.get(u, math.nan))
    time_p99 = (time["p99"] * to_ms).groupby([time[c] for c in index]).max()
    keys = sorted(measured[["op", "group", "size_bytes"]].drop_duplicates().itertuples(index=False, name=None),
                  key=lambda k: (rank_in(k[0], OP_ORDER), rank_in(k[1], GROUP_ORDER), k[2]))
    rows = []
    for op, group, size in keys:
        row = [Cell(op), Cell(group), Cell(format_bytes(size))]
        for src, var in pairs:
            key = (src, var, op, group, size)
            row += [Cell(fmt_number(busbw.get(key, math.nan))), Cell(fmt_number(time_p99.get(key, math.nan)))]
        rows.append(row)
    columns = ["op", "group", "size"] + [c for _ in pairs for c in ("busbw p50 (GB/s)", "time p99 (ms)")]
    groups = [("message", 3)] + [(f"{s} · {v}", 2) for s, v in pairs]
    return Table(columns=columns, rows=rows, groups=groups, id="collectives-comparison",
                 caption="busbw p50 (median over the groups of a kind) and the worst p99 of the per-iteration "
                         "time, sources and variants side by side")


def _per_node_table(stats: pd.DataFrame, pairs: list[tuple[str, str]]) -> Table | None:
    """One row per node and group at the largest size each (source, variant, op, group) measured.

    Shown for the runs whose records come from more than one node: the node whose busbw falls
    below SLOW_NODE_FRACTION of its peers' median is flagged, so a slow node shows up.
    """
    busbw = stats[stats["metric"] == "busbw"]
    nodes = busbw.groupby(["source", "variant"])["node"].transform("nunique")
    busbw = busbw[nodes > 1]  # a run on one node has no peers to be slow against
    if busbw.empty:
        return None
    largest = busbw.groupby(["source", "variant", "op", "group"])["size_bytes"].transform("max")
    top = busbw[busbw["size_bytes"] == largest]
    peers = top.groupby(["source", "variant", "op", "group"])["p50"].transform("median")
    order = {pair: i for i, pair in enumerate(pairs)}
    top = top.assign(_peer=peers, _pair=[order.get((s, v), len(order)) for s, v in zip(top["source"], top["variant"])])
    top = top.sort_values(["_pair", "op", "group", "group_name", "node"],
                          key=lambda col: col.map(lambda v: rank_in(v, OP_ORDER + GROUP_ORDER)) if col.dtype == object else col)
    rows, classes = [], []
    for rec in top.to_dict("records"):
        ratio = rec["p50"] / rec["_peer"] if rec["_peer"] else math.nan
        slow = ratio < SLOW_NODE_FRACTION
        rows.append([Cell(f"{rec['source']} · {rec['variant']}"), Cell(str(rec["op"])), Cell(str(rec["group_name"])),
                     Cell(str(rec["node"])), Cell(format_bytes(rec["size_bytes"])), Cell(fmt_number(rec["p50"])),
                     Cell(f"{ratio:.2f}" + (" (slow)" if slow else ""), "fail" if slow else "")])
        classes.append("fail" if slow else "")
    return Table(columns=["run · variant", "op", "group", "node", "size", "busbw p50 (GB/s)", "vs peers' median"],
                 rows=rows, id="collectives-per-node", row_classes=classes, collapsed=len(rows) > 40,
                 caption=f"Per node, at the largest size: busbw p50 against the median of the same op and group "
                         f"kind on the other nodes (below {SLOW_NODE_FRACTION:.0%} is flagged slow)")


def _lookup_unit(frame: pd.DataFrame, key: tuple) -> str:
    try:
        value = frame.loc[key, "unit"]
    except KeyError:
        return "s"
    return str(value.iloc[0] if isinstance(value, pd.Series) else value)


def _failure_table(stats: pd.DataFrame, sources: Sequence[str]) -> Table | None:
    checks = stats[(stats["metric"] == "correct") & (stats["min"] < 1)]
    if not len(checks):
        return None
    rows = []
    for rec in checks.to_dict("records"):
        failed = int(round((1.0 - rec["mean"]) * rec["n"]))
        rows.append([Cell(str(rec["source"])), Cell(str(rec["variant"])), Cell(str(rec["op"])),
                     Cell(str(rec["group_name"])), Cell(format_bytes(rec["size_bytes"])),
                     Cell(f"{failed} of {rec['n']} checks wrong")])
    return Table(columns=["source", "variant", "op", "group", "size", "result"], rows=rows,
                 caption="Correctness failures", id="collectives-failures",
                 row_classes=["fail"] * len(rows))


def _busbw_figure(stats: pd.DataFrame, pairs: list[tuple[str, str]]) -> Figure | None:
    import seaborn as sns
    from matplotlib.figure import Figure as MplFigure

    plot = stats[(stats["metric"] == "busbw") & stats["p50"].notna()]
    plot = plot.drop(columns=["group"]).rename(columns={"group_name": "group"})
    if not len(plot):
        return None
    panels = [p for p in pairs if ((plot["source"] == p[0]) & (plot["variant"] == p[1])).any()]
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = MplFigure(figsize=(4.2 * ncols, 3.2 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True)
    hue_order = ordered(plot["op"], OP_ORDER)
    style_order = ordered(plot["group"])
    for i, (src, var) in enumerate(panels):
        ax = axes[i // ncols][i % ncols]
        part = plot[(plot["source"] == src) & (plot["variant"] == var)].sort_values("size_bytes")
        sns.lineplot(data=part, x="size_bytes", y="p50", hue="op", style="group", hue_order=hue_order,
                     style_order=style_order, markers=True, dashes=True, ax=ax,
                     legend=(i == len(panels) - 1))
        ax.set_xscale("log", base=2)
        ax.set_title(f"{src} · {var}", fontsize=9)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw p50 (GB/s)")
        ax.grid(True, alpha=0.3)
        if i == len(panels) - 1:
            legend_below(ax, ncol=3)
    for j in range(len(panels), nrows * ncols):
        axes[j // ncols][j % ncols].set_visible(False)
    fig.tight_layout()
    return Figure(title="busbw p50 vs message size", data=image_of(fig),
                  alt="bus bandwidth p50 against message size, one panel per source and variant")
