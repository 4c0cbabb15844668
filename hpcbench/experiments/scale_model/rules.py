"""Verdict rule of ``scale_model``: C1 (a misestimated AllReduce held a 10B model below 40 % GPU utilisation).

C1 is an **anecdote**: "misestimating AllReduce communication cost kept a 10-billion-parameter
model's GPU utilisation below 40 % for a long time". Nothing here can run a 10B model on A100s,
and the guide gives no setting to rerun; what can be asked is whether the anecdote is
**consistent with the model**: whether the validated scale model (:mod:`hpcbench.scale`), fed
with the link efficiency a real transport reaches over a shaped link, puts the busy share of
the guide's setting below 40 %. Fixed here before any value was looked at; the claim, its reference and the
assumptions below are declared in :mod:`~hpcbench.experiments.scale_model.claims`.

**The assumptions** (every one stated in the detail; none tuned to the data):

* platform ``a100_hdr`` (:data:`hpcbench.scale.platforms.PLATFORMS`): 8 A100 per node, NVLink 3
  inside the node, bf16 peak x MFU 0.5 as the sustained rate (each figure's source there);
* 4 nodes x 8 GPUs, as the guide's job script (``--ntasks=32 --gres=gpu:8``);
* 200 Gb/s HDR InfiniBand (C16), at **1 and at 8 NICs per node** (:data:`C1_NIC_COUNTS`): the
  guide does not state the count (1: the literal reading of C16; 8: a DGX A100);
* a 10e9-parameter model trained with plain DDP: a ring all-reduce of float32 gradients in
  DDP's 25 MiB buckets (1 MiB first bucket), no overlap of communication with compute;
* 2048 tokens per GPU per step (one 2048-token sequence per GPU, a 32-sequence global batch);
  compute = 6 x params x tokens (Kaplan et al. 2020) at the platform's sustained rate;
* the NICs' bandwidth scaled by the **inter-node link efficiency measured in the launch**: the
  fitted per-node bandwidth of the ``inter_node`` all-reduce over the phase's shaped rate (one
  value per shaped phase; a launch contributes the median over its phases).

**The quantity**: the predicted busy share ("GPU utilisation", :attr:`Prediction.busy_share`) at
1 and at 8 NICs per node, each over launches with :func:`hpcbench.judge.verdict.single_value`
(95 % interval, Bonferroni across strict launch groups) against at most 0.40
(:data:`C1_REFERENCE`). **Outcome: the condition, not a verdict word.** A link efficiency at or below
its line rate keeps one NIC per node under 40 % (above it only at ~3.9x line rate), and the busy share
only rises with NICs per node, so "inconsistent with the model" could never come out: the row is
``context`` and states up to which NIC count the anecdote holds ("consistent at <= k NICs per node",
:func:`nic_condition`), at 1, 2, 4 and 8 NICs per node (:data:`C1_NIC_COUNTS`: the platform line read
literally, up to a DGX A100's 8). ``inconclusive`` with fewer than
:data:`~hpcbench.judge.verdict.MIN_LAUNCHES` launches, or without a shaped link (a phase outside the
emulated cluster has no line rate to compare with).
A phase whose inter-node fit is poor (r2 < :data:`C1_MIN_R2`) is left out and named.

**The detail** says where < 40 % arises and where it does not (the sweep of
:func:`hpcbench.scale.predict.predict_c1` over NICs per node, gradient bytes and tokens per GPU at
the median measured efficiency), the link efficiency at which one NIC would reach 40 %, the
misestimate (a planner who prices the all-reduce as the gradient bytes sent once over one NIC at
its line rate, against the model), and the memory caveat: a 10B model with Adam needs ~160 GB per
GPU under plain DDP (weights, gradients and two moments in fp32), more than an A100's 80 GB, so
the guide's run must have sharded its state (ZeRO / FSDP); ZeRO's reduce-scatter + all-gather
move the same gradient bytes as a ring all-reduce (Rajbhandari et al., SC'20, sec. 7), so the
communication estimate stands.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import pandas as pd

from hpcbench.experiments.scale_model.claims import (C1_BUCKET_BYTES, C1_GRAD_BYTES, C1_NIC_COUNTS, C1_NICS, C1_NODES,
                                                     C1_PARAMS, C1_PLATFORM, C1_REFERENCE, C1_THRESHOLD, C1_TOKENS)
from hpcbench.guide.claims import Claim
from hpcbench.judge.evidence import CONTEXT, NO_VALUE, Evidence, Judgement
from hpcbench.judge.rulekit import in_group, launch_groups
from hpcbench.judge.verdict import CONFIDENCE, INCONCLUSIVE, REPRODUCED, Outcome, judge, single_value
from hpcbench.scale.guide_scale import ModelText
from hpcbench.scale.platforms import LinkModel, Platform, get_platform
from hpcbench.scale.predict import Prediction, predict_c1, predict_step, training_flops

#: An inter-node fit below this r2 does not describe the link by alpha and beta: its efficiency is not used.
C1_MIN_R2 = 0.9
#: Bytes per parameter of fp32 Adam training under plain DDP: weights, gradients and two moments, 4 bytes each.
ADAM_BYTES_PER_PARAM = 16
#: Device memory of the guide's GPU (A100 80 GB data sheet).
A100_MEMORY_BYTES = 80e9


def pct(share: float, *, digits: int = 0, signed: bool = False) -> str:
    """A share as a percentage the way this project writes it: ``0.184`` -> ``"18 %"`` (``signed``: ``"+18 %"``)."""
    return f"{100 * share:{'+' if signed else ''}.{digits}f} %"


def guide_platform(efficiency: float, nics: int = C1_NICS) -> Platform:
    """``a100_hdr`` with ``nics`` NICs per node, each at ``efficiency`` x its line rate."""
    if not (efficiency > 0 and math.isfinite(efficiency)):
        raise ValueError(f"efficiency {efficiency!r} is not a positive number")
    plat = get_platform(C1_PLATFORM)
    nic = LinkModel(plat.nic.alpha_s, plat.nic.beta_s_per_byte / efficiency,
                    f"{plat.nic.source}; x {efficiency:.3f}, the inter-node link efficiency measured here")
    return plat.with_(nic=nic, nics_per_node=nics)


def c1_prediction(efficiency: float, *, nics: int = C1_NICS, tokens: int = C1_TOKENS,
                  grad_bytes: int = C1_GRAD_BYTES) -> Prediction:
    """The scale model's step at the reference point (module docstring) with the NICs at ``efficiency``."""
    return predict_step(C1_PARAMS, platform=guide_platform(efficiency, nics), nodes=C1_NODES, mode="ddp",
                        flops=training_flops(C1_PARAMS, tokens), grad_bytes_per_param=grad_bytes,
                        bucket_bytes=C1_BUCKET_BYTES, overlap_share=0.0)


