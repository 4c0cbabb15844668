"""The figure of ``io_formats``, shared by its notebook (seaborn on matplotlib)."""

from __future__ import annotations

import seaborn as sns

from hpcbench.present.kit import figure_for


def io_formats_plot(summary, *, title: str = "Cold-cache read throughput per format", axes=None):
    """Bars of samples/s (left) and accelerator idle share (right) per format and DataLoader setting.

    Args:
        summary: the frame of :func:`hpcbench.experiments.io_formats.summary.summarize`.
    Returns:
        The matplotlib Figure.
    """
    fig, axes = figure_for(axes, 1, 2, figsize=(11, 4))
    sweep = summary[summary["phase"] == "sweep"] if len(summary) else summary
    if not len(sweep):
        axes[0].text(0.5, 0.5, "no measurements", ha="center", va="center")
        return fig
    sweep = sweep.assign(setting=[f"workers={int(w)}, prefetch={int(p)}"
                                  for w, p in zip(sweep["workers"], sweep["prefetch_factor"])])
    sns.barplot(data=sweep, x="format", y="samples_per_s", hue="setting", ax=axes[0])
    axes[0].set_ylabel("samples/s (cold page cache)")
    axes[0].set_title(title, fontsize=10)
    sns.barplot(data=sweep, x="format", y="accel_idle", hue="setting", ax=axes[1], legend=False)
    axes[1].set_ylabel("accelerator idle share")
    axes[1].set_ylim(0, 1)
    axes[1].set_title("idle share with the emulated step (1 - compute / wall)", fontsize=10)
    for ax in axes:
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig
