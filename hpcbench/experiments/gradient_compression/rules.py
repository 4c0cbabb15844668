"""Verdict rule of ``gradient_compression``: C8 (2-bit gradients in 4 MB buckets, layer norms left uncompressed).

Fixed here from the claim's words before any value was looked at (the claim, its figures, bands and
regime are declared in :mod:`~hpcbench.experiments.gradient_compression.claims`). C8: "Gradient compression to
2 bits in 4 MB buckets, leaving layer_norm parameters uncompressed, is one of the case's
communication optimisations"; predicted: 16x less traffic for compressed buckets.

* **Setting** — read from what the launch recorded, never from its values: the ``quant2bit``
  series sent codes of :data:`~hpcbench.experiments.gradient_compression.claims.GUIDE_C8_BITS` = 2
  bits (its recorded ``wire_bits``), every series ran with DDP buckets of the guide's 4 MiB
  (``bucket_cap_mb`` = ``GUIDE_C8_BUCKET_BYTES``), and the ``skip`` list leaves a parameter named
  ``layer_norm`` uncompressed. A launch in another setting measures another technique: not applicable, with
  the reason.
* **Level 1, traffic** — per model and mode, the compressed part's float32 bytes over the bytes
  it really sent, both counted per step by the hook (never assumed). Reference: **16x** (32 bits
  over 2, the guide's "16x less traffic"), band **>= 12x**, i.e. a wire ratio of at most 1/12:
  the per-chunk scales and the padding may cost up to a third more than the bare 2 bits (2.67
  bits per element), no more.
* **Level 2, effect** — median total samples/s of ``quant2bit`` over ``none`` (float32
  all-reduce), paired per launch (all series run interleaved step by step in the same job).
  Reference: a gain of **>= 1.05x**. That bound is ours: the guide gives a figure only for the
  whole case (3.2x from three optimisations together, C7), none for C8 alone; 5 % is the least
  gain that makes "one of the case's communication optimisations" worth doing and that
  launch-to-launch noise of a few % does not produce.
* **Checks** — the loss on a held-out batch after the same samples within **5 %** of ``none``'s,
  the ranks' parameters bit-identical after training, the skipped gradients bit-identical to a
  plain reduction of the same values. A series failing one is left out and named, so its launch
  gives no pair and does not count.

Applicability, from recorded facts (:data:`~hpcbench.experiments.gradient_compression.claims.C8_APPLIES`): the
claim is about sparing the inter-node link, so it needs one — the emulated cluster's shaped link
or SLURM with nodes >= 2; one node or emulated nodes on one loopback are inconclusive whatever
the values. Fewer than 5 launches x 5 steps: inconclusive (n = ...).

**The regime of level 2, stated before any launch was run.** What 2-bit codes save in time depends
on the share of the step spent communicating: C8 is "one of the case's communication
optimisations", so its effect is judged in the case's regime, where the case's original (the
float32 ``none`` series here) was 61 % busy (``claims.GUIDE_REGIME``, the same as C7's). Per model and
mode, ``none``'s busy share is its no-op twin's median step over its own (``noop_step_p50_ms`` /
``step_p50_ms`` of the launch's summary) in that launch. Each launch is keyed by where each pair
stood (within +-5 points of 61 % or not), as C7 keys its launches, so launches that reached the
regime are judged among themselves, at their own count, and those that missed it give
"inconclusive: regime X vs the guide's Y" — never "not reproduced" (on CPU ranks at a fast link
``none`` is ~85 % busy: the codec's cost then outweighs bytes that hardly cost anything, which
says nothing of the guide's case). With ``regime: guide`` (the default) the worker calibrates the
link before each (model, mode)'s timed steps so that ``none`` lands there
(:mod:`hpcbench.scale.regime`); with ``fixed`` a launch reaches it only where its link happens to
be shaped to it. Level 1 counts bytes, which no regime changes: it is judged wherever the setting and the link apply.

Reproduced only if both levels are, for every model and mode; not reproduced if either is not;
inconclusive otherwise. Level 1 is a count of bytes whose per-step values repeat exactly, so its
interval is the value itself and adds no chance of a false verdict: it is judged as a single
value (:func:`~hpcbench.judge.rulekit.judge_levels`), level 2 as paired ratios
(:func:`~hpcbench.judge.rulekit.judge_comparisons`, Holm across models and modes), and the two
verdicts are combined as :func:`~hpcbench.judge.verdict.combine` combines required parts.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Callable

import pandas as pd

from hpcbench.core.results import json_object
from hpcbench.experiments.gradient_compression.claims import (BASELINE, C8_APPLIES, C8_MIN_GAIN, C8_MIN_REDUCTION, C8_REDUCTION,
                                                              GUIDE_C8_BITS, GUIDE_C8_BUCKET_BYTES, GUIDE_REGIME,
                                                              TECHNIQUE)
from hpcbench.experiments.gradient_compression.config import REACHED_METRIC
from hpcbench.experiments.gradient_compression.summary import LOSS_TOLERANCE
from hpcbench.guide.claims import Claim
from hpcbench.judge.evidence import NO_VALUE, Evidence, Judgement
from hpcbench.judge.rulekit import Comparison, Level, judge_comparisons, judge_levels
from hpcbench.judge.verdict import Reference, combine_verdicts
from hpcbench.parallel.compression import is_skipped
from hpcbench.scale.regime import FACT_REACHED, MATCHED, MISSED, finite_number, regime_reason

#: Parameters that do not split launches into groups (the rule pairs series inside a launch).
IGNORED_PARAMS = ("models", "modes", "compressions", "no_feedback_ablation")


def baseline_busy(summaries: pd.DataFrame) -> dict[tuple[str, str, str, str], float]:
    """(run_id, task_id, model, mode) -> the ``none`` series' busy share: no-op median step over its own."""
    need = {"run_id", "task_id", "model", "mode", "compression", "step_p50_ms", "noop_step_p50_ms"}
    if summaries.empty or not need <= set(summaries.columns):
        return {}
    rows = summaries[summaries["compression"] == BASELINE]
    return {(r.run_id, r.task_id, r.model, r.mode): r.noop_step_p50_ms / r.step_p50_ms
            for r in rows.itertuples(index=False)
            if r.step_p50_ms and r.step_p50_ms > 0 and pd.notna(r.noop_step_p50_ms)}