def c1_sensitivity(efficiency: float, *, tokens: Sequence[int], nics: Sequence[int],
                   grad_bytes: Sequence[int]) -> pd.DataFrame:
    """Busy share across tokens per GPU, NICs per node and gradient bytes (:func:`predict_c1`) at ``efficiency``."""
    return predict_c1(C1_PARAMS, guide_platform(efficiency), tokens_per_step=tuple(tokens),
                      nics_per_node=tuple(nics), grad_bytes_per_param=tuple(grad_bytes), nodes=(C1_NODES,),
                      bucket_bytes=C1_BUCKET_BYTES)


def naive_estimate(tokens: int = C1_TOKENS) -> dict[str, float]:
    """What a planner predicts who prices the all-reduce as the gradient bytes once over one NIC at line rate."""
    plat = get_platform(C1_PLATFORM)
    compute = training_flops(C1_PARAMS, tokens) / plat.sustained_flops
    comm = C1_PARAMS * C1_GRAD_BYTES * plat.nic.beta_s_per_byte
    return {"compute_s": compute, "comm_s": comm, "busy_share": compute / (compute + comm)}


def sensitivity_findings(frame: pd.DataFrame, threshold: float = C1_THRESHOLD) -> list[str]:
    """One sentence per (NICs, gradient bytes): the busy share at the reference tokens and where it is < 40 %."""
    lines = []
    for (nics, gb), g in frame.groupby(["nics_per_node", "grad_bytes_per_param"], sort=True):
        g = g.sort_values("tokens_per_gpu")
        below = g[g["busy_share"] < threshold]["tokens_per_gpu"]
        ref = g[g["tokens_per_gpu"] == C1_TOKENS]["busy_share"]
        at = f"{pct(ref.iloc[0], digits=1)} at {C1_TOKENS} tokens" if len(ref) else "the reference tokens not swept"
        if below.empty:
            where = f"never below {pct(threshold)} from {g['tokens_per_gpu'].min()} tokens up"
        elif len(below) == len(g):
            where = f"below {pct(threshold)} at every point up to {g['tokens_per_gpu'].max()} tokens"
        else:
            where = f"below {pct(threshold)} only for tokens <= {int(below.max())}"
        lines.append(f"{nics} NIC(s), {8 * gb}-bit gradients: busy share {at}; {where}")
    return lines


