"""The figure of ``monitoring``, shared by its notebook and report: per fault, utilisation next to the C6 alerts."""

from __future__ import annotations

from hpcbench.experiments.monitoring.summary import UTIL_HEALTHY_MIN
from hpcbench.present.kit import panels_figure


def draw_monitoring(left, right, summary) -> None:
    """Left: step time relative to the baseline per fault; right: plain utilisation, the band, the alerts."""
    faults = list(summary["fault"])
    left.bar(faults, list(summary["slowdown"]), color="#4c72b0")
    left.axhline(1.0, color="grey", lw=1)
    left.set_ylabel("step p50 / baseline")
    colors = ["#c44e52" if r.alerts else "#55a868" for r in summary.itertuples(index=False)]
    right.bar(faults, list(summary["utilisation"]), color=colors)
    right.axhline(UTIL_HEALTHY_MIN, color="red", ls=":", lw=1)
    metric = next((m for m in summary["util_metric"] if m), "utilisation")
    right.set_ylabel(f"{metric} (median)")
    right.set_ylim(0, 1.05)
    for i, r in enumerate(summary.itertuples(index=False)):
        right.text(i, 0.02, "\n".join(a.replace("_", " ") for a in r.alerts) or "no alert", ha="center",
                   va="bottom", fontsize=6, rotation=90)
    for ax in (left, right):
        ax.tick_params(axis="x", rotation=30, labelsize=7)
        ax.grid(True, axis="y", alpha=0.3)


def monitoring_plot(summary, *, title: str = "What utilisation shows against what the C6 alerts catch"):
    """The notebook's figure of :func:`~hpcbench.experiments.monitoring.summary.summarize`'s frame (red bars: a
    C6 alert fired; dotted: the healthy-utilisation band's edge); returns the matplotlib Figure."""
    return panels_figure(lambda axes: draw_monitoring(*axes, summary), title=title, rows=summary)
