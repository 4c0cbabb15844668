"""Verdict rule of ``scaling``: C13, progressive scaling behind the C12 gate.

Fixed here from the claim's words before any value was looked at. C13: "Scale progressively:
tune on one node with 8 GPUs, then extend to 2-4 nodes, then run at full scale." As written it
is a procedure, not a measurable statement; what can be tested is its premise, together with
the gate (C12) the guide puts before each step out: **a configuration that passes the gate at
a small scale keeps scaling at the next, and one that fails it would not**. So, per stage
``k > 1``, the per-node weak-scaling efficiency (per-node throughput at ``k`` nodes over that at
1 node, same per-rank batch, paired per launch: both stages run in the same launch), as a
ratio with its 95 % interval over launches (:func:`~hpcbench.judge.verdict.paired_comparison`),
Holm-corrected across stages:

* **cleared stages** (every earlier stage's gate passed, so the procedure steps out to ``k``):
  efficiency **>= 0.8**;
* **stages the gate would have stopped** (an earlier gate failed; only measured by launches
  run with ``continue_past_gate``, which keep going to show what stopping avoided): efficiency
  **< 0.8**. A stopped configuration that then scales well means the gate stopped it for
  nothing.

The 0.8 is ours: the guide gives no efficiency figure. At 80 % per node each added node still
does four fifths of a node's work; below it, most of what a further doubling adds is spent on
communication, which is what "keeps scaling" must exclude. It is a convention stated before
any data, not derived from the guide.

Reproduced only if every measured member is; not reproduced if any is not. Applicability, from
recorded facts only: the stages must cross a real inter-node link (the emulated cluster's shaped
link or SLURM nodes; emulated nodes on one loopback measure nothing about a link), and on the
emulated cluster, whose nodes share one host, a stage's ranks must not outnumber the host's CPUs
(``fact.host_cpus``, recorded by the driver): else per-node throughput falls because the ranks
share cores, not because of communication, and that stage's member is inconclusive. Fewer than
5 launches x 5 steps: inconclusive (n = ...).

**Only gates run in C12's regime** (:mod:`hpcbench.practice.regime`). The arms are split by the
gate's decisions, so they speak for C12's gate only where C12's gate can tell a problem from a
healthy run: a platform whose healthy step-time spread lies below half the gate's 5 %. Before
each stage whose gate decides a step out, every launch calibrates that spread in healthy steps of
its own (fact ``regime.healthy_step_cv``: the largest over those stages); only launches in the
regime are judged, the others are named. Launches that ran the gate with limits of their own
(``gate_limits``) do not run C12's gate at all: they are kept apart from the others and never
counted. Where no launch's gate ran in the regime, C13 is "inconclusive: no gate ran in C12's
regime (...)", with the reason (what the calibrations measured, or that none was recorded) and,
shown but not counted, what those launches measured.

The claim, its bound and the regime it reads are declared in :mod:`~hpcbench.experiments.scaling.claims`; this
module reads them.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd

from hpcbench.core.facts import EMULATED_CLUSTER
from hpcbench.core.results import json_object
from hpcbench.experiments.scaling.claims import C13_APPLIES, C13_MIN_EFFICIENCY, CLEARED, GATE_REGIME, STOPPED
from hpcbench.guide.claims import Claim
from hpcbench.judge.evidence import Evidence, Judgement
from hpcbench.judge.rulekit import Comparison, in_group, judge_comparisons

#: The driver's record of the CPUs of the host it ran on (a fact: the rule reads it as ``host_cpus``).
HOST_CPUS_FACT = "fact.host_cpus"
#: Parameters that change neither what a stage measures nor which gate it runs: launches differing only in them pool.
POOLED_PARAMS = ("continue_past_gate", "calibration_steps")
#: The summary row's reason when no launch's gate speaks for C12's (:meth:`SpreadRegime.no_gate_reason`'s words).
NO_GATE_IN_REGIME = f"no gate ran in {GATE_REGIME.claim}'s regime"


def cpu_problem(launch: pd.Series, nodes: int, ranks_per_node: int) -> str:
    """Why a stage on ``nodes`` nodes measures CPU sharing rather than scaling ("" when it does not)."""
    if str(launch.get("cluster") or "") != EMULATED_CLUSTER:
        return ""
    cpus = launch.get("host_cpus")
    ranks = nodes * ranks_per_node
    if cpus is None or pd.isna(cpus):
        return "the host's CPU count was not recorded: a stage's ranks may share cores"
    if ranks > float(cpus):
        return (f"{ranks} ranks on {nodes} emulated nodes share the host's {int(cpus)} CPUs: per-node throughput "
                f"falls from sharing cores, not from the link")
    return ""


def c13_comparisons(launch: pd.Series) -> list[Comparison]:
    """Per stage k > 1, both arms, stated from the launch's parameters before any value is read."""
    params = json_object(launch["params"])
    stages = [int(k) for k in params.get("stages", [])]
    per_node = int(params.get("ranks_per_node", 1))
    out = []
    for k in stages[1:]:
        why = cpu_problem(launch, k, per_node)
        base = {"nodes": stages[0]}
        out += [
            Comparison(label=f"{k} nodes, gate passed before: per-node throughput / 1 node's",
                       numerator={"nodes": k, "cleared": True, "ran": True}, denominator=base, not_applicable=why,
                       reference=CLEARED),
            Comparison(label=f"{k} nodes, gate failed before: per-node throughput / 1 node's",
                       numerator={"nodes": k, "cleared": False, "ran": True}, denominator=base, not_applicable=why,
                       reference=STOPPED),
        ]
    return out


