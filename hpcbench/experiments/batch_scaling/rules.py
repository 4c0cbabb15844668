"""Verdict rule of ``batch_scaling``: C2 (a > 4x batch with gradient accumulation: +220 % per GPU).

The comparison is fixed by the launch's parameters before any value is read:

* numerator: the ``fixed_global_batch`` regime (max(factors) x base samples per optimizer
  step, which must be >= 4x the base batch) at the largest micro-batch that still
  accumulates (accumulation >= 2) — a batch > 4x the cloud batch *with* gradient
  accumulation, as the guide says. At the largest factor the regime does not accumulate at
  all (accumulation 1), so that point is never the numerator;
* denominator: ``larger_batch`` at factor 1: the cloud batch, one optimizer step each.

**Applicability, from recorded facts, stated before any launch was run.** Accumulation spares
synchronisations, so C2 applies only where a synchronisation crosses a link slower than the
intra-node one (:func:`~hpcbench.judge.rulekit.slow_link_problem`: >= 2 nodes on the emulated
cluster or real SLURM nodes), and its figure holds only in the guide's regime: a 3.2x gain from 4x
accumulation means the 1x step was 1/12 busy (its synchronisation 11/12 = 92 % of it;
:data:`~hpcbench.experiments.batch_scaling.config.GUIDE_REGIME`). So the comparison is judged only in
launches calibrated to that regime (``link_regime: guide``) whose 1x step reached it: the recorded
``fact.regime.reached_busy`` within +-5 points of ``fact.regime.target_busy`` (0.083). A calibrated
launch that missed it is "inconclusive: regime X vs the guide's Y" — never "not reproduced"; launches
on a fixed link (``link_regime: fixed``, and every launch recorded before the parameter existed,
which includes the former CPU refusal's runs) are context rows, shown and never counted. Whether
the ranks are GPUs or CPU cores no longer decides: the regime does (CPU ranks compute slower, so
their link is slowed further to sit where the guide's GPUs sat).
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from hpcbench.core.facts import GUIDE_C2_BATCH_FACTOR, GUIDE_C2_GAIN
from hpcbench.core.results import json_object
from hpcbench.experiments.batch_scaling.config import GUIDE_REGIME
from hpcbench.guide.claims import Claim
from hpcbench.judge.evidence import Evidence, Judgement
from hpcbench.judge.rulekit import Comparison, judge_comparisons, slow_link_problem
from hpcbench.judge.verdict import gain_reference
from hpcbench.scale.regime import key_launches_by_regime, regime_applies


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


def rule_c2(claim: Claim, evidence: Evidence) -> Judgement:
    """C2: per-rank throughput, accumulated > 4x batch over the 1x batch, paired per launch."""
    def comparisons(launch: pd.Series) -> list[Comparison]:
        params = json_object(launch["params"])
        factor = accumulating_factor(params)
        if factor is None:
            return []
        top = max(int(f) for f in params["factors"])
        return [Comparison(
            f"fixed_global_batch {top}x by {top // factor} x {factor}x micro-batches / larger_batch 1x",
            {"regime": "fixed_global_batch", "factor": factor}, {"regime": "larger_batch", "factor": 1},
            gain_reference(1 + GUIDE_C2_GAIN, "the guide: +220 % per-GPU throughput"))]

    what = (f"Paired per launch: median per-rank throughput with a batch of max(factors) >= "
            f"{GUIDE_C2_BATCH_FACTOR}x the base reached by gradient accumulation (the largest micro-batch that "
            f"still accumulates) over the base batch without accumulation; reference: at least 80 % of the "
            f"guide's +220 %; applies only across an inter-node link and only in launches calibrated to the guide's "
            f"regime (the 1x step {GUIDE_REGIME.target_busy:.1%} busy +-{GUIDE_REGIME.tolerance * 100:.0f} points: "
            f"{GUIDE_REGIME.arithmetic}); fixed-link launches are context.")
    launches = key_launches_by_regime(evidence.launches, GUIDE_REGIME, param="link_regime")
    regime_problem = regime_applies(launches, GUIDE_REGIME)
    return judge_comparisons(dataclasses.replace(evidence, launches=launches), comparisons,
                             applies=lambda first: slow_link_problem(first) or regime_problem(first), what=what,
                             ignore_params=("calibration_rates", "calibration_steps"))


RULES = {"C2": rule_c2}
