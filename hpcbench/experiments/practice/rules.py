"""Verdict rule of ``practice``: C12 (the gate before scaling out "avoids 90 % of common problems").

Fixed here from the claim's words before any value was looked at. C12: "Before scaling out,
check that the step-time standard deviation is below 5 %, the communication share below 30 % and
the storage read latency P99 below 100 ms; this avoids 90 % of common problems." The gate is
:func:`hpcbench.practice.gates.evaluate_gate` with the guide's three limits; a problem counts as
*avoided* when the gate fails on it, so that the run would not have been scaled out. Per strict
launch group (same parameters but the fault list, same recorded facts), two members, each a
share with an exact (Clopper-Pearson) interval, Bonferroni-corrected across all members:

* **catch fraction** — caught / injected faults, pooled over faults and launches: every fault
  phase where the fault was really applied and the gate measured at least one check is one
  trial, caught when the gate failed. Only launches whose baseline passed the gate count (where
  the baseline already fails, the gate fails whatever the fault, and a "catch" says nothing
  about the fault; such launches are named). Reference: the claim's **90 %**, band **>= 0.8**,
  no upper bound. The band: "90 %" is a round figure given without a source or a spread; as a
  round figure it means "about nine in ten", which the next round tenth below, 8 in 10, still
  rounds to and 7 in 10 does not (that is "most", or "two thirds to three quarters", figures the
  guide did not write). A gate that catches more than 90 % does not contradict "avoids 90 %",
  so the band is open above;
* **quiet baseline** — the share of launches whose ``none`` phase failed the gate (false
  alarms: a gate that stops healthy runs avoids problems by avoiding scaling out altogether).
  Reference: **at most 1/2** (reproduced when the whole interval lies below 0.5: the gate passes
  the healthy run in most launches).

Reproduced only if both members are; not reproduced if either is not (too few faults caught, or
a baseline that fails the gate in most launches); inconclusive with fewer than 5 launches x 5
steps, when an interval straddles its band's edge, or when no fault could be counted (none
applied, or every baseline failed).

**In the guide's regime only** (:mod:`hpcbench.experiments.practice.regime`): C12 is a figure, and
the gate can tell a fault from a healthy run only where a healthy run's step-time spread is small
beside the gate's 5 %. Each launch calibrates that spread in a healthy phase of its own before the
judged ones (fact ``regime.healthy_step_cv``); only launches below 2.5 % are judged. The others,
and launches that recorded no calibration, are named and give "inconclusive: regime ...", never
"not reproduced": a noisy platform's false alarms say nothing about the gate (what the gate did
there is still shown, per fault, as context). What never counts, from recorded facts only: a fault that
was not applied (no emulated cluster for a link fault, no cgroup controller, no root: recorded
*not injected* with the reason) and a phase where the gate could measure none of its checks.
The detail names the faults the gate missed, and how often; for launches whose baseline failed
it also shows (never counts) how often each fault broke a check the baseline had passed, which
tells a noisy machine's false alarm apart from what the gate would still see on a quiet one.

The fraction is over **this project's fault list** (:mod:`hpcbench.experiments.practice.faults`:
slow and lossy links, slow storage, CPU contention, unbound threads, a slow node, a flapping
link, as far as each can be applied here), not over a census of "common problems": the claim's
90 % is about problems as they occur in the field, weighted by how often; ours are equally
weighted, one trial per fault per launch.

How many launches: with 2 members (each interval at 1 - 0.05/2), 7 faults caught in all of 5
launches (35 of 35) give an exact lower bound of 0.88, inside the band; one fault missed in every
launch (30 of 35) gives 0.67, inconclusive. The quiet baseline needs 7 launches: 0 false alarms
in 7 gives an exact upper bound of 0.47, below the band's 0.5; 0 in 5 gives 0.58, which can never
be reproduced.

The claim, its figures, the bands and the regime are declared in :mod:`~hpcbench.experiments.practice.claims`;
this module reads them.
"""

from __future__ import annotations

import pandas as pd

from hpcbench.experiments.practice.claims import (CATCH, CATCH_LOWER, GATE_REGIME, GUIDE_C12_PROBLEMS_AVOIDED,
                                                  MAJORITY, QUIET)
