"""One ``batch_scaling`` launch's records -> its summary, and the step-cost model that bounds the gain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpcbench.experiments.batch_scaling.claims import GUIDE_C2_GAIN
from hpcbench.core.results import expand_labels

SUMMARY_KEYS = ["regime", "factor"]


def summarize(records: Any) -> Any:
    """One row per (regime, factor): throughput per rank p50, its gain over 1x, step p50/p99, memory."""
    import pandas as pd

    rows = records[(records["experiment"] == "batch_scaling") & records["value"].notna()]
    rows = rows[rows["metric"].isin(["throughput_per_rank", "step_time", "memory_per_rank"])]
    if rows.empty:
        return pd.DataFrame(columns=SUMMARY_KEYS + ["throughput_p50", "gain_vs_1x"])
    wide = expand_labels(rows)
    out = []
    for (regime, factor), g in wide.groupby(SUMMARY_KEYS, sort=True):
        tput = g[g["metric"] == "throughput_per_rank"]
        step = g[g["metric"] == "step_time"]["value"]
        mem = g[g["metric"] == "memory_per_rank"]["value"]
        out.append({"regime": regime, "factor": int(factor), "micro_batch": int(g["micro_batch"].iloc[0]),
                    "accumulation": int(g["accumulation"].iloc[0]),
                    "batch_per_step": int(g["batch_per_step"].iloc[0]),
                    "unit": tput["unit"].iloc[0] if len(tput) else "",
                    "throughput_p50": tput["value"].median(), "step_p50_ms": step.median() * 1e3,
                    "step_p99_ms": step.quantile(0.99) * 1e3,
                    "memory_MiB": mem.max() if len(mem) else float("nan"), "steps": len(step),
                    "samples": tuple(float(v) for v in tput["value"])})
    frame = pd.DataFrame(out)
    smallest = frame.loc[frame.groupby("regime")["factor"].idxmin()].set_index("regime")["throughput_p50"]
    frame["gain_vs_1x"] = frame["throughput_p50"] / frame["regime"].map(smallest)
    return frame


@dataclass(frozen=True)
class StepCostModel:
    """step time = samples x per_sample_s + per_step_s, fitted on the larger_batch regime."""

    per_sample_s: float
    per_step_s: float
    fixed_share_at_1x: float
    """the per-step cost's share of the smallest batch's step"""
    gain_bound: float
    """1 / (1 - fixed_share_at_1x): the most any batch growth can give per rank"""

    def describe(self) -> str:
        return (f"step ≈ {self.per_sample_s * 1e3:.3g} ms per sample + {self.per_step_s * 1e3:.3g} ms per step; "
                f"the per-step cost is {self.fixed_share_at_1x:.0%} of the smallest batch's step, so growing "
                f"the batch can raise per-rank throughput by at most {self.gain_bound:.2f}x "
                f"(the guide's +220 % is {1 + GUIDE_C2_GAIN:.1f}x)")


def step_cost_model(summary: Any, regime: str = "larger_batch") -> StepCostModel | None:
    """Least-squares fit of step time against samples per step (None with fewer than 2 sizes)."""
    import numpy as np

    part = summary[summary["regime"] == regime].sort_values("batch_per_step")
    if len(part) < 2:
        return None
    slope, intercept = np.polyfit(part["batch_per_step"], part["step_p50_ms"] / 1e3, 1)
    slope, intercept = max(float(slope), 0.0), max(float(intercept), 0.0)
    first = float(part["step_p50_ms"].iloc[0]) / 1e3
    share = min(intercept / first, 0.999) if first > 0 else 0.0
    return StepCostModel(per_sample_s=slope, per_step_s=intercept, fixed_share_at_1x=share,
                         gain_bound=1.0 / (1.0 - share))
