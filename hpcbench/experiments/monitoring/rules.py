"""Verdict rule of ``monitoring``: C6 (utilisation alone hides the bottleneck; watch the four C6 metrics).

Fixed here from the claim's words before any value was looked at. C6: "GPU utilisation alone
hides the real bottleneck; monitor SM efficiency (> 80 %), IB retransmission rate (< 0.1 %),
storage latency P99 (< 50 ms) and CPU cache hit rate (> 90 %) against alert thresholds";
predicted: "a healthy run meets all four thresholds; a run with [a fault] but high 'GPU
utilisation' shows why utilisation alone misleads". Per strict launch group, two kinds of
member, each a share over launches with an exact (Clopper-Pearson) interval (Bonferroni across members):

* **quiet baseline** — the share of launches whose ``none`` phase raised any C6 alert (false
  alarms). Reference: **at most 1/2** (reproduced when the whole interval lies below 0.5: the
  thresholds leave a healthy run alone in most launches);
* **caught while utilisation looked healthy**, per injected fault — over the launches where the
  fault was really applied *and* plain utilisation (``gpu_utilization`` where a GPU was sampled,
  else the ranks' own CPU busy share, ``rank_cpu_utilization``, the phase's median; see
  ``summary.UTILISATION_PREFERENCE``) lay in the healthy band **>= 80 %**
  (:data:`~hpcbench.experiments.monitoring.summary.UTIL_HEALTHY_MIN`, the bar the guide sets for
  SM efficiency), the share where an alert of one of *its own* C6 metrics fired (``detected``;
  else ``missed``): SM efficiency for every fault (the GPU waits), the retransmission rate for a
  lossy link (not a slow one: a clean slow link loses no packets), storage P99 for slow reads,
  the cache hit rate for CPU contention (``config.FAULT_METRICS``).
  Reference: **at least 1/2** (caught in most launches).

Reproduced only if the baseline is quiet and every fault that utilisation hid is caught; not
reproduced if the baseline raises false alarms or any such fault is missed; inconclusive with
fewer than 5 launches x 5 steps, when an interval straddles 1/2, or when no fault hid from
utilisation (the claim's situation did not arise). What does not count, from recorded facts
only: a phase whose fault was not applied (no emulated cluster for a link fault...); a phase
where every C6 metric meant for that fault was recorded absent (no GPU, no InfiniBand, perf
counters unsupported) —
an absent metric is never "missed"; a phase where utilisation did *not* look healthy (there
utilisation itself showed the fault, which the claim does not dispute; counted and shown).
Failed tasks never reach the rule (the ledger drops them).

How many launches: with the baseline and two tested faults (3 members, each interval at
1 - 0.05/3), 5 caught of 5 gives an exact lower bound of 0.38, inside the band's edge, so 5
launches can never reproduce; 8 of 8 gives 0.55. Run >= 8 launches for a verdict.

The claim, its thresholds and the bands are declared in :mod:`~hpcbench.experiments.monitoring.claims`; this
module reads them.
"""

from __future__ import annotations

import pandas as pd

from hpcbench.experiments.monitoring.claims import CAUGHT, MAJORITY, QUIET
from hpcbench.experiments.monitoring.config import NO_FAULT
from hpcbench.experiments.monitoring.summary import UTIL_HEALTHY_MIN
from hpcbench.guide.claims import Claim
from hpcbench.judge.evidence import NO_VALUE, Evidence, Judgement
from hpcbench.judge.rulekit import in_group, launch_groups
from hpcbench.judge.verdict import CONFIDENCE, INCONCLUSIVE, Outcome, Reference, combine, share_outcome


