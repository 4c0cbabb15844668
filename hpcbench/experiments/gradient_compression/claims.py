"""C8 declared: the guide's words and figures, the two levels and their bands, the regime.

Everything the ledger, ``hpcbench list``, the catalogue and the notebook know about C8 is here:

* **words and figures**: :data:`C8` (the guide's sentence, its figures quoted, its kind, its arithmetic);
  :data:`GUIDE_C8_BITS` and :data:`GUIDE_C8_BUCKET_BYTES`, the 2 bits and 4 MB it states. They are the
  2-bit code's settings, so they live with the technique as its defaults
  (:data:`hpcbench.parallel.compression.GUIDE_CODE_BITS` and ``GUIDE_BUCKET_BYTES``) and are named here
  as C8's figures;
* **the guide's consistency**: none to check; C8 is a technique, judged on whether it works as described;
* **the regime**: :data:`GUIDE_REGIME`, the case's: the original weather step's 61 % GPU utilisation
  (:data:`hpcbench.guide.statements.WEATHER_ORIGINAL_UTIL`, C7's first row), matched by the float32
  :data:`BASELINE` series;
* **the comparisons and their bands**: level 1, the compressed part's float32 bytes over the bytes
  :data:`TECHNIQUE` sent, :data:`C8_REDUCTION` (16x) with at least :data:`C8_MIN_REDUCTION`; level 2, samples/s
  of :data:`TECHNIQUE` over :data:`BASELINE`, at least :data:`C8_MIN_GAIN` (our bound);
* **what the platform can show**: no cap is computed; level 2 is judged only in the case's regime;
* **prediction at the guide's scale**: :func:`hpcbench.experiments.gradient_compression.prediction.predict_c8`;
  **the rule**: :func:`hpcbench.experiments.gradient_compression.rules.rule_c8`.
"""

from __future__ import annotations

from hpcbench.core.units import format_bytes
from hpcbench.guide.claims import S3, TECHNIQUE as TECHNIQUE_KIND, Claim
from hpcbench.judge.applicability import SLOW_LINK
from hpcbench.guide.statements import WEATHER_ORIGINAL_UTIL
from hpcbench.parallel.compression import GUIDE_BUCKET_BYTES, GUIDE_CODE_BITS
from hpcbench.scale.regime import GuideRegime

#: "Gradient compression to 2 bits": the 2-bit code's bits per element (the technique's default).
GUIDE_C8_BITS = GUIDE_CODE_BITS
#: "in 4 MB buckets": the DDP bucket the codes travel in (the technique's default).
GUIDE_C8_BUCKET_BYTES = GUIDE_BUCKET_BYTES

#: The series every other one is compared with: float32 all-reduce (DDP's own sums), counted.
BASELINE = "none"
#: The guide's technique, as registered in hpcbench.parallel.compression.
TECHNIQUE = "quant2bit"

#: C8's speed level is judged in the case's regime: C8 is one of the optimisations of the tuning case,
#: whose original ran at 61 % GPU utilisation (C7); here the float32 all-reduce ``none`` is the original.
GUIDE_REGIME = GuideRegime(claim="C8", target_busy=WEATHER_ORIGINAL_UTIL, baseline=BASELINE,
                           arithmetic=f"C8 is one of the case's optimisations; the case's original ran at "
                                      f"{WEATHER_ORIGINAL_UTIL:.0%} GPU utilisation (C7)")

#: Level 1: float32 bytes over sent bytes of the compressed part; the guide's 32 / 2 bits ...
C8_REDUCTION = 32 / GUIDE_C8_BITS
#: ... and the least that counts: 2 bits plus at most a third more for scales and padding.
C8_MIN_REDUCTION = 12.0
#: Level 2: samples/s of quant2bit over none must gain at least this much (our bound).
C8_MIN_GAIN = 1.05


def _c8_predicted() -> str:
    elements = GUIDE_C8_BUCKET_BYTES // 4
    sent = elements * GUIDE_C8_BITS // 8
    return (f"{32 // GUIDE_C8_BITS}x less gradient traffic for compressed buckets: a "
            f"{format_bytes(GUIDE_C8_BUCKET_BYTES)} fp32 bucket ({elements:,} elements) sends "
            f"{format_bytes(sent)} plus its scale(s); layer-norm gradients travel uncompressed")


C8 = Claim("C8", TECHNIQUE_KIND, S3,
           "Gradient compression to 2 bits in 4 MB buckets, leaving layer_norm parameters "
           "uncompressed, is one of the case's communication optimisations.",
           (("bits", "2"), ("bucket size", "4 MB"), ("skipped", "layer_norm")),
           _c8_predicted(),
           title="2-bit gradient compression", headline="2 bits, 4 MB buckets")
#: The claims this experiment declares (its SPEC's ``ClaimSet.declared``).
CLAIMS = (C8,)
#: C8 spares inter-node bytes: it applies only where the inter-node link is slower than the intra-node one.
C8_APPLIES = SLOW_LINK
#: What each claim needs of the platform (its SPEC's ``ClaimSet.applicability``; ``hpcbench doctor`` reads it).
APPLICABILITY = {"C8": C8_APPLIES}
