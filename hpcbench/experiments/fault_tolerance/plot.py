"""The figure of ``fault_tolerance``, shared by its notebook and its report section (matplotlib)."""

from __future__ import annotations

import math

from hpcbench.experiments.fault_tolerance.claims import GUIDE_C15_TRIES
from hpcbench.judge.verdict import clopper_pearson

#: Tries drawn on the survival panel: the guide's 3 between its neighbours.
TRIES_SHOWN = (1, 2, 3, 4)


def draw_survival(ax, points) -> None:
    """Failure share of jobs against the wrapper's tries: the model p^t and the measured points.

    Args:
        points: (label, p, tries, failed jobs, jobs) per series; p is the measured per-try failure share.
    """
    for label, p, tries, failed, jobs in points:
        ts = list(TRIES_SHOWN)
        ax.plot(ts, [p ** t for t in ts], color="grey", ls=":", lw=1, marker=".")
        low, high = clopper_pearson(int(failed), int(jobs))
        share = failed / jobs if jobs else math.nan
        ax.errorbar([tries], [share], yerr=[[share - low], [high - share]], fmt="o", capsize=3,
                    label=f"{label}: {int(failed)}/{int(jobs)} jobs failed (p_try = {p:.3g})")
    ax.set_yscale("log")
    ax.set_xticks(list(TRIES_SHOWN))
    ax.set_xlabel(f"tries per job (dotted: p^tries; the guide: {GUIDE_C15_TRIES})")
    ax.set_ylabel("share of jobs failed")
    ax.legend(fontsize=6)


def fault_tolerance_plot(summary, *, title: str = "Checkpoints and retries"):
    """Four panels: bytes written per tier, zstd ratio by level, stall sync vs async, survival.

    Args:
        summary: the frame of :func:`hpcbench.experiments.fault_tolerance.summary.summarize`.
    Returns:
        The matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    (sizes, levels), (stalls, survival) = axes
    if not len(summary):
        for ax in axes.flat:
            ax.text(0.5, 0.5, "no measurements", ha="center", va="center")
        return fig
    save = summary[summary["phase"] == "save"]
    names = [f"{r.model}\n{r.dtype}\n{r.tier}" for r in save.itertuples()]
    sizes.bar(range(len(save)), save["bytes_raw"] / 1e6, color="lightgrey", label="raw")
    sizes.bar(range(len(save)), save["bytes_written"] / 1e6, color="tab:blue", label="written (zstd)")
    sizes.set_xticks(range(len(save)), names, fontsize=6)
    sizes.set_ylabel("MB per checkpoint")
    sizes.legend(fontsize=7)
    sizes.set_title("checkpoint size per tier", fontsize=9)

    comp = summary[summary["phase"] == "compression"]
    for (model, dtype), g in comp.groupby(["model", "dtype"], sort=True):
        g = g.sort_values("level")
        levels.plot(g["level"], g["ratio"], marker="o", label=f"{model} {dtype}")
    levels.axhline(1.0, color="grey", lw=1)
    levels.set_xlabel("zstd level (0: stored raw)")
    levels.set_ylabel("raw / compressed bytes")
    levels.legend(fontsize=6)
    levels.set_title("weights compressed by zstd", fontsize=9)

    stall = summary[summary["phase"] == "stall"]
    keys = sorted({(r.model, r.dtype) for r in stall.itertuples()})
    for i, mode in enumerate(("sync", "async")):
        vals = [stall[(stall["model"] == m) & (stall["dtype"] == d) & (stall["mode"] == mode)]["stall_p50_s"]
                for m, d in keys]
        stalls.bar([k + 0.4 * i for k in range(len(keys))], [v.iloc[0] * 1e3 if len(v) else math.nan for v in vals],
                   width=0.4, label=mode)
    stalls.set_xticks([k + 0.2 for k in range(len(keys))], [f"{m}\n{d}" for m, d in keys], fontsize=7)
    stalls.set_yscale("log")
    stalls.set_ylabel("training stall per light save, p50 (ms)")
    stalls.legend(fontsize=7)
    stalls.set_title("synchronous vs asynchronous save", fontsize=9)

    surv = summary[summary["phase"] == "survival"]
    draw_survival(survival, [(r.mode, r.p_try, r.tries, r.failed, r.jobs) for r in surv.itertuples()])
    survival.set_title("job wrapper against one try: measured vs p_try^tries", fontsize=9)
    for ax in axes.flat:
        ax.grid(True, alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
