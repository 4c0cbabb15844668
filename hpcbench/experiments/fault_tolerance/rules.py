"""Verdict rules of ``fault_tolerance``: C11 (checkpoint cadence and zstd) and C15 (the 3-try wrapper).

Both references are fixed here from the claims' words, before any value is read.

**C11** — "full training state every hour, a light checkpoint every 10 minutes, compressed
with Zstandard". The guide gives no overhead figure; what its cadence promises is that
checkpointing is affordable and bounds the work a failure costs. Every part must hold, for
every model and dtype of the launch:

* *overhead*: a synchronous save (serialize + zstd + write, what the training loop waits for
  without an asynchronous writer) takes at most **1 %** of the wall time when repeated at the
  guide's interval: ``save / (interval + save) <= 1 %``, light tier at 600 s and full tier at
  3600 s. 1 % is our bound for "affordable" (the guide states none), chosen in advance;
* *compression*: zstd at the launch's ``zstd_level`` writes fewer bytes than the raw state:
  raw / written **>= 1.01** (the 1 % margin keeps an incompressible payload, which zstd
  stores with a few bytes of framing, from counting as compressed);
* *work lost*: the work lost per failure at the guide's 600 s light interval is at most
  **600 s** (the claim's "at most one light interval"): steps since the newest valid
  checkpoint at a failure injected at a uniformly random step, as a share of the light
  cadence in steps, times 600 s. The expected value is half the interval.

Applicability, from recorded facts: a checkpoint folder on tmpfs/ramfs holds the checkpoint
in memory, so no storage write was measured; the overhead and work-lost parts also need the
launch to have used the guide's intervals.

**C15** — "a job wrapper that reruns srun up to 3 times": if each try fails independently with
probability p, a job fails only when all 3 tries do, with probability p^3. Measured: the share
of survival jobs (real processes, failures injected with probability p) that failed after the
wrapper's tries, divided by p^3. The band separates 3 tries from 2 or 4: on a log scale it
reaches halfway to p^2 and to p^4, i.e. measured / p^3 in **[p^0.5, p^-0.5]** ([0.71, 1.41]
at p = 0.5). Its interval is a two-level bootstrap of the *mean* over launches and jobs (a
job's outcome is 0/1, whose median says nothing). Too few jobs to expect
:data:`MIN_EXPECTED_FAILURES` failures at p^3 is inconclusive, never "not reproduced".
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from hpcbench.core.facts import GUIDE_C11_FULL_EVERY_S, GUIDE_C11_LIGHT_EVERY_S, GUIDE_C15_TRIES
from hpcbench.guide.claims import Claim
from hpcbench.report.ledger import NO_VALUE, Evidence, Judgement, launch_params, select
from hpcbench.report.rulekit import Level, in_group, judge_levels, launch_groups
from hpcbench.report.verdict import (BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CONFIDENCE, INCONCLUSIVE, MIN_LAUNCHES,
                                     MIN_STEPS, Interval, Outcome, Reference, combine, judge)

#: C11: a save repeated at the guide's interval may cost at most this share of the wall time, in %.
C11_OVERHEAD_PCT = 1.0
#: C11: zstd must write at least 1 % fewer bytes than the raw state.
C11_MIN_RATIO = 1.01
#: C15: fewer failures than this expected at p^3 over all launches cannot tell 3 tries from 2 or 4.
MIN_EXPECTED_FAILURES = 10
IN_MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")


# -- C11 ----------------------------------------------------------------------------------

def storage_problem(launch: pd.Series) -> str | None:
    """C11's overhead is a storage write; a checkpoint folder in memory measured none."""
    fs = str(launch.get("storage.filesystem") or "unknown")
    if fs.split()[0].lower() in IN_MEMORY_FILESYSTEMS:
        return f"the checkpoints were written to {fs}, which holds them in memory: no storage write was measured"
    return None


def _interval_problem(params: dict, name: str, guide: float) -> str:
    value = params.get(name)
    if value is None or math.isclose(float(value), guide):
        return ""
    return f"the launch used {name} = {float(value):g} s, not the guide's {guide:g} s"


def rule_c11(claim: Claim, evidence: Evidence) -> Judgement:
    """C11: overhead share of each tier at the guide's interval, zstd's ratio, work lost per failure."""
    def levels(launch: pd.Series) -> list[Level]:
        params = launch_params(launch["params"])
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
        out.append(Level(f"work lost per failure at the {GUIDE_C11_LIGHT_EVERY_S} s light interval",
                         {"phase": "failure"},
                         Reference(GUIDE_C11_LIGHT_EVERY_S, upper=GUIDE_C11_LIGHT_EVERY_S, unit=" s",
                                   source="'a light checkpoint every 10 minutes': at most 10 minutes lost"),
                         not_applicable=light_na))
        return out

    what = (f"Per launch, the median over saves of a synchronous save's share of the wall time at the guide's "
            f"interval (reference <= {C11_OVERHEAD_PCT:g} %, light at {GUIDE_C11_LIGHT_EVERY_S} s, full at "
            f"{GUIDE_C11_FULL_EVERY_S} s), of zstd's raw / written bytes (>= {C11_MIN_RATIO}x) and of the work lost "
            f"per injected failure (<= {GUIDE_C11_LIGHT_EVERY_S} s); every model and dtype must hold; launches whose "
            f"restored state differed from the saved one do not count; the overhead does not apply to checkpoints "
            f"written to memory (tmpfs).")
    return judge_levels(evidence, levels, applies=storage_problem, what=what)


# -- C15 ----------------------------------------------------------------------------------

