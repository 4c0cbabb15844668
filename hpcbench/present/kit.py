"""Presenters turn one experiment's statistics into report sections.

A presenter is registered under its experiment's name in :data:`PRESENTERS`; an
experiment without one gets :func:`present_stats`, the generic statistics table, and so does one
built on the launches' summaries (:func:`summary_presenter`) where they are missing.
Presenters build :class:`Table` and :class:`Figure` objects holding plain strings;
the template escapes every one of them, so nothing here writes HTML.

A cell can link a file of the run (a notebook, a trace) with :func:`file_link`: the
presenter names the file, and the report writer, which alone knows the report folder,
copies it into ``files/`` there and links it by a relative path
(:class:`hpcbench.report.report_folder.LinkedFiles`), so the folder stays whole when it is
published or copied to another machine.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import pandas as pd

from hpcbench.core.results import label_keys

# -- the document model ----------------------------------------------------------

@dataclass(frozen=True)
class LinkedFile:
    """A file of the run that a cell links to; the report writer copies it into the report folder."""

    path: Path
    """The file as the run recorded it: relative to its run directory (the first part of
    :attr:`folder` names the source), or absolute in records written before paths were relative."""
    folder: tuple[str, ...] = ()
    """Where its copy goes under the report's ``files/``, e.g. ``(source, task id)``; each
    part is made a safe folder name."""
    optional: bool = False
    """Copied only when the report is asked for such files (``hpcbench report --traces``): a
    profiler trace weighs MiB and is published with every copy of the report."""


@dataclass
class Cell:
    """One table cell; ``parts`` (cells shown one per line) replaces ``text`` when given."""

    text: str = ""
    cls: str = ""
    href: str | None = None
    parts: tuple["Cell", ...] = ()
    file: LinkedFile | None = None
    """A file to link: the writer replaces the cell by one whose ``href`` is the file's copy in
    the report folder (see :func:`file_link`); ``href`` is then ignored."""


def file_link(path: str | Path, label: str | None = None, *, folder: Sequence[str] = (),
              optional: bool = False) -> Cell:
    """A table cell that links a file of the run, copied into the report folder when it is written.

    Presenters need not know the report folder: the report writer
    (:class:`hpcbench.report.report_folder.LinkedFiles`) copies the file to
    ``files/<folder...>/<name>`` there (identical files once) and links it by that relative
    path. A file that is missing says so; one over the size caps, or outside the report's run
    directories, is not copied and keeps its absolute ``file:`` link, marked as working only on
    the machine that holds the file. Works in table cells (and their ``parts``), not in section notes.

    Args:
        path: the file as the run recorded it: relative to the run directory of the source
            ``folder[0]`` names, or absolute.
        label: the text shown (default: the file's name).
        folder: sub-folders of ``files/`` for the copy, e.g. ``(source, task_id)``, so that
            files of the same name from different tasks stay apart.
        optional: copied only with ``hpcbench report --traces`` (a profiler trace); otherwise
            the cell says how to include it.

    Returns:
        A :class:`Cell` with :attr:`Cell.file` set.
    """
    path = Path(path)
    return Cell(label if label is not None else path.name,
                file=LinkedFile(path, tuple(map(str, folder)), optional=optional))


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
    data: str
    """The image, base64: SVG from :func:`image_of` (PNG where a presenter asked for it)."""
    alt: str = ""

    @property
    def mime(self) -> str:
        """The image's type, read from its first bytes (base64 of PNG's signature starts ``iVBOR``)."""
        return "image/png" if self.data.startswith("iVBOR") else "image/svg+xml"


@dataclass
class Section:
    title: str
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[Cell] = field(default_factory=list)
    id: str = ""
    badges: list[Cell] = field(default_factory=list)
    """Short counts shown as badges under the title (the ledger's verdict counts)."""
    details: list[Any] = field(default_factory=list)
    """Folded sub-sections after the tables and figures (:class:`hpcbench.report.ledger_page.ClaimDetail`)."""
    figures_first: bool = True
    """Figures above the tables (an experiment's plot first); False puts a summary table first."""

    def __post_init__(self) -> None:
        if not self.id:
            self.id = slug(self.title)

    def add(self, *parts: Table | Figure | None) -> None:
        """Append each table to :attr:`tables` and each figure to :attr:`figures`, in order; a None (a
        part with nothing to show, as :func:`text_table` returns for no rows) is left out."""
        for part in parts:
            if isinstance(part, Figure):
                self.figures.append(part)
            elif part is not None:
                self.tables.append(part)


@dataclass
class ExperimentData:
    """What a presenter receives: one experiment, all sources."""

    experiment: str
    sources: list[str]          # source labels, in report order
    stats: pd.DataFrame         # aggregate stats with the label keys as columns
    text: pd.DataFrame          # text rows with the label keys as columns
    raw: pd.DataFrame | None    # raw rows (schema + source) when the presenter asked for them
    summaries: pd.DataFrame = field(default_factory=lambda: pd.DataFrame())  # pandas read when made
    """Every launch's summary (the experiment's ``summarize``) with a ``source`` column."""


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


def label_text(labels: str) -> str:
    try:
        data = json.loads(labels)
    except (TypeError, json.JSONDecodeError):
        return str(labels)
    if not isinstance(data, dict) or not data:
        return ""
    return ", ".join(f"{k}={v}" for k, v in data.items())


def image_of(fig, fmt: str = "svg") -> str:
    """A matplotlib Figure as base64 SVG (or PNG at 150 dpi), drawn without pyplot state.

    SVG by default: its text stays text, sharp at any zoom and legible in the published page;
    ``fmt="png"`` for a plot of so many points that its SVG would weigh more than its pixels.
    """
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if fmt not in ("svg", "png"):
        raise ValueError(f"image format {fmt!r}: allowed svg, png")
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    # Fonts as text (the browser draws them) and a fixed id salt, so that one report gives one file.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "hpcbench"}):
        fig.savefig(buf, format=fmt, dpi=150, bbox_inches="tight", metadata={"Date": None} if fmt == "svg" else None)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def mark_empty(axes: Iterable[Any], text: str = "no measurements") -> None:
    """``text`` in the middle of each of ``axes``: a panel with nothing to draw says so rather than stay blank."""
    for ax in axes:
        ax.text(0.5, 0.5, text, ha="center", va="center")


def panels_figure(draw: Callable[[list], None], *, title: str, panels: int = 2,
                  figsize: tuple[float, float] = (11, 4.2), rows: Any = None, grid: bool = False):
    """An experiment's notebook figure: ``panels`` axes side by side, drawn by ``draw(axes)``, under ``title``.

    pyplot is imported here, on call, not by the modules that use it: inside a kernel the inline
    backend shows the figure (no ``matplotlib.use()``), while the report draws the same panels on bare
    Figures in worker threads, where pyplot's state must stay out.

    Args:
        draw: fills the axes (a list, left to right).
        title: the figure's title.
        panels, figsize: how many axes, and the figure's size in inches.
        rows: what the figure shows; when given and empty, each panel says "no measurements" instead
            and the figure has no title.
        grid: a light grid on every panel, once drawn.
    Returns:
        The matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, figsize=figsize)
    axes = list(axes)
    if rows is not None and not len(rows):
        mark_empty(axes)
        return fig
    draw(axes)
    if grid:
        for ax in axes:
            ax.grid(True, alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def figure_for(axes: Any, *grid: int, figsize: tuple[float, float]) -> tuple[Any, Any]:
    """The figure to draw on and its axes: ``axes`` and their own figure when a caller passes them (panels of
    its figure), else a new figure of ``grid`` subplots (``plt.subplots(*grid)``) of ``figsize`` inches.

    pyplot is imported on call, as in :func:`panels_figure`, and only when a figure is made.
    """
    if axes is None:
        import matplotlib.pyplot as plt

        return plt.subplots(*grid, figsize=figsize)
    first = axes if hasattr(axes, "figure") else axes[0]
    return first.figure, axes


def legend_below(ax, ncol: int = 2) -> None:
    """The axes' legend under it, at a legible size: a legend inside the axes covers the data it names."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=ncol, frameon=False)


def ordered(values: Sequence, order: Sequence | None = None) -> list:
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
    frame = text.assign(labels_text=text["labels"].map(label_text))
    grouped = (frame.groupby(["source", "variant", "metric", "labels_text", "text"], sort=True, dropna=False)
               ["node"].agg(lambda s: ", ".join(sorted(set(map(str, s))))).reset_index())
    rows = [[Cell(str(r["source"])), Cell(str(r["variant"])), Cell(str(r["metric"])),
             Cell(str(r["labels_text"])), Cell(str(r["text"])), Cell(str(r["node"]))]
            for r in grouped.to_dict("records")]
    return Table(columns=["source", "variant", "metric", "labels", "text", "nodes"], rows=rows,
                 caption=caption)


#: Text rows every launch writes about where each rank ran (:mod:`hpcbench.dist.binding`): facts of
#: the launch, not values "not measured", so they get their own table (:func:`rank_binding_table`).
BINDING_METRICS = ("rank_binding", "rank_binding_planned", "rank_binding_mismatches")


def split_binding_rows(text: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the text rows without the ranks' binding facts, those facts)."""
    if not len(text) or "metric" not in text.columns:
        return text, text.iloc[0:0]
    mask = text["metric"].isin(BINDING_METRICS)
    return text[~mask], text[mask]


def rank_binding_table(binding: pd.DataFrame) -> Table | None:
    """Per task and rank, what the kernel says the rank had (CPUs, memory nodes, policy, threads...), under
    which bind mode, and how it differed from the plan; one row per distinct combination."""
    if not len(binding):
        return None
    what = {"rank_binding_planned": "planned", "rank_binding_mismatches": "differs from the plan"}
    frame = binding.assign(
        rank=binding["rank"] if "rank" in binding.columns else "",
        bind=binding["bind"] if "bind" in binding.columns else "",
        fact=[f"{what.get(m) or (f if isinstance(f, str) else m)}: {t}"
              for m, f, t in zip(binding["metric"], binding.get("field", [None] * len(binding)), binding["text"])])
    keys = ["source", "variant", "node", "rank", "bind"]
    rows = [[*(Cell(str(k)) for k in key), Cell(parts=tuple(Cell(f) for f in sorted(set(g["fact"]))))]
            for key, g in frame.groupby(keys, sort=True, dropna=False)]
    return Table(columns=[*keys, "what the rank had"], rows=rows,
                 caption="Where each rank ran: CPUs, memory nodes, memory policy and threads as the kernel "
                         "reported them (and, under bind=plan, every difference from the plan)", collapsed=True)


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


def summary_presenter(*columns: str) -> Callable[[Callable[[ExperimentData, pd.DataFrame], list[Section]]],
                                                 Callable[[ExperimentData], list[Section]]]:
    """Decorates ``present(data, summaries)``, a presenter built on the launches' summaries, into a presenter.

    The presenter runs only where there are summaries and they have every one of ``columns``; elsewhere
    (no launch summarised, or records of an older summary) the section is :func:`present_stats`' generic one.
    """
    def decorate(present: Callable[[ExperimentData, pd.DataFrame], list[Section]]) -> Callable[[ExperimentData],
                                                                                                list[Section]]:
        @functools.wraps(present)
        def presenter(data: ExperimentData) -> list[Section]:
            summaries = data.summaries
            if summaries is None or not len(summaries) or not set(columns) <= set(summaries.columns):
                return present_stats(data)
            return present(data, summaries)
        return presenter
    return decorate


# -- collectives -----------------------------------------------------------------


def check_note(section: Section, checks: pd.DataFrame, *, fail: str, ok: str) -> None:
    """A red note when any series of a pass/fail check (1/0 values) has a 0, a green one when all pass."""
    if len(checks) and (checks["min"] < 1).any():
        section.notes.append(Cell(fail, "fail"))
    elif len(checks):
        section.notes.append(Cell(ok, "ok"))


def rank_in(value: str, order: Sequence[str]) -> tuple[int, str]:
    return (order.index(value) if value in order else len(order), str(value))


def lookup(frame: pd.DataFrame, key: tuple, column: str) -> float:
    try:
        value = frame.loc[key, column]
    except KeyError:
        return math.nan
    if isinstance(value, pd.Series):  # duplicates (several units): take the first
        value = value.iloc[0]
    return float(value)


def source_variants(stats: pd.DataFrame, sources: Sequence[str]) -> list[tuple[str, str]]:
    return [(s, v) for s in sources for v in ordered(stats.loc[stats["source"] == s, "variant"])]


def pick(stats: pd.DataFrame, metric: str, **where: object) -> pd.DataFrame:
    sel = stats[stats["metric"] == metric]
    for col, val in where.items():
        sel = sel[sel[col] == val] if col in sel.columns else sel.iloc[0:0]
    return sel


# -- the evidence tail of every experiment section ------------------------------


LAUNCH_CAPTION = "Per launch: the medians the claims ledger's rules pair and pool"


def launch_table(summaries: pd.DataFrame, columns: Sequence[str], *, caption: str) -> Table | None:
    """Every launch's summary rows: the very numbers the ledger's rules read (per launch, before pooling).

    Args:
        summaries: :attr:`ExperimentData.summaries` (the experiment's ``summarize`` per launch).
        columns: the summary columns to show, after source, variant and repetition.
    """
    if summaries is None or not len(summaries):
        return None
    shown = [c for c in columns if c in summaries.columns]
    keys = [c for c in ("source", "variant", "repetition") if c in summaries.columns]
    frame = summaries.sort_values(keys + shown[:2], kind="stable")
    rows = [[Cell(str(r[k])) for k in keys]
            + [Cell(fmt_number(r[c]) if not isinstance(r[c], str) else r[c]) for c in shown]
            + [Cell("" if r.get("ok", True) is not False else str(r.get("problem") or "check failed"),
                    "fail" if r.get("ok", True) is False else "")]
            for _, r in frame.iterrows()]
    return Table(columns=keys + shown + ["not counted because"], rows=rows, caption=caption, collapsed=True)


def evidence_tables(data: "ExperimentData", launch_columns: Sequence[str],
                    stats: pd.DataFrame | None = None) -> list[Table]:
    """The tail every experiment section ends with: the per-launch summaries the rules read
    (:func:`launch_table`) and all statistics, both collapsed."""
    tables = []
    launches = launch_table(data.summaries, launch_columns, caption=LAUNCH_CAPTION)
    if launches is not None:
        tables.append(launches)
    tables.append(stats_table(data.stats if stats is None else stats, data.sources, caption="All statistics",
                              collapsed=True))
    return tables
