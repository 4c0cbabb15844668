"""What a rule sees and what it returns: the launches of one experiment, the judgement, the ledger row.

The types and helpers every experiment's ``rules.py`` uses, below the report so that rules
never import it:

* :class:`Evidence`: the counted launches of one experiment, summarised once by its
  ``summarize``, each with its facts (``fact.*`` records, its workers' ``backend``, its
  ``storage.filesystem``), and what was left out and why (:func:`evidence_for`). A launch whose
  task did not finish, or a summary row whose correctness check failed (``ok`` False), never counts.
* :class:`Judgement`: the verdict, what was measured with its intervals, and how
  (built with :mod:`hpcbench.judge.verdict`'s standard).
* :class:`LedgerRow`: one line of the ledger (:func:`row_of`), its verdict read in the claim
  kind's words (:func:`verdict_words`): a figure is *reproduced* or *not reproduced*, a technique
  *works as described* or *does not work as described*, an anecdote is *consistent* or
  *inconsistent with the model*. Rules return the same three values whatever the kind.
* Reading launches: :func:`select`, :func:`paired_samples`, :func:`facts_of`.

Which experiment rules on which claim, and the ledger itself, are the report's
(:mod:`hpcbench.report.ledger`): they need the experiments' registry.

Light on purpose: pandas and numpy, no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import pandas as pd

from hpcbench.guide.claims import ANECDOTE, FIGURE, TECHNIQUE, Claim
from hpcbench.judge.verdict import ARITHMETIC, IMPLAUSIBLE, MEASUREMENT, NOT_TESTABLE, Outcome

VERDICTS = ("reproduced", "not reproduced", "inconclusive", IMPLAUSIBLE, NOT_TESTABLE, "context", "not measured yet")
NOT_MEASURED = "not measured yet"
CONTEXT = "context"
NO_VALUE = "—"  # what "measured" shows when nothing was measured
LAUNCH_KEYS = ["run_id", "task_id"]
#: A verdict in its claim kind's words: (reproduced, not reproduced) per kind; the others read the same.
_KIND_WORDS = {
    FIGURE: ("reproduced", "not reproduced"),
    TECHNIQUE: ("works as described", "does not work as described"),
    ANECDOTE: ("consistent with the model", "inconsistent with the model"),
}


def verdict_words(kind: str, verdict: str) -> str:
    """``verdict`` (one of :data:`VERDICTS`) as a claim of ``kind`` says it."""
    yes, no = _KIND_WORDS.get(kind, _KIND_WORDS[FIGURE])
    return {"reproduced": yes, "not reproduced": no}.get(verdict, verdict)
#: Columns every launch carries besides its facts.
LAUNCH_COLUMNS = ["run_id", "task_id", "experiment", "variant", "repetition", "params"]


@dataclass(frozen=True)
class Judgement:
    """What a rule decides: the verdict, what was measured (with intervals), and how."""

    verdict: str
    measured: str
    detail: str
    outcomes: tuple[Outcome, ...] = ()
    """The comparisons behind the verdict, each with its interval and reference band (drawn in the report)."""
    labels: tuple[str, ...] = ()
    """One short name per outcome (e.g. ``"hdf5 / files"``)."""
    decided_by: str = MEASUREMENT
    """:data:`ARITHMETIC` when the guide's consistency or the platform's reach decided, else :data:`MEASUREMENT`."""
    reason: str = ""
    """Why, in at most 8 words, for a verdict other than reproduced / not reproduced (the summary row)."""
    consistency: str = ""
    """The guide's statements checked against each other and the scale model (:mod:`hpcbench.judge.feasibility`)."""