def sensitivity_at(summary: pd.DataFrame, cfg: Any) -> pd.DataFrame | None:
    """The busy-share sweep of ``cfg``'s C1 axes at the median efficiency of ``summary``'s usable phases.

    Returns:
        Busy share by (NICs per node, gradient bytes) x tokens per GPU; None without a usable phase.
    """
    c1 = summary[(summary["row"] == "c1") & (summary["ok"] == True)] if len(summary) else summary  # noqa: E712
    if not len(c1):
        return None
    frame = c1_sensitivity(float(c1["efficiency"].median()), tokens=cfg.c1_tokens, nics=cfg.c1_nics,
                           grad_bytes=cfg.c1_grad_bytes)
    return frame.pivot_table(index=["nics_per_node", "grad_bytes_per_param"], columns="tokens_per_gpu",
                             values="busy_share")


def _nics(n: int) -> str:
    return f"{n} NIC{'s' if n != 1 else ''}"


def efficiency_for_threshold(nics: int, threshold: float = C1_THRESHOLD, *, lo: float = 1e-3,
                             hi: float = 1e3) -> float | None:
    """The link efficiency (x line rate) at which the reference point's busy share reaches ``threshold``.

    Bisection on a log scale: the busy share grows with the efficiency. None when it is outside
    ``lo..hi``.
    """
    share = lambda e: c1_prediction(e, nics=nics).busy_share  # noqa: E731
    if not share(lo) <= threshold <= share(hi):
        return None
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if share(mid) < threshold else (lo, mid)
    return math.sqrt(lo * hi)


def _assumptions() -> str:
    return (f"{C1_PLATFORM}: {C1_NODES} nodes x 8 A100 (the guide's 32-task job), 200 Gb/s HDR InfiniBand at "
            f"{', '.join(map(str, C1_NIC_COUNTS))} NICs per node (the guide does not state the count: one, read "
            f"literally; a DGX A100 has 8), a "
            f"{C1_PARAMS / 1e9:g}B-parameter model under plain DDP, float32 gradients in 25 MiB buckets, no overlap, "
            f"{C1_TOKENS} tokens per GPU per step (one {C1_TOKENS}-token sequence per GPU, a "
            f"{C1_NODES * 8}-sequence global batch), compute 6 x params x tokens at the platform's sustained rate "
            f"(bf16 peak x MFU 0.5), the NICs' bandwidth scaled by the inter-node link efficiency measured in each "
            f"launch (fitted per-node all-reduce bandwidth / shaped rate; a launch gives the median over its shaped "
            f"phases)")


def _what(evidence: Evidence) -> str:
    return (f"C1 is an anecdote: judged as consistent with the scale model or not, never as re-measured. The model, "
            f"validated on the emulated cluster, predicts the busy share ('GPU utilisation') of the guide's setting "
            f"under these assumptions: {_assumptions()}; reference < {pct(C1_THRESHOLD)}. The row states up to which "
            f"NIC count per node ({', '.join(map(str, C1_NIC_COUNTS))}) the busy share stays below it: the guide "
            f"does not state the count, and no real link efficiency puts one NIC above it.")