from hpcbench.experiments.practice.config import NO_FAULT
from hpcbench.experiments.practice.regime import FACT_HEALTHY_CV, IN_REGIME
from hpcbench.guide.claims import Claim
from hpcbench.judge.evidence import NO_VALUE, Evidence, Judgement
from hpcbench.judge.rulekit import in_group, launch_groups
from hpcbench.judge.verdict import CONFIDENCE, INCONCLUSIVE, NOT_REPRODUCED, Outcome, combine, share_outcome

CATCH_LABEL = "catch fraction (faults the gate fails on / faults injected)"
QUIET_LABEL = "baseline: launches where the gate fails the healthy run (false alarms)"


def _key(frame: pd.DataFrame) -> pd.Series:
    return frame["run_id"].astype(str) + "/" + frame["task_id"].astype(str)


def _members(summaries: pd.DataFrame) -> tuple[list[tuple], list[str]]:
    """(label, k, n, launches, fewest steps, reference, why not applicable) of one group, and per-fault lines."""
    s = summaries.assign(_launch=_key(summaries))
    base = s[(s["fault"] == NO_FAULT) & s["gate_passed"].notna()]
    quiet_k = int((base["gate_passed"] == False).sum())  # noqa: E712 - a column of True/False/None
    quiet_steps = int(base["steps"].min()) if len(base) else 0
    quiet = (QUIET_LABEL + f": {quiet_k}/{len(base)}", quiet_k, len(base), len(base), quiet_steps, QUIET,
             None if len(base) else "no launch measured the gate on its baseline")
    healthy = set(base.loc[base["gate_passed"] == True, "_launch"])  # noqa: E712
    faults = s[s["fault"] != NO_FAULT]
    applied = faults[faults["injected"] == True]  # noqa: E712
    trials = applied[applied["caught"].notna() & applied["_launch"].isin(healthy)]
    # where the baseline failed too, what the gate did is shown (never counted): which checks the fault broke
    # beyond the baseline's own tells whether the gate would have seen it on a quieter machine
    base_failed = {launch: set(f) for launch, f in zip(base["_launch"], base["failed"])}
    lines = []
    for fault in dict.fromkeys(faults["fault"]):
        rows = faults[faults["fault"] == fault]
        counted = trials[trials["fault"] == fault]
        if not (rows["injected"] == True).any():  # noqa: E712
            lines.append(f"{fault}: not injected ({rows['injection'].iloc[0]})")
            continue
        k = int(counted["caught"].astype(bool).sum())
        line = f"{fault}:"
        if len(counted):
            checks = sorted({c for t in counted.loc[counted["caught"].astype(bool), "failed"] for c in t})
            by = f" (by {', '.join(checks)})" if checks else ""
            line += f" caught {k}/{len(counted)}{by}" + (f", missed {len(counted) - k}" if k < len(counted) else "")
        noisy = applied[(applied["fault"] == fault) & applied["caught"].notna()
                        & ~applied["_launch"].isin(healthy) & applied["_launch"].isin(set(base_failed))]
        if len(noisy):
            beyond = [set(f) - base_failed[launch] for launch, f in zip(noisy["_launch"], noisy["failed"])]
            shown = sorted(set().union(*beyond))
            line += (f"{';' if len(counted) else ''} in launches whose baseline failed too (not counted) the gate "
                     f"failed {int(noisy['caught'].astype(bool).sum())}/{len(noisy)}, by a check the baseline passed "
                     f"{sum(1 for b in beyond if b)}/{len(noisy)}" + (f" ({', '.join(shown)})" if shown else ""))
        lines.append(line if line != f"{fault}:" else f"{fault}: not counted (the gate measured nothing)")
    k = int(trials["caught"].astype(bool).sum())
    launches = trials["_launch"].nunique()
    steps = int(trials["steps"].min()) if len(trials) else 0
    why = None
    if not len(applied):
        why = "no fault was applied in any launch"
    elif not len(trials):
        why = ("no applied fault could be counted: every launch's baseline failed the gate or the gate measured "
               "nothing")
    catch = (CATCH_LABEL + f": {k}/{len(trials)}", k, len(trials), launches, steps, CATCH, why)
    return [catch, quiet], lines