def _members(summaries: pd.DataFrame) -> list[tuple[str, int, int, int, Reference, str | None]]:
    """(label, k, n, fewest steps, reference, why not applicable) of one launch group."""
    out = []
    base = summaries[(summaries["fault"] == NO_FAULT) & summaries["caught"].notna()]
    steps = int(base["steps"].min()) if len(base) else 0
    out.append(("baseline: launches with a C6 alert (false alarms)", int(base["caught"].astype(bool).sum()),
                len(base), steps, QUIET,
                None if len(base) else "no baseline phase recorded any C6 metric"))
    faults = [f for f in dict.fromkeys(summaries["fault"]) if f != NO_FAULT]
    for fault in faults:
        rows = summaries[summaries["fault"] == fault]
        injected = rows[rows["injected"] == True]  # noqa: E712 - a column of True/False/None
        measured = injected[injected["caught"].notna()]
        hidden = measured[measured["util_healthy"] == True]  # noqa: E712
        shown = measured[measured["util_healthy"] == False]  # noqa: E712
        k = int(hidden["caught"].astype(bool).sum())
        label = (f"{fault}: detected {k}/{len(hidden)}, missed {len(hidden) - k}/{len(hidden)} launches where "
                 f"utilisation looked healthy")
        why = None
        if not len(injected):
            why = f"{fault} was not applied in any launch ({rows['injection'].iloc[0]})"
        elif not len(measured):
            why = (f"{fault}: every C6 metric meant for it was recorded absent "
                   f"({'; '.join(injected['c6_absent'].iloc[0])})")
        elif not len(hidden):
            util = shown["utilisation"].median()
            why = (f"{fault}: utilisation showed the fault itself in all {len(shown)} launches (median {util:.0%} < "
                   f"{UTIL_HEALTHY_MIN:.0%}); the claim is about faults it hides")
        n_steps = int(hidden["steps"].min()) if len(hidden) else 0
        out.append((label, k, len(hidden), n_steps, CAUGHT, why))
    return out


def rule_c6(claim: Claim, evidence: Evidence) -> Judgement:
    """C6: the baseline stays quiet, and every fault that utilisation hid raises a C6 alert, in most launches."""
    what = (f"Per launch, a training task on 2 nodes with real faults injected on the last node, one phase each, "
            f"sampled at every node; C6 thresholds {{SM efficiency > 80 %, IB (here TCP) retransmissions < 0.1 %, "
            f"storage read P99 < 50 ms, CPU cache hit > 90 %}} alert after sustained breaches. Members: the share "
            f"of launches whose no-fault phase alerted (reference <= {MAJORITY:g}), and per fault the share caught "
            f"among the launches where it was applied and plain utilisation looked healthy (>= "
            f"{UTIL_HEALTHY_MIN:.0%}; reference >= {MAJORITY:g}); exact (Clopper-Pearson) intervals, Bonferroni across members. A "
            f"metric recorded absent never counts as caught or missed; a fault utilisation showed by itself does "
            f"not test the claim.")
    found: list[tuple[str, tuple]] = []
    groups = launch_groups(evidence, ignore_params=("faults",))
    for group_text, launches in groups:
        summaries = in_group(evidence.summaries, launches)
        if summaries.empty or "fault" not in summaries.columns:
            continue
        found += [(group_text, m) for m in _members(summaries)]
    if not found:
        return Judgement(INCONCLUSIVE, NO_VALUE, f"{what} No launch recorded a phase, so nothing to judge."
                         + evidence.excluded_note())
    confidence = 1 - (1 - CONFIDENCE) / max(1, sum(1 for _, m in found if m[5] is None))
    outcomes, labels, parts, applicable, reasons = [], [], [], [], []
    for group_text, (label, k, n, steps, reference, why) in found:
        outcome = share_outcome(k, n, reference, steps=steps, confidence=confidence)
        if why:
            outcome = Outcome(INCONCLUSIVE, outcome.interval, reference, f"not applicable: {why}")
            reasons.append(why)
        else:
            applicable.append((label, outcome))
        shown = f"{label} ({group_text})" if len(groups) > 1 else label
        outcomes.append(outcome)
        labels.append(shown)
        parts.append(f"{shown}: {outcome.describe()}")
    faults_tested = [o for label, o in applicable if not label.startswith("baseline")]
    detail = what
    if reasons:
        detail += f" Not applicable in {len(reasons)} of {len(found)} member(s): {'; '.join(sorted(set(reasons)))}."
    if not faults_tested:
        verdict = INCONCLUSIVE
        detail += " No fault hid from utilisation in any launch, so the claim's situation did not arise."
    else:
        verdict = combine([o for _, o in applicable])
    return Judgement(verdict, "; ".join(parts), detail + evidence.excluded_note(), tuple(outcomes), tuple(labels))


RULES = {"C6": rule_c6}
