"""Verdict rule of ``advisor``: C14 (the priority of communication optimisations).

Fixed here from the claim's words before any value was looked at. C14: "if bandwidth-bound use
gradient compression, else if latency-sensitive use topology optimisation, else overlap
computation and communication". The advisor (:mod:`hpcbench.advise`) applies that order to
each regime's **baseline** records; the rule asks whether the technique it picks is the one
that then measures best.

Per strict launch group (same parameters and facts, :func:`~hpcbench.judge.rulekit.launch_groups`)
and per regime:

* **the advisor's pick** — the most frequent pick over the launches (a tie: no pick);
* **each technique's gain** — the baseline's time per sample over the technique's, paired per
  launch (:func:`~hpcbench.judge.verdict.paired_ratio`, 95 % interval; shown);
* **the measured best** — the technique with the highest gain, *distinguishable* only where its
  paired ratio over every other technique (the other's time per sample / its own) lies above 1:
  the paired form of "its interval lies above every other's" (two gain intervals can overlap
  while the paired difference is clear, because launch-to-launch noise is shared). These
  pairwise comparisons of all groups and regimes form one family, Holm-corrected
  (:func:`~hpcbench.judge.verdict.judge_family`); fewer than 5 launches x 5 steps leave
  them inconclusive (n = ...);
* **agree** — pick == measured best, counted only where the best is distinguishable.

Measured: the regimes that agree, out of the regimes where a best was distinguishable, with the
intervals. **Reproduced** when every regime of the three (bandwidth, latency, compute) has a
distinguishable best and agrees; **not reproduced** when a distinguishable best disagrees with the
pick; **inconclusive** otherwise. Applicability, from recorded facts only: the regimes differ by
their link, so the run needs a real inter-node link
(:data:`~hpcbench.experiments.advisor.claims.C14_APPLIES`) and a phase whose link was not shaped for
it (``shaped`` False) does not count.

**Only where the pick could win.** A regime tests C14's order only where the technique the order
picks can, on this layout, do what the order picks it for (:data:`PICK_CANNOT_WIN`: given the
pick, which the advisor makes from the baseline's records alone, read from the launch's recorded
nodes, ranks per node and backend, never from a technique's measured value). The order
picks topology optimisation for a *latency-sensitive* run (the advisor's own classification:
the latency term is most of the modelled communication), so it must save latency steps. It
cannot where the two-level reduction takes no fewer latency steps than DDP's flat ring at either
level (the scale model's counts, :mod:`hpcbench.scale.algorithms`: the ring's inter-node steps
are ``2 (nodes-1)`` like the two-level one's, so the saving is in the node, ``2 nodes (r-1)``
ring steps against ``2 (r-1)``, or ``4 (r-1)`` on gloo, whose intra stages are all-reduces).
On 2 nodes with gloo, the emulated cluster's default, the counts are equal and the two-level
reduction only adds two stages per bucket, each with its own fixed cost; the inter-node bytes it
saves (a third on 2 nodes x 2 ranks) are the minor term by that same classification. A regime
whose pick cannot win there is "not applicable", neither agreement nor disagreement: its
measured best says nothing about whether the order is right where the technique works.

The claim, its band (:data:`~hpcbench.experiments.advisor.claims.FASTER`) and what the layout lets each pick
show (:data:`~hpcbench.experiments.advisor.claims.PICK_CANNOT_WIN`) are declared in
:mod:`~hpcbench.experiments.advisor.claims`; this module reads them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from hpcbench.experiments.advisor.claims import C14_APPLIES, FASTER, PICK_CANNOT_WIN, hierarchical_cannot_win  # noqa: F401 (tests)
from hpcbench.experiments.advisor.config import BASELINE, REGIME_NAMES, TECHNIQUES
from hpcbench.guide.claims import Claim
from hpcbench.judge.evidence import NO_VALUE, Evidence, Judgement, paired_samples
from hpcbench.judge.rulekit import in_group, launch_groups
from hpcbench.judge.verdict import (INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, Interval, Outcome, judge_family,
                                    paired_comparison, paired_ratio)


@dataclass
class RegimeResult:
    """One regime of one launch group: the pick, every gain, the measured best and whether they agree."""

    group: str
    regime: str
    pick: str | None
    picks: dict[str, int]
    gains: dict[str, Interval]
    best: str | None = None
    """the technique with the highest gain (a candidate until ``distinguishable``)"""
    versus: list[tuple[str, Outcome]] = field(default_factory=list)
    """(other technique, outcome of best over it)"""
    not_applicable: str | None = None

    @property
    def distinguishable(self) -> bool:
        return (self.not_applicable is None and bool(self.versus)
                and all(o.verdict == REPRODUCED for _, o in self.versus))

    @property
    def agree(self) -> bool | None:
        """pick == best where the best is distinguishable, else None (not counted)."""
        if not self.distinguishable:
            return None
        return self.pick == self.best

    def describe(self) -> str:
        picks = ", ".join(f"{p} {n}" for p, n in sorted(self.picks.items())) or "none"
        gains = ", ".join(f"{t} {i.describe()}" for t, i in self.gains.items())
        if self.not_applicable:
            end = f"not applicable: {self.not_applicable}"
        elif self.distinguishable:
            end = f"best {self.best} (distinguishable) -> {'agrees' if self.agree else 'DISAGREES'}"
        else:
            end = f"no distinguishable best (highest: {self.best or '-'})"
        return f"{self.regime}: advisor's pick {self.pick or 'none'} (launches: {picks}); gains {gains}; {end}"


def _pick(rows: pd.DataFrame) -> tuple[str | None, dict[str, int]]:
    """The most frequent pick over the launches' baseline rows (None on a tie or without any)."""
    counts = Counter(p for p in rows["pick"] if isinstance(p, str) and p)
    if not counts:
        return None, {}
    (top, n), *rest = counts.most_common()
    return (None if rest and rest[0][1] == n else top), dict(counts)


