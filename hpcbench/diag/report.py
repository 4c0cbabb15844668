"""What the report and the summaries read from the diagnostics rows (:mod:`hpcbench.diag.records`).

Every training experiment writes the same rows, so its presenter shows them with the same
tables: :func:`diagnostics_tables` (step breakdown, divergence checks, trace links), and its
``summarize`` adds the same columns with :func:`breakdown_columns`. :func:`without_diagnostics`
keeps those rows out of an experiment's table of text records.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from hpcbench.core.results import PATH_UNIT
from hpcbench.diag.step_breakdown import OTHER, PHASES
from hpcbench.present.kit import Cell, Table, file_link, fmt_number, pick

__all__ = ["BREAKDOWN_PHASES", "DIAG_TEXT", "breakdown_columns", "breakdown_table", "diagnostics_tables",
           "divergence_table", "trace_table", "without_diagnostics"]

#: Phases shown (those a series measured), in the order they happen, then the time between them.
BREAKDOWN_PHASES = (*PHASES, OTHER)
#: Text rows the diagnostics tables show (kept out of an experiment's "text records" table).
DIAG_TEXT = ("tf32_state", "trace_file", "step_phase_seconds", "step_jitter")


def without_diagnostics(text: pd.DataFrame) -> pd.DataFrame:
    """``text`` without the rows :func:`diagnostics_tables` shows."""
    return text[~text["metric"].isin(DIAG_TEXT)] if len(text) else text


# -- summaries ----------------------------------------------------------------------------------

def breakdown_columns(wide: pd.DataFrame, phases: Sequence[str] = BREAKDOWN_PHASES, **where: Any) -> dict[str, float]:
    """A series' step breakdown as summary columns.

    Args:
        wide: one series' records with their labels as columns (``expand_labels``).
        phases: the phases wanted.
        where: label values the rows must have (``comm="mode"``...).
    Returns:
        ``<phase>_p50_ms`` (median over every rank's phase-timed steps, NaN where the phase was
        not measured) and ``jitter_max`` (the largest rank's step-time std / mean).
    """
    measured = wide[wide["value"].notna()] if len(wide) else wide

    def values(metric: str, **extra: Any) -> pd.Series:
        sel = measured[measured["metric"] == metric] if len(measured) else measured
        for col, val in {**where, **extra}.items():
            sel = sel[sel[col] == val] if col in sel.columns else sel.iloc[0:0]
        return sel["value"].astype(float) if len(sel) else pd.Series(dtype=float)

    out = {f"{p}_p50_ms": (values("step_phase_seconds", phase=p).median() * 1e3) for p in phases}
    jitters = values("step_jitter")
    out["jitter_max"] = float(jitters.max()) if len(jitters) else math.nan
    return {k: float(v) if v == v else math.nan for k, v in out.items()}


# -- report tables ------------------------------------------------------------------------------

def _match(frame: pd.DataFrame, src: str, var: str, keys: Sequence[str], key: tuple) -> pd.DataFrame:
    sel = frame[(frame["source"] == src) & (frame["variant"] == var)]
    for col, val in zip(keys, key):
        sel = sel[sel[col] == val] if col in sel.columns else sel.iloc[0:0]
    return sel


def breakdown_table(stats: pd.DataFrame, pairs: Sequence[tuple[str, str]], keys: Sequence[str], *, id: str,
                    caption: str, series: Sequence[tuple] | None = None,
                    formats: Mapping[str, Callable[[Any], str]] | None = None, **where: Any) -> Table | None:
    """Where a step's time goes, per source and series: p50 per phase and the jitter.

    Args:
        stats: the aggregate statistics with labels as columns (per node: a phase's cell is the
            median of the nodes' medians; the jitter the largest rank's).
        pairs: the (source, variant) pairs shown, in order.
        keys: the label columns naming a series (``model``, ``stage``...).
        id: the table's id.
        caption: what the series timed (extra steps or the timed ones, why a phase is absent).
        series: the key tuples in the order shown (None: sorted as found).
        formats: per key column, how a value is shown (``str`` otherwise).
        where: label values the rows must have (``comm="mode"``...).
    Returns:
        The table, or None without phase rows. Only phases measured somewhere get a column.
    """
    if not len(stats):
        return None
    phases = pick(stats, "step_phase_seconds", **where)
    if not len(phases) or not set(keys) <= set(phases.columns):
        return None
    jitter = pick(stats, "step_jitter", **where)
    shown = [p for p in BREAKDOWN_PHASES if (phases["phase"] == p).any()]
    if series is None:
        found = phases[list(keys)].drop_duplicates()
        series = sorted((tuple(r) for r in found.itertuples(index=False)), key=lambda t: tuple(map(str, t)))
    formats = dict(formats or {})
    rows = []
    for src, var in pairs:
        for key in series:
            sel = _match(phases, src, var, keys, key)
            if not len(sel):
                continue
            cells = [Cell(fmt_number(sel[sel["phase"] == p]["p50"].median() * 1e3)) for p in shown]
            jit = _match(jitter, src, var, keys, key) if len(jitter) else jitter
            rows.append([Cell(f"{src} · {var}"), *(Cell(formats.get(c, str)(v)) for c, v in zip(keys, key)),
                         *cells, Cell(fmt_number(jit["max"].max() if len(jit) else math.nan, 3))])
    if not rows:
        return None
    return Table(columns=["source", *keys, *(f"{p} p50 (ms)" for p in shown), "jitter (max over ranks)"],
                 rows=rows, id=id,
                 caption=caption + ". comm_wait is the exposed communication wait after the last gradient is "
                                   "computed, other the time between phases; jitter = sample std / mean of step time")


def divergence_table(stats: pd.DataFrame, text: pd.DataFrame, *, id: str, label: str = "model") -> Table | None:
    """The TF32 settings as each rank saw them (red where nodes differ) and the same-start checks.

    Args:
        stats: statistics of every series (``same_start`` rows).
        text: the text rows (``tf32_state``).
        id: the table's id.
        label: the ``same_start`` rows' label naming what was checked.
    """
    checks = []
    tf32 = text[text["metric"] == "tf32_state"] if len(text) else text
    if len(tf32) and "setting" in tf32.columns:
        for (src, setting), g in tf32.groupby(["source", "setting"], sort=True):
            values = sorted(set(map(str, g["text"])))
            checks.append(([Cell(str(src)), Cell(f"TF32: {setting}"), Cell(" / ".join(values)),
                            Cell(", ".join(sorted(set(map(str, g["node"])))))],
                           "fail" if len(values) > 1 else ""))
    same = pick(stats, "same_start") if len(stats) else stats
    for r in same.to_dict("records"):
        ok = r["min"] == 1.0
        what = r.get(label, "")
        what = "" if what is None or (isinstance(what, float) and math.isnan(what)) else f" ({what})"
        checks.append(([Cell(str(r["source"])), Cell(f"same initial weights on every rank{what}"),
                        Cell("yes" if ok else "no"), Cell(str(r["node"]))], "" if ok else "fail"))
    if not checks:
        return None
    return Table(columns=["source", "check", "value", "nodes"], rows=[c for c, _ in checks],
                 row_classes=[k for _, k in checks], id=id,
                 caption="divergence checks (guide 5.2): TF32 settings as each rank saw them (red where nodes "
                         "differ) and the parameter hash compared across ranks at start")


def trace_table(text: pd.DataFrame, *, id: str, profiled: Sequence[str]) -> Table | None:
    """Links to every rank's ``torch.profiler`` trace (:func:`~hpcbench.present.kit.file_link`, optional:
    copied into the report folder when the report is written with ``--traces``).

    Args:
        text: the text rows (``trace_file``).
        id: the table's id.
        profiled: the label columns saying what was profiled (joined with " / ").
    """
    traces = text[text["metric"] == "trace_file"] if len(text) else text
    if not len(traces):
        return None
    rows = []
    for r in traces.sort_values(["source", "node", "rank"]).to_dict("records"):
        where = str(r["text"])
        # A path relative to the run directory, or an absolute one from records written before paths
        # were stored relative; anything else is why no trace was written. The report writer finds the
        # file under the source's run directory (the first part of the folder) and copies it.
        is_path = r.get("unit") == PATH_UNIT or Path(where).is_absolute()
        link = (file_link(where, folder=(str(r["source"]), str(r.get("task_id", ""))), optional=True)
                if is_path else Cell(where))
        what = " / ".join(str(r[c]) for c in profiled if c in r and r[c] == r[c] and r[c] is not None)
        rows.append([Cell(str(r["source"])), Cell(str(r["node"])), Cell(str(r["rank"])), Cell(what), link])
    return Table(columns=["source", "node", "rank", "profiled", "trace"], rows=rows, id=id,
                 caption="torch.profiler traces (Chrome format: open in https://ui.perfetto.dev or chrome://tracing); "
                         "gaps and top operators are in the statistics as trace_gap_seconds, trace_idle_fraction "
                         "and trace_op_self_seconds")


def diagnostics_tables(stats: pd.DataFrame, text: pd.DataFrame, pairs: Sequence[tuple[str, str]],
                       keys: Sequence[str], *, prefix: str, caption: str, series: Sequence[tuple] | None = None,
                       formats: Mapping[str, Callable[[Any], str]] | None = None, same_start_label: str = "model",
                       breakdown_stats: pd.DataFrame | None = None, **where: Any) -> list[Table]:
    """The three diagnostics tables of a training experiment: ids ``<prefix>-step-breakdown``,
    ``<prefix>-divergence-checks`` and ``<prefix>-traces``.

    Args:
        stats: statistics of every series, labels as columns.
        text: text rows, labels as columns.
        pairs, keys, series, formats, where: see :func:`breakdown_table`.
        prefix: the tables' id prefix (the experiment's slug).
        caption: the breakdown's caption (what the phase-timed steps were).
        same_start_label: see :func:`divergence_table`.
        breakdown_stats: the statistics the breakdown reads, when only part of ``stats`` (default: ``stats``).
    """
    tables = [breakdown_table(stats if breakdown_stats is None else breakdown_stats, pairs, keys,
                              id=f"{prefix}-step-breakdown", caption=caption, series=series, formats=formats, **where),
              divergence_table(stats, text, id=f"{prefix}-divergence-checks", label=same_start_label),
              trace_table(text, id=f"{prefix}-traces", profiled=keys)]
    return [t for t in tables if t is not None]
