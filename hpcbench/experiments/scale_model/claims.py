"""C1 declared: the guide's words and figures, the reference, the assumptions the scale model is fed.

Everything the ledger, ``hpcbench list``, the catalogue and the notebook know about C1 is here:

* **words and figures**: :data:`C1` (the guide's sentence, its figures quoted, its kind, its arithmetic);
  the 10B parameters and the < 40 % it states, with the guide's 4 nodes, are the defaults of the scale
  model's C1 sweep (:func:`hpcbench.scale.predict.predict_c1`), so they live there
  (:data:`~hpcbench.scale.predict.C1_PARAMS`, :data:`~hpcbench.scale.predict.C1_THRESHOLD`,
  :data:`~hpcbench.scale.predict.C1_NODES`) and are named here;
* **the guide's consistency**: C1 is an anecdote; the rule itself asks whether it is consistent with the
  scale model, so no separate check precedes it;
* **the regime**: none (nothing is re-measured at the guide's scale);
* **the reference**: :data:`C1_REFERENCE`, a predicted busy share below 40 %, read at each of
  :data:`C1_NIC_COUNTS` NICs per node;
* **the assumptions** the model is fed where the guide is silent: :data:`C1_PLATFORM`, :data:`C1_NICS`,
  :data:`C1_TOKENS`, :data:`C1_GRAD_BYTES`, :data:`C1_BUCKET_BYTES`;
* **prediction at the guide's scale**:
  :func:`hpcbench.experiments.scale_model.rules.predict_c1_at_guide_scale`;
  **the rule**: :func:`hpcbench.experiments.scale_model.rules.rule_c1`.
"""

from __future__ import annotations

from hpcbench.core.facts import DDP_DEFAULT_BUCKET_BYTES
from hpcbench.guide.claims import ANECDOTE, S1, Claim
from hpcbench.judge.verdict import Reference
from hpcbench.scale.predict import C1_NODES, C1_PARAMS, C1_THRESHOLD

C1_PLATFORM = "a100_hdr"
#: NICs per node of the sensitivity's default point: C16's "connected by 200 Gb/s HDR InfiniBand", read literally.
C1_NICS = 1
#: NICs per node the rule reads the condition at: the guide's platform line read literally (1: "200 Gbps HDR"),
#: up to a DGX A100's 8, the stated alternative.
C1_NIC_COUNTS = (1, 2, 4, 8)
C1_TOKENS = 2048
C1_GRAD_BYTES = 4
C1_BUCKET_BYTES = DDP_DEFAULT_BUCKET_BYTES
C1_REFERENCE = Reference(C1_THRESHOLD, upper=C1_THRESHOLD, unit="",
                         source="the guide's C1: GPU utilisation below 40 %")

C1 = Claim("C1", ANECDOTE, S1,
           "Misestimating AllReduce communication cost kept a 10-billion-parameter model's GPU "
           "utilisation below 40 % for a long time.",
           (("model", "10B parameters"), ("GPU utilisation", "< 40 %"),
            ("cause", "AllReduce overhead misestimated")),
           "GPU utilisation < 40 % means communication and other stalls take > 60 % of each step",
           title="AllReduce misestimate kept GPUs idle", headline="GPU utilisation < 40 %")
#: The claims this experiment declares (its SPEC's ``ClaimSet.declared``).
CLAIMS = (C1,)

__all__ = ["C1", "C1_BUCKET_BYTES", "C1_GRAD_BYTES", "C1_NICS", "C1_NIC_COUNTS", "C1_NODES", "C1_PARAMS",
           "C1_PLATFORM", "C1_REFERENCE", "C1_THRESHOLD", "C1_TOKENS", "CLAIMS"]