@dataclass(frozen=True)
class LedgerRow:
    """One line of the ledger: a claim, what was measured, and the verdict."""

    claim_id: str
    section: str
    wording: str
    claimed: str
    """The guide's figures joined as readable text."""
    measured: str
    """What was measured here, with units and intervals, or ``"—"``."""
    predicted: str
    """What is predicted at the guide's scale: the model's text (:attr:`model_prediction`), then the
    guide's own arithmetic (:attr:`guide_arithmetic`), labelled; the arithmetic alone when no model predicts."""
    verdict: str
    """One of :data:`VERDICTS`."""
    detail: str
    """How the verdict was reached: comparison, reference, applicability, what was excluded."""
    experiment: str | None
    outcomes: tuple[Outcome, ...] = ()
    labels: tuple[str, ...] = ()
    model_prediction: str = ""
    """What the predicting experiments' models say at the guide's scale, with their inputs; ``""`` when none."""
    model_headline: str = ""
    """The first model's prediction as one number and its main assumption (the summary row); ``""`` when none."""
    guide_arithmetic: str = ""
    """The guide's own arithmetic (:attr:`hpcbench.guide.claims.Claim.predicted`)."""
    kind: str = FIGURE
    """The claim's kind (:data:`hpcbench.guide.claims.KINDS`)."""
    title: str = ""
    """The claim in a few words (:attr:`hpcbench.guide.claims.Claim.title`)."""
    headline: str = ""
    """The guide's main figure in a few words (:attr:`hpcbench.guide.claims.Claim.headline`)."""
    regime: str = ""
    """For a figure measured in a regime: the guide's regime and the one the launches reached; else ``""``."""
    regime_brief: str = ""
    """:attr:`regime` in a few words for the summary row (e.g. ``61 % busy, 4/5 in regime``); else ``""``."""
    decided_by: str = MEASUREMENT
    """Which of arithmetic or measurement decided the verdict (:attr:`Judgement.decided_by`)."""
    reason: str = ""
    """:attr:`Judgement.reason`: why, in at most 8 words."""
    consistency: str = ""
    """:attr:`Judgement.consistency`: the guide's statements checked against each other and the model."""

    def __post_init__(self) -> None:
        # An invariant of this module, not a user error: rules must use VERDICTS.
        assert self.verdict in VERDICTS, f"{self.claim_id}: verdict {self.verdict!r} not in {VERDICTS}"

    @property
    def verdict_text(self) -> str:
        """The verdict in the words of the claim's kind (:func:`verdict_words`)."""
        return verdict_words(self.kind, self.verdict)

    def as_record(self) -> dict[str, Any]:
        """The row as JSON-ready data (``report.json``'s ``ledger``): every comparison with its interval,
        n, reference band and outcome, so that teams can track verdicts across runs."""
        return {"claim": self.claim_id, "kind": self.kind, "section": self.section, "claimed": self.claimed,
                "experiment": self.experiment, "verdict": self.verdict, "verdict_text": self.verdict_text,
                "title": self.title, "headline": self.headline, "regime": self.regime or None,
                "regime_brief": self.regime_brief or None, "measured": self.measured,
                "decided_by": self.decided_by, "reason": self.reason or None,
                "consistency": self.consistency or None,
                "predicted": self.model_headline or None, "prediction": self.predicted,
                "comparisons": [_outcome_record(label, o) for label, o in
                                zip(self.labels or [""] * len(self.outcomes), self.outcomes)],
                "not_counted": sorted({o.why for o in self.outcomes if o.why.startswith(NOT_COUNTED_PREFIXES)}),
                "detail": self.detail}


@dataclass
class Evidence:
    """What a rule sees: the counted launches of its experiment, summarised, with their facts."""

    experiment: str
    summaries: pd.DataFrame
    """Every counted launch's summary rows, with :data:`LAUNCH_COLUMNS` prepended."""
    launches: pd.DataFrame
    """One row per counted launch: :data:`LAUNCH_COLUMNS` plus one column per fact."""
    records: pd.DataFrame
    """The raw records of every counted launch (all experiments: rules may read context)."""
    excluded: list[str] = field(default_factory=list)
    """Launches or series that do not count, and why."""

    def excluded_note(self) -> str:
        if not self.excluded:
            return ""
        more = f"; +{len(self.excluded) - 3} more" if len(self.excluded) > 3 else ""
        return f" Not counted: {'; '.join(self.excluded[:3])}{more}."


GUIDE_ARITHMETIC = "Guide's arithmetic"
PREDICTION_SEPARATOR = " · "


def combined_prediction(model_prediction: str, guide_arithmetic: str) -> str:
    """The predicted column's text: the model's, then the guide's arithmetic, labelled (either may be empty)."""
    if not model_prediction:
        return guide_arithmetic
    if not guide_arithmetic:
        return model_prediction
    return f"{model_prediction}{PREDICTION_SEPARATOR}{GUIDE_ARITHMETIC}: {guide_arithmetic}"


#: How an outcome that does not count says why (:mod:`hpcbench.judge.rulekit`): not applicable, context, regime.
NOT_COUNTED_PREFIXES = ("not applicable", "context:", "inconclusive: regime", "inconclusive: no gate ran",
                        NOT_TESTABLE)


def _number(value: float | None) -> float | None:
    """A float for JSON: None for NaN and infinities (an interval with too few launches has infinite bounds)."""
    import math

    return float(value) if value is not None and math.isfinite(value) else None


