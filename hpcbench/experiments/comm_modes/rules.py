"""Verdict rules of ``comm_modes``: C3 (two-level reduction beats flat DDP) and C17 (bucket = IB MTU).

Both compare two series measured in the same launch (modes and buckets run one after the
other in one job), so every launch gives one paired ratio of median total throughputs. The claims,
their figures, bands and regime, the guide's consistency and what the platform can show are declared
in :mod:`~hpcbench.experiments.comm_modes.claims`; this module reads them.

**C3 is read arithmetic first, then measurement** (:mod:`hpcbench.judge.feasibility`):

* **The guide's statements** (:func:`guide_consistency`). The guide's ResNet-50 DDP ran at 15.8 % of
  what its 32 A100s compute alone, so its DDP step was ~16 % busy
  (:data:`~hpcbench.experiments.comm_modes.claims.GUIDE_REGIME`). In that regime the scale model gives
  the hierarchical reduction over NCCL's ring 1.18x with one HDR NIC per node (the platform line
  "200 Gbps HDR" read literally) and 1.04x with a DGX A100's 8, both under the band's 1.40x: the
  figure is **implausible as stated** on its own platform. The GPT-2 figure implies DDP at 0.12 % of
  its compute-bound rate, a step no cluster runs in; its comparison is never judged.
* **What this platform can show** (:func:`topology_reach`). On one link per node the two-level
  mode can at best send :func:`~hpcbench.experiments.comm_modes.claims.two_level_bytes_share` of
  DDP's bytes across (2 x 2: 2/3), so at the busy share ``b`` a group's DDP step reached, the gain
  is at most ``(1/b) / (1 + (1/b - 1) x share)`` (Amdahl): 1.39x at 16 % busy on 2 x 2, under the
  band, so such a group is **not testable here**; 2 nodes x 8 ranks reaches 1.64x.
* **Measurement.** The ResNet comparison is judged in launches calibrated to the guide's regime
  (``regime: guide``, ``fact.regime.reached_busy`` within +-5 points of the target); a calibrated
  launch that missed it is "inconclusive: regime X vs the guide's Y", fixed-link launches are context
  rows, never counted. The value is total throughput as work over wall time (stalls included).
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from hpcbench.core.facts import DDP_DEFAULT_BUCKET_BYTES
from hpcbench.core.results import json_object
from hpcbench.experiments.comm_modes.claims import (C3_APPLIES, C3_FIGURES, C17_APPLIES, C17_SHARE, CALIBRATED_FAMILY,
                                                    GPT2_OUT_OF_REACH, GUIDE_REGIME, IB_MTU_BUCKET_MB,
                                                    topology_reach)
from hpcbench.experiments.comm_modes.prediction import guide_consistency
from hpcbench.guide.claims import Claim
from hpcbench.judge.evidence import Evidence, Judgement
from hpcbench.judge.feasibility import decide
from hpcbench.judge.rulekit import Comparison, judge_comparisons
from hpcbench.judge.verdict import WORK_OVER_TIME_RATES, Reference, gain_reference
from hpcbench.scale.regime import group_reached_busy, key_launches_by_regime, regime_applies, with_measured_busy

DEFAULT_BUCKET_MB = DDP_DEFAULT_BUCKET_BYTES / (1 << 20)
#: The two-level mode compared with DDP, fixed in advance: the guide's own recipe where it can run
#: (a process that sees several GPUs), else the hierarchical hook, which does what the recipe is
#: for — reduce inside the node first, send one node's share over the slow link.
C3_MODES = ("hybrid_dp_ddp", "hierarchical")


def family_of(model: str) -> str | None:
    for family in C3_FIGURES:
        if str(model).startswith(family):
            return family
    return None


def _two_level_mode(evidence: Evidence) -> str:
    ran = evidence.summaries
    for mode in C3_MODES:
        rows = ran[(ran["mode"] == mode)] if "mode" in ran.columns else ran.iloc[0:0]
        if len(rows) and any(len(s) for s in rows["samples"]):
            return mode
    return C3_MODES[-1]


def _ddp_busy(summaries: pd.DataFrame) -> dict[tuple[str, str], float]:
    """(run_id, task_id) -> 1 - ddp's communication share at DDP's bucket on a resnet model (with measure_noop)."""
    need = {"model", "mode", "bucket_cap_mb", "comm_share_p50"}
    if summaries.empty or not need <= set(summaries.columns):
        return {}
    rows = summaries[(summaries["mode"] == "ddp") & (summaries["bucket_cap_mb"] == DEFAULT_BUCKET_MB)
                     & summaries["model"].map(lambda m: family_of(m) == CALIBRATED_FAMILY)]
    return {(r, t): 1.0 - float(c) for r, t, c in zip(rows["run_id"], rows["task_id"], rows["comm_share_p50"])
            if pd.notna(c)}


def rule_c3(claim: Claim, evidence: Evidence) -> Judgement:
    """C3: total throughput of the two-level mode over plain DDP, per model family, at DDP's bucket."""
    mode = _two_level_mode(evidence)
    models = sorted({m for m in evidence.summaries.get("model", pd.Series(dtype=str)) if family_of(m)})
    launches = key_launches_by_regime(with_measured_busy(evidence.launches, _ddp_busy(evidence.summaries)),
                                      GUIDE_REGIME)
    regime_problem = regime_applies(launches, GUIDE_REGIME)

    def comparisons(first: pd.Series) -> list[Comparison]:
        """Per model; the ResNet ones judged only in the guide's regime, the GPT-2 ones never (see above)."""
        reach = topology_reach(json_object(first["params"]), group_reached_busy(launches, first))
        out = []
        for model in models:
            ddp, hybrid, _ = C3_FIGURES[family_of(model)]
            out.append(Comparison(
                label=f"{model}: {mode} / ddp",
                numerator={"model": model, "mode": mode, "bucket_cap_mb": DEFAULT_BUCKET_MB},
                denominator={"model": model, "mode": "ddp", "bucket_cap_mb": DEFAULT_BUCKET_MB},
                reference=gain_reference(hybrid / ddp, f"the guide: {hybrid:,} vs {ddp:,} ({family_of(model)})"),
                not_applicable=(regime_problem(first) or "") if family_of(model) == CALIBRATED_FAMILY
                else GPT2_OUT_OF_REACH,
                reach=reach if family_of(model) == CALIBRATED_FAMILY else None, estimator=WORK_OVER_TIME_RATES))
        return out

    what = (f"Paired per launch: total throughput (work over wall time, stalls included) of {mode} over plain DDP at "
            f"DDP's default "
            f"{DEFAULT_BUCKET_MB:g} MiB bucket, per model; reference: at least 80 % of the guide's gain "
            f"(+49.6 % ResNet-50, +40.2 % GPT-2); applies only where the inter-node link is slower than the "
            f"intra-node one (emulated cluster's shaped link or real nodes), and only in launches calibrated to "
            f"the guide's regime (ddp {GUIDE_REGIME.target_busy:.0%} busy +-{GUIDE_REGIME.tolerance * 100:.0f} "
            f"points: {GUIDE_REGIME.arithmetic}); fixed-link launches are context; the GPT-2 figure implies a "
            f"regime no cluster runs in and is not judged; the reachable gain is read from each group's topology and "
            f"reached busy share before any throughput.")
    judgement = judge_comparisons(dataclasses.replace(evidence, launches=launches), comparisons,
                                  applies=C3_APPLIES, what=what,
                                  ignore_params=("bucket_cap_mb", "modes", "models", "calibration_rates",
                                                 "calibration_steps"))
    return decide(judgement, guide_consistency())