def reached_busy(evidence: Evidence) -> dict[tuple[str, str, str, str], float]:
    """(run_id, task_id, model, mode) -> the regime the pair's judged steps reached, as the launch recorded it.

    Applicability reads recorded facts, and the same ones the ledger's regime sentence reads: each calibrated
    pair's :data:`REACHED_METRIC` row; for a launch recorded before those rows, its ``fact.regime.reached_busy``
    for the pair it names (``fact.regime.series``); only where neither exists (a launch on a fixed link), the
    summary's no-op median over the series' median (:func:`baseline_busy`). The two estimators differ by a few
    points on a noisy machine, so judging on one while the regime sentence counts the other would count a launch
    "in" the regime that the verdict leaves out.
    """
    busy = dict(baseline_busy(evidence.summaries))
    launches = evidence.launches
    if FACT_REACHED in launches.columns and "regime.series" in launches.columns:
        for run, task, series, value in zip(launches["run_id"], launches["task_id"], launches["regime.series"],
                                            launches[FACT_REACHED]):
            if isinstance(series, str) and " " in series and finite_number(value) is not None:
                model, mode = series.rsplit(" ", 1)
                busy[(run, task, model, mode)] = float(value)
    records = evidence.records
    if not records.empty:
        for r in records[records["metric"] == REACHED_METRIC].itertuples(index=False):
            labels = json_object(r.labels)
            if finite_number(r.value) is not None:
                busy[(r.run_id, r.task_id, labels.get("model"), labels.get("mode"))] = float(r.value)
    return busy


#: The parameter :func:`key_by_regime` adds: each (model, mode)'s standing against the case's regime in the launch.
REGIME_KEY = "regime_status"


