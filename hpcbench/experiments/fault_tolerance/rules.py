"""Verdict rules of ``fault_tolerance``: C11 (checkpoint cadence and zstd) and C15 (the 3-try wrapper).

Both references are fixed from the claims' words, before any value is read: the claims, their figures and
the bands are declared in :mod:`~hpcbench.experiments.fault_tolerance.claims`; this module reads them. Intervals are
95 % Student-t intervals over launches (df = launches - 1) of per-launch values, or exact
(Clopper-Pearson) intervals of 0/1 outcomes pooled over launches; the members a rule adds itself are
Bonferroni-corrected among themselves (those of :func:`hpcbench.judge.rulekit.judge_levels` are
corrected there).

**C11** — "full training state every hour, a light checkpoint every 10 minutes, compressed
with Zstandard". The guide gives no overhead figure; what its cadence promises is that
checkpointing is affordable and bounds the work a failure costs. Every part must hold:

* *overhead*: a synchronous save (serialize + zstd + write, what the training loop waits for
  without an asynchronous writer) takes at most **1 %** of the wall time when repeated at the
  guide's interval: ``save / (interval + save) <= 1 %``: light and full tier of every model and
  dtype at 600 s and 3600 s, and the light save that stalls the training loop of
  ``overhead_model`` (GPT-2 124M in the reproduce suite: its save is not free) at 600 s. 1 %
  is our bound for "affordable" (the guide states none), chosen in advance;
* *compression*: zstd at the launch's ``zstd_level`` writes fewer bytes than the raw state:
  raw / written **>= 1.01** (the 1 % margin keeps an incompressible payload, which zstd
  stores with a few bytes of framing, from counting as compressed);
* *work lost*, measured in wall time with the cadence scaled down (failures at drawn moments,
  independent of the cadence; lost = from the kill until the resumed training is back where it
  was, restore included), as a share of the cadence times 600 s. "A light checkpoint every 10
  minutes" promises at most one interval lost per failure. Two members: the **mean** work lost
  per failure (per-launch mean, t interval) at most **600 s** (failures uniform over the
  cadence lose half of it; a recovery that falls back past the newest checkpoint, or saves
  that come late, push it past one interval), and the share of failures restored from the
  **newest checkpoint whose save had returned** (or a newer one) at least **90 %** (exact interval,
  pooled): a fallback to an older one (a completed save found torn) loses more than one
  interval whatever the mean says.

Applicability, from recorded facts: a checkpoint folder on tmpfs/ramfs holds the checkpoint
in memory, so no storage write was measured; the overhead and work-lost parts also need the
launch to have used the guide's intervals.

**C15** — "a job wrapper that reruns srun up to 3 times, repairing storage between tries".
Measured against an independent injector (SIGKILL of the running try, or a flipped byte in a
data shard, at exponential times), with the same jobs run through the wrapper with 3 tries and
with 1, side by side. The wrapper works as described when all four members hold:

* its **decisions** followed the policy (rerun after a failed try, stop at the first success,
  give up after 3, exit with the last try's status) in at least **90 %** of jobs (exact interval);
* every shard the injector damaged was **repaired before the next try** (listed by the repair
  step, intact at the next try's sha256 check) in at least **90 %** of the cases (Clopper-Pearson);
* **fewer jobs fail with it than without**: failed share with 3 tries / failed share with 1
  try **< 1** (each share's exact bounds: the ratio's interval is the 3-try share's bounds over
  the 1-try share's opposite bounds);
* tries fail **independently**, as a wrapper that repairs storage makes them: failed share with
  3 tries / p_try^3 (p_try = the measured share of failed tries, both arms) within
  **[p^0.5, p^-0.5]** (halfway on a log scale to the 2- and 4-try models; [0.71, 1.41] at
  p = 0.5); its interval is the share's exact interval over p_try^3, p_try taken as known (it
  rests on ~3x as many tries as there are jobs). A repair that leaves the shard bad makes the
  tries after a corruption fail too and the ratio rise; a wrapper that stops early makes it
  p^-1 or p^-2.

Jobs are pooled over launches: each job's outcome is an independent draw of the injector
(its own exponential failure times), and the launches (>= 5, each >= 10 jobs per arm) bound
how much a single session can count; too few jobs to expect :data:`MIN_EXPECTED_FAILURES` failures
at p_try^3 is inconclusive, never "not reproduced".
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from hpcbench.core.results import json_object
from hpcbench.experiments.fault_tolerance.claims import (C11_APPLIES, C11_MIN_NEWEST_SHARE, C11_MIN_RATIO, C11_OVERHEAD_PCT,
                                                        C15_MIN_SHARE, GUIDE_C11_FULL_EVERY_S, GUIDE_C11_LIGHT_EVERY_S,
                                                        GUIDE_C15_TRIES, MIN_EXPECTED_FAILURES, affordable_save_s,
                                                        survival_reference)
from hpcbench.guide.claims import Claim
from hpcbench.judge.evidence import NO_VALUE, Evidence, Judgement, select
from hpcbench.judge.rulekit import Level, in_group, judge_levels, launch_groups
from hpcbench.judge.verdict import (CONFIDENCE, INCONCLUSIVE, Interval, Outcome, Reference, clopper_pearson, combine,
                                    judge, mean_interval, share_outcome)

NOT_APPLICABLE = "not applicable: "


# -- C11 ----------------------------------------------------------------------------------

def _interval_problem(params: dict, name: str, guide: float) -> str:
    value = params.get(name)
    if value is None or math.isclose(float(value), guide):
        return ""
    return f"the launch used {name} = {float(value):g} s, not the guide's {guide:g} s"


def _members_judgement(evidence: Evidence, members: list[tuple[str, Outcome, str | None]], what: str,
                       base: Judgement | None = None) -> Judgement:
    """One verdict from members (label, outcome, why not applicable), after ``base``'s outcomes if given."""
    outcomes = list(base.outcomes) if base is not None else []
    labels = list(base.labels) if base is not None else []
    applicable = [o for o in outcomes if not o.why.startswith(NOT_APPLICABLE)]
    reasons = []
    for label, outcome, why_not in members:
        if why_not:
            outcome = Outcome(INCONCLUSIVE, outcome.interval, outcome.reference, NOT_APPLICABLE + why_not)
            reasons.append(why_not)
        else:
            applicable.append(outcome)
        outcomes.append(outcome)
        labels.append(label)
    if not outcomes:
        return Judgement(INCONCLUSIVE, NO_VALUE, f"{what} No launch measured the series, so nothing to judge."
                         + evidence.excluded_note())
    detail = base.detail if base is not None and base.outcomes else what + evidence.excluded_note()
    if reasons:
        detail += f" Not applicable in {len(reasons)} of {len(members)} member(s): {sorted(set(reasons))[0]}."
    measured = "; ".join(f"{label}: {o.describe()}" for label, o in zip(labels, outcomes))
    return Judgement(combine(applicable) if applicable else INCONCLUSIVE, measured, detail, tuple(outcomes),
                     tuple(labels))