def rule_c17(claim: Claim, evidence: Evidence) -> Judgement:
    """C17: a gradient bucket of one IB MTU (4 KiB) against DDP's default bucket, per model and mode."""
    s = evidence.summaries
    comparisons = []
    if "bucket_cap_mb" in s.columns and len(s):
        swept = s.groupby(["model", "mode"])["bucket_cap_mb"].agg(lambda b: set(round(x, 12) for x in b))
        for (model, mode), buckets in swept.items():
            if round(IB_MTU_BUCKET_MB, 12) in buckets and round(DEFAULT_BUCKET_MB, 12) in buckets:
                comparisons.append(Comparison(
                    label=f"{model}/{mode}: 4 KiB / {DEFAULT_BUCKET_MB:g} MiB bucket",
                    numerator={"model": model, "mode": mode, "bucket_cap_mb": IB_MTU_BUCKET_MB},
                    denominator={"model": model, "mode": mode, "bucket_cap_mb": DEFAULT_BUCKET_MB},
                    reference=Reference(1.0, lower=C17_SHARE, unit="x",
                                        source="'match the bucket to the IB MTU': at least as fast as the default")))
    what = (f"Paired per launch: median total throughput with a 4 KiB (IB MTU) bucket over DDP's default "
            f"{DEFAULT_BUCKET_MB:g} MiB bucket, same model and mode; reference: >= {C17_SHARE:g}x (matching the "
            f"MTU is advice to follow only if it costs nothing); applies only with NCCL over InfiniBand.")
    return judge_comparisons(evidence, comparisons, applies=C17_APPLIES, what=what,
                             ignore_params=("bucket_cap_mb", "modes", "models"))


RULES = {"C3": rule_c3, "C17": rule_c17}
