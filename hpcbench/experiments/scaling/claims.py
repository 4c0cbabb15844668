"""C13 declared: the guide's words, the bound its premise is judged with, the regime it reads.

Everything the ledger, ``hpcbench list``, the catalogue and the notebook know about C13 is here:

* **words and figures**: :data:`C13` (the guide's sentence, its stages quoted, its kind). The guide gives no
  figure to judge: C13 is a procedure, and what is tested is its premise, with the C12 gate the guide puts
  before each step out;
* **the bands**: per-node weak-scaling efficiency at a stage beyond one node, :data:`C13_MIN_EFFICIENCY`
  (our bound, the guide gives none): at least that where every earlier gate passed (:data:`CLEARED`), below
  it where an earlier gate failed (:data:`STOPPED`);
* **the regime**: C12's, :data:`GATE_REGIME` (a healthy step-time spread below half the gate's 5 %). Read,
  not owned: it is defined in :mod:`hpcbench.practice.regime`, beside the gate, because ``practice`` (C12)
  reads it too and experiments do not import each other; only gates run in it count for C13;
* **the rule**: :func:`hpcbench.experiments.scaling.rules.rule_c13`.
"""

from __future__ import annotations

from hpcbench.guide.claims import S6, TECHNIQUE, Claim
from hpcbench.judge.applicability import INTER_NODE_LINK, requires
from hpcbench.judge.verdict import Reference
from hpcbench.practice.regime import GATE_REGIME

#: Per-node weak-scaling efficiency that counts as "keeps scaling" (our bound; see the rule's module docstring).
C13_MIN_EFFICIENCY = 0.8
#: A stage the procedure steps out to (every earlier gate passed) keeps scaling.
CLEARED = Reference(C13_MIN_EFFICIENCY, lower=C13_MIN_EFFICIENCY, unit="x",
                    source="our bound: keeps scaling = per-node efficiency >= 0.8")
#: A stage an earlier gate would have stopped (measured only by launches run past the gate) would not scale.
STOPPED = Reference(C13_MIN_EFFICIENCY, upper=C13_MIN_EFFICIENCY, unit="x",
                    source="our bound: a configuration the gate stops would not scale")

__all__ = ["C13", "C13_MIN_EFFICIENCY", "CLAIMS", "CLEARED", "GATE_REGIME", "STOPPED"]

C13 = Claim("C13", TECHNIQUE, S6,
            "Scale progressively: tune on one node with 8 GPUs, then extend to 2-4 nodes, then run "
            "at full scale.",
            (("stage 1", "1 node, 8 GPUs"), ("stage 2", "2-4 nodes"), ("stage 3", "full scale")),
            "",
            title="Scale out progressively", headline="1 node -> 2-4 -> all")
#: The claims this experiment declares (its SPEC's ``ClaimSet.declared``).
CLAIMS = (C13,)
#: Scaling out costs what the inter-node link costs: C13's stages must cross a real one.
C13_APPLIES = requires(INTER_NODE_LINK.because(", so no stage crosses an inter-node link whose cost scaling out "
                                              "could show"))
#: What each claim needs of the platform (its SPEC's ``ClaimSet.applicability``; ``hpcbench doctor`` reads it).
APPLICABILITY = {"C13": C13_APPLIES}
