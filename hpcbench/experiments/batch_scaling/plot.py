"""The figure of ``batch_scaling``, shared by its notebook (seaborn on matplotlib)."""

from __future__ import annotations

# No matplotlib.use(): inside a kernel the inline backend must stay, and headless
# processes fall back to Agg on their own.
import matplotlib.pyplot as plt
import seaborn as sns

from hpcbench.core.facts import GUIDE_C2_GAIN


def batch_scaling_plot(summary, *, title: str = "Per-rank throughput against the batch factor"):
    """Left: per-rank throughput gain over the 1x batch per regime; right: memory per rank.

    Args:
        summary: the frame of :func:`hpcbench.experiments.batch_scaling.summary.summarize`.
    Returns:
        The matplotlib Figure.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    if not len(summary):
        for ax in (left, right):
            ax.text(0.5, 0.5, "no measurements", ha="center", va="center")
        return fig
    sns.lineplot(data=summary, x="factor", y="gain_vs_1x", hue="regime", marker="o", ax=left)
    left.axhline(1 + GUIDE_C2_GAIN, color="red", ls=":", lw=1, label=f"guide: +220 % ({1 + GUIDE_C2_GAIN:.1f}x)")
    left.set_xscale("log", base=2)
    left.set_xlabel("batch factor (x base batch)")
    left.set_ylabel("throughput per rank / 1x (p50)")
    left.legend(fontsize=7)
    sns.barplot(data=summary, x="factor", y="memory_MiB", hue="regime", ax=right)
    right.set_xlabel("batch factor")
    right.set_ylabel("memory per rank (MiB)")
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
