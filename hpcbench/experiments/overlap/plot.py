"""The figure of ``overlap``, shared by its notebook and its report section (matplotlib, seaborn)."""

from __future__ import annotations

from typing import Any

from hpcbench.present.kit import mark_empty, panels_figure

#: Bar colours: the compute part of a sample's time, and the communication the step did not hide.
COMPUTE_COLOUR, EXPOSED_COLOUR = "#4c72b0", "#dd8452"


def draw_time_per_sample(ax: Any, split: Any) -> None:
    """Stacked bars, one per series: compute per sample (the no-op step) + exposed communication.

    Args:
        split: :func:`hpcbench.experiments.overlap.summary.per_sample_split` (a ``label`` column, when
            present, names the bars instead of model and series).
    """
    if not len(split):
        ax.text(0.5, 0.5, "no measurements", ha="center", va="center")
        return
    names = list(split["label"]) if "label" in split.columns else [f"{m}\n{s}" for m, s in
                                                                      zip(split["model"], split["series"])]
    xs = range(len(names))
    ax.bar(xs, split["compute_ms"], color=COMPUTE_COLOUR, label="compute (no-op hook step)")
    # exposed can be slightly negative (noise): drawn as measured, below the compute bar's top
    ax.bar(xs, split["exposed_ms"], bottom=split["compute_ms"], color=EXPOSED_COLOUR,
           label="exposed communication")
    ax.set_xticks(list(xs), names, fontsize=8)
    ax.set_ylabel("time per sample, p50 (ms)")
    ax.set_title("time per sample: compute + exposed communication", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)


def draw_relative(ax: Any, summary: Any) -> None:
    """Bars per series against k=1 of the same model: synchronisations per sample (fewer) and samples/s."""
    import pandas as pd
    import seaborn as sns

    from hpcbench.experiments.overlap.summary import series_name, with_k1_baseline

    rows = []
    for model, b, g in with_k1_baseline(summary):
        for r in g.itertuples(index=False):
            name = f"{model}\n{series_name(r.micro_steps, r.no_sync)}"
            rows.append({"series": name, "quantity": "k=1's syncs per sample / this one's",
                         "ratio": b.syncs_per_sample / r.syncs_per_sample})
            rows.append({"series": name, "quantity": "samples/s / k=1's",
                         "ratio": r.throughput_total_p50 / b.throughput_total_p50})
    if not rows:
        ax.text(0.5, 0.5, "no k=1 baseline", ha="center", va="center")
        return
    sns.barplot(data=pd.DataFrame(rows), x="series", y="ratio", hue="quantity", ax=ax)
    ax.axhline(1.0, color="grey", lw=1)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("")
    ax.set_ylabel("ratio to k=1 (log2)")
    ax.set_title("fewer synchronisations, and what they buy", fontsize=10)
    ax.tick_params(axis="x", labelsize=8)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)


def overlap_plot(summary: Any, *, title: str = "Overlap through no_sync() accumulation"):
    """The notebook's figure of :func:`~hpcbench.experiments.overlap.summary.summarize`'s frame; returns the
    matplotlib Figure. Left: time per sample by series, compute vs exposed communication; right: ratios to k=1."""
    from hpcbench.experiments.overlap.summary import per_sample_split

    ran = summary[summary["throughput_total_p50"].notna()] if len(summary) else summary

    def draw(axes: list) -> None:
        left, right = axes
        draw_time_per_sample(left, per_sample_split(ran))
        if len(ran):
            draw_relative(right, ran)
        else:
            mark_empty([right])

    return panels_figure(draw, title=title)