def _outcome_record(label: str, outcome: Outcome) -> dict[str, Any]:
    iv, ref = outcome.interval, outcome.reference
    return {"label": label, "estimate": _number(iv.estimate), "low": _number(iv.low), "high": _number(iv.high),
            "unit": iv.unit, "launches": iv.launches, "steps": iv.steps,
            "reference": {"value": _number(ref.value), "lower": _number(ref.lower), "upper": _number(ref.upper),
                          "unit": ref.unit, "source": ref.source},
            "verdict": outcome.verdict, "why": outcome.why}


#: A reason's prefix that the verdict word already says.
_SAID = ("not applicable: ", "inconclusive: ", "context: ", "not testable here: ")


def brief_reason(judgement: Judgement) -> str:
    """Why an inconclusive verdict is inconclusive, in at most 8 words: the rule's own reason, else the first
    comparison's (too few launches, a straddled bound, a regime missed, not applicable), else ``""``."""
    if judgement.reason or judgement.verdict != "inconclusive":
        return judgement.reason
    # A counted comparison's reason (too few launches, a straddled bound) says more than one not counted.
    whys = sorted((o.why for o in judgement.outcomes if o.why), key=lambda w: w.startswith(NOT_COUNTED_PREFIXES))
    if not whys:
        return "nothing measured" if judgement.measured == NO_VALUE else ""
    why = whys[0]
    for prefix in _SAID:
        why = why.removeprefix(prefix)
    if why.startswith("Holm-adjusted p"):
        why = "the interval straddles a bound of the band"
    while re.search(r"\([^()]*\)", why):  # the parenthesised detail stays in the detail
        why = re.sub(r"\s*\([^()]*\)", "", why)
    words = why.replace(";", ",").split(",")[0].split()
    return " ".join(words[:8])


def row_of(claim: Claim, judgement: Judgement, experiment: str | None, model_prediction: str = "",
           regime: str = "", *, model_headline: str = "", regime_brief: str = "") -> LedgerRow:
    """The ledger row of ``claim`` (the claim's own fields are copied, never retyped)."""
    return LedgerRow(claim_id=claim.id, section=claim.section, wording=claim.wording, claimed=claim.claimed(),
                     measured=judgement.measured, predicted=combined_prediction(model_prediction, claim.predicted),
                     verdict=judgement.verdict, detail=judgement.detail, experiment=experiment,
                     outcomes=judgement.outcomes, labels=judgement.labels, model_prediction=model_prediction,
                     model_headline=model_headline, guide_arithmetic=claim.predicted, kind=claim.kind,
                     title=claim.title, headline=claim.headline, regime=regime, regime_brief=regime_brief,
                     decided_by=judgement.decided_by, reason=brief_reason(judgement),
                     consistency=judgement.consistency)


# -- launches, summaries, facts ---------------------------------------------------------

def facts_of(records: pd.DataFrame) -> dict[str, Any]:
    """One launch's facts: ``fact.*`` rows, its workers' ``backend``, its ``storage.filesystem``."""
    facts: dict[str, Any] = {}
    if records.empty:
        return facts
    wanted = records["metric"].str.startswith("fact.") | records["metric"].isin(["backend", "storage.filesystem"])
    for row in records[wanted].itertuples(index=False):
        name = row.metric[5:] if row.metric.startswith("fact.") else row.metric
        if name in facts:
            continue
        text = row.text if isinstance(row.text, str) and row.text else None
        facts[name] = text if text is not None else (None if pd.isna(row.value) else float(row.value))
    return facts


def split_launches(records: pd.DataFrame) -> Iterable[tuple[tuple[str, str], pd.DataFrame]]:
    """(run_id, task_id) -> that launch's records."""
    if records.empty:
        return []
    return records.groupby(LAUNCH_KEYS, sort=True)


def summarize_launches(records: pd.DataFrame, summarize: Callable[[pd.DataFrame], pd.DataFrame],
                       experiment: str) -> pd.DataFrame:
    """Every launch of ``experiment`` summarised once, with :data:`LAUNCH_COLUMNS` in front."""
    frames = []
    mine = records[records["experiment"] == experiment] if not records.empty else records
    for (run_id, task_id), rows in split_launches(mine):
        summary = summarize(rows)
        if summary is None or summary.empty:
            continue
        first = rows.iloc[0]
        front = {"run_id": run_id, "task_id": task_id, "experiment": experiment, "variant": first["variant"],
                 "repetition": int(first["repetition"]), "params": first["params"]}
        summary = summary.copy()
        for i, (name, value) in enumerate(front.items()):
            if name in summary.columns:
                summary = summary.drop(columns=name)
            summary.insert(i, name, value)
        frames.append(summary)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=LAUNCH_COLUMNS)


