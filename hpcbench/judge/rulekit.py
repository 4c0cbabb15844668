"""What verdict rules share: strict launch groups, paired comparisons, applicability, one sentence.

A rule states its comparisons in advance (a numerator series, a denominator series and
a :class:`~hpcbench.judge.verdict.Reference` each), then :func:`judge_comparisons`:

* splits the launches into strict groups — same parameters and same recorded facts
  (cluster, link rate, file system...) — so that ext4 is never pooled with Lustre, nor a
  1-node run with a 2-node one;
* asks ``applies(launch_facts)`` of every group, the same question whatever the values (a claim's
  :class:`~hpcbench.judge.applicability.Requirement`, declared in its experiment's ``claims.py``);
* measures every comparison in every group as a paired ratio over launches with its 95 %
  interval, Holm-corrected across all of them;
* reads the verdict: not applicable or too few launches -> inconclusive; else
  reproduced only when every applicable comparison is, not reproduced when any is not.

**Sessions.** Launches of one session (one run: ``run_id``) share the machine's state — its
other load, the link's calibration, the page cache — so an interval speaks for the session
that measured it, and launches of two sessions are never pooled: each session is a group of
its own (named in the labels when there are several). When the same comparison's sessions
reach different verdicts the claim is inconclusive ("the sessions disagree"); when their
verdicts agree but their intervals are disjoint, the detail says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import pandas as pd

from hpcbench.judge.evidence import (ARITHMETIC, MEASUREMENT, NO_VALUE, NOT_TESTABLE, Evidence, Judgement,
                                     paired_samples, select)
from hpcbench.judge.feasibility import Reach, not_testable, read_parts
from hpcbench.judge.verdict import (CONFIDENCE, INCONCLUSIVE, MEDIAN, Outcome, Reference, combine, judge,
                                    judge_family, paired_comparison, single_value)

#: Facts that make two launches incomparable when they differ.
GROUP_FACTS = ("cluster", "link_rate_bps", "link_delay_s", "infiniband", "gpus", "backend", "storage.filesystem")


@dataclass(frozen=True)
class Comparison:
    """One ratio a rule states in advance: numerator series over denominator series against a band."""

    label: str
    numerator: Mapping[str, Any]
    denominator: Mapping[str, Any]
    reference: Reference
    match: tuple[str, ...] = ("run_id", "task_id")
    """How numerator and denominator launches pair: the same launch by default."""
    not_applicable: str = ""
    """Set (from recorded facts, before any value is read) when this comparison cannot test the claim."""
    column: str = "samples"
    """The summary column holding each launch's per-step values."""
    estimator: str = MEDIAN
    """Each launch's value from its steps (:data:`~hpcbench.judge.verdict.ESTIMATORS`): ``median`` for a claim
    about a typical step; ``work_over_time`` (per-step rates) or ``mean_time`` (per-step times) for a throughput
    claim, which counts stalled steps (work over wall time)."""
    reach: Reach | None = None
    """What this group's platform can show (:class:`~hpcbench.judge.feasibility.Reach`), computed from recorded
    facts before any value is read; a band above it makes the comparison "not testable here"."""


def _fact_text(value: Any) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "?"
    return f"{value:g}" if isinstance(value, float) else str(value)


SESSION = "session"
#: Reasons a member is not counted that name their own kind, shown without "not applicable: ".
SELF_DESCRIBING = ("context:", "inconclusive:")


def launch_groups(evidence: Evidence, ignore_params: Iterable[str] = ()) -> list[tuple[str, pd.DataFrame]]:
    """The launches split by parameters (less ``ignore_params``), :data:`GROUP_FACTS` and session.

    Returns:
        (a readable description of the group, its launches) in a stable order. With several
        groups a description names only what tells the groups apart (the parameters and facts
        that differ among them, the session when there are several); one group is described by
        its recorded facts.
    """
    launches = evidence.launches
    if launches.empty:
        return []
    ignore = set(ignore_params) | {"output_dir"}
    several_sessions = launches["run_id"].nunique() > 1

    def key(row: pd.Series) -> str:
        try:
            params = {k: v for k, v in json.loads(row["params"]).items() if k not in ignore}
        except (TypeError, ValueError, AttributeError):
            params = {}
        facts = {f: _fact_text(row.get(f)) for f in GROUP_FACTS if f in launches.columns}
        if several_sessions:
            facts[SESSION] = str(row["run_id"])
        return json.dumps({"params": params, "facts": facts}, sort_keys=True, default=str)

    keyed = launches.assign(_group=[key(r) for _, r in launches.iterrows()])
    parsed = {k: json.loads(k) for k in keyed["_group"].unique()}

    def varying(part: str) -> list[str]:
        names = sorted({n for p in parsed.values() for n in p[part]})
        return [n for n in names if len({json.dumps(p[part].get(n), default=str) for p in parsed.values()}) > 1]

    several = len(parsed) > 1
    params_shown, facts_shown = (varying("params"), varying("facts")) if several else ([], None)
    groups = []
    for k, g in keyed.groupby("_group", sort=True):
        facts = parsed[k]["facts"]
        parts = [f"{name} {_fact_text(parsed[k]['params'].get(name))}" for name in params_shown]
        parts += [f"{name} {v}" for name, v in facts.items()
                  if v != "?" and (facts_shown is None or name in facts_shown)]
        groups.append((", ".join(parts) or "no recorded facts", g.drop(columns="_group")))
    return groups


