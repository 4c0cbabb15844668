"""The figure of ``practice``, shared by its notebook and report: per fault, the gate's values against its limits."""

from __future__ import annotations

import math

from hpcbench.experiments.practice.config import NO_FAULT
from hpcbench.experiments.practice.summary import CHECK_COLUMNS
from hpcbench.present.kit import panels_figure

#: Bar colours: the check failed (the gate stops the run), passed, or the fault was not applied.
FAILED, PASSED, ABSENT = "#c44e52", "#55a868", "#cccccc"


def outcome_text(row) -> str:
    """Under each fault's name: caught / missed / not injected / the baseline's pass or false alarm."""
    if row.fault == NO_FAULT:
        return {True: "passes", False: "false alarm", None: "not measured"}[row.gate_passed]
    if not row.injected:
        return "not injected"
    return {True: "caught", False: "MISSED", None: "not measured"}[row.caught]


def draw_practice(axes, summary) -> None:
    """Four panels: step time over the baseline, then each gate check's value per fault with its limit dashed."""
    from hpcbench.practice.gates import GATE_THRESHOLDS

    faults = list(summary["fault"])
    ticks = [f"{f}\n{outcome_text(r)}" for f, r in zip(faults, summary.itertuples(index=False))]
    applied = [r.fault == NO_FAULT or bool(r.injected) for r in summary.itertuples(index=False)]
    axes[0].bar(ticks, [v if a else 0 for v, a in zip(summary["slowdown"], applied)], color="#4c72b0")
    axes[0].axhline(1.0, color="grey", lw=1)
    axes[0].set_ylabel("step p50 / baseline")
    for ax, t in zip(axes[1:], GATE_THRESHOLDS):
        column = CHECK_COLUMNS[t.name]
        scale = 1e3 if t.unit == "s" else 1.0
        values = [v * scale if a and math.isfinite(v) else 0.0 for v, a in zip(summary[column], applied)]
        colors = [ABSENT if not a or not math.isfinite(v) else FAILED if v >= t.limit * scale else PASSED
                  for v, a in zip(values, applied)]
        ax.bar(ticks, values, color=colors)
        ax.axhline(t.limit * scale, color="red", ls="--", lw=1)
        ax.set_ylabel(f"{t.name} ({'ms' if t.unit == 's' else 'fraction'})")
        ax.set_title(t.description, fontsize=8)
        if t.unit == "s" and any(v > 0 for v in values):
            ax.set_yscale("log")
    for ax in axes:
        ax.tick_params(axis="x", rotation=60, labelsize=6)
        ax.grid(True, axis="y", alpha=0.3)


def practice_plot(summary, *, title: str = "The C12 gate on each injected fault (red: a check fails, the gate stops "
                                           "the run)"):
    """The notebook's figure of :func:`~hpcbench.experiments.practice.summary.summarize`'s frame (see
    :func:`draw_practice`); returns the matplotlib Figure."""
    return panels_figure(lambda axes: draw_practice(axes, summary), title=title, panels=4, figsize=(15, 4.2),
                         rows=summary)