def counted_records(records: pd.DataFrame, statuses: Mapping[tuple[str, str], str] | None
                    ) -> tuple[pd.DataFrame, list[str]]:
    """The records of launches whose task is done; the others named with their state.

    Args:
        statuses: (run_id, task_id) -> state from the run dirs' ``status.json``; ``None``
            when the records have no run dir (a notebook judging its own records).
    """
    if statuses is None or records.empty:
        return records, []
    keys = list(zip(records["run_id"], records["task_id"]))
    state = pd.Series([statuses.get(k, "unknown") for k in keys], index=records.index)
    dropped = sorted({f"{task} of {run}: task {s}" for (run, task), s in zip(keys, state) if s != "done"})
    return records[state == "done"], dropped


def evidence_for(experiment: str, records: pd.DataFrame, *,
                 summarize: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
                 statuses: Mapping[tuple[str, str], str] | None = None,
                 summaries: pd.DataFrame | None = None) -> Evidence:
    """Launches, summaries and facts of ``experiment`` in ``records`` (see the module docstring).

    Args:
        summarize: the experiment's ``summarize``, run on each counted launch when ``summaries``
            is not given (none: no summaries). Passed in, not looked up, so that rules need no registry.
        statuses: task states by (run_id, task_id); launches not "done" do not count.
        summaries: every launch's summary, already computed.
    """
    counted, excluded = counted_records(records, statuses)
    if summaries is None:
        summaries = (summarize_launches(counted, summarize, experiment) if summarize
                     else pd.DataFrame(columns=LAUNCH_COLUMNS))
    elif statuses is not None and not summaries.empty:
        done = {(r, t) for r, t in zip(counted["run_id"], counted["task_id"])}
        summaries = summaries[[(r, t) in done for r, t in zip(summaries["run_id"], summaries["task_id"])]]
    if "ok" in summaries.columns and len(summaries):
        bad = summaries[summaries["ok"] == False]  # noqa: E712 - NaN (no check) must not count as failed
        for row in bad.itertuples(index=False):
            why = getattr(row, "problem", "") or "its correctness check failed"
            excluded.append(f"{row.task_id} of {row.run_id}: {why}")
        summaries = summaries[summaries["ok"] != False]  # noqa: E712
    launches = []
    mine = counted[counted["experiment"] == experiment] if not counted.empty else counted
    for (run_id, task_id), rows in split_launches(mine):
        first = rows.iloc[0]
        launches.append({"run_id": run_id, "task_id": task_id, "experiment": experiment,
                         "variant": first["variant"], "repetition": int(first["repetition"]),
                         "params": first["params"], **facts_of(rows)})
    return Evidence(experiment=experiment, summaries=summaries.reset_index(drop=True),
                    launches=pd.DataFrame(launches, columns=None if launches else LAUNCH_COLUMNS),
                    records=counted, excluded=excluded)


def select(frame: pd.DataFrame, where: Mapping[str, Any]) -> pd.DataFrame:
    """Rows of ``frame`` whose columns equal ``where``'s values (floats compared with a tolerance)."""
    mask = pd.Series(True, index=frame.index)
    for column, value in where.items():
        if column not in frame.columns:
            return frame.iloc[0:0]
        col = frame[column]
        if isinstance(value, float):
            mask &= (pd.to_numeric(col, errors="coerce") - value).abs() <= 1e-9 * max(1.0, abs(value))
        else:
            mask &= col == value
    return frame[mask]


def paired_samples(summaries: pd.DataFrame, numerator: Mapping[str, Any], denominator: Mapping[str, Any], *,
                   match: Iterable[str] = LAUNCH_KEYS, samples: str = "samples"
                   ) -> tuple[list[list[float]], list[list[float]], list[tuple]]:
    """Step samples of two series, paired launch by launch.

    Args:
        numerator, denominator: column values selecting each series' summary rows.
        match: the columns that pair a numerator launch with a denominator launch (the same
            launch by default; ``("run_id", "repetition")`` pairs variants of one repetition).
        samples: the summary column holding a launch's per-step values.

    Returns:
        (numerator samples per launch, denominator samples per launch, the matched keys);
        launches that have only one of the two series are left out.
    """
    match = list(match)
    num = {tuple(r[k] for k in match): list(r[samples]) for _, r in select(summaries, numerator).iterrows()}
    den = {tuple(r[k] for k in match): list(r[samples]) for _, r in select(summaries, denominator).iterrows()}
    keys = sorted(set(num) & set(den), key=str)
    return [num[k] for k in keys], [den[k] for k in keys], keys
