"""The figure of ``scaling``, shared by its notebook and its report section (matplotlib)."""

from __future__ import annotations

from typing import Any

from hpcbench.present.kit import mark_empty, panels_figure

#: Bar colours by the stage's gate: passed, failed, not measurable / not run.
GATE_COLOURS = {True: "#55a868", False: "#c44e52", None: "#8c8c8c"}


def draw_efficiency(ax: Any, summary: Any, *, reference: float | None = None) -> None:
    """Per-node efficiency per stage (bars coloured by that stage's gate), with the rule's bound.

    Args:
        summary: :func:`hpcbench.experiments.scaling.summary.summarize` (a ``label`` column, when
            present, names the bars instead of the node counts).
        reference: a horizontal line at this efficiency (the C13 rule's bound).
    """
    ran = summary[summary["ran"]] if len(summary) else summary
    if not len(ran):
        ax.text(0.5, 0.5, "no stage ran", ha="center", va="center")
        return
    names = list(ran["label"]) if "label" in ran.columns else [f"{n} node(s)" for n in ran["nodes"]]
    colours = [GATE_COLOURS.get(g if g in (True, False) else None) for g in ran["gate"]]
    xs = range(len(names))
    ax.bar(xs, ran["efficiency"], color=colours)
    for x, (eff, gate) in enumerate(zip(ran["efficiency"], ran["gate"])):
        ax.text(x, eff, {True: "gate passes", False: "gate fails"}.get(gate, "gate n/a"), ha="center",
                va="bottom", fontsize=8)
    ax.axhline(1.0, color="grey", lw=1)
    if reference is not None:
        ax.axhline(reference, color="black", lw=1, ls="--", label=f"bound {reference:g}")
        ax.legend(fontsize=8)
    ax.set_xticks(list(xs), names, fontsize=8)
    ax.set_ylabel("per-node throughput / 1 node's")
    ax.set_title("weak-scaling efficiency per stage", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)


def draw_step_times(ax: Any, summary: Any) -> None:
    """Step time p50 per stage that ran: with communication, and the same step under the no-op hook."""
    ran = summary[summary["ran"]] if len(summary) else summary
    if len(ran):
        ax.plot(ran["nodes"], ran["step_p50_ms"], marker="o", label="step (with communication)")
        ax.plot(ran["nodes"], ran["noop_p50_ms"], marker="s", label="same step, no-op hook")
        ax.set_xticks(list(ran["nodes"]))
        ax.set_xlabel("nodes")
        ax.set_ylabel("step time p50 (ms)")
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
    else:
        mark_empty([ax], "no stage ran")
    ax.set_title("step time per stage", fontsize=10)


def scaling_plot(summary: Any, *, title: str = "Progressive scaling behind the gate"):
    """The notebook's figure of :func:`~hpcbench.experiments.scaling.summary.summarize`'s frame; returns the
    matplotlib Figure. Left: per-node efficiency per stage (:func:`draw_efficiency`); right: :func:`draw_step_times`."""
    from hpcbench.experiments.scaling.claims import C13_MIN_EFFICIENCY

    def draw(axes: list) -> None:
        draw_efficiency(axes[0], summary, reference=C13_MIN_EFFICIENCY)
        draw_step_times(axes[1], summary)

    return panels_figure(draw, title=title, figsize=(11, 4.0))
