"""The figure of ``weather_case``, shared by its notebook and its report section: stage bars, the guide's
speed-ups beside ours, each as original's time over the stage's."""

from __future__ import annotations

import math
from typing import Any

GUIDE_SERIES = "the guide (A100s, InfiniBand)"


def speedup_frame(summary: Any, series: str = "ours") -> Any:
    """Long frame ``stage, series, speedup`` from one or more summaries (a ``series`` column, if any, is kept).

    Ours: original's time per micro-step p50 / the stage's (per launch, as the summary computed it);
    the guide's: 420 ms / the stage's ms, for the three stages the guide has.
    """
    import pandas as pd

    rows = []
    guide = {}
    for r in summary.itertuples(index=False):
        rows.append({"stage": r.stage, "series": getattr(r, "series", series), "speedup": r.speedup_vs_original,
                     "counted": getattr(r, "ok", True) is not False})
        if r.guide_speedup is not None and not (isinstance(r.guide_speedup, float) and math.isnan(r.guide_speedup)):
            guide[r.stage] = float(r.guide_speedup)
    rows += [{"stage": stage, "series": GUIDE_SERIES, "speedup": value, "counted": True}
             for stage, value in guide.items()]
    return pd.DataFrame(rows, columns=["stage", "series", "speedup", "counted"])


def draw_speedups(ax: Any, frame: Any, order: list[str]) -> None:
    """Grouped bars per stage: the guide's speed-up and each series of ours; 1 = original.

    A stage none of whose series counted (loss or rank check failed) is named so under its bars.
    """
    import seaborn as sns

    if not len(frame) or frame["speedup"].notna().sum() == 0:
        ax.text(0.5, 0.5, "no measurements", ha="center", va="center")
        return
    hue_order = [GUIDE_SERIES] + sorted(s for s in frame["series"].unique() if s != GUIDE_SERIES)
    stages = [s for s in order if s in set(frame["stage"])]
    sns.barplot(data=frame, x="stage", y="speedup", hue="series", order=stages,
                hue_order=[h for h in hue_order if h in set(frame["series"])], ax=ax, errorbar=None)
    ours = frame[frame["series"] != GUIDE_SERIES]
    dropped = {s for s, g in ours.groupby("stage") if not g["counted"].any()}
    ax.set_xticks(range(len(stages)), [f"{s}\n(not counted)" if s in dropped else s for s in stages])
    ax.axhline(1.0, color="grey", lw=1)
    ax.set_ylabel("speed-up: original / stage\n(time per micro-step)")
    ax.set_xlabel("")
    ax.tick_params(axis="x", rotation=20)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7)


def weather_case_plot(summary: Any, *, title: str = "The tuning case: speed-up of each stage over original"):
    """The notebook's figure from one launch's summary (:func:`~hpcbench.experiments.weather_case.summary.summarize`).

    Returns:
        The matplotlib Figure.
    """
    # pyplot here only: inside a kernel the inline backend shows the figure; the report draws
    # the same bars on a bare Figure (present.py).
    import matplotlib.pyplot as plt

    from hpcbench.experiments.weather_case.stages import STAGE_ORDER

    fig, ax = plt.subplots(figsize=(8, 4))
    draw_speedups(ax, speedup_frame(summary, "ours (this launch)"), STAGE_ORDER)
    ax.set_title(title)
    fig.tight_layout()
    return fig
