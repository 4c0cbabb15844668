"""The figure of ``gradient_compression``, shared by its notebook and its report section (seaborn on matplotlib)."""

from __future__ import annotations

from typing import Any


def draw_relative(summary: Any, axes: tuple[Any, Any]) -> None:
    """Bars on two axes: bytes on the wire per step, and communication time, each relative to ``none``.

    Args:
        summary: rows of :func:`hpcbench.experiments.gradient_compression.summary.summarize` (several launches
            may be stacked; a ``series`` column, when present, tells sources apart).
        axes: (left, right) matplotlib axes.
    """
    import seaborn as sns

    from hpcbench.experiments.gradient_compression.summary import ORDER

    left, right = axes
    ran = summary[summary["note"] == ""] if len(summary) else summary
    if not len(ran):
        for ax in axes:
            ax.text(0.5, 0.5, "no measurements", ha="center", va="center")
        return
    ran = ran.assign(series=ran["series"] if "series" in ran.columns else ran["model"] + " · " + ran["mode"])
    order = [c for c in ORDER if c in set(ran["compression"])]
    sns.barplot(data=ran, x="compression", y="bytes_vs_none", hue="series", order=order, ax=left)
    left.set_yscale("log")
    left.axhline(1.0, color="grey", lw=1)
    left.axhline(1 / 16, color="red", ls=":", lw=1, label="1/16 (2 of 32 bits)")
    left.set_ylabel("bytes sent per step / none's")
    left.set_title("bytes on the wire", fontsize=10)
    sns.barplot(data=ran, x="compression", y="comm_vs_none", hue="series", order=order, ax=right)
    right.axhline(1.0, color="grey", lw=1)
    right.set_ylabel("communication time / none's (p50)")
    right.set_title("communication time = t(series) - t(no-op hook)", fontsize=10)
    for ax in axes:
        ax.tick_params(axis="x", rotation=20)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)


def compression_plot(summary: Any, *, title: str = "Gradient compression relative to float32 all-reduce"):
    """The notebook's figure (see :func:`draw_relative`); returns the matplotlib Figure."""
    # No matplotlib.use(): inside a kernel the inline backend must stay, and headless
    # processes fall back to Agg on their own.
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    draw_relative(summary, tuple(axes))
    fig.suptitle(title)
    fig.tight_layout()
    return fig
