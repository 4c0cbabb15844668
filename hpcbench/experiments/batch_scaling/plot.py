"""The figure of ``batch_scaling``, shared by its notebook (seaborn on matplotlib)."""

from __future__ import annotations

import seaborn as sns

from hpcbench.experiments.batch_scaling.claims import GUIDE_C2_GAIN
from hpcbench.present.kit import panels_figure


def draw_batch_scaling(left, right, summary) -> None:
    """Left: per-rank throughput gain over the 1x batch per regime; right: memory per rank."""
    sns.lineplot(data=summary, x="factor", y="gain_vs_1x", hue="regime", marker="o", ax=left)
    left.axhline(1 + GUIDE_C2_GAIN, color="red", ls=":", lw=1, label=f"guide: +220 % ({1 + GUIDE_C2_GAIN:.1f}x)")
    left.set_xscale("log", base=2)
    left.set_xlabel("batch factor (x base batch)")
    left.set_ylabel("throughput per rank / 1x (p50)")
    left.legend(fontsize=7)
    sns.barplot(data=summary, x="factor", y="memory_MiB", hue="regime", ax=right)
    right.set_xlabel("batch factor")
    right.set_ylabel("memory per rank (MiB)")


def batch_scaling_plot(summary, *, title: str = "Per-rank throughput against the batch factor"):
    """The notebook's figure of :func:`~hpcbench.experiments.batch_scaling.summary.summarize`'s frame (see
    :func:`draw_batch_scaling`); returns the matplotlib Figure."""
    return panels_figure(lambda axes: draw_batch_scaling(*axes, summary), title=title, rows=summary, grid=True)