def gate_limits(launch: pd.Series) -> dict:
    """The launch's overrides of the gate's limits ({}: it ran C12's gate, the guide's limits)."""
    limits = json_object(launch["params"]).get("gate_limits")
    return dict(limits) if isinstance(limits, dict) else {}


def _restricted(evidence: Evidence, launches: pd.DataFrame) -> Evidence:
    """``evidence`` with only ``launches`` and their summaries."""
    return replace(evidence, launches=launches.reset_index(drop=True),
                   summaries=in_group(evidence.summaries, launches).reset_index(drop=True))


def _judge(evidence: Evidence, what: str, not_counted: str = "") -> Judgement:
    """The comparisons on ``evidence``'s launches; with ``not_counted``, every one is shown and not counted."""
    comparisons = (c13_comparisons if not not_counted
                   else lambda launch: [replace(c, not_applicable=not_counted) for c in c13_comparisons(launch)])
    return judge_comparisons(evidence, comparisons, applies=C13_APPLIES, what=what, ignore_params=POOLED_PARAMS)


def rule_c13(claim: Claim, evidence: Evidence) -> Judgement:
    """C13: cleared stages keep >= 0.8 per-node efficiency; stages the gate would have stopped fall below it.

    Only launches whose gate was C12's (no ``gate_limits``) and ran in C12's regime count (module docstring).
    """
    what = (f"Per-node weak-scaling efficiency at each stage beyond 1 node (per-node throughput over 1 node's, "
            f"paired per launch): where every earlier gate (C12) passed it must be >= {C13_MIN_EFFICIENCY:g}, where "
            f"an earlier gate failed (launches run past the gate) it must be < {C13_MIN_EFFICIENCY:g}. The "
            f"{C13_MIN_EFFICIENCY:g} is our bound (the guide gives none). Applies where the stages cross a real "
            f"inter-node link and their ranks do not outnumber the host's CPUs. Only gates run in C12's regime "
            f"count: {GATE_REGIME.guide()}, calibrated before each stage that gates a step out, with the guide's "
            f"limits.")
    launches = evidence.launches
    if launches.empty:
        return _judge(evidence, what)
    overridden = pd.Series([bool(gate_limits(row)) for _, row in launches.iterrows()], index=launches.index,
                           dtype=bool)
    own_limits, default = launches[overridden], launches[~overridden]
    in_regime = pd.Series(GATE_REGIME.in_regime(default), index=default.index, dtype=bool)
    judged, outside = default[in_regime], default[~in_regime]
    notes = []
    if len(own_limits):
        shown = sorted({json.dumps(gate_limits(row), sort_keys=True) for _, row in own_limits.iterrows()})
        notes.append(f"{len(own_limits)} launch(es) ran the gate with limits of their own (gate_limits "
                     f"{', '.join(shown)}): not C12's gate, kept apart and not counted")
    if judged.empty:
        reason = (GATE_REGIME.no_gate_reason(default) if len(default) else
                  f"inconclusive: {NO_GATE_IN_REGIME} (every launch ran the gate with limits of its own, "
                  f"gate_limits: not C12's gate)")
        shown_launches = default if len(default) else own_limits
        found = _judge(_restricted(evidence, shown_launches), what, not_counted=reason)
        detail = found.detail + (" " + ". ".join(notes) + "." if notes else "")
        if not found.outcomes:
            return replace(found, measured=reason, detail=f"{what} {reason}." + detail[len(what):],
                           reason=NO_GATE_IN_REGIME)
        return replace(found, detail=detail, reason=NO_GATE_IN_REGIME)
    if len(outside):
        why = GATE_REGIME.no_gate_reason(outside).removeprefix("inconclusive: ")
        notes.insert(0, f"{len(outside)} of {len(default)} launch(es) with the guide's limits: {why}")
    found = _judge(_restricted(evidence, judged), what)
    return replace(found, detail=found.detail + (" Not judged: " + "; ".join(notes) + "." if notes else ""))


RULES = {"C13": rule_c13}
