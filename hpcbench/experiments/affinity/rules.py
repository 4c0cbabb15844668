"""What each affinity mistake costs here, with its interval, and whether that makes it a mistake worth the name.

T-affinity is a technique of the guide (section 2.3: "common errors: GPUs not bound to their
NUMA node, wrong CPU affinity, huge pages ignored"), not one of its numbered claims C1-C17,
so the claims ledger has no row for it and :data:`RULES` is empty. The report section and
the notebook read :func:`judge_costs` instead, built on the same standard
(:func:`hpcbench.judge.rulekit.judge_comparisons`).

Fixed here from the guide's words before any value was looked at: the guide calls each of
these an *error* and gives no figure. Per mistake, one comparison, paired per launch (both
settings timed interleaved in the same launch): median step time of the mistake over the
right way's. Reference: **>= 1.05x** (our bound: 5 % is the least slowdown that makes a
setting an error worth a section, and more than the launch-to-launch noise of a few %; the
same bound the overlap rule uses for a gain the guide gives no figure for). So, per mistake:

* *reproduced*: the whole 95 % interval is >= 1.05x — the mistake costs at least 5 % here;
* *not reproduced*: the whole interval is below 1.05x — it costs less than that here;
* *inconclusive*: the interval straddles 1.05x, fewer than 5 launches x 5 steps, the mistake
  does not apply (one NUMA node; a plan with no cores apart for the loader; ranks x threads
  not above the cores — recorded by the worker from the topology, before any timing), or a
  setting was not really applied (its check failed: that launch's pair does not count).

Each mistake is its own question, so there is no correction across them.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import pandas as pd

from hpcbench.experiments.affinity.config import MISTAKES
from hpcbench.experiments.affinity.summary import MISTAKE, RIGHT, TITLES, summarize
from hpcbench.judge.evidence import NO_VALUE, Evidence, Judgement, evidence_for
from hpcbench.judge.rulekit import Comparison, judge_comparisons
from hpcbench.judge.verdict import INCONCLUSIVE, Reference

#: The least slowdown of the mistake over the right way that counts as a cost (our bound, see above).
MIN_COST = 1.05
COST_REFERENCE = Reference(MIN_COST, lower=MIN_COST, unit="x",
                           source="our bound: the guide calls it an error (section 2.3) and gives no figure")
#: The experiment's claims: none (T-affinity is a technique, not a numbered claim).
RULES: dict[str, Any] = {}


def _reasons(summaries: pd.DataFrame, mistake: str) -> dict[tuple[str, str], str]:
    """(run_id, task_id) -> why ``mistake`` does not apply in that launch ("" where it does)."""
    if summaries.empty or "mistake" not in summaries.columns:
        return {}
    rows = summaries[summaries["mistake"] == mistake]
    return {(r.run_id, r.task_id): str(r.not_applicable or "") for r in rows.itertuples(index=False)}


def judge_cost(evidence: Evidence, mistake: str) -> Judgement:
    """The cost of one mistake: median step time, mistake / right way, paired per launch, against >= 1.05x."""
    what = (f"{TITLES[mistake]}: median step time with the mistake over the right way's, both timed interleaved in "
            f"each launch; reference >= {MIN_COST:g}x (our bound: the guide names the error, gives no figure).")
    reasons = _reasons(evidence.summaries, mistake)
    timed = (not evidence.summaries.empty and "setting" in evidence.summaries.columns
             and ((evidence.summaries["mistake"] == mistake) & (evidence.summaries["setting"] == MISTAKE)).any())
    why_not = sorted({r for r in reasons.values() if r})
    if not timed:
        if why_not:
            return Judgement(INCONCLUSIVE, NO_VALUE, f"{what} Not applicable: {why_not[0]}; nothing was timed."
                             + evidence.excluded_note())
        return Judgement(INCONCLUSIVE, NO_VALUE, f"{what} No launch timed this pair (or its checks failed)."
                         + evidence.excluded_note())

    def comparisons(launch: pd.Series) -> list[Comparison]:
        return [Comparison(label=f"{mistake}: step time, mistake / right way",
                           numerator={"mistake": mistake, "setting": MISTAKE},
                           denominator={"mistake": mistake, "setting": RIGHT}, reference=COST_REFERENCE,
                           not_applicable=reasons.get((launch["run_id"], launch["task_id"]), ""))]

    return judge_comparisons(evidence, comparisons, applies=lambda launch: None, what=what)


def judge_costs(evidence: Evidence, mistakes: Any = MISTAKES) -> dict[str, Judgement]:
    """:func:`judge_cost` of every mistake the launches recorded (in :data:`MISTAKES` order), also those whose
    every pair failed its check (the summaries no longer hold them; the records do)."""
    seen = set(evidence.summaries["mistake"]) if "mistake" in evidence.summaries.columns else set()
    records = evidence.records
    if not records.empty:
        mine = records[(records["experiment"] == "affinity")
                       & records["metric"].isin(["step_time", "setting_applied", "not_applicable"])]
        seen |= {json.loads(text).get("mistake") for text in mine["labels"].dropna().unique()}
    return {m: judge_cost(evidence, m) for m in mistakes if m in seen}


def cost_verdicts(records: pd.DataFrame, *, statuses: Mapping[tuple[str, str], str] | None = None,
                  summaries: pd.DataFrame | None = None) -> dict[str, Judgement]:
    """:func:`judge_costs` straight from records (the notebook's one launch, or a report's many)."""
    return judge_costs(evidence_for("affinity", records, summarize=summarize, statuses=statuses,
                                    summaries=summaries))


def cost_table(judgements: Mapping[str, Judgement]) -> pd.DataFrame:
    """One row per mistake: the measured slowdown with its interval, and the verdict."""
    rows = [{"mistake": m, "what": TITLES[m], "slower by (mistake / right)": j.measured, "verdict": j.verdict,
             "detail": j.detail} for m, j in judgements.items()]
    return pd.DataFrame(rows, columns=["mistake", "what", "slower by (mistake / right)", "verdict", "detail"])
