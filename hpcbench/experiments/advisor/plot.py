"""The figure of ``advisor``, shared by its notebook and its report section (matplotlib)."""

from __future__ import annotations

from typing import Any

#: One colour per technique (the baseline is the line at 1).
COLOURS = {"quant2bit": "#4c72b0", "hierarchical": "#dd8452", "no_sync": "#55a868"}


def draw_gains(ax: Any, summary: Any) -> None:
    """Per regime, one bar per technique: measured gain per sample over the baseline; the advisor's pick
    edged in black and starred, the scale model's predicted gain as a diamond.

    Args:
        summary: :func:`hpcbench.experiments.advisor.summary.summarize`'s frame (or medians over launches
            with the same columns).
    """
    from hpcbench.experiments.advisor.config import BASELINE, TECHNIQUES

    rows = summary[summary["technique"] != BASELINE] if len(summary) else summary
    if not len(rows):
        ax.text(0.5, 0.5, "no measurements", ha="center", va="center")
        return
    regimes = list(dict.fromkeys(rows["regime"]))
    width = 0.8 / len(TECHNIQUES)
    for j, technique in enumerate(TECHNIQUES):
        xs, gains, predicted, picked = [], [], [], []
        for i, regime in enumerate(regimes):
            sel = rows[(rows["regime"] == regime) & (rows["technique"] == technique)]
            if not len(sel):
                continue
            r = sel.iloc[0]
            xs.append(i + (j - (len(TECHNIQUES) - 1) / 2) * width)
            gains.append(r["gain_p50"])
            predicted.append(r["predicted_gain"])
            picked.append(r["pick"] == technique)
        bars = ax.bar(xs, gains, width=width * 0.95, color=COLOURS.get(technique, "grey"), label=technique,
                      edgecolor=["black" if p else "none" for p in picked], linewidth=1.5)
        ax.scatter(xs, predicted, marker="D", color="black", s=18, zorder=3,
                   label="predicted (scale model)" if j == 0 else None)
        for bar, p in zip(bars, picked):
            if p:
                ax.annotate("advisor's pick", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize=7)
    ax.axhline(1.0, color="grey", lw=1)
    ax.set_xticks(range(len(regimes)), regimes)
    ax.set_yscale("log", base=2)
    ax.set_ylabel("gain per sample over the baseline (log2)")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)


def advisor_plot(summary: Any, *, title: str = "C14: the advisor's pick against each technique's measured gain"):
    """The gains figure of one launch's summary. Returns the matplotlib Figure."""
    # pyplot here, not at import: the report draws on a bare Figure in worker threads.
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2))
    draw_gains(ax, summary)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