def _by_launch(rows: pd.DataFrame) -> list[pd.DataFrame]:
    return [part for _, part in rows.groupby(["run_id", "task_id"], sort=True)] if len(rows) else []


def work_lost_members(evidence: Evidence) -> list[tuple[str, Outcome, str | None]]:
    """C11's work-lost members per strict launch group: mean work lost, and restores from the newest checkpoint."""
    members = []
    groups = launch_groups(evidence)
    confidence = 1 - (1 - CONFIDENCE) / 2
    for group_text, launches in groups:
        first = launches.iloc[0]
        why_not = C11_APPLIES(first) or _interval_problem(json_object(first["params"]), "light_interval_s",
                                                              GUIDE_C11_LIGHT_EVERY_S) or None
        rows = select(in_group(evidence.summaries, launches), {"phase": "failure"})
        if "restored_newest_samples" not in rows.columns:  # records from before work lost was measured in wall time
            continue
        per_launch = [(np.asarray(list(p["samples"].iloc[0]), dtype=float),
                       np.asarray(list(p["restored_newest_samples"].iloc[0]), dtype=float))
                      for p in _by_launch(rows) if len(p["samples"].iloc[0])]
        if not per_launch:
            continue
        failures = min(len(lost) for lost, _ in per_launch)
        mean, low, high = mean_interval([float(lost.mean()) for lost, _ in per_launch], confidence=confidence)
        lost = judge(Interval(mean, low, high, len(per_launch), failures, " s"),
                     Reference(GUIDE_C11_LIGHT_EVERY_S, upper=GUIDE_C11_LIGHT_EVERY_S, unit=" s",
                               source="'a light checkpoint every 10 minutes': at most 10 minutes lost per failure"))
        newest = np.concatenate([n for _, n in per_launch])
        restored = share_outcome(int(newest.sum()), newest.size,
                                 Reference(1.0, lower=C11_MIN_NEWEST_SHARE, unit="",
                                           source="falling back past the newest light checkpoint loses more "
                                                  "than one interval"),
                                 launches=len(per_launch), steps=failures, confidence=confidence)
        suffix = f" ({group_text})" if len(groups) > 1 else ""
        members += [(f"mean work lost per failure at the {GUIDE_C11_LIGHT_EVERY_S} s light interval{suffix}", lost,
                     why_not),
                    (f"failures restored from the newest complete light checkpoint{suffix}", restored, why_not)]
    return members


