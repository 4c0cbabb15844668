"""Verdict rule of ``batch_scaling``: C2 (a > 4x batch with gradient accumulation: +220 % per GPU).

The claim, its figures, its band, its regime and what the platform can show are declared in
:mod:`~hpcbench.experiments.batch_scaling.claims`; this module reads them. Arithmetic first, then
measurement (:mod:`hpcbench.judge.feasibility`), each stated on its own:

* **The guide's statements.** A 3.2x gain from 4x accumulation needs the 1x step's synchronisation
  to be 11 times its compute: ``4 (c + m) / (4 c + m) = 3.2`` gives ``m = 11 c``, a step 92 %
  synchronisation. The scale model puts the guide's own workloads (ResNet-50, GPT-2 124M) on its
  stated platform (A100s over HDR, one NIC per node read literally, or a DGX's 8) at a few percent
  of synchronisation, where 4x accumulation gains a few percent
  (:func:`~hpcbench.experiments.batch_scaling.prediction.predict_c2`). Where no workload reaches the
  needed share, the figure is **implausible as stated**, decided by arithmetic.
* **No regime from the figure itself.** The guide names no model, so it states nothing about its
  step independent of the +220 %; a regime derived from that figure would make any working
  accumulation "reproduce" it. The measurement therefore judges the **mechanism** as a technique:
  accumulation amortises the synchronisation as Amdahl's law says it can.
* **Measurement.** Paired per launch, per-rank throughput as work over wall time (stalls included,
  :data:`~hpcbench.judge.verdict.WORK_OVER_TIME_RATES`) of the ``fixed_global_batch`` regime at the
  largest micro-batch that still accumulates (a batch > 4x the cloud batch *with* accumulation) over
  ``larger_batch`` at factor 1. Its band is fixed from the busy share ``b`` of the 1x step the launch
  recorded before its timed steps (``fact.regime.reached_busy``), never from a throughput: with ``N``
  times the samples per synchronisation, ``N / (N b + 1 - b)`` is the most accumulation can give with
  compute linear in the batch (:func:`~hpcbench.judge.feasibility.accumulation_cap`); the band is at
  least 80 % of that gain and at least :data:`MIN_GAIN`. A launch whose regime leaves less room than
  that is **not testable here**; one with no recorded busy share is not applicable.
* **Applicability**: accumulation spares synchronisations, so only where one crosses a link slower
  than the intra-node one (:data:`~hpcbench.experiments.batch_scaling.claims.C2_APPLIES`).
"""

from __future__ import annotations

import pandas as pd

from hpcbench.core.results import json_object
from hpcbench.experiments.batch_scaling.claims import (C2_APPLIES, GUIDE_C2_BATCH_FACTOR, MIN_GAIN, accumulating_factor,
                                                       mechanism_reach)
from hpcbench.experiments.batch_scaling.prediction import guide_consistency
from hpcbench.guide.claims import Claim
from hpcbench.judge.evidence import Evidence, Judgement
from hpcbench.judge.feasibility import decide
from hpcbench.judge.rulekit import Comparison, judge_comparisons
from hpcbench.judge.verdict import WORK_OVER_TIME_RATES, Reference
from hpcbench.scale.regime import group_reached_busy


def rule_c2(claim: Claim, evidence: Evidence) -> Judgement:
    """C2: the guide's consistency, then accumulation's mechanism measured against Amdahl at the reached regime."""
    launches = evidence.launches

    def comparisons(launch: pd.Series) -> list[Comparison]:
        params = json_object(launch["params"])
        factor = accumulating_factor(params)
        if factor is None:
            return []
        top = max(int(f) for f in params["factors"])
        found = mechanism_reach(params, group_reached_busy(launches, launch))
        # The label names the ratio in few words (the ledger's summary shows it); the detail says how it is made.
        label = f"accumulated {top}x / 1x batch"
        where = ({"regime": "fixed_global_batch", "factor": factor}, {"regime": "larger_batch", "factor": 1})
        if found is None:
            return [Comparison(label, *where, Reference(1.0, lower=MIN_GAIN, unit="x", source="no busy share"),
                               not_applicable="no busy share of the 1x step recorded (link_regime: guide records it)",
                               estimator=WORK_OVER_TIME_RATES)]
        reach, lower = found
        return [Comparison(label, *where,
                           Reference(reach.cap, lower=lower, unit="x",
                                     source=f"mechanism: >= 80 % of what Amdahl gives at the reached regime "
                                            f"({reach.cap:.2f}x), and >= {MIN_GAIN}x"),
                           reach=reach, estimator=WORK_OVER_TIME_RATES)]

    what = (f"Mechanism, paired per launch: per-rank throughput (work over wall time, stalls included) with a batch "
            f"of max(factors) >= {GUIDE_C2_BATCH_FACTOR}x the base ('accumulated') reached by gradient accumulation "
            f"(fixed_global_batch at the largest micro-batch that still accumulates) over the base "
            f"batch without accumulation; band: >= 80 % of the gain Amdahl gives at the 1x step's recorded busy share "
            f"(N / (N b + 1 - b)) and >= {MIN_GAIN}x, fixed before any throughput is read; applies only across an "
            f"inter-node link. The guide names no model, so no regime independent of its figure exists: the +220 % is "
            f"judged by arithmetic, the mechanism by measurement.")
    judgement = judge_comparisons(evidence, comparisons,
                                  applies=C2_APPLIES, what=what,
                                  ignore_params=("calibration_rates", "calibration_steps"))
    return decide(judgement, guide_consistency())


RULES = {"C2": rule_c2}
