"""Verdict rule of ``batch_scaling``: C2 (a > 4x batch with gradient accumulation: +220 % per GPU).

The comparison is fixed by the launch's parameters before any value is read:

* numerator: the ``fixed_global_batch`` regime (max(factors) x base samples per optimizer
  step, which must be >= 4x the base batch) at the largest micro-batch that still
  accumulates (accumulation >= 2) — a batch > 4x the cloud batch *with* gradient
  accumulation, as the guide says. At the largest factor the regime does not accumulate at
  all (accumulation 1), so that point is never the numerator;
* denominator: ``larger_batch`` at factor 1: the cloud batch, one optimizer step each.
"""

from __future__ import annotations

import pandas as pd

from hpcbench.core.facts import GUIDE_C2_BATCH_FACTOR, GUIDE_C2_GAIN
from hpcbench.guide.claims import Claim
from hpcbench.report.ledger import Evidence, Judgement, launch_params
from hpcbench.report.rulekit import Comparison, judge_comparisons
from hpcbench.report.verdict import gain_reference


def accumulating_factor(params: dict) -> int | None:
    """The micro-batch factor of the C2 numerator, or None when the sweep has no such point."""
    factors = sorted(int(f) for f in params.get("factors") or [])
    regimes = params.get("regimes") or []
    if not factors or 1 not in factors or "fixed_global_batch" not in regimes or "larger_batch" not in regimes:
        return None
    top = factors[-1]
    if top < GUIDE_C2_BATCH_FACTOR:
        return None
    accumulating = [f for f in factors if f < top and top % f == 0]
    return accumulating[-1] if accumulating else None


def gpu_problem(launch: pd.Series) -> str | None:
    """C2 is about GPUs, whose per-sample time is small next to the per-step cost; CPU ranks are not."""
    backend = str(launch.get("backend") or "")
    if backend == "nccl":
        return None
    return (f"ran on {backend or 'an unrecorded backend'} (CPU ranks): per-sample compute dominates the step, "
            f"so the per-step cost a larger batch amortises is small whatever the value; not the guide's regime")


def rule_c2(claim: Claim, evidence: Evidence) -> Judgement:
    """C2: per-rank throughput, accumulated > 4x batch over the 1x batch, paired per launch."""
    def comparisons(launch: pd.Series) -> list[Comparison]:
        factor = accumulating_factor(launch_params(launch["params"]))
        if factor is None:
            return []
        top = max(int(f) for f in launch_params(launch["params"])["factors"])
        return [Comparison(
            f"fixed_global_batch {top}x by {top // factor} x {factor}x micro-batches / larger_batch 1x",
            {"regime": "fixed_global_batch", "factor": factor}, {"regime": "larger_batch", "factor": 1},
            gain_reference(1 + GUIDE_C2_GAIN, "the guide: +220 % per-GPU throughput"))]

    what = (f"Paired per launch: median per-rank throughput with a batch of max(factors) >= "
            f"{GUIDE_C2_BATCH_FACTOR}x the base reached by gradient accumulation (the largest micro-batch that "
            f"still accumulates) over the base batch without accumulation; reference: at least 80 % of the "
            f"guide's +220 %; applies only on GPUs (NCCL).")
    return judge_comparisons(evidence, comparisons, applies=gpu_problem, what=what)


RULES = {"C2": rule_c2}