def in_group(summaries: pd.DataFrame, launches: pd.DataFrame) -> pd.DataFrame:
    keys = set(zip(launches["run_id"], launches["task_id"]))
    return summaries[[(r, t) in keys for r, t in zip(summaries["run_id"], summaries["task_id"])]]


Comparisons = Sequence[Comparison] | Callable[["pd.Series"], Sequence[Comparison]]


def judge_comparisons(evidence: Evidence, comparisons: Comparisons, *,
                      applies: Callable[[pd.Series], str | None], what: str,
                      ignore_params: Iterable[str] = ()) -> Judgement:
    """Measure every comparison in every strict launch group, and read the claim's verdict.

    Args:
        comparisons: the comparisons, or a function of a group's first launch that states them
            from its parameters (e.g. C5's setting: the most DataLoader workers it ran).
        applies: given a group's first launch (params and facts), None when the claim applies
            there, else the reason it does not (asked before any value is looked at).
        what: one sentence on what the comparison is, for the detail.
    """
    family: list[tuple[str, Comparison, list, list, str | None]] = []
    for group_text, launches in launch_groups(evidence, ignore_params):
        first = launches.iloc[0]
        why_not = applies(first)
        summaries = in_group(evidence.summaries, launches)
        for comp in (comparisons(first) if callable(comparisons) else comparisons):
            nums, dens, _ = paired_samples(summaries, comp.numerator, comp.denominator, match=comp.match,
                                           samples=comp.column)
            if nums:
                family.append((group_text, comp, nums, dens, why_not or comp.not_applicable or None))
    if not family:
        return Judgement(INCONCLUSIVE, NO_VALUE,
                         f"{what} No launch measured both series of any comparison, so nothing to judge."
                         + evidence.excluded_note())
    boots = [paired_comparison(n, d, estimator=c.estimator) for _, c, n, d, _ in family]  # one t test per comparison
    # A comparison whose band lies beyond its reach is known untestable before any value is read: it is no
    # member of the family the multiplicity correction protects, so it cannot make the others stricter.
    tested = [i for i, (_, c, *_) in enumerate(family) if c.reach is None or not c.reach.blocks(c.reference)]
    in_family = judge_family([boots[i].interval for i in tested],
                             [boots[i].pvalues(family[i][1].reference) for i in tested],
                             [family[i][1].reference for i in tested]) if tested else []
    judged = [judge(b.interval, c.reference) for b, (_, c, *_) in zip(boots, family)]
    for i, outcome in zip(tested, in_family):
        judged[i] = outcome
    members = [(group_text, comp.label, why_not) for group_text, comp, _, _, why_not in family]
    return _assemble(evidence, members, judged, what, reaches=[comp.reach for _, comp, *_ in family])


def _without_session(group_text: str) -> str:
    """A group's description less its session: the same comparison in another session has the same one."""
    return ", ".join(part for part in group_text.split(", ") if not part.startswith(f"{SESSION} "))


def session_disagreement(members: Sequence[tuple[str, str]], outcomes: Sequence[Outcome]) -> tuple[bool, str]:
    """Whether sessions that measured the same comparison disagree, and what to say about it.

    Args:
        members: (group description, comparison label) per outcome; the description names its
            session (:func:`launch_groups`) when there are several.

    Returns:
        (True when the same comparison reached different verdicts in different sessions,
        a sentence naming each such comparison's sessions — also when their verdicts agree but
        their intervals are disjoint — or ``""``).
    """
    by_comparison: dict[tuple[str, str], list[tuple[str, Outcome]]] = {}
    for (group_text, label), outcome in zip(members, outcomes):
        session = next((p[len(SESSION) + 1:] for p in group_text.split(", ") if p.startswith(f"{SESSION} ")), None)
        if session is not None:
            by_comparison.setdefault((_without_session(group_text), label), []).append((session, outcome))
    disagree, notes = False, []
    for (_, label), runs in sorted(by_comparison.items()):
        if len(runs) < 2:
            continue
        verdicts = {o.verdict for _, o in runs}
        lows = [o.interval.low for _, o in runs]
        highs = [o.interval.high for _, o in runs]
        disjoint = max(lows) > min(highs)
        if len(verdicts) > 1 or disjoint:
            disagree |= len(verdicts) > 1
            shown = "; ".join(f"{session}: {o.interval.describe()} -> {o.verdict}" for session, o in runs)
            what = "reach different verdicts" if len(verdicts) > 1 else "agree on the verdict but their intervals are disjoint"
            notes.append(f"{label}: the sessions {what} ({shown})")
    if not notes:
        return False, ""
    return disagree, (" Each interval speaks for the session that measured it (launches of one session share the "
                      "machine's state). " + ". ".join(notes) + ".")


