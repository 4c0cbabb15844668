"""Presenters turn one experiment's statistics into report sections.

A presenter is registered under its experiment's name in :data:`PRESENTERS`; an
experiment without one gets :func:`present_stats`, the generic statistics table.
Presenters build :class:`Table` and :class:`Figure` objects holding plain strings;
the template escapes every one of them, so nothing here writes HTML.
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

import pandas as pd

from hpcbench.registry import Registry
from hpcbench.report.aggregate import label_keys
from hpcbench.units import format_bytes


# -- the document model ----------------------------------------------------------

@dataclass
class Cell:
    """One table cell; ``parts`` (cells shown one per line) replaces ``text`` when given."""

    text: str = ""
    cls: str = ""
    href: str | None = None
    parts: tuple["Cell", ...] = ()


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Cell]]
    caption: str = ""
    id: str | None = None
    #: An optional header row above ``columns``: (text, colspan) pairs.
    groups: list[tuple[str, int]] | None = None
    #: Per-row CSS class ("fail" paints a row red).
    row_classes: list[str] | None = None
    #: Shown folded (<details>) when long and secondary.
    collapsed: bool = False


@dataclass
class Figure:
    title: str
    png_base64: str
    alt: str = ""


@dataclass
class Section:
    title: str
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[Cell] = field(default_factory=list)
    id: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            self.id = slug(self.title)


@dataclass
class ExperimentData:
    """What a presenter receives: one experiment, all sources."""

    experiment: str
    sources: list[str]          # source labels, in report order
    stats: pd.DataFrame         # aggregate stats with the label keys as columns
    text: pd.DataFrame          # text rows with the label keys as columns
    raw: pd.DataFrame | None    # raw rows (schema + source) when the presenter asked for them


@dataclass(frozen=True)
class Presenter:
    present: Callable[[ExperimentData], list[Section]]
    #: The presenter needs the raw rows of its experiment (small inventories only).
    raw_rows: bool = False


PRESENTERS: Registry[Presenter] = Registry("report presenter")


def presenter_for(experiment: str) -> Presenter:
    return PRESENTERS.get(experiment) if experiment in PRESENTERS else DEFAULT_PRESENTER


# -- formatting ------------------------------------------------------------------

def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "section"


def fmt_number(value: object, digits: int = 4) -> str:
    """Numbers with ``digits`` significant digits; NaN/None as an en dash."""
    if value is None:
        return "–"
    if isinstance(value, (int,)) and not isinstance(value, bool):
        return str(value)
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(x):
        return "–"
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.{digits}g}"


def _label_text(labels: str) -> str:
    try:
        data = json.loads(labels)
    except (TypeError, json.JSONDecodeError):
        return str(labels)
    if not isinstance(data, dict) or not data:
        return ""
    return ", ".join(f"{k}={v}" for k, v in data.items())


def png_of(fig) -> str:
    """A matplotlib Figure as base64 PNG, drawn with the Agg canvas (no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _ordered(values: Sequence, order: Sequence | None = None) -> list:
    seen = list(dict.fromkeys(values))
    if order:
        return [v for v in order if v in seen] + sorted((v for v in seen if v not in order), key=str)
    return sorted(seen, key=str)


# -- the generic presenter -------------------------------------------------------

def stats_table(stats: pd.DataFrame, sources: Sequence[str], *, caption: str = "",
                collapsed: bool = False) -> Table:
    """Every series with its statistics, one row each."""
    keys = label_keys(stats)
    columns = ["source", "variant", "metric", "unit", *keys, "n", "mean", "p50", "p99", "std",
               "min", "max", "repetitions", "spread over repetitions (%)"]
    order = {s: i for i, s in enumerate(sources)}
    frame = stats.assign(_o=stats["source"].map(order)).sort_values(
        ["_o", "variant", "metric", *keys], kind="stable") if len(stats) else stats
    rows = []
    for rec in frame.to_dict("records"):
        rows.append([Cell(str(rec["source"])), Cell(str(rec["variant"])), Cell(str(rec["metric"])),
                     Cell(str(rec["unit"])), *(Cell(fmt_number(rec.get(k))) for k in keys),
                     *(Cell(fmt_number(rec[c])) for c in ("n", "mean", "p50", "p99", "std", "min",
                                                           "max", "repetitions", "spread_pct"))])
    return Table(columns=columns, rows=rows, caption=caption, collapsed=collapsed)


def text_table(text: pd.DataFrame, *, caption: str = "Text records") -> Table | None:
    """Text rows (values that are facts or reasons, not numbers), duplicates folded."""
    if not len(text):
        return None
    frame = text.assign(labels_text=text["labels"].map(_label_text))
    grouped = (frame.groupby(["source", "variant", "metric", "labels_text", "text"], sort=True, dropna=False)
               ["node"].agg(lambda s: ", ".join(sorted(set(map(str, s))))).reset_index())
    rows = [[Cell(str(r["source"])), Cell(str(r["variant"])), Cell(str(r["metric"])),
             Cell(str(r["labels_text"])), Cell(str(r["text"])), Cell(str(r["node"]))]
            for r in grouped.to_dict("records")]
    return Table(columns=["source", "variant", "metric", "labels", "text", "nodes"], rows=rows,
                 caption=caption)


def present_stats(data: ExperimentData) -> list[Section]:
    section = Section(title=f"Experiment: {data.experiment}", id=f"exp-{slug(data.experiment)}")
    if len(data.stats):
        section.tables.append(stats_table(data.stats, data.sources, caption="Statistics over raw samples"))
    table = text_table(data.text)
    if table is not None:
        section.tables.append(table)
    if not section.tables:
        section.notes.append(Cell("no records"))
    return [section]


DEFAULT_PRESENTER = Presenter(present_stats)


# -- collectives -----------------------------------------------------------------

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

    pairs = [(s, v) for s in data.sources for v in _ordered(stats.loc[stats["source"] == s, "variant"])]
    section.tables.append(_comparison_table(stats, pairs))
    per_node = _per_node_table(stats, pairs)
    if per_node is not None:
        section.tables.append(per_node)

    figure = _busbw_figure(stats, pairs)
    if figure is not None:
        section.figures.append(figure)

    failures = _failure_table(stats, data.sources)
    if failures is not None:
        section.tables.append(failures)
        section.notes.append(Cell(f"{len(failures.rows)} correctness check series failed", "fail"))
    elif (stats["metric"] == "correct").any():
        section.notes.append(Cell("every correctness check passed", "ok"))
    else:
        section.notes.append(Cell("no correctness checks were recorded"))

    table = text_table(data.text, caption="Not measured")
    if table is not None:
        section.tables.append(table)
    section.tables.append(stats_table(data.stats, data.sources, caption="All statistics", collapsed=True))
    return [section]


_TO_MS = {"s": 1e3, "ms": 1.0, "us": 1e-3}


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
                  key=lambda k: (_rank(k[0], OP_ORDER), _rank(k[1], GROUP_ORDER), k[2]))
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
                          key=lambda col: col.map(lambda v: _rank(v, OP_ORDER + GROUP_ORDER)) if col.dtype == object else col)
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


def _check_note(section: Section, checks: pd.DataFrame, *, fail: str, ok: str) -> None:
    """A red note when any series of a pass/fail check (1/0 values) has a 0, a green one when all pass."""
    if len(checks) and (checks["min"] < 1).any():
        section.notes.append(Cell(fail, "fail"))
    elif len(checks):
        section.notes.append(Cell(ok, "ok"))


def _rank(value: str, order: Sequence[str]) -> tuple[int, str]:
    return (order.index(value) if value in order else len(order), str(value))


def _lookup(frame: pd.DataFrame, key: tuple, column: str) -> float:
    try:
        value = frame.loc[key, column]
    except KeyError:
        return math.nan
    if isinstance(value, pd.Series):  # duplicates (several units): take the first
        value = value.iloc[0]
    return float(value)


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
    hue_order = _ordered(plot["op"], OP_ORDER)
    style_order = _ordered(plot["group"])
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
        if i == len(panels) - 1 and ax.get_legend() is not None:
            ax.legend(fontsize=7, loc="best")
    for j in range(len(panels), nrows * ncols):
        axes[j // ncols][j % ncols].set_visible(False)
    fig.tight_layout()
    return Figure(title="busbw p50 vs message size", png_base64=png_of(fig),
                  alt="bus bandwidth p50 against message size, one panel per source and variant")


PRESENTERS.register("collectives", Presenter(present_collectives))


# -- environment -----------------------------------------------------------------

def present_environment(data: ExperimentData) -> list[Section]:
    """The inventory: one row per fact, one column per (source, node)."""
    rows_frame = data.raw if data.raw is not None and len(data.raw) else data.text
    section = Section(title="Environment inventory", id="exp-environment")
    if not len(rows_frame):
        section.notes.append(Cell("no inventory records"))
        return [section]
    values: dict[tuple[str, str], dict[tuple[str, str], list[str]]] = {}
    for rec in rows_frame.to_dict("records"):
        fact = (str(rec["metric"]), _label_text(rec["labels"]))
        column = (str(rec["source"]), str(rec.get("node", "")))
        text = rec.get("text")
        if isinstance(text, str):
            shown = text
        else:
            value = rec.get("value")
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            shown = f"{fmt_number(value)} {rec['unit']}".strip()
        cell = values.setdefault(fact, {}).setdefault(column, [])
        if shown not in cell:
            cell.append(shown)
    order = {s: i for i, s in enumerate(data.sources)}
    columns = sorted({c for by_col in values.values() for c in by_col}, key=lambda c: (order.get(c[0], 1 << 30), c))
    rows = [[Cell(metric), Cell(labels)] + [Cell(" / ".join(values[(metric, labels)].get(c, [])) or "–")
                                            for c in columns]
            for metric, labels in sorted(values)]
    section.tables.append(Table(columns=["fact", "labels"] + [f"{s} / {n}" for s, n in columns], rows=rows,
                                id="environment-inventory", caption="Inventory (text values as recorded)"))
    if len(data.stats) and data.raw is None:
        section.tables.append(stats_table(data.stats, data.sources, caption="Numeric facts"))
    return [section]


PRESENTERS.register("environment", Presenter(present_environment, raw_rows=True))


# -- io_formats ------------------------------------------------------------------

IO_FORMAT_ORDER = ("files", "hdf5", "tfrecord", "tar")
_IO_COLUMNS = (("samples_per_s", "mean", 1.0, "samples/s"), ("mb_per_s", "mean", 1.0, "MB/s"),
               ("read_latency", "p50", 1e3, "read p50 (ms)"), ("read_latency", "p99", 1e3, "read p99 (ms)"),
               ("file_opens", "mean", 1.0, "opens/epoch"), ("accelerator_idle", "mean", 1.0, "accel. idle"),
               ("page_cache_resident", "mean", 1.0, "cached after eviction"))


def present_io_formats(data: ExperimentData) -> list[Section]:
    """Formats side by side: throughput, latency, opens, idle share per DataLoader setting; repairs."""
    stats = data.stats
    needed = {"format", "workers", "prefetch_factor", "phase"}
    if not len(stats) or not needed <= set(stats.columns):
        return present_stats(data)
    section = Section(title="Storage I/O formats (C4, C5)", id="exp-io-formats")
    timed = stats[stats["phase"].isin(["sweep", "staged"]) & stats["workers"].notna()].copy()
    timed["workers"] = timed["workers"].astype(int)
    timed["prefetch_factor"] = timed["prefetch_factor"].astype(int)
    index = ["source", "variant", "phase", "format", "workers", "prefetch_factor"]
    keys = sorted(timed[index].drop_duplicates().itertuples(index=False, name=None),
                  key=lambda k: (data.sources.index(k[0]) if k[0] in data.sources else 99, k[1],
                                 k[2] != "sweep", _rank(k[3], IO_FORMAT_ORDER), k[4], k[5]))
    by_metric = {m: timed[timed["metric"] == m].set_index(index).sort_index() for m, *_ in _IO_COLUMNS}
    rows = []
    for key in keys:
        row = [Cell(str(k)) for k in key]
        for metric, stat, scale, _ in _IO_COLUMNS:
            row.append(Cell(fmt_number(_lookup(by_metric[metric], key, stat) * scale)))
        rows.append(row)
    section.tables.append(Table(columns=[*index, *(c[3] for c in _IO_COLUMNS)], rows=rows, id="io-formats",
                                caption="Cold-cache epochs: means over epochs; read latency percentiles over "
                                        "every sample; idle share = 1 - emulated compute / wall time"))
    figure = _io_figure(timed[(timed["metric"] == "samples_per_s") & (timed["phase"] == "sweep")])
    if figure is not None:
        section.figures.append(figure)
    other = stats[stats["metric"].isin(["repairs", "lost_samples", "staging_time", "staging_saved_per_epoch",
                                        "staging_break_even", "exactly_once"])
                  & ~stats["phase"].isin(["sweep", "staged"])]
    if len(other):
        section.tables.append(stats_table(other, data.sources, caption="Staging and resilience"))
    exact = stats[stats["metric"] == "exactly_once"]
    _check_note(section, exact, fail="some epoch lost or repeated samples",
                ok="every epoch delivered every sample exactly once")
    table = text_table(data.text, caption="Facts, repairs and values not measured")
    if table is not None:
        section.tables.append(table)
    section.tables.append(stats_table(stats, data.sources, caption="All statistics", collapsed=True))
    return [section]


def _io_figure(sps: pd.DataFrame) -> Figure | None:
    import seaborn as sns
    from matplotlib.figure import Figure as MplFigure

    if not len(sps):
        return None
    plot = sps.assign(setting=[f"{s} · {v} · w={w} pf={p}" for s, v, w, p in
                               zip(sps["source"], sps["variant"], sps["workers"], sps["prefetch_factor"])])
    fig = MplFigure(figsize=(8, 3.6))
    ax = fig.subplots()
    sns.barplot(data=plot, x="format", y="mean", hue="setting", order=_ordered(plot["format"], IO_FORMAT_ORDER),
                ax=ax)
    ax.set_ylabel("samples/s (cold cache, mean)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    return Figure(title="samples/s per format and DataLoader setting", png_base64=png_of(fig),
                  alt="bar chart of samples per second for each storage format")


PRESENTERS.register("io_formats", Presenter(present_io_formats))


# -- comm_modes ------------------------------------------------------------------

MODE_ORDER = ("ddp", "hybrid_dp_ddp", "hierarchical", "hierarchical_leader")


def _pairs(stats: pd.DataFrame, sources: Sequence[str]) -> list[tuple[str, str]]:
    return [(s, v) for s in sources for v in _ordered(stats.loc[stats["source"] == s, "variant"])]


def _pick(stats: pd.DataFrame, metric: str, **where: object) -> pd.DataFrame:
    sel = stats[stats["metric"] == metric]
    for col, val in where.items():
        sel = sel[sel[col] == val] if col in sel.columns else sel.iloc[0:0]
    return sel


def present_comm_modes(data: ExperimentData) -> list[Section]:
    """Modes x models x bucket sizes: throughput, step p50/p99 and communication share, sources side by side."""
    stats = data.stats
    if not len(stats) or not {"model", "mode", "bucket_cap_mb"} <= set(stats.columns):
        return present_stats(data)
    stats = stats[stats["bucket_cap_mb"].notna()].copy()
    stats["bucket_cap_mb"] = stats["bucket_cap_mb"].astype(float)
    section = Section(title="Communication modes: throughput and communication share", id="exp-comm-modes")
    pairs = _pairs(stats, data.sources)
    tput = _pick(stats, "throughput", scope="total")
    step = _pick(stats, "step_time", comm="mode")
    share = _pick(stats, "comm_share")
    keys = sorted({(r.model, r.mode, r.bucket_cap_mb) for r in stats.itertuples()},
                  key=lambda k: (k[0], _rank(k[1], MODE_ORDER), k[2]))

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
    checks = _pick(stats, "grad_match")
    _check_note(section, checks, fail="some modes' gradients differ from plain DDP's",
                ok="every mode that ran gave plain DDP's gradients")
    table = text_table(data.text, caption="Not measured, with the reason")
    if table is not None:
        section.tables.append(table)
    section.tables.append(stats_table(data.stats, data.sources, caption="All statistics", collapsed=True))
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
    sns.barplot(data=at, x="mode", y="ratio", hue="series", order=_ordered(at["mode"], MODE_ORDER), ax=left)
    left.axhline(1.0, color="grey", lw=1)
    left.set_ylabel("throughput p50 / ddp")
    left.set_title("modes at the largest bucket", fontsize=9)
    left.tick_params(axis="x", rotation=15)
    left.legend(fontsize=6)
    if sweep.any():
        sw = plot[sweep]
        sns.lineplot(data=sw, x="bucket_cap_mb", y="p50", hue="mode", style="series", markers=True, ax=right,
                     hue_order=_ordered(sw["mode"], MODE_ORDER))
        right.set_xscale("log", base=2)
        right.axvline(4096 / (1 << 20), color="red", ls=":", lw=1)
        right.set_yscale("log")
        right.legend(fontsize=6)
    else:
        right.text(0.5, 0.5, "no bucket sweep", ha="center", va="center")
    right.set_xlabel("bucket_cap_mb (MiB; dotted: 4 KiB IB MTU)")
    right.set_ylabel("throughput p50 (total)")
    right.set_title("gradient bucket sweep", fontsize=9)
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return Figure(title="throughput against plain DDP, and against the bucket size", png_base64=png_of(fig),
                  alt="bars of throughput relative to DDP per mode; lines of throughput against bucket size")


PRESENTERS.register("comm_modes", Presenter(present_comm_modes))


# -- batch_scaling ---------------------------------------------------------------

def present_batch_scaling(data: ExperimentData) -> list[Section]:
    """Per-rank throughput, its gain over 1x, and memory per regime and batch factor."""
    stats = data.stats
    if not len(stats) or not {"regime", "factor"} <= set(stats.columns):
        return present_stats(data)
    stats = stats[stats["factor"].notna()].copy()
    stats["factor"] = stats["factor"].astype(int)
    section = Section(title="Batch scaling: per-rank throughput", id="exp-batch-scaling")
    pairs = _pairs(stats, data.sources)
    tput = _pick(stats, "throughput_per_rank")
    mem = _pick(stats, "memory_per_rank")
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
        ax.axhline(3.2, color="red", ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch factor (dotted: the guide's 3.2x)")
        ax.set_ylabel("throughput per rank / smallest batch")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6)
        fig.tight_layout()
        section.figures.append(Figure(title="per-rank throughput gain against the batch factor",
                                      png_base64=png_of(fig), alt="lines of throughput gain per batch factor"))
    table = text_table(data.text, caption="Facts and values not measured")
    if table is not None:
        section.tables.append(table)
    section.tables.append(stats_table(data.stats, data.sources, caption="All statistics", collapsed=True))
    return [section]


PRESENTERS.register("batch_scaling", Presenter(present_batch_scaling))