def regime_results(evidence: Evidence) -> tuple[list[RegimeResult], list[tuple[RegimeResult, str, list, list]]]:
    """Every (group, regime)'s pick and gains, and the pairwise comparisons still to be judged as one family."""
    results, family = [], []
    for group_text, launches in launch_groups(evidence):
        why_not = C14_APPLIES(launches.iloc[0])
        s = in_group(evidence.summaries, launches)
        for regime in [r for r in REGIME_NAMES if (s["regime"] == r).any()]:
            mine = s[s["regime"] == regime]
            pick, picks = _pick(mine[mine["technique"] == BASELINE])
            gains: dict[str, Interval] = {}
            for t in TECHNIQUES:
                nums, dens, _ = paired_samples(mine, {"technique": BASELINE}, {"technique": t})
                if nums:
                    gains[t] = paired_ratio(nums, dens)
            unshaped = "shaped" in mine.columns and (mine["shaped"] == False).any()  # noqa: E712 - None: unknown
            # read from the baseline's pick and the launch's facts, before any technique's value
            cannot_win = PICK_CANNOT_WIN[pick](launches.iloc[0]) if pick in PICK_CANNOT_WIN else None
            r = RegimeResult(group_text, regime, pick, picks, gains,
                             not_applicable=why_not or ("the link was not shaped for this phase" if unshaped
                                                        else cannot_win))
            ranked = sorted((i.estimate, t) for t, i in gains.items() if pd.notna(i.estimate))
            if ranked:
                r.best = ranked[-1][1]
                for other in (t for _, t in ranked[:-1]):
                    nums, dens, _ = paired_samples(mine, {"technique": other}, {"technique": r.best})
                    family.append((r, other, nums, dens))
            results.append(r)
    return results, family


def judge_regimes(evidence: Evidence) -> list[RegimeResult]:
    """:func:`regime_results` with every pairwise comparison judged, Holm-corrected as one family."""
    results, family = regime_results(evidence)
    if family:
        boots = [paired_comparison(n, d) for _, _, n, d in family]
        outcomes = judge_family([b.interval for b in boots], [b.pvalues(FASTER) for b in boots],
                                [FASTER] * len(boots))
        for (r, other, _, _), outcome in zip(family, outcomes):
            r.versus.append((other, outcome))
    return results


def c14_verdict(results: list[RegimeResult]) -> str:
    """Reproduced: all three regimes distinguishable and agreeing in every group; not reproduced: any
    distinguishable best disagrees; inconclusive otherwise."""
    applicable = [r for r in results if r.not_applicable is None]
    if any(r.agree is False for r in applicable):
        return NOT_REPRODUCED
    groups = {r.group for r in applicable}
    if groups and all({r.regime for r in applicable if r.group == g and r.agree} == set(REGIME_NAMES)
                      for g in groups):
        return REPRODUCED
    return INCONCLUSIVE


def rule_c14(claim: Claim, evidence: Evidence) -> Judgement:
    """C14: in how many regimes the advisor's pick (the guide's order) is the technique that measures best."""
    what = ("Per regime (a slow link, tiny buckets, a compute-heavy step), the advisor classifies the baseline's "
            "records (C14's order: bandwidth-bound -> gradient compression, latency-sensitive -> topology "
            "optimisation, else overlap); each technique's gain is the baseline's time per sample over its own, "
            "paired per launch; the measured best is the technique faster than every other (paired, "
            "Holm-corrected over all regimes); agreement counts only where that best is distinguishable. "
            "Reproduced when all three regimes agree, not reproduced when a distinguishable best disagrees. A "
            "regime counts only where its pick could win on the launch's layout (topology optimisation: fewer "
            "latency steps than the flat ring).")
    results = judge_regimes(evidence)
    if not results:
        return Judgement(INCONCLUSIVE, NO_VALUE, f"{what} No launch measured a regime." + evidence.excluded_note())
    counted = [r for r in results if r.agree is not None]
    agreeing = [r for r in counted if r.agree]
    several = len({r.group for r in results}) > 1
    parts = [(f"[{r.group}] " if several else "") + r.describe() for r in results]
    measured = (f"{len(agreeing)} of {len(counted)} regime(s) with a distinguishable best agree with the advisor's "
                f"pick (of {len(results)} regime(s)); " + "; ".join(parts))
    outcomes, labels = [], []
    for r in results:
        for other, o in r.versus:
            if r.not_applicable:
                o = Outcome(INCONCLUSIVE, o.interval, o.reference, f"not applicable: {r.not_applicable}")
            outcomes.append(o)
            labels.append((f"{r.group}: " if several else "") + f"{r.regime}: {r.best} over {other}")
    detail = what
    reasons = sorted({r.not_applicable for r in results if r.not_applicable})
    if reasons:
        detail += f" Not applicable: {reasons[0]}."
    short = [o.why for o in outcomes if o.why.startswith("n = ")]
    if short:
        detail += f" Too little data: {short[0]}."
    detail += evidence.excluded_note()
    return Judgement(c14_verdict(results), measured, detail, tuple(outcomes), tuple(labels))


RULES = {"C14": rule_c14}