def rule_c11(claim: Claim, evidence: Evidence) -> Judgement:
    """C11: overhead share at the guide's interval, zstd's ratio, work lost per failure in wall time."""
    def levels(launch: pd.Series) -> list[Level]:
        params = json_object(launch["params"])
        light_na = _interval_problem(params, "light_interval_s", GUIDE_C11_LIGHT_EVERY_S)
        full_na = _interval_problem(params, "full_interval_s", GUIDE_C11_FULL_EVERY_S)
        level = params.get("zstd_level", "?")
        share = Reference(C11_OVERHEAD_PCT, upper=C11_OVERHEAD_PCT, unit=" %",
                          source="'affordable' checkpoints: <= 1 % of the wall time (our bound; the guide gives none)")
        ratio = Reference(C11_MIN_RATIO, lower=C11_MIN_RATIO, unit="x", source="'compressed with Zstandard'")
        out = []
        for model in params.get("models") or []:
            for dtype in params.get("dtypes") or []:
                at = {"phase": "save", "model": model, "dtype": dtype}
                out += [
                    Level(f"{model} {dtype} light: save / ({GUIDE_C11_LIGHT_EVERY_S} s + save)",
                          {**at, "tier": "light"}, share, not_applicable=light_na),
                    Level(f"{model} {dtype} full: save / ({GUIDE_C11_FULL_EVERY_S} s + save)",
                          {**at, "tier": "full"}, share, not_applicable=full_na),
                    Level(f"{model} {dtype} light: raw / zstd-{level} bytes", {**at, "tier": "light"}, ratio,
                          column="ratio_samples"),
                ]
        model = params.get("overhead_model")
        if model:
            out.append(Level(f"{model} light save's stall of training / ({GUIDE_C11_LIGHT_EVERY_S} s + stall)",
                             {"phase": "overhead", "model": model}, share, not_applicable=light_na))
        return out

    what = (f"Per launch, the median over saves of a synchronous save's share of the wall time at the guide's "
            f"interval (reference <= {C11_OVERHEAD_PCT:g} %, light at {GUIDE_C11_LIGHT_EVERY_S} s, full at "
            f"{GUIDE_C11_FULL_EVERY_S} s; and the light save's stall of overhead_model's training loop), of zstd's "
            f"raw / written bytes (>= {C11_MIN_RATIO}x), each with a Student-t interval over launches; and the work "
            f"lost per failure injected at a drawn wall-clock moment (from the kill until resumed training is back "
            f"where it was, restore included), as a share of the scaled-down cadence times "
            f"{GUIDE_C11_LIGHT_EVERY_S} s: its mean over failures <= {GUIDE_C11_LIGHT_EVERY_S} s (t interval), and "
            f">= {C11_MIN_NEWEST_SHARE:.0%} of failures restored from the newest complete checkpoint (exact "
            f"interval). Every "
            f"model and dtype must hold; launches whose restored state differed from the saved one do not count; "
            f"nothing applies to checkpoints written to memory (tmpfs).")
    judgement = _members_judgement(evidence, work_lost_members(evidence), what,
                                   base=judge_levels(evidence, levels, applies=C11_APPLIES, what=what))
    note = storage_rate_note(evidence)
    return dataclasses.replace(judgement, detail=f"{judgement.detail} {note}") if note else judgement