def _detail(efficiencies: list[float], params: dict[str, Any]) -> str:
    """Every NIC count, where < 40 % arises and where not, the misestimate and the memory caveat."""
    eff = float(pd.Series(efficiencies).median())
    models = {n: c1_prediction(eff, nics=n) for n in C1_NIC_COUNTS}
    naive = naive_estimate()
    sweep = c1_sensitivity(eff, tokens=params.get("c1_tokens") or [512, 1024, 2048, 4096, 8192, 16384],
                           nics=params.get("c1_nics") or [1, 2, 4, 8], grad_bytes=params.get("c1_grad_bytes") or [4, 2])
    state_gb = C1_PARAMS * ADAM_BYTES_PER_PARAM / 1e9
    at = "; ".join(f"{_nics(n)}: compute {m.compute_s:.2f} s, all-reduce {m.comm_s['total']:.2f} s per step, busy "
                   f"share {pct(m.busy_share)}" for n, m in models.items())
    needed = []
    for n in C1_NIC_COUNTS:
        e = efficiency_for_threshold(n)
        if e is not None:
            needed.append(f"{_nics(n)} at {e:.2f} x line rate")
    reach = (f" The busy share reaches {pct(C1_THRESHOLD)} with " + ", ".join(needed) + "." if needed else "")
    one = models[C1_NIC_COUNTS[0]]
    return (f" At the median measured link efficiency {eff:.2f}: {at}.{reach} Where < 40 % arises and where it "
            f"does not: " + "; ".join(sensitivity_findings(sweep)) + ". The misestimate: a "
            f"planner who prices the all-reduce as the {C1_PARAMS * C1_GRAD_BYTES / 1e9:g} GB of gradients sent once "
            f"over one NIC at its line rate expects {naive['comm_s']:.2f} s and a busy share of "
            f"{pct(naive['busy_share'])}; the ring sends 2 (N-1)/N of them per node at {pct(eff)} of the line rate, "
            f"{one.comm_s['total'] / naive['comm_s']:.1f}x that time over one NIC. Memory: Adam under plain DDP holds "
            f"{ADAM_BYTES_PER_PARAM} bytes per parameter, {state_gb:.0f} GB per GPU against an A100's "
            f"{A100_MEMORY_BYTES / 1e9:.0f} GB, so the guide's run needed ZeRO-style sharding; its reduce-scatter + "
            f"all-gather move the same gradient bytes as the ring all-reduce, so the communication estimate stands.")


def nic_condition(outcomes: dict[int, Outcome]) -> tuple[str, str]:
    """(verdict, the condition in at most 8 words) from the outcomes at each NIC count (:data:`C1_NIC_COUNTS`).

    An anecdote gets no verdict word it cannot reach: the busy share only rises with NICs per node, and a
    link efficiency at or below its line rate keeps one NIC under 40 %, so "inconsistent" could never come
    out. The row states instead up to which NIC count the anecdote holds — ``context``, "consistent at <= k
    NICs per node" — which the measured link efficiency moves. Too few launches at any count: inconclusive.
    """
    counts = sorted(outcomes)
    if any(not o.interval.enough(min_steps=1) or not math.isfinite(o.interval.estimate) for o in outcomes.values()):
        undecided = next(o for o in outcomes.values() if o.verdict == INCONCLUSIVE)
        return INCONCLUSIVE, undecided.why or "too few launches"
    k = max((n for n in counts if all(outcomes[m].verdict == REPRODUCED for m in counts if m <= n)), default=None)
    if k is None:
        if outcomes[counts[0]].verdict == INCONCLUSIVE:
            return CONTEXT, f"undecided even at {_nics(counts[0])} per node"
        return CONTEXT, f"not consistent even at {_nics(counts[0])} per node"
    if k == counts[-1]:
        return CONTEXT, f"consistent at every NIC count, {counts[0]}-{counts[-1]}"
    nxt = counts[counts.index(k) + 1]
    if outcomes[nxt].verdict == INCONCLUSIVE:
        return CONTEXT, f"consistent at <= {_nics(k)}, undecided at {nxt}"
    return CONTEXT, f"consistent at <= {_nics(k)} per node"


def _column(n: int) -> str:
    return "c1_busy_share" if n == C1_NIC_COUNTS[0] else f"c1_busy_share_{n}nics"


