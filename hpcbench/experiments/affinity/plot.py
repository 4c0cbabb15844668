"""The figure of ``affinity``, shared by its notebook and its report section (matplotlib)."""

from __future__ import annotations

import math
from typing import Any, Mapping

#: Bar colours: the mistake's setting and the right way's.
MISTAKE_COLOUR, RIGHT_COLOUR = "#dd8452", "#4c72b0"


def draw_step_times(ax: Any, costs: Any) -> None:
    """Paired bars per mistake: step time p50 with the mistake and the right way (ms, log scale).

    Args:
        costs: :func:`hpcbench.experiments.affinity.summary.costs` (one launch) or its medians over launches.
    """
    timed = costs[costs["slowdown"].notna()] if len(costs) else costs
    if not len(timed):
        ax.text(0.5, 0.5, "no pair timed", ha="center", va="center")
        return
    xs = list(range(len(timed)))
    ax.bar([x - 0.2 for x in xs], timed["mistake_p50_ms"], width=0.4, color=MISTAKE_COLOUR, label="mistake")
    ax.bar([x + 0.2 for x in xs], timed["right_p50_ms"], width=0.4, color=RIGHT_COLOUR, label="right way")
    ax.set_xticks(xs, list(timed["mistake"]), fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("step time p50 (ms, log)")
    ax.set_title("each mistake against the right way, timed interleaved", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)


def draw_slowdowns(ax: Any, rows: Any, reference: float) -> None:
    """Slowdown (mistake / right way) per mistake, with its 95 % interval where there is one, against the bound.

    Args:
        rows: columns ``mistake``, ``estimate``, ``low``, ``high`` (low/high NaN or infinite: no interval).
        reference: the least slowdown that counts as a cost (drawn as a dashed line).
    """
    shown = rows[rows["estimate"].notna()] if len(rows) else rows
    if not len(shown):
        ax.text(0.5, 0.5, "no pair timed", ha="center", va="center")
        return
    ys = list(range(len(shown)))
    for y, r in zip(ys, shown.itertuples(index=False)):
        if math.isfinite(r.low) and math.isfinite(r.high):
            ax.plot([r.low, r.high], [y, y], color="black", lw=2)
        ax.plot([r.estimate], [y], "o", color=MISTAKE_COLOUR if r.estimate >= reference else RIGHT_COLOUR)
    ax.axvline(1.0, color="grey", lw=1)
    ax.axvline(reference, color="grey", lw=1, ls="--", label=f"cost bound {reference:g}x")
    ax.set_yticks(ys, list(shown["mistake"]), fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("step time, mistake / right way (log2)")
    ax.set_title("what each mistake costs (95 % interval over launches)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, axis="x", alpha=0.3)


def slowdown_rows(costs: Any, judgements: Mapping[str, Any] | None = None) -> Any:
    """The rows :func:`draw_slowdowns` reads: the judged interval where a verdict has one, else the launch's ratio."""
    import pandas as pd

    rows = []
    for r in costs.itertuples(index=False):
        low = high = math.nan
        estimate = r.slowdown
        judged = (judgements or {}).get(r.mistake)
        if judged is not None and judged.outcomes:
            interval = judged.outcomes[0].interval
            estimate, low, high = interval.estimate, interval.low, interval.high
        rows.append({"mistake": r.mistake, "estimate": estimate, "low": low, "high": high})
    return pd.DataFrame(rows, columns=["mistake", "estimate", "low", "high"])


def affinity_plot(summary: Any, judgements: Mapping[str, Any] | None = None, *,
                  title: str = "Affinity: what each common mistake costs on this node"):
    """Left: step time p50 per mistake, mistake vs right way; right: the slowdown with its interval.

    Args:
        summary: :func:`hpcbench.experiments.affinity.summary.summarize` of one launch.
        judgements: :func:`hpcbench.experiments.affinity.rules.judge_costs` (intervals), optional.
    Returns:
        The matplotlib Figure.
    """
    # pyplot here, not at import: the report draws on a bare Figure in worker threads.
    import matplotlib.pyplot as plt

    from hpcbench.experiments.affinity.rules import MIN_COST
    from hpcbench.experiments.affinity.summary import costs

    table = costs(summary)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.0))
    draw_step_times(left, table)
    draw_slowdowns(right, slowdown_rows(table, judgements), MIN_COST)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
