"""The figure of ``collectives``, shared by its notebook (seaborn on matplotlib)."""

from __future__ import annotations

import seaborn as sns

from hpcbench.present.kit import figure_for


def busbw_plot(summary, *, title: str = "Bus bandwidth (p50) vs message size", ax=None):
    """Line plot of busbw p50 against size (log2 axis), one line per op and group.

    Args:
        summary: the frame of :func:`hpcbench.experiments.collectives.summary.summarize`.
    Returns:
        The matplotlib Figure.
    """
    fig, ax = figure_for(ax, figsize=(8, 4.5))
    if summary.empty:
        ax.text(0.5, 0.5, "no measurements", ha="center", va="center")
        return fig
    sns.lineplot(data=summary, x="size_bytes", y="busbw_p50_GBps", hue="op", style="group",
                 markers=True, dashes=True, ax=ax)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw p50 (GB/s, 1e9 B/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig
