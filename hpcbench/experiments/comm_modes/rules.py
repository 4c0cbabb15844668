"""Verdict rules of ``comm_modes``: C3 (two-level reduction beats flat DDP) and C17 (bucket = IB MTU).

Both compare two series measured in the same launch (modes and buckets run one after the
other in one job), so every launch gives one paired ratio of median total throughputs.
"""

from __future__ import annotations

import pandas as pd

from hpcbench.core.facts import DDP_DEFAULT_BUCKET_BYTES, GUIDE_C3_GPT2, GUIDE_C3_RESNET
from hpcbench.experiments.comm_modes.config import IB_MTU_BUCKET_MB
from hpcbench.guide.claims import Claim
from hpcbench.report.ledger import Evidence, Judgement
from hpcbench.report.rulekit import Comparison, judge_comparisons, slow_link_problem
from hpcbench.report.verdict import Reference, gain_reference

DEFAULT_BUCKET_MB = DDP_DEFAULT_BUCKET_BYTES / (1 << 20)
#: The guide's figures per model family: (DDP, hybrid, stated gain %).
C3_FIGURES = {"resnet": GUIDE_C3_RESNET, "gpt2": GUIDE_C3_GPT2}
#: The two-level mode compared with DDP, fixed in advance: the guide's own recipe where it can run
#: (a process that sees several GPUs), else the hierarchical hook, which does what the recipe is
#: for — reduce inside the node first, send one node's share over the slow link.
C3_MODES = ("hybrid_dp_ddp", "hierarchical")
#: C17: the MTU bucket must reach this share of DDP's default bucket's throughput ("match it").
C17_SHARE = 0.95


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


def rule_c3(claim: Claim, evidence: Evidence) -> Judgement:
    """C3: total throughput of the two-level mode over plain DDP, per model family, at DDP's bucket."""
    mode = _two_level_mode(evidence)
    models = sorted({m for m in evidence.summaries.get("model", pd.Series(dtype=str)) if family_of(m)})
    comparisons = []
    for model in models:
        ddp, hybrid, _ = C3_FIGURES[family_of(model)]
        comparisons.append(Comparison(
            label=f"{model}: {mode} / ddp",
            numerator={"model": model, "mode": mode, "bucket_cap_mb": DEFAULT_BUCKET_MB},
            denominator={"model": model, "mode": "ddp", "bucket_cap_mb": DEFAULT_BUCKET_MB},
            reference=gain_reference(hybrid / ddp, f"the guide: {hybrid:,} vs {ddp:,} ({family_of(model)})")))
    what = (f"Paired per launch: median total throughput of {mode} over plain DDP at DDP's default "
            f"{DEFAULT_BUCKET_MB:g} MiB bucket, per model; reference: at least 80 % of the guide's gain "
            f"(+49.6 % ResNet-50, +40.2 % GPT-2); applies only where the inter-node link is slower than the "
            f"intra-node one (emulated cluster's shaped link or real nodes).")
    return judge_comparisons(evidence, comparisons, applies=slow_link_problem, what=what,
                             ignore_params=("bucket_cap_mb", "modes", "models"))


def infiniband_problem(launch: pd.Series) -> str | None:
    """C17's advice is about the InfiniBand MTU: it applies only where InfiniBand carries the reduction."""
    if str(launch.get("infiniband") or "absent") != "present":
        return "no active InfiniBand port was recorded, so there is no IB MTU to match"
    if str(launch.get("backend") or "") != "nccl":
        return f"the reduction ran on {launch.get('backend') or 'an unrecorded backend'}, not NCCL over IB verbs"
    return None


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
    return judge_comparisons(evidence, comparisons, applies=infiniband_problem, what=what,
                             ignore_params=("bucket_cap_mb", "modes", "models"))


RULES = {"C3": rule_c3, "C17": rule_c17}