def storage_rate_note(evidence: Evidence) -> str:
    """What the storage took during the overhead model's saves, against what C11's bound needs (context: the
    same save costs a different share on different storage; records without the bytes give no note)."""
    rows = evidence.summaries
    if "save_MB_per_s" not in rows.columns:
        return ""
    rows = rows[(rows["phase"] == "overhead") & rows["save_MB_per_s"].notna()]
    if not len(rows):
        return ""
    rate, mb = float(rows["save_MB_per_s"].median()), float(rows["bytes_written"].median()) / 1e6
    need = mb / affordable_save_s(GUIDE_C11_LIGHT_EVERY_S)
    return (f"Storage: the overhead model's saves moved their {mb:.0f} MB at {rate:.0f} MB/s through the save "
            f"(median over {len(rows)} launch(es)); {C11_OVERHEAD_PCT:g} % of {GUIDE_C11_LIGHT_EVERY_S} s needs "
            f"{need:.0f} MB/s for them, serialization and zstd included.")


# -- C15 ----------------------------------------------------------------------------------

def failure_ratio(k: int, n: int, over: tuple[float, float, float], *, launches: int, jobs: int,
                  confidence: float = CONFIDENCE) -> Interval:
    """A failed share ``k / n`` over a denominator ``(estimate, low, high)``, with the share's exact bounds.

    The bounds are the share's Clopper-Pearson bounds over the denominator's opposite bounds (a point
    denominator: low = high = estimate), so the interval is at least as wide as either one's.
    """
    if n == 0 or not over[0] > 0:
        return Interval(math.nan, math.nan, math.nan, launches, jobs, "x")
    low, high = clopper_pearson(k, n, confidence)
    estimate, d_low, d_high = over
    return Interval(k / n / estimate, low / d_high, high / d_low if d_low > 0 else math.inf, launches, jobs, "x")


def survival_members(per_launch: list[dict], repairs: list[float], *, suffix: str = "",
                     why_not: str | None = None) -> list[tuple[str, Outcome, str | None]]:
    """C15's four members from one strict group's launches, every count pooled over them.

    Args:
        per_launch: per launch ``{"failed3", "jobs3", "failed1", "jobs1", "tries_failed", "tries",
            "policy_ok", "policy_n"}``: failed and all jobs with the wrapper and without, failed and all tries
            (both arms), and the jobs whose wrapper followed its policy out of all.
        repairs: every repair check of those launches (1 = repaired before the next try).
    """
    confidence = 1 - (1 - CONFIDENCE) / 4
    n = len(per_launch)
    total = {key: sum(d[key] for d in per_launch) for key in per_launch[0]}
    jobs = min(min(d["jobs3"], d["jobs1"]) for d in per_launch)
    p = total["tries_failed"] / total["tries"] if total["tries"] else math.nan
    share = Reference(1.0, lower=C15_MIN_SHARE, unit="", source="the wrapper as described")
    policy = share_outcome(total["policy_ok"], total["policy_n"], share, launches=n, steps=jobs, confidence=confidence)
    repaired = (share_outcome(int(sum(repairs)), len(repairs), share, launches=n, steps=jobs, confidence=confidence)
                if repairs else judge(Interval(math.nan, math.nan, math.nan, n, jobs, ""), share))
    single = total["failed1"] / total["jobs1"] if total["jobs1"] else math.nan
    single_bounds = clopper_pearson(total["failed1"], total["jobs1"], confidence)
    side = judge(failure_ratio(total["failed3"], total["jobs3"], (single, *single_bounds), launches=n, jobs=jobs,
                               confidence=confidence),
                 Reference(p ** (GUIDE_C15_TRIES - 1), upper=1.0, unit="x",
                           source="the wrapper's purpose: fewer failed jobs than the same jobs run once"))
    predicted = p ** GUIDE_C15_TRIES
    reference = survival_reference(p)
    model = judge(failure_ratio(total["failed3"], total["jobs3"], (predicted, predicted, predicted), launches=n,
                                jobs=jobs, confidence=confidence), reference)
    expected = total["jobs3"] * predicted
    if expected < MIN_EXPECTED_FAILURES:
        model = Outcome(INCONCLUSIVE, model.interval, reference,
                        f"{total['jobs3']} jobs expect {expected:.1f} failures at p_try^{GUIDE_C15_TRIES} = "
                        f"{predicted:.3f}; a verdict needs >= {MIN_EXPECTED_FAILURES}")
    return [(f"wrapper's decisions followed its policy{suffix}", policy, why_not),
            (f"damaged shards repaired before the next try{suffix}", repaired, why_not),
            (f"failed jobs, {GUIDE_C15_TRIES} tries / 1 try{suffix}", side, why_not),
            (f"failed jobs with the wrapper / p_try^{GUIDE_C15_TRIES} at p_try = {p:.2f}{suffix}", model, why_not)]


