"""The figure of ``comm_modes``, shared by its notebook (seaborn on matplotlib)."""

from __future__ import annotations

import seaborn as sns

from hpcbench.present.kit import panels_figure


def draw_comm_modes(left, right, ran) -> None:
    """Left: total throughput relative to plain DDP per mode and model (at each model's largest bucket
    size); right: throughput against bucket size (log2 axis), relative to each series' best.

    Args:
        ran: the summary's rows that were measured (a throughput).
    """
    from hpcbench.experiments.comm_modes.config import IB_MTU_BUCKET_MB
    from hpcbench.experiments.comm_modes.summary import mode_gains

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


def comm_modes_plot(summary, *, title: str = "Communication modes"):
    """The notebook's figure of :func:`~hpcbench.experiments.comm_modes.summary.summarize`'s frame (see
    :func:`draw_comm_modes`); returns the matplotlib Figure."""
    ran = summary[summary["throughput_total_p50"].notna()] if len(summary) else summary
    return panels_figure(lambda axes: draw_comm_modes(*axes, ran), title=title, rows=ran, grid=True)