def rule_c1(claim: Claim, evidence: Evidence) -> Judgement:
    """C1 (an anecdote): the predicted busy share at each of :data:`C1_NIC_COUNTS` NICs per node, against < 40 %."""
    import json

    what = _what(evidence)
    s = evidence.summaries
    rows = s[s["row"] == "c1"] if len(s) and "row" in s.columns else s.iloc[0:0]
    found = []
    for group_text, launches in launch_groups(evidence):
        mine = in_group(rows, launches) if len(rows) else rows
        values: dict[int, list] = {n: [] for n in C1_NIC_COUNTS}
        effs = []
        for _, g in mine.groupby(["run_id", "task_id"], sort=True):
            ok = g[g["efficiency"].notna() & g["c1_busy_share"].notna()]
            if not len(ok):
                continue
            for n in C1_NIC_COUNTS:
                column = _column(n)
                busy = ([float(v) for v in ok[column]] if column in ok.columns and ok[column].notna().all()
                        else [c1_prediction(float(e), nics=n).busy_share for e in ok["efficiency"]])
                values[n].append(busy)
            effs += [float(v) for v in ok["efficiency"]]
        if values[C1_NIC_COUNTS[0]]:
            try:
                params = json.loads(launches.iloc[0]["params"])
            except (TypeError, ValueError):
                params = {}
            found.append((group_text, values, effs, params if isinstance(params, dict) else {}))
    if not found:
        return Judgement(INCONCLUSIVE, NO_VALUE,
                         f"{what} No launch measured the inter-node link's efficiency on a shaped link (the emulated "
                         f"cluster), so nothing to judge." + evidence.excluded_note())
    confidence = 1 - (1 - CONFIDENCE) / len(found)
    outcomes, labels, parts, verdicts, reasons = [], [], [], [], []
    for group_text, values, _, _ in found:
        per_nic = {n: judge(single_value(values[n], unit="", confidence=confidence), C1_REFERENCE, min_steps=1)
                   for n in C1_NIC_COUNTS}
        verdict, reason = nic_condition(per_nic)
        verdicts.append(verdict)
        where = f" ({group_text})" if len(found) > 1 else ""
        for n, outcome in per_nic.items():
            outcomes.append(outcome)
            labels.append(f"busy share, {_nics(n)} per node{where}")
        parts.append("; ".join(f"{_nics(n)} per node{where}: {o.interval.describe()}" for n, o in per_nic.items())
                     + f" -> {reason}")
        reasons.append(reason)
    overall = CONTEXT if verdicts and all(v == CONTEXT for v in verdicts) else INCONCLUSIVE
    effs = [e for _, _, group_effs, _ in found for e in group_effs]
    detail = what + _detail(effs, found[0][3])
    if len(found) > 1:
        detail += f" {len(found)} launch groups, Bonferroni-corrected."
    reason = reasons[0] if len(set(reasons)) == 1 else "the launch groups disagree on the NIC count"
    return Judgement(overall, "; ".join(parts), detail + evidence.excluded_note(), tuple(outcomes), tuple(labels),
                     reason=reason)


RULES = {"C1": rule_c1}


def predict_c1_at_guide_scale(claim: Claim, evidence: Evidence) -> ModelText:
    """The ledger's predicted column for C1: the busy share at 1 and 8 NICs per node, at the measured link efficiency.

    Reads the evidence's ``link_efficiency`` (median over launches) where it has launches; the rated
    link (efficiency 1) otherwise.
    """
    values = evidence.summaries.get("link_efficiency") if len(evidence.summaries) else None
    measured = pd.to_numeric(values, errors="coerce").dropna() if values is not None else pd.Series(dtype=float)
    efficiency = float(measured.median()) if len(measured) else 1.0
    where = (f"link efficiency {efficiency:.2f} (measured, median of {len(measured)} phase(s))" if len(measured)
             else "the rated link (efficiency 1, none measured)")
    shares = ", ".join(f"{pct(c1_prediction(efficiency, nics=n).busy_share)} with {_nics(n)} per node"
                       for n in C1_NIC_COUNTS)
    naive = naive_estimate()
    busy = [c1_prediction(efficiency, nics=n).busy_share for n in C1_NIC_COUNTS]
    headline = f"{pct(min(busy))}..{pct(max(busy))} busy, {min(C1_NIC_COUNTS)}-{max(C1_NIC_COUNTS)} NICs/node"
    return ModelText(f"Model ({C1_PLATFORM}, {C1_NODES} nodes x 8 GPUs, {C1_PARAMS / 1e9:g}B parameters, plain DDP fp32, "
            f"no overlap, {C1_TOKENS} tokens per GPU per step, {where}; the guide states neither the NIC count nor "
            f"the tokens per GPU): busy share {shares}; a planner pricing the gradient bytes once over one NIC "
            f"expects {pct(naive['busy_share'])}", headline)
