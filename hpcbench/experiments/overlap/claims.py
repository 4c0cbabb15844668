"""C9 declared: the guide's words and figures, the comparison and its band.

Everything the ledger, ``hpcbench list``, the catalogue and the notebook know about C9 is here:

* **words and figures**: :data:`C9` (the guide's sentence, its figures quoted, its kind, its arithmetic);
  :data:`GUIDE_C9_MICRO_STEPS`, the 4 micro-steps it states. They are the technique's setting, so they live
  with it as its default (:data:`hpcbench.parallel.overlap.GUIDE_MICRO_STEPS`) and are named here as C9's
  figure;
* **the guide's consistency**: none to check; C9 is a technique, judged on whether it works as described;
* **the regime**: none; the case's original is C7's (:mod:`hpcbench.guide.statements`), from which the
  prediction starts;
* **the comparison and its band**: samples/s of k = 4 micro-steps under ``no_sync()`` over k = 4 synchronising
  every micro-step, at least :data:`C9_MIN_GAIN` (our bound: the guide gives no figure for C9 alone);
* **what the platform can show**: no cap is computed;
* **prediction at the guide's scale**: :func:`hpcbench.experiments.overlap.prediction.predict_c9`;
  **the rule**: :func:`hpcbench.experiments.overlap.rules.rule_c9`.
"""

from __future__ import annotations

from hpcbench.guide.claims import S3, TECHNIQUE, Claim
from hpcbench.judge.applicability import SLOW_LINK
from hpcbench.parallel.overlap import GUIDE_MICRO_STEPS

#: "no_sync() for 4 micro-steps, then synchronising once": the technique's default.
GUIDE_C9_MICRO_STEPS = GUIDE_MICRO_STEPS
#: Samples/s of k=4 with no_sync() over k=4 synchronising every micro-step must gain at least this much (our bound).
C9_MIN_GAIN = 1.05

C9 = Claim("C9", TECHNIQUE, S3,
           "Overlapping computation and communication by accumulating gradients locally under "
           "no_sync() for 4 micro-steps, then synchronising once, is one of the case's optimisations.",
           (("micro-steps under no_sync()", "4"), ("global synchronisations", "1 per 4 micro-steps")),
           "4x fewer gradient all-reduces per sample (one per 4 micro-steps)",
           title="Local accumulation under no_sync()", headline="1 sync per 4 micro-steps")
#: The claims this experiment declares (its SPEC's ``ClaimSet.declared``).
CLAIMS = (C9,)
#: C9 spares synchronisations over the inter-node link: it applies only where that link is slower.
C9_APPLIES = SLOW_LINK
#: What each claim needs of the platform (its SPEC's ``ClaimSet.applicability``; ``hpcbench doctor`` reads it).
APPLICABILITY = {"C9": C9_APPLIES}