def key_by_regime(launches: pd.DataFrame, busy: dict[tuple[str, str, str, str], float],
                  pairs: list[tuple[str, str]]) -> pd.DataFrame:
    """``launches`` with each launch's regime, per (model, mode), added to its ``params`` JSON.

    The rulekit groups launches by parameters, so the launches in which ``none`` reached the case's
    regime never pool with those that missed it: a group is judged, or not, as a whole, and the
    launches that missed cannot dilute those that reached it (nor carry them across the band).
    """
    def status(run: str, task: str, model: str, mode: str) -> str:
        return MATCHED if GUIDE_REGIME.matches(busy.get((run, task, model, mode))) else MISSED

    if launches.empty:
        return launches
    keyed = [json.dumps({**json_object(p), REGIME_KEY: {f"{m}/{d}": status(r, t, m, d) for m, d in pairs}},
                        sort_keys=True, default=str)
             for r, t, p in zip(launches["run_id"], launches["task_id"], launches["params"])]
    return launches.assign(params=keyed)


def _same_group(launches: pd.DataFrame, first: pd.Series) -> list[tuple[str, str]]:
    """The launches whose parameters (less IGNORED_PARAMS) equal ``first``'s, as (run_id, task_id)."""
    def key(params: str) -> str:
        return json.dumps({k: v for k, v in json_object(params).items() if k not in IGNORED_PARAMS},
                          sort_keys=True, default=str)

    want = key(first["params"])
    return [(r, t) for r, t, p in zip(launches["run_id"], launches["task_id"], launches["params"]) if key(p) == want]


def recorded_bits(records: pd.DataFrame) -> dict[tuple[str, str], float]:
    """(run_id, task_id) -> the bits per element quant2bit recorded (``wire_bits``) in that launch."""
    if records.empty or "metric" not in records.columns:
        return {}
    rows = records[(records["metric"] == "wire_bits") & records["value"].notna()]
    bits = {}
    for r in rows.itertuples(index=False):
        try:
            labels = json.loads(r.labels)
        except (TypeError, ValueError):
            continue
        if isinstance(labels, dict) and labels.get("compression") == TECHNIQUE:
            bits[(r.run_id, r.task_id)] = float(r.value)
    return bits


def setting_problem(launch: pd.Series, bits: float | None) -> str | None:
    """None when the launch ran the guide's setting (2 bits, 4 MiB buckets, layer_norm skipped), else why not."""
    params = json_object(launch["params"])
    problems = []
    if bits is None:
        problems.append(f"no {TECHNIQUE} series recorded its bits per element")
    elif bits != GUIDE_C8_BITS:
        problems.append(f"{TECHNIQUE} sent {bits:g}-bit codes, not the guide's {GUIDE_C8_BITS}")
    bucket = params.get("bucket_cap_mb")
    if bucket is None or not math.isclose(float(bucket) * (1 << 20), GUIDE_C8_BUCKET_BYTES, rel_tol=1e-9):
        problems.append(f"buckets of {bucket} MiB, not the guide's {GUIDE_C8_BUCKET_BYTES >> 20} MiB")
    skip = params.get("skip")
    if not isinstance(skip, list) or not is_skipped("layer_norm", tuple(str(s) for s in skip)):
        problems.append(f"the skip list {skip} compresses layer_norm parameters")
    if not problems:
        return None
    return "not the guide's setting: " + "; ".join(problems)


def c8_levels(pairs: list[tuple[str, str]]) -> list[Level]:
    """Level 1 for every model and mode, stated before any value is read."""
    return [Level(label=f"{model}/{mode}: float32 / {TECHNIQUE} bytes of the compressed part",
                  where={"model": model, "mode": mode, "compression": TECHNIQUE}, column="reduction_samples",
                  reference=Reference(C8_REDUCTION, lower=C8_MIN_REDUCTION, unit="x",
                                      source="the guide: 2 bits instead of 32, '16x less traffic'; scales and "
                                             "padding may add up to a third"))
            for model, mode in pairs]


def c8_comparisons(pairs: list[tuple[str, str]],
                   regime_problem: Callable[[str, str], str | None] | None = None) -> list[Comparison]:
    """Level 2 for every model and mode, stated before any value is read.

    Args:
        regime_problem: ``(model, mode)`` -> why that pair is outside the case's regime (None: inside).
    """
    return [Comparison(label=f"{model}/{mode}: samples/s, {TECHNIQUE} / {BASELINE}",
                       numerator={"model": model, "mode": mode, "compression": TECHNIQUE},
                       denominator={"model": model, "mode": mode, "compression": BASELINE},
                       reference=Reference(C8_MIN_GAIN, lower=C8_MIN_GAIN, unit="x",
                                           source="our bound: the guide gives no figure for C8 alone"),
                       not_applicable=(regime_problem(model, mode) or "") if regime_problem else "")
            for model, mode in pairs]


