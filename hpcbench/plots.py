"""Plots shared by notebooks and reports (seaborn on matplotlib's Agg backend)."""

from __future__ import annotations

# No matplotlib.use(): inside a kernel the inline backend must stay, and headless
# processes fall back to Agg on their own.
import matplotlib.pyplot as plt
import seaborn as sns


def busbw_plot(summary, *, title: str = "Bus bandwidth (p50) vs message size", ax=None):
    """Line plot of busbw p50 against size (log2 axis), one line per op and group.

    Args:
        summary: the frame of :func:`hpcbench.collectives.summarize`.
    Returns:
        The matplotlib Figure.
    """
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 4.5))
    else:
        fig = ax.figure
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


def comm_modes_plot(summary, *, title: str = "Communication modes"):
    """Left: total throughput relative to plain DDP per mode and model (at each model's largest bucket
    size); right: throughput against bucket size (log2 axis), relative to each series' best.

    Args:
        summary: the frame of :func:`hpcbench.comm_modes.summarize`.
    Returns:
        The matplotlib Figure.
    """
    from hpcbench.comm_modes import IB_MTU_BUCKET_MB, mode_gains

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    ran = summary[summary["throughput_total_p50"].notna()] if len(summary) else summary
    if not len(ran):
        for ax in (left, right):
            ax.text(0.5, 0.5, "no measurements", ha="center", va="center")
        return fig
    gains = mode_gains(ran)
    at = gains[gains["bucket_cap_mb"] == gains.groupby("model")["bucket_cap_mb"].transform("max")]
    sns.barplot(data=at, x="mode", y="ratio_vs_ddp", hue="model", ax=left)
    left.axhline(1.0, color="grey", lw=1)
    left.set_ylabel("throughput / plain DDP (p50)")
    left.set_title("modes at the largest bucket size")
    left.tick_params(axis="x", rotation=20)
    rel = ran.assign(relative=ran["throughput_total_p50"]
                     / ran.groupby(["model", "mode"])["throughput_total_p50"].transform("max"))
    if rel["bucket_cap_mb"].nunique() > 1:
        sns.lineplot(data=rel, x="bucket_cap_mb", y="relative", hue="mode", style="model", markers=True, ax=right)
        right.set_xscale("log", base=2)
        right.axvline(IB_MTU_BUCKET_MB, color="red", ls=":", lw=1, label="4 KiB (IB MTU)")
        right.legend(fontsize=7)
    else:
        right.text(0.5, 0.5, "one bucket size: no sweep", ha="center", va="center")
    right.set_xlabel("bucket_cap_mb (MiB)")
    right.set_ylabel("throughput / best of the series")
    right.set_title("gradient bucket size sweep")
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def io_formats_plot(summary, *, title: str = "Cold-cache read throughput per format", axes=None):
    """Bars of samples/s (left) and accelerator idle share (right) per format and DataLoader setting.

    Args:
        summary: the frame of :func:`hpcbench.io_formats.summarize`.
    Returns:
        The matplotlib Figure.
    """
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    fig = axes[0].figure
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


def batch_scaling_plot(summary, *, title: str = "Per-rank throughput against the batch factor"):
    """Left: per-rank throughput gain over the 1x batch per regime; right: memory per rank.

    Args:
        summary: the frame of :func:`hpcbench.batch_scaling.summarize`.
    Returns:
        The matplotlib Figure.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    if not len(summary):
        for ax in (left, right):
            ax.text(0.5, 0.5, "no measurements", ha="center", va="center")
        return fig
    sns.lineplot(data=summary, x="factor", y="gain_vs_1x", hue="regime", marker="o", ax=left)
    left.axhline(3.2, color="red", ls=":", lw=1, label="guide: +220 % (3.2x)")
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
