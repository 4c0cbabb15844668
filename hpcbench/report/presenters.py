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
GROUP_ORDER = ("world", "intra", "inter")


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
    # One row per node that measured the series: a slow node stands out as its own row.
    index = ["source", "variant", "op", "group_name", "node", "size_bytes"]
    busbw = stats[stats["metric"] == "busbw"].set_index(index).sort_index()
    time = stats[stats["metric"] == "time"].set_index(index).sort_index()
    keys = stats[stats["metric"].isin(["busbw", "time"])][["op", "group_name", "node", "size_bytes"]].drop_duplicates()
    keys = sorted(keys.itertuples(index=False, name=None),
                  key=lambda k: (_rank(k[0], OP_ORDER), _rank(k[1].split("[")[0], GROUP_ORDER), k[1], k[2], k[3]))
    rows = []
    for op, group, node, size in keys:
        row = [Cell(op), Cell(group), Cell(node), Cell(format_bytes(size))]
        for src, var in pairs:
            b = _lookup(busbw, (src, var, op, group, node, size), "p50")
            t = _lookup(time, (src, var, op, group, node, size), "p99")
            unit = _lookup_unit(time, (src, var, op, group, node, size))
            row += [Cell(fmt_number(b)), Cell(fmt_number(t * _TO_MS.get(unit, math.nan)))]
        rows.append(row)
    columns = ["op", "group", "node", "size"] + [c for _ in pairs for c in ("busbw p50 (GB/s)", "time p99 (ms)")]
    groups = [("message", 4)] + [(f"{s} · {v}", 2) for s, v in pairs]
    section.tables.append(Table(columns=columns, rows=rows, groups=groups, id="collectives-comparison",
                                caption="busbw p50 and p99 of the per-iteration time, sources and variants side by side"))

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