def combine_levels(evidence: Evidence, parts: list[Judgement], what: str) -> Judgement:
    """One verdict from required parts: reproduced if all are, not reproduced if any is not."""
    verdict = combine_verdicts([j.verdict for j in parts])
    measured = "; ".join(j.measured for j in parts if j.measured != NO_VALUE) or NO_VALUE
    note = evidence.excluded_note()
    details = [j.detail[:-len(note)] if note and j.detail.endswith(note) else j.detail for j in parts]
    return Judgement(verdict, measured, " ".join([what, *details]) + note,
                     tuple(o for j in parts for o in j.outcomes), tuple(lab for j in parts for lab in j.labels))


def rule_c8(claim: Claim, evidence: Evidence) -> Judgement:
    """C8: bytes of the compressed part (>= 12x less, guide 16x) and samples/s (>= 1.05x), quant2bit vs none."""
    s = evidence.summaries
    has_keys = {"model", "mode"} <= set(s.columns)
    pairs = sorted({(r.model, r.mode) for r in s.itertuples(index=False)}) if has_keys else []
    bits = recorded_bits(evidence.records)

    def applies(launch: pd.Series) -> str | None:
        reasons = [setting_problem(launch, bits.get((launch["run_id"], launch["task_id"]))),
                   C8_APPLIES(launch)]
        reasons = [r for r in reasons if r]
        return "; ".join(reasons) if reasons else None

    traffic = judge_levels(evidence, c8_levels(pairs), applies=applies, ignore_params=IGNORED_PARAMS,
                           what=f"Level 1 (traffic): per launch, the median over steps of the compressed part's "
                                f"float32 bytes over the bytes {TECHNIQUE} sent, counted by its hook; reference "
                                f"{C8_REDUCTION:g}x, at least {C8_MIN_REDUCTION:g}x.")
    busy = reached_busy(evidence)
    keyed = key_by_regime(evidence.launches, busy, pairs)

    def effect_comparisons(first: pd.Series) -> list[Comparison]:
        group = _same_group(keyed, first)
        statuses = json_object(first["params"]).get(REGIME_KEY, {})

        def regime_problem(model: str, mode: str) -> str | None:
            shares = [busy[(r, t, model, mode)] for r, t in group if (r, t, model, mode) in busy]
            return regime_reason(statuses.get(f"{model}/{mode}", MISSED), shares, GUIDE_REGIME)

        return c8_comparisons(pairs, regime_problem)

    effect = judge_comparisons(dataclasses.replace(evidence, launches=keyed), effect_comparisons, applies=applies,
                               ignore_params=IGNORED_PARAMS,
                               what=f"Level 2 (effect): median total samples/s of {TECHNIQUE} over {BASELINE}, "
                                    f"paired per launch; reference >= {C8_MIN_GAIN:g}x (our bound: the guide gives "
                                    f"no figure for C8 alone); judged only where {BASELINE} is "
                                    f"{GUIDE_REGIME.target_busy:.0%} +-{GUIDE_REGIME.tolerance * 100:.0f} points busy, the "
                                    f"case's regime ({GUIDE_REGIME.arithmetic}).")
    what = (f"C8 needs both levels, for every model and mode, in the guide's setting ({GUIDE_C8_BITS}-bit codes, "
            f"{GUIDE_C8_BUCKET_BYTES >> 20} MiB buckets, layer_norm uncompressed) and where the inter-node link is "
            f"slower than the intra-node one (the emulated cluster's shaped link or real nodes); series whose "
            f"loss after the same samples is more than {LOSS_TOLERANCE:.0%} off {BASELINE}'s, whose ranks' "
            f"parameters differ or whose skipped gradients are not a plain reduction's do not count.")
    return combine_levels(evidence, [traffic, effect], what)


RULES = {"C8": rule_c8}
