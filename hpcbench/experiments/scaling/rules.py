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
"""

from __future__ import annotations

import pandas as pd

from hpcbench.core.facts import EMULATED_CLUSTER
from hpcbench.core.results import json_object
from hpcbench.guide.claims import Claim
from hpcbench.judge.evidence import Evidence, Judgement
from hpcbench.judge.rulekit import Comparison, judge_comparisons
from hpcbench.judge.verdict import Reference

#: Per-node weak-scaling efficiency that counts as "keeps scaling" (our bound; see the module docstring).
C13_MIN_EFFICIENCY = 0.8
#: The driver's record of the CPUs of the host it ran on (a fact: the rule reads it as ``host_cpus``).
HOST_CPUS_FACT = "fact.host_cpus"


def link_problem(launch: pd.Series) -> str | None:
    """None when the launch's stages cross a real inter-node link, else why not."""
    cluster = str(launch.get("cluster") or "")
    if cluster == EMULATED_CLUSTER or cluster.startswith("SLURM"):
        return None
    return (f"ran on {cluster or 'an unrecorded setup'}: the emulated nodes share one loopback, so no stage "
            f"crosses an inter-node link whose cost scaling out could show")


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
                       reference=Reference(C13_MIN_EFFICIENCY, lower=C13_MIN_EFFICIENCY, unit="x",
                                           source="our bound: keeps scaling = per-node efficiency >= 0.8")),
            Comparison(label=f"{k} nodes, gate failed before: per-node throughput / 1 node's",
                       numerator={"nodes": k, "cleared": False, "ran": True}, denominator=base, not_applicable=why,
                       reference=Reference(C13_MIN_EFFICIENCY, upper=C13_MIN_EFFICIENCY, unit="x",
                                           source="our bound: a configuration the gate stops would not scale")),
        ]
    return out


def rule_c13(claim: Claim, evidence: Evidence) -> Judgement:
    """C13: cleared stages keep >= 0.8 per-node efficiency; stages the gate would have stopped fall below it."""
    what = (f"Per-node weak-scaling efficiency at each stage beyond 1 node (per-node throughput over 1 node's, "
            f"paired per launch): where every earlier gate (C12) passed it must be >= {C13_MIN_EFFICIENCY:g}, where "
            f"an earlier gate failed (launches run past the gate) it must be < {C13_MIN_EFFICIENCY:g}. The "
            f"{C13_MIN_EFFICIENCY:g} is our bound (the guide gives none). Applies where the stages cross a real "
            f"inter-node link and their ranks do not outnumber the host's CPUs.")
    return judge_comparisons(evidence, c13_comparisons, applies=link_problem, what=what,
                             ignore_params=("continue_past_gate", "gate_limits"))


RULES = {"C13": rule_c13}