def survival_reference(p: float) -> Reference:
    """measured / p^3 within halfway (log scale) to the 2- and 4-try models: [p^0.5, p^-0.5]."""
    return Reference(1.0, lower=p ** 0.5, upper=p ** -0.5, unit="x",
                     source=f"'reruns up to {GUIDE_C15_TRIES} times': p^{GUIDE_C15_TRIES}, not p^2 or p^4")


def failure_ratio(outcomes: Sequence[Sequence[float]], predicted: float, *, confidence: float = CONFIDENCE,
                  resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> Interval:
    """Mean over launches of each launch's failed share of jobs, over ``predicted``, with a 95 % interval.

    Two-level bootstrap as :func:`hpcbench.report.verdict.paired_ratio`, with the mean in place
    of the median: launches with replacement, then the 0/1 job outcomes inside each chosen launch
    (for 0/1 values that resample is a binomial draw of the launch's size at its share).

    Args:
        outcomes: one sequence per launch of job outcomes (1 = the job failed after all its tries).
        predicted: the failure probability the survival model predicts (p^3).
    """
    launches = [a[np.isfinite(a)] for a in (np.asarray(o, dtype=float) for o in outcomes)]
    launches = [a for a in launches if a.size]
    n = len(launches)
    if n == 0 or not predicted > 0:
        return Interval(math.nan, math.nan, math.nan, n, 0, "x")
    sizes = np.array([a.size for a in launches])
    shares = np.array([a.mean() for a in launches])
    estimate = float(shares.mean() / predicted)
    if n < 2:
        return Interval(estimate, -math.inf, math.inf, n, int(sizes.min()), "x")
    rng = np.random.default_rng(seed)
    chosen = rng.integers(0, n, size=(resamples, n))
    stats = (rng.binomial(sizes[chosen], shares[chosen]) / sizes[chosen]).mean(axis=1) / predicted
    alpha = 1.0 - confidence
    low, high = np.quantile(stats, [alpha / 2, 1 - alpha / 2])
    return Interval(estimate, float(low), float(high), n, int(sizes.min()), "x")


def judge_survival(outcomes: Sequence[Sequence[float]], p: float, tries: int = GUIDE_C15_TRIES) -> Outcome:
    """The C15 outcome of one group's survival jobs: the interval, the band, the expected-failures guard."""
    predicted = p ** tries
    interval = failure_ratio(outcomes, predicted)
    reference = survival_reference(p)
    outcome = judge(interval, reference)
    jobs = sum(len(o) for o in outcomes)
    expected = jobs * predicted
    if outcome.verdict != INCONCLUSIVE and expected < MIN_EXPECTED_FAILURES:
        return Outcome(INCONCLUSIVE, interval, reference,
                       f"n = {jobs} jobs expect {expected:.1f} failures at p^{tries}; a verdict needs >= "
                       f"{MIN_EXPECTED_FAILURES}")
    return outcome


def rule_c15(claim: Claim, evidence: Evidence) -> Judgement:
    """C15: the share of jobs that failed after the wrapper's tries, over p^3, per strict launch group."""
    what = (f"Survival jobs, each a real process retried by the wrapper up to {GUIDE_C15_TRIES} times, each try "
            f"failing with an injected probability p: the failed share of jobs over p^{GUIDE_C15_TRIES}, mean over "
            f"launches with a two-level bootstrap interval; reference: within [p^0.5, p^-0.5] (halfway, on a log "
            f"scale, to the 2- and 4-try models); >= {MIN_LAUNCHES} launches x {MIN_STEPS} jobs and >= "
            f"{MIN_EXPECTED_FAILURES} expected failures. Level 1 of the claim (checkpoints named by host and job id, "
            f"restored exactly) is each launch's correctness check; level 2 (the repairing dataset) is io_formats'.")
    members: list[tuple[str, Outcome, str | None]] = []
    groups = launch_groups(evidence)
    for group_text, launches in groups:
        rows = select(in_group(evidence.summaries, launches), {"phase": "survival"})
        if rows.empty:
            continue
        for (p, tries), part in rows.groupby(["p", "tries"], sort=True):
            outcome = judge_survival([list(s) for s in part["samples"]], float(p), int(tries))
            why_not = (None if int(tries) == GUIDE_C15_TRIES else
                       f"the wrapper ran up to {int(tries)} tries, the guide's {GUIDE_C15_TRIES}")
            label = f"failed jobs / p^{GUIDE_C15_TRIES} at p = {float(p):g}"
            members.append((f"{label} ({group_text})" if len(groups) > 1 else label, outcome, why_not))
    if not members:
        return Judgement(INCONCLUSIVE, NO_VALUE, f"{what} No launch ran survival jobs, so nothing to judge."
                         + evidence.excluded_note())
    outcomes, labels, parts, applicable, reasons = [], [], [], [], []
    for label, outcome, why_not in members:
        if why_not:
            outcome = Outcome(INCONCLUSIVE, outcome.interval, outcome.reference, f"not applicable: {why_not}")
            reasons.append(why_not)
        else:
            applicable.append(outcome)
        outcomes.append(outcome)
        labels.append(label)
        parts.append(f"{label}: {outcome.describe()}")
    detail = what
    if reasons:
        detail += f" Not applicable in {len(reasons)} of {len(members)} group(s): {sorted(set(reasons))[0]}."
    verdict = combine(applicable) if applicable else INCONCLUSIVE
    return Judgement(verdict, "; ".join(parts), detail + evidence.excluded_note(), tuple(outcomes), tuple(labels))


RULES = {"C11": rule_c11, "C15": rule_c15}