def _assemble(evidence: Evidence, members: list[tuple[str, str, str | None]], judged: list[Outcome],
              what: str, reaches: Sequence[Reach | None] = ()) -> Judgement:
    """The claim's verdict from its members' outcomes; members that do not apply are shown, never counted.

    A member whose band lies beyond its :class:`~hpcbench.judge.feasibility.Reach` is "not testable here":
    shown with its interval beside the cap, never counted as reproduced or not. The parts are all required
    (:func:`~hpcbench.judge.feasibility.read_parts`): one measured outside its band fails the claim, else one
    this platform cannot show leaves it not testable.
    """
    outcomes: list[Outcome] = []
    labels: list[str] = []
    parts: list[str] = []
    reasons: list[str] = []
    applicable: list[Outcome] = []
    untestable: list[Reach] = []
    several_groups = len({g for g, _, _ in members}) > 1
    reaches = list(reaches) or [None] * len(members)
    for (group_text, label, why_not), outcome, reach in zip(members, judged, reaches):
        if not why_not and reach is not None and reach.blocks(outcome.reference):
            outcome = not_testable(outcome, reach)
            untestable.append(reach)
        elif why_not:
            # A reason that already says what it is ("context: ...", "inconclusive: regime ...") is shown as it is.
            shown = why_not if why_not.startswith(SELF_DESCRIBING) else f"not applicable: {why_not}"
            outcome = Outcome(INCONCLUSIVE, outcome.interval, outcome.reference, shown)
            reasons.append(why_not)
        else:
            applicable.append(outcome)
        outcomes.append(outcome)
        labels.append(f"{label} ({group_text})" if several_groups else label)
        parts.append(f"{labels[-1]}: {outcome.describe()}")
    verdict = combine(applicable) if applicable else INCONCLUSIVE
    tested = [(g, l) for (g, l, why_not), o in zip(members, outcomes) if not why_not and o.verdict != NOT_TESTABLE]
    disagree, sessions_note = session_disagreement(tested, applicable)
    if disagree:
        verdict = INCONCLUSIVE
    decided_by, reason = MEASUREMENT, ""
    if untestable:
        verdict = read_parts([verdict, NOT_TESTABLE])
        if verdict == NOT_TESTABLE:
            decided_by = ARITHMETIC
            reason = f"this platform caps it at {min(r.cap for r in untestable):.2f}x"
    detail = what
    if reasons:
        detail += f" Not applicable in {len(reasons)} of {len(members)} comparison(s): {sorted(set(reasons))[0]}."
    if len(members) > 1:
        detail += f" {len(members)} comparisons, corrected for multiplicity."
    detail += sessions_note + evidence.excluded_note()
    return Judgement(verdict, "; ".join(parts), detail, tuple(outcomes), tuple(labels), decided_by=decided_by,
                     reason=reason)


@dataclass(frozen=True)
class Level:
    """One quantity a rule judges on its own (not a ratio): a series' per-step values against a band."""

    label: str
    where: Mapping[str, Any]
    reference: Reference
    column: str = "samples"
    not_applicable: str = ""


def judge_levels(evidence: Evidence, levels: Sequence[Level] | Callable[[pd.Series], Sequence[Level]], *,
                 applies: Callable[[pd.Series], str | None], what: str,
                 ignore_params: Iterable[str] = ()) -> Judgement:
    """Like :func:`judge_comparisons` for single quantities: mean over launches of per-launch medians.

    Several levels are Bonferroni-corrected (each interval at 1 - 0.05/m).
    """
    found: list[tuple[str, Level, list, str | None]] = []
    for group_text, launches in launch_groups(evidence, ignore_params):
        first = launches.iloc[0]
        why_not = applies(first)
        summaries = in_group(evidence.summaries, launches)
        for level in (levels(first) if callable(levels) else levels):
            rows = select(summaries, level.where)
            values = [list(v) for v in rows[level.column]] if len(rows) else []
            if any(values):
                found.append((group_text, level, values, why_not or level.not_applicable or None))
    if not found:
        return Judgement(INCONCLUSIVE, NO_VALUE, f"{what} No launch measured the series, so nothing to judge."
                         + evidence.excluded_note())
    confidence = 1 - (1 - CONFIDENCE) / len(found)
    judged = [judge(single_value(values, unit=level.reference.unit, confidence=confidence), level.reference)
              for _, level, values, _ in found]
    members = [(group_text, level.label, why_not) for group_text, level, _, why_not in found]
    return _assemble(evidence, members, judged, what)

