"""Verdict rule of ``weather_case``: C7, the tuning case "3.2x faster" (guide section 3).

Written from the claim's words before any value was looked at. The claim, its table, its bands, its regime,
the guide's consistency and what the platform can show are declared in
:mod:`~hpcbench.experiments.weather_case.claims`; this module reads them.

**The claim.** "Topology-aware communication, gradient compression and compute/communication
overlap made a weather-forecast model's training step 3.2x faster": original 420 ms/step (61 %
GPU utilisation) -> after communication tuning 310 ms (75 %) -> full optimisation 132 ms (92 %).

**Arithmetic first, then measurement** (:mod:`hpcbench.judge.feasibility`), each stated on its own:

* **The guide's statements** (:func:`guide_consistency`). All three techniques spare communication;
  a micro-step's compute stays. The original step is 61 % busy, so sparing every byte and wait gives
  at most 1 / 0.61 = 1.64x (Amdahl), while the guide reports 420 -> 132 ms = 3.18x: its own figures
  need the busy time per step to fall 256 -> 121 ms, a 2.1x cut of the compute it never describes.
  C7 is **implausible as stated**, decided by arithmetic; level 1 (1.35x) fits within the cap.
* **What this platform can show** (:func:`amdahl_reach`): at the busy share ``b`` a group's
  ``original`` reached, a level whose band's lower edge lies above ``1 / b`` is **not testable
  here**. At the guide's own 61 % that is level 2, on any platform.
* **Measurement**: the comparisons below, shown whatever decided.

**The comparisons** (paired per launch: every stage runs in the same launch on the same model,
data and ranks, interleaved step by step; the value is the geometric mean over launches of
mean(original) / mean(stage) of the time per micro-step over the timed window, stalls included
(:data:`~hpcbench.judge.verdict.MEAN_TIME`: "faster" is work over wall time), with its 95 %
Student-t interval, the two levels Holm-corrected):

* level 1 — ``original / comm_tuned`` against the guide's 420 / 310 = 1.35x;
* level 2 — ``original / full`` against the guide's 420 / 132 = 3.18x (the guide rounds to 3.2x).

Time per micro-step = optimizer step time / k (k = 4 micro-steps under no_sync in ``full``, 1 in
the others): an optimizer step of ``full`` covers 4 micro-batches, so the ratio compares time per
sample, as "the step got faster" must when one stage's step holds four times the samples.

**The bands, fixed in advance** (ReFrame's ``(value, lower, upper)``): lower = 1 + 0.8 x the guide's
gain — 1.28x for level 1, 2.75x for level 2 — and no upper bound. The same standard as C3
(:data:`hpcbench.judge.verdict.GAIN_SHARE`): a gain of at least 80 % of the claimed one supports
the claim; "faster than the guide" is no failure of "made it faster". Why not 0.8 x the ratio: for
level 1 that is 1.08x, so 23 % of the claimed gain would count as reproducing it. Both levels must
be reproduced for C7 to be; either one not reproduced makes C7 not reproduced; a level this platform
cannot show leaves it not testable; a level with no counted launch leaves C7 inconclusive.

**What counts.** A stage whose loss check failed (final loss more than 5 % from ``original``'s
after the same samples from the same seed: compression and accumulation must not change what is
learned) or whose ranks ended with different parameters is dropped and named; fewer than 5
launches of 5 steps -> inconclusive (n = ...).

**Applicability, from recorded facts**, asked before any value is read:
:data:`~hpcbench.experiments.weather_case.claims.C7_APPLIES` — the techniques spare an inter-node link, so
the claim applies only where one exists (the emulated cluster's shaped link, or real nodes).

**The regime (dynamic similarity), from recorded facts, stated before any launch was run.** The
guide's figures hold in the guide's regime: its original was 61 % busy (420 ms/step, 256 ms of
compute, 164 ms of exposed communication; :data:`~hpcbench.experiments.weather_case.claims.GUIDE_REGIME`).
What the techniques can save depends on that share, so the levels are judged only in launches
calibrated to it (``regime: guide``) whose ``original`` reached it in the judged steps:
``fact.regime.reached_busy`` within +-5 points of ``fact.regime.target_busy`` (0.61). A calibrated
launch that missed it gives "inconclusive: regime X vs the guide's Y" — never "not reproduced", since
a scale model outside the guide's regime cannot contradict the guide. Launches on a fixed link
(``regime: fixed``, and every launch recorded before the parameter existed) are context rows —
"what this looks like on my link" — shown with their values and never counted in the verdict.

**What this scale model does not share with the guide's platform**, stated in every verdict the
same way whatever the values: the ranks' compute (CPU cores here when no GPU is recorded, against
A100s), the inter-node link (the recorded ``fact.link_rate_bps`` against HDR InfiniBand's 200 Gb/s
per NIC, :data:`hpcbench.core.facts.LINK_PEAKS_GBPS`) and the transport (the workers' recorded
backend against NCCL). The share of a step that communication takes — the room any of the three
techniques has — follows from the ratio of link bandwidth to compute speed, so it differs too; the
report shows this model's busy share beside the guide's utilisation.
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from hpcbench.core.facts import LINK_PEAKS_GBPS
from hpcbench.experiments.weather_case.claims import (C7_APPLIES, GUIDE_C7_STEP_MS, GUIDE_C7_UTIL, GUIDE_REGIME, LEVEL_REFERENCES,
                                                      LEVEL_STAGES, amdahl_reach, guide_consistency)
from hpcbench.experiments.weather_case.stages import BASELINE
from hpcbench.guide.claims import Claim
from hpcbench.judge.evidence import NOT_TESTABLE, Evidence, Judgement
from hpcbench.judge.feasibility import decide
from hpcbench.judge.rulekit import Comparison, judge_comparisons
from hpcbench.judge.verdict import INCONCLUSIVE, MEAN_TIME, NOT_REPRODUCED
from hpcbench.scale.regime import (FACT_RATE, group_reached_busy, key_launches_by_regime, regime_applies,
                                   with_measured_busy)

_ORIGINAL, _COMM, _FULL = GUIDE_C7_STEP_MS
#: The guide's fabric, the link its figures were measured over (C16).
GUIDE_LINK = "HDR InfiniBand (200 Gb/s)"

#: The two levels, fixed in advance: original's time per micro-step over the stage's, each against its band
#: (:data:`~hpcbench.experiments.weather_case.claims.LEVEL_REFERENCES`).
LEVELS = tuple(Comparison(label=f"level {i}: {BASELINE} / {stage}", numerator={"stage": BASELINE},
                          denominator={"stage": stage}, reference=reference)
               for i, (stage, reference) in enumerate(zip(LEVEL_STAGES, LEVEL_REFERENCES), start=1))


def _values(launches: pd.DataFrame, column: str) -> list:
    if column not in launches.columns or not len(launches):
        return []
    return sorted({v for v in launches[column] if v is not None and not (isinstance(v, float) and pd.isna(v))},
                  key=str)


def platform_differences(launches: pd.DataFrame) -> str:
    """One sentence: how the launches' recorded platform differs from the guide's, whatever the values."""
    guide_gbit = LINK_PEAKS_GBPS[GUIDE_LINK] * 8
    gpus = _values(launches, "gpus")
    compute = ("ranks computed on CPU cores (no GPU recorded) against the guide's A100s"
               if not gpus or max(float(g) for g in gpus) == 0 else
               f"{', '.join(f'{g:g}' for g in gpus)} GPU(s) per node recorded (the guide: 8 x A100)")
    rates = _values(launches, "link_rate_bps")
    steered = [r for r in _values(launches, FACT_RATE) if pd.notna(r)]
    if steered:  # the link the judged steps ran on, calibrated to the guide's regime
        rates = sorted({*steered, *(_values(launches[launches[FACT_RATE].isna()], "link_rate_bps"))})
    if rates:
        link = "; ".join(f"inter-node link shaped to {r / 1e6:g} Mbit/s, 1/{guide_gbit * 1e9 / r:,.0f} of the "
                         f"guide's {guide_gbit:.0f} Gb/s HDR per NIC" for r in rates)
    else:
        link = f"no shaped link rate recorded (the guide: {guide_gbit:.0f} Gb/s HDR per NIC)"
    backends = _values(launches, "backend")
    transport = (f"transport {', '.join(map(str, backends))} against the guide's NCCL" if backends
                 else "transport not recorded (the guide: NCCL)")
    return (f"This scale model differs from the guide's platform in: {compute}; {link}; {transport}. The share of a "
            f"step communication takes, which bounds what the three techniques can save, follows from the ratio "
            f"of link bandwidth to compute speed, so it differs too (busy share of {BASELINE} here against the "
            f"guide's {GUIDE_C7_UTIL[0]:.0%} utilisation, shown in the report).")


def _baseline_busy(summaries: pd.DataFrame) -> dict[tuple[str, str], float]:
    """(run_id, task_id) -> original's median busy share in that launch's summary."""
    if summaries.empty or "stage" not in summaries.columns:
        return {}
    base = summaries[summaries["stage"] == BASELINE]
    return {(r, t): float(b) for r, t, b in zip(base["run_id"], base["task_id"], base["busy_share_p50"])}


def rule_c7(claim: Claim, evidence: Evidence) -> Judgement:
    """C7: time per micro-step of original over comm_tuned (level 1) and over full (level 2), paired per launch."""
    what = (f"Paired per launch: time per micro-step (optimizer step / k) over the timed window, stalls included, "
            f"of {BASELINE} over comm_tuned "
            f"(level 1, reference >= {LEVELS[0].reference.lower:.2f}x: 80 % of the guide's gain to "
            f"{_ORIGINAL / _COMM:.2f}x) and over full (level 2, >= {LEVELS[1].reference.lower:.2f}x: 80 % of the "
            f"gain to {_ORIGINAL / _FULL:.2f}x); stages whose loss check failed do not count; applies only where "
            f"an inter-node link is slower than the intra-node one, and only in launches calibrated to the guide's "
            f"regime ({BASELINE} {GUIDE_REGIME.target_busy:.0%} busy +-{GUIDE_REGIME.tolerance * 100:.0f} points: "
            f"{GUIDE_REGIME.arithmetic}); fixed-link launches are context. "
            + platform_differences(evidence.launches))
    launches = key_launches_by_regime(with_measured_busy(evidence.launches, _baseline_busy(evidence.summaries)),
                                      GUIDE_REGIME)
    regime_problem = regime_applies(launches, GUIDE_REGIME)

    def levels(first: pd.Series) -> list[Comparison]:
        """The two levels, each with what this group's reached regime lets it show (read before any value)."""
        reach = amdahl_reach(group_reached_busy(launches, first))
        return [dataclasses.replace(level, reach=reach, estimator=MEAN_TIME) for level in LEVELS]

    judgement = judge_comparisons(dataclasses.replace(evidence, launches=launches), levels,
                                  applies=lambda first: C7_APPLIES(first) or regime_problem(first), what=what,
                                  ignore_params=("stages", "calibration_rates", "calibration_steps"))
    missing = [c.label for c in LEVELS if not any(label.startswith(c.label) for label in judgement.labels)]
    if missing and judgement.labels:
        # judge_comparisons judges what was measured; C7 needs both levels, so a level that no counted
        # launch measured (its stage not run, or dropped by its loss check) leaves the claim open.
        verdict = judgement.verdict if judgement.verdict in (NOT_REPRODUCED, INCONCLUSIVE, NOT_TESTABLE) \
            else INCONCLUSIVE
        note = (f" {' and '.join(missing)} measured in no counted launch (stage not run, or dropped by its loss "
                f"or rank check), so C7 cannot be reproduced on the other level alone.")
        judgement = dataclasses.replace(judgement, verdict=verdict, detail=judgement.detail + note,
                                        reason=judgement.reason if verdict == NOT_TESTABLE else "a level was not measured")
    return decide(judgement, guide_consistency())


RULES = {"C7": rule_c7}
