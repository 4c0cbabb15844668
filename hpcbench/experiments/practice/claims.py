"""C12 declared: the guide's words, its gate limits and judged figure, the bands, the regime.

Everything the ledger, ``hpcbench list``, the catalogue and the notebook know about C12 is here:

* **words and figures**: :data:`C12` (the guide's sentence, its figures quoted, its kind). The three gate
  limits (:data:`GATE_STEP_TIME_CV_MAX`, :data:`GATE_COMM_SHARE_MAX`,
  :data:`GATE_READ_P99_MAX_S`) are defined in :mod:`hpcbench.practice.gates`, as the gate technique's
  defaults that its checks use; the claim quotes them from there. The figure judged,
  :data:`GUIDE_C12_PROBLEMS_AVOIDED` ("avoids 90 % of common problems"), is declared here;
* **the bands**: the catch fraction's reference :data:`CATCH` (band >= :data:`CATCH_LOWER`, "about nine in
  ten" as a round figure, open above) and the quiet baseline's :data:`QUIET` (false alarms in at most
  :data:`MAJORITY` of the launches);
* **the regime**: :data:`GATE_REGIME`, a healthy step-time spread below half the gate's 5 %. It is defined in
  :mod:`hpcbench.practice.regime`, beside the gate, not here, because two experiments read it (``practice``
  for C12 and ``scaling`` for C13, which splits its arms by the same gate's decisions) and experiments do not
  import each other; re-exported here unchanged as C12's regime;
* **the rule**: :func:`hpcbench.experiments.practice.rules.rule_c12`.
"""

from __future__ import annotations

from hpcbench.guide.claims import FIGURE, S6, Claim
from hpcbench.judge.verdict import Reference
from hpcbench.practice.gates import GATE_COMM_SHARE_MAX, GATE_READ_P99_MAX_S, GATE_STEP_TIME_CV_MAX
from hpcbench.practice.regime import GATE_REGIME

#: The guide's figure: the share of common problems the gate avoids (C12, "avoids 90 %").
GUIDE_C12_PROBLEMS_AVOIDED = 0.90
#: The catch fraction's band edge: "about nine in ten" as a round figure (see the rule's module docstring).
CATCH_LOWER = 0.80
#: A share of launches counts as "most" from here.
MAJORITY = 0.5
CATCH = Reference(GUIDE_C12_PROBLEMS_AVOIDED, lower=CATCH_LOWER, unit="",
                  source="'this avoids 90 % of common problems': the gate fails on about nine faults in ten")
QUIET = Reference(0.0, upper=MAJORITY, unit="",
                  source="a gate before scaling out must let a healthy run through: false alarms in at most half "
                         "the launches")

__all__ = ["C12", "CATCH", "CATCH_LOWER", "CLAIMS", "GATE_REGIME", "GATE_COMM_SHARE_MAX",
           "GUIDE_C12_PROBLEMS_AVOIDED", "GATE_READ_P99_MAX_S", "GATE_STEP_TIME_CV_MAX", "MAJORITY", "QUIET"]


def _percent(share: float) -> str:
    return f"{share * 100:g} %"


C12 = Claim("C12", FIGURE, S6,
            "Before scaling out, check that the step-time standard deviation is below 5 %, the "
            "communication share below 30 % and the storage read latency P99 below 100 ms; this "
            "avoids 90 % of common problems.",
            (("step-time standard deviation", f"< {_percent(GATE_STEP_TIME_CV_MAX)}"),
             ("communication share", f"< {_percent(GATE_COMM_SHARE_MAX)}"),
             ("storage read latency P99", f"< {GATE_READ_P99_MAX_S * 1000:g} ms"),
             ("problems avoided", _percent(GUIDE_C12_PROBLEMS_AVOIDED))),
            "",
            title="Gate before scaling out", headline="sd < 5%, comm < 30%")
#: The claims this experiment declares (its SPEC's ``ClaimSet.declared``).
CLAIMS = (C12,)
