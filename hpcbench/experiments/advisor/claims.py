"""C14 declared: the guide's words, the band the rule judges with, what each pick can show on a layout.

Everything the ledger, ``hpcbench list``, the catalogue and the notebook know about C14 is here:

* **words and figures**: :data:`C14` (the guide's sentence, its order quoted, its kind). The guide gives no
  number: the order itself is what is judged (the advisor, :mod:`hpcbench.advise`, applies it);
* **the band**: :data:`FASTER`, the measured best is faster per sample than every other technique, paired per
  launch (the paired ratio above 1);
* **what the platform can show**: :data:`PICK_CANNOT_WIN`, per technique, why it cannot do what the order picks
  it for on a launch's recorded layout (:func:`hierarchical_cannot_win`: a two-level reduction that saves no
  latency step), read from recorded facts, never from a measured value;
* **the regime**: none (a technique, judged on whether its order picks the technique that measures best);
* **the rule**: :func:`hpcbench.experiments.advisor.rules.rule_c14`.
"""

from __future__ import annotations

import pandas as pd

from hpcbench.core.results import json_object
from hpcbench.guide.claims import S6, TECHNIQUE, Claim
from hpcbench.judge.applicability import SLOW_LINK
from hpcbench.judge.verdict import Reference
from hpcbench.scale import algorithms as alg

#: "Faster than the other technique": the paired ratio (other's time per sample / this one's) above 1.
FASTER = Reference(1.0, lower=1.0, unit="x", source="C14's measured best: faster per sample than every other "
                                                    "technique, paired per launch")


def _level_steps(stages: list[alg.Stage]) -> tuple[int, int]:
    """(intra-node, inter-node) latency steps of one bucket's reduction."""
    return sum(st.intra_steps for st in stages), sum(st.inter_steps for st in stages)


def hierarchical_cannot_win(launch: pd.Series) -> str | None:
    """Why a two-level reduction cannot save latency on the launch's layout, or None when it can.

    Compares the scale model's latency steps per bucket of the two-level reduction with DDP's flat
    ring on the recorded nodes x ranks per node, with the intra stages the hook runs on the
    recorded backend (all-reduces unless nccl; gloo when unrecorded, as the advisor assumes). It
    can save latency only with no more steps at either level and fewer at one.
    """
    params = json_object(launch["params"])
    if "nodes" not in params or "ranks_per_node" not in params:
        return "nodes and ranks per node not recorded"
    nodes, per_node = int(params["nodes"]), int(params["ranks_per_node"])
    recorded = launch.get("backend")
    backend = str(recorded) if isinstance(recorded, str) and recorded else "gloo"
    if nodes < 2 or per_node < 2:
        return f"hierarchical needs >= 2 nodes x 2 ranks; ran {nodes} x {per_node}"
    elems = 1024  # the step counts do not depend on the bucket's size
    ring = _level_steps(alg.ring_allreduce(elems * alg.FP32_BYTES, nodes=nodes, ranks_per_node=per_node))
    two = _level_steps(alg.hierarchical_allreduce(elems, alg.FP32_BYTES, nodes=nodes, ranks_per_node=per_node,
                                                  intra_via_allreduce=backend != "nccl"))
    if all(t <= r for t, r in zip(two, ring)) and any(t < r for t, r in zip(two, ring)):
        return None
    return f"hierarchical saves no latency step on {nodes} nodes x {per_node} ranks ({backend})"


#: Per technique, why it cannot win on a launch (from its recorded facts), or None when it could.
#: Compression (fewer bytes) and accumulation (fewer synchronisations) can wherever there is an
#: inter-node link, which every counted launch has (:data:`C14_APPLIES`).
PICK_CANNOT_WIN = {"hierarchical": hierarchical_cannot_win}


C14 = Claim("C14", TECHNIQUE, S6,
            "Communication optimisation priority: if bandwidth-bound use gradient compression, else "
            "if latency-sensitive use topology optimisation, else overlap computation and communication.",
            (("bandwidth-bound", "gradient compression"), ("latency-sensitive", "topology optimisation"),
             ("otherwise", "compute/communication overlap")),
            "",
            title="Communication optimisation priority", headline="compression, topology, then overlap")
#: The claims this experiment declares (its SPEC's ``ClaimSet.declared``).
CLAIMS = (C14,)
#: Every technique the advisor picks among spares the inter-node link: C14 needs a slower one.
C14_APPLIES = SLOW_LINK
#: What each claim needs of the platform (its SPEC's ``ClaimSet.applicability``; ``hpcbench doctor`` reads it).
APPLICABILITY = {"C14": C14_APPLIES}
