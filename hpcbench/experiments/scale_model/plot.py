"""The figure of ``scale_model``, shared by its notebook and its report: predicted vs measured step, residuals."""

from __future__ import annotations

import math
from typing import Any

from hpcbench.experiments.scale_model.rules import pct
from hpcbench.experiments.scale_model.summary import TOLERANCE
from hpcbench.present.kit import panels_figure

#: One colour per mode, in the order the modes first appear.
PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3")


def _rate_axis(steps: Any) -> tuple[list[str], dict[str, int]]:
    """Link rates from fastest to slowest (unshaped last), and their x positions."""
    first = steps.drop_duplicates("link_rate")
    bps = {r: float(b) for r, b in zip(first["link_rate"], first["rate_bps"])}
    order = sorted(bps, key=lambda r: -bps[r] if math.isfinite(bps[r]) else math.inf)
    return order, {r: i for i, r in enumerate(order)}


def draw_predicted_vs_measured(ax: Any, steps: Any) -> None:
    """Per mode across link rates: measured median with its 95 % CI (points), predicted (line), the tolerance's band.

    Args:
        steps: the ``step`` rows of :func:`hpcbench.experiments.scale_model.summary.summarize` (or their
            medians over launches: columns link_rate, rate_bps, mode, measured_p50_ms, measured_ci_*_ms,
            predicted_ms).
    """
    if not len(steps):
        ax.text(0.5, 0.5, "no measurements", ha="center", va="center")
        return
    rates, x_of = _rate_axis(steps)
    for i, (mode, g) in enumerate(steps.groupby("mode", sort=False)):
        g = g.assign(_x=g["link_rate"].map(x_of)).sort_values("_x")
        colour = PALETTE[i % len(PALETTE)]
        xs, meas = list(g["_x"]), list(g["measured_p50_ms"])
        err = [[max(0.0, m - lo) if math.isfinite(lo) else 0.0 for m, lo in zip(meas, g["measured_ci_low_ms"])],
               [max(0.0, hi - m) if math.isfinite(hi) else 0.0 for m, hi in zip(meas, g["measured_ci_high_ms"])]]
        ax.errorbar(xs, meas, yerr=err, fmt="o", color=colour, capsize=3, label=f"{mode} measured")
        ax.fill_between(xs, [m * (1 - TOLERANCE) for m in meas], [m * (1 + TOLERANCE) for m in meas], color=colour,
                        alpha=0.12)
        ax.plot(xs, list(g["predicted_ms"]), "-", color=colour, marker="x", label=f"{mode} predicted")
    ax.set_xticks(range(len(rates)), rates)
    ax.set_xlabel("node link rate")
    ax.set_ylabel("step time (ms)")
    ax.set_title(f"predicted vs measured median step (band: +-{pct(TOLERANCE)} of measured)", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)


def draw_residuals(ax: Any, steps: Any) -> None:
    """Bars of (predicted - measured) / measured per link rate and mode, with the +-TOLERANCE target."""
    if not len(steps):
        ax.text(0.5, 0.5, "no measurements", ha="center", va="center")
        return
    rates, x_of = _rate_axis(steps)
    modes = list(dict.fromkeys(steps["mode"]))
    width = 0.8 / max(1, len(modes))
    for i, mode in enumerate(modes):
        g = steps[steps["mode"] == mode]
        xs = [x_of[r] - 0.4 + width * (i + 0.5) for r in g["link_rate"]]
        ax.bar(xs, [100 * v for v in g["residual"]], width=width, color=PALETTE[i % len(PALETTE)], label=mode)
    for bound in (TOLERANCE, -TOLERANCE):
        ax.axhline(100 * bound, color="red", ls=":", lw=1)
    ax.axhline(0, color="grey", lw=1)
    ax.set_xticks(range(len(rates)), rates)
    ax.set_xlabel("node link rate")
    ax.set_ylabel("residual (%)")
    ax.set_title("(predicted - measured) / measured", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)


def scale_model_plot(summary: Any, *, title: str = "The scale model on the emulated cluster"):
    """The notebook's figure of :func:`~hpcbench.experiments.scale_model.summary.summarize`'s frame; returns the
    matplotlib Figure. Left: predicted vs measured per mode across link rates; right: the residuals."""
    steps = summary[summary["row"] == "step"] if len(summary) else summary

    def draw(axes: list) -> None:
        draw_predicted_vs_measured(axes[0], steps)
        draw_residuals(axes[1], steps)

    return panels_figure(draw, title=title)