def rule_c15(claim: Claim, evidence: Evidence) -> Judgement:
    """C15: the wrapper's decisions and repairs, and its failed jobs against 1 try and against p_try^3."""
    what = (f"Survival jobs (a real workload checking data shards' sha256) run through slurm/run_with_retries.sh "
            f"with {GUIDE_C15_TRIES} tries and with 1, side by side, under an independent injector (SIGKILL of the "
            f"running try's process group, or a flipped byte in a shard, at exponential times). Members: the "
            f"wrapper's decisions followed its policy and damaged shards were repaired before the next try, each in "
            f">= {C15_MIN_SHARE:.0%} of cases; failed share of jobs with the wrapper / without < 1 and / "
            f"p_try^{GUIDE_C15_TRIES} within [p^0.5, p^-0.5] (jobs and tries pooled over launches, exact "
            f"Clopper-Pearson bounds); "
            f"Bonferroni over the 4; >= 5 launches x 5 jobs and >= {MIN_EXPECTED_FAILURES} expected failures. "
            f"Level 1 of the claim (checkpoints named by host and job id, restored exactly) is each launch's "
            f"correctness check; level 2 (the repairing dataset) is io_formats'.")
    members: list[tuple[str, Outcome, str | None]] = []
    groups = launch_groups(evidence)
    for group_text, launches in groups:
        summaries = in_group(evidence.summaries, launches)
        per_launch, repairs, tries = [], [], set()
        survival = select(summaries, {"phase": "survival"})
        if "p_try" not in survival.columns:  # records from before the two arms
            continue
        for part in _by_launch(survival):
            arms = {r["mode"]: r for _, r in part.iterrows()}
            if "wrapper" not in arms or "single" not in arms:
                continue
            wrapper, single = arms["wrapper"], arms["single"]
            tries.add(int(wrapper["tries"]))
            policy = list(wrapper["policy_samples"]) + list(single["policy_samples"])
            per_launch.append({"failed3": int(wrapper["failed"]), "jobs3": int(wrapper["jobs"]),
                               "failed1": int(single["failed"]), "jobs1": int(single["jobs"]),
                               "tries_failed": int(wrapper["tries_failed"]) + int(single["tries_failed"]),
                               "tries": int(wrapper["tries_made"]) + int(single["tries_made"]),
                               "policy_ok": int(sum(policy)), "policy_n": len(policy)})
            key = (part["run_id"].iloc[0], part["task_id"].iloc[0])
            rows = select(summaries, {"phase": "repair"})
            for _, r in rows[(rows["run_id"] == key[0]) & (rows["task_id"] == key[1])].iterrows():
                repairs += list(r["samples"])
        if not per_launch:
            continue
        why_not = (None if tries == {GUIDE_C15_TRIES} else
                   f"the wrapper ran up to {sorted(tries)} tries, not the guide's {GUIDE_C15_TRIES}")
        members += survival_members(per_launch, repairs, suffix=f" ({group_text})" if len(groups) > 1 else "",
                                    why_not=why_not)
    if not members:
        return Judgement(INCONCLUSIVE, NO_VALUE, f"{what} No launch ran survival jobs in both arms, so nothing to "
                                                 f"judge." + evidence.excluded_note())
    return _members_judgement(evidence, members, what)


RULES = {"C11": rule_c11, "C15": rule_c15}