def rule_c12(claim: Claim, evidence: Evidence) -> Judgement:
    """C12: the gate fails on about 90 % of the injected faults or more, and passes the healthy baseline mostly."""
    what = (f"Per launch, training on 2 nodes with one phase per fault injected on the last node and a healthy "
            f"baseline; after each phase the C12 gate (step-time std / mean < 5 %, communication share < 30 %, "
            f"read P99 < 100 ms) on that phase's records. Members: the catch fraction, faults the gate fails on over "
            f"faults injected, pooled over faults and launches whose baseline passed (reference "
            f"{GUIDE_C12_PROBLEMS_AVOIDED:g}, band >= {CATCH_LOWER:g}), and the share of launches whose baseline "
            f"fails the gate (reference <= {MAJORITY:g}); exact (Clopper-Pearson) intervals, Bonferroni across members. Faults not "
            f"injected here never count. The faults are this project's list, not a census of common problems.")
    found: list[tuple[str, tuple]] = []
    per_fault: list[str] = []
    outside: list[str] = []
    context: list[str] = []
    groups = launch_groups(evidence, ignore_params=("faults",))
    for group_text, launches in groups:
        spreads = list(launches[FACT_HEALTHY_CV]) if FACT_HEALTHY_CV in launches.columns else [None] * len(launches)
        judged = launches[GATE_REGIME.in_regime(launches)]
        summaries = in_group(evidence.summaries, launches)
        if summaries.empty or "fault" not in summaries.columns:
            continue
        if len(judged) < len(launches):
            outside.append(f"{len(launches) - len(judged)} of {len(launches)} launch(es)"
                           + (f" ({group_text})" if len(groups) > 1 else "") + ": "
                           + GATE_REGIME.reason([v for v in spreads if GATE_REGIME.status(v) != IN_REGIME]))
        if judged.empty:
            regime = GATE_REGIME.reason(spreads)
            found += [(group_text, (label, 0, 0, 0, 0, reference, regime))
                      for label, reference in ((CATCH_LABEL, CATCH), (QUIET_LABEL, QUIET))]
            base = summaries[summaries["fault"] == NO_FAULT]
            alarms = f"baseline failed the gate {int((base['gate_passed'] == False).sum())}/{len(base)}"  # noqa: E712
            context += [f"{alarms}"] + _members(summaries)[1]
            continue
        members, lines = _members(in_group(summaries, judged))
        found += [(group_text, m) for m in members]
        per_fault += [f"{line} ({group_text})" if len(groups) > 1 else line for line in lines]
    if not found:
        return Judgement(INCONCLUSIVE, NO_VALUE, f"{what} No launch recorded a phase, so nothing to judge."
                         + evidence.excluded_note())
    confidence = 1 - (1 - CONFIDENCE) / max(1, sum(1 for _, m in found if m[6] is None))
    outcomes, labels, parts, reasons = [], [], [], []
    catches, quiets = [], []
    for group_text, (label, k, n, launches, steps, reference, why) in found:
        outcome = share_outcome(k, n, reference, launches=launches, steps=steps, confidence=confidence)
        if why:
            said = why if why.startswith("inconclusive: regime") else f"not applicable: {why}"
            outcome = Outcome(INCONCLUSIVE, outcome.interval, reference, said)
            reasons.append(why)
        else:
            (catches if reference is CATCH else quiets).append(outcome)
        shown = f"{label} ({group_text})" if len(groups) > 1 else label
        outcomes.append(outcome)
        labels.append(shown)
        parts.append(f"{shown}: {outcome.describe()}")
    detail = what + f" Judged only in the guide's regime: {GATE_REGIME.guide()}, calibrated per launch."
    if outside:
        detail += " Not judged: " + "; ".join(outside) + "."
    if context:
        detail += " Out of the regime, shown and not judged: " + "; ".join(context) + "."
    detail += " Per fault: " + ("; ".join(per_fault) or "none") + "."
    missed = [line.split(":")[0] for line in per_fault if ", missed" in line]
    if missed:
        detail += f" Missed at least once: {', '.join(missed)}."
    elif catches:
        detail += " No counted fault was missed."
    if reasons:
        detail += f" Not applicable in {len(reasons)} of {len(found)} member(s): {'; '.join(sorted(set(reasons)))}."
    if catches:
        verdict = combine(catches + quiets)
    else:  # no fault counted: only false alarms can still decide (against the claim)
        verdict = NOT_REPRODUCED if any(o.verdict == NOT_REPRODUCED for o in quiets) else INCONCLUSIVE
        detail += " No injected fault could be counted, so the catch fraction is unknown."
    return Judgement(verdict, "; ".join(parts), detail + evidence.excluded_note(), tuple(outcomes), tuple(labels))


RULES = {"C12": rule_c12}
