"""The claims ledger: every claim of the guide (C1-C17), what was measured, and the verdict.

This module puts the experiments' registry and the claims together; what a rule sees and
returns (:class:`~hpcbench.judge.evidence.Evidence`, :class:`~hpcbench.judge.evidence.Judgement`,
:class:`~hpcbench.judge.evidence.LedgerRow`) lives below it, in :mod:`hpcbench.judge.evidence`.

Claims link one way: an experiment's SPEC names the claim ids it rules on
(:attr:`hpcbench.experiments.ClaimSet.rules`); a claim no SPEC rules on is *not
measured yet*. Evaluating a claim:

1. **Launches.** The records are split into launches (one task of one run: ``run_id``,
   ``task_id``). A launch whose task did not finish (its ``status.json`` says failed,
   pending or running) never counts, and is named in the row's detail.
2. **Summaries.** Each counted launch of the owning experiment is summarised once by the
   experiment's ``summarize`` (the same frame the notebook and the report show); rows of a
   summary whose correctness check failed (``ok`` False) are dropped and named.
3. **Facts.** Each launch's ``fact.*`` records (:mod:`hpcbench.system.facts`), its
   workers' ``backend`` and its ``storage.filesystem`` become columns of
   :attr:`~hpcbench.judge.evidence.Evidence.launches`, for applicability.
4. **Rule.** The rule returns a :class:`~hpcbench.judge.evidence.Judgement` built with the
   standard of :mod:`hpcbench.judge.verdict`; a rule that raises gives "inconclusive" with the error,
   so one broken rule never takes the ledger down.
5. **Prediction.** Every experiment whose SPEC predicts the claim
   (:attr:`hpcbench.experiments.ClaimSet.predictions`) is asked what the model predicts at
   the guide's scale, with the evidence of the experiment its SPEC names in
   :attr:`~hpcbench.experiments.ClaimSet.prediction_inputs` (whose launches measure the model's
   inputs), or its own (possibly no launches: a prediction works from platform data alone). The
   row's ``predicted`` is that text followed by the guide's own arithmetic; a predictor that
   raises gives "model: not available (...)", never a broken ledger.

**Kinds.** Every row names its claim's kind (:data:`hpcbench.guide.claims.KINDS`) and reads
its verdict in that kind's words (:func:`~hpcbench.judge.evidence.verdict_words`).

Light on purpose: pandas and numpy, no torch.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import pandas as pd

from hpcbench.guide.claims import Claim
from hpcbench.judge.evidence import (NO_VALUE, NOT_MEASURED, PREDICTION_SEPARATOR, VERDICTS, Evidence, Judgement,
                                     LedgerRow, evidence_for, row_of)

#: The claims API the report reads (:func:`evaluate_claims` and the verdicts its rows take); a
#: test swaps in another module with the same two names.
__all__ = ["VERDICTS", "evaluate_claim", "evaluate_claims", "model_prediction", "prediction_owners"]


def _not_measured(claim: Claim, owner: str | None, why: str, model: tuple[str, str] = ("", "")) -> LedgerRow:
    return row_of(claim, Judgement(NOT_MEASURED, NO_VALUE, why), owner, model[0], model_headline=model[1])


def prediction_owners() -> dict[str, list[str]]:
    """Claim id -> the experiments whose SPEC predicts it (:attr:`~hpcbench.experiments.ClaimSet.predictions`)."""
    from hpcbench.experiments import claim_owners

    return claim_owners("predictions")


def _evidence(experiment: str, records: pd.DataFrame, statuses: Mapping[tuple[str, str], str] | None,
              summaries: Mapping[str, pd.DataFrame] | None, cache: dict[str, Evidence] | None) -> Evidence:
    """:func:`~hpcbench.judge.evidence.evidence_for` with the experiment's ``summarize``, computed once per
    experiment when ``cache`` is given (shared across claims).

    Each caller gets its own shallow copy: a rule that adds a column to its summaries or a line
    to ``excluded`` does not change what the next claim's rule or predictor sees.
    """
    evidence = cache.get(experiment) if cache is not None else None
    if evidence is None:
        from hpcbench.experiments import EXPERIMENTS

        evidence = evidence_for(experiment, records, summarize=EXPERIMENTS.get(experiment).summarize,
                                statuses=statuses, summaries=(summaries or {}).get(experiment))
        if cache is not None:
            cache[experiment] = evidence
    return replace(evidence, summaries=evidence.summaries.copy(deep=False),
                   launches=evidence.launches.copy(deep=False), excluded=list(evidence.excluded))


def model_prediction(claim: Claim | str, records: pd.DataFrame, *,
                     statuses: Mapping[tuple[str, str], str] | None = None,
                     summaries: Mapping[str, pd.DataFrame] | None = None,
                     cache: dict[str, Evidence] | None = None) -> str:
    """What the models of every experiment predicting ``claim`` say at the guide's scale; ``""`` when none does.

    Each predictor gets the evidence of its SPEC's ``prediction_inputs``, else of its own experiment
    (possibly with no launches). One that raises gives ``"model: not available (<error>)"``: one
    broken model never takes the ledger down.
    Several predictions are joined with :data:`PREDICTION_SEPARATOR`.
    """
    return _model(claim, records, statuses=statuses, summaries=summaries, cache=cache)[0]


def _model(claim: Claim | str, records: pd.DataFrame, *, statuses: Mapping[tuple[str, str], str] | None,
           summaries: Mapping[str, pd.DataFrame] | None, cache: dict[str, Evidence] | None) -> tuple[str, str]:
    """(:func:`model_prediction`'s text, the first prediction's headline or ``""``).

    A predictor returns text, or an object with ``describe()`` and a ``headline`` (one number and its
    main assumption, for the summary row).
    """
    from hpcbench.experiments import EXPERIMENTS, get_claim

    claim = get_claim(claim) if isinstance(claim, str) else claim
    texts, headlines = [], []
    for owner in prediction_owners().get(claim.id, []):
        try:
            claims = EXPERIMENTS.get(owner).claims
            evidence = _evidence(claims.prediction_inputs or owner, records, statuses, summaries, cache)
            prediction = claims.predictions[claim.id](claim, evidence)
            describe = getattr(prediction, "describe", None)
            text = str(describe() if callable(describe) else prediction)
            headlines.append(str(getattr(prediction, "headline", "") or ""))
        except Exception as exc:  # noqa: BLE001 - one broken model must not take the ledger down
            text = f"model: not available ({type(exc).__name__}: {exc})"
        texts.append(text)
    return PREDICTION_SEPARATOR.join(t for t in texts if t), next((h for h in headlines if h), "")


def evaluate_claim(claim: Claim | str, records: pd.DataFrame, *,
                   statuses: Mapping[tuple[str, str], str] | None = None,
                   summaries: Mapping[str, pd.DataFrame] | None = None,
                   cache: dict[str, Evidence] | None = None) -> LedgerRow:
    """The ledger row of one claim.

    Args:
        claim: a :class:`Claim` or its id.
        records: rows of the one results schema (any experiments, possibly empty).
        statuses: task states by (run_id, task_id); launches not "done" do not count.
        summaries: per-experiment summaries already computed (the report computes them on
            its dask workers); computed here from ``records`` when absent.
        cache: evidence by experiment, filled and reused across claims (:func:`evaluate_claims`
            passes one, so each experiment is summarised once).
    """
    from hpcbench.experiments import EXPERIMENTS, get_claim, rule_owners

    claim = get_claim(claim) if isinstance(claim, str) else claim
    model = _model(claim, records, statuses=statuses, summaries=summaries, cache=cache)
    owners = rule_owners().get(claim.id, [])
    if not owners:
        return _not_measured(claim, None, "No hpcbench experiment rules on this claim yet.", model)
    owner = owners[0]
    present = not records.empty and (records["experiment"] == owner).any()
    if not present:
        return _not_measured(claim, owner, f"No records of experiment '{owner}'; running it would measure "
                                           f"this claim.", model)
    regime = brief = ""
    try:
        evidence = _evidence(owner, records, statuses, summaries, cache)
        claims = EXPERIMENTS.get(owner).claims
        if claim.id in claims.regimes:
            regime = claims.regimes[claim.id].summary(evidence.launches)
            brief = claims.regimes[claim.id].brief(evidence.launches)
        judgement = claims.rules[claim.id](claim, evidence)
    except Exception as exc:  # noqa: BLE001 - one broken rule must not take the ledger down
        judgement = Judgement("inconclusive", NO_VALUE,
                              f"The rule of {owner} failed ({type(exc).__name__}: {exc}), so no verdict.")
    return row_of(claim, judgement, owner, model[0], regime, model_headline=model[1], regime_brief=brief)


def evaluate_claims(records: pd.DataFrame, *, statuses: Mapping[tuple[str, str], str] | None = None,
                    summaries: Mapping[str, pd.DataFrame] | None = None) -> list[LedgerRow]:
    """One ledger row per claim, C1..C17, in claim order (see :func:`evaluate_claim`), as the experiments declare
    them (:func:`hpcbench.experiments.all_claims`)."""
    from hpcbench.experiments import all_claims

    cache: dict[str, Evidence] = {}
    return [evaluate_claim(claim, records, statuses=statuses, summaries=summaries, cache=cache)
            for claim in all_claims()]
