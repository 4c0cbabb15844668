"""C6 declared: the guide's words, its four alert thresholds, the bands the rule judges with.

Everything the ledger, ``hpcbench list``, the catalogue and the notebook know about C6 is here:

* **words and figures**: :data:`C6` (the guide's sentence, its four thresholds quoted, its kind, its
  arithmetic). The thresholds themselves (:data:`ALERT_SM_EFFICIENCY_MIN`, :data:`ALERT_IB_RETRANS_MAX`,
  :data:`ALERT_STORAGE_P99_MAX_S`, :data:`ALERT_CACHE_HIT_MIN`) are defined in
  :mod:`hpcbench.monitor.thresholds`, as the monitoring technique's defaults its alerts use; the claim quotes
  them from there, so the alerts and the claim's figures cannot disagree;
* **the bands**: the baseline stays quiet, alerts in at most :data:`MAJORITY` of the launches (:data:`QUIET`),
  and a fault that plain utilisation hid is caught in at least :data:`MAJORITY` of them (:data:`CAUGHT`);
  utilisation "looks healthy" at or above
  :data:`hpcbench.experiments.monitoring.summary.UTIL_HEALTHY_MIN` (the SM-efficiency threshold, applied to
  what an operator watching only utilisation sees: the summary computes it per phase);
* **the regime**: none (a technique, judged on whether its alerts work as described);
* **the rule**: :func:`hpcbench.experiments.monitoring.rules.rule_c6`.
"""

from __future__ import annotations

from hpcbench.guide.claims import S24, TECHNIQUE, Claim
from hpcbench.judge.verdict import Reference
from hpcbench.monitor.thresholds import (ALERT_CACHE_HIT_MIN, ALERT_IB_RETRANS_MAX, ALERT_SM_EFFICIENCY_MIN,
                                         ALERT_STORAGE_P99_MAX_S)

#: A share of launches counts as "most" from here (both members' band edge).
MAJORITY = 0.5
QUIET = Reference(0.0, upper=MAJORITY, unit="",
                  source="'a healthy run meets all four thresholds': alerts in at most half the baseline launches")
CAUGHT = Reference(1.0, lower=MAJORITY, unit="",
                   source="'monitor ... against alert thresholds' catches what utilisation hides: in most launches")


def _percent(share: float) -> str:
    return f"{share * 100:g} %"


def _figures() -> tuple[tuple[str, str], ...]:
    """The four thresholds as the guide writes them, from the technique's defaults."""
    return (("GPU SM efficiency (DCGM)", f"> {_percent(ALERT_SM_EFFICIENCY_MIN)}"),
            ("IB retransmission rate (ibmonitor)", f"< {_percent(ALERT_IB_RETRANS_MAX)}"),
            ("storage latency P99 (Lustre monitoring)", f"< {ALERT_STORAGE_P99_MAX_S * 1000:g} ms"),
            ("CPU cache hit rate (perf)", f"> {_percent(ALERT_CACHE_HIT_MIN)}"))


C6 = Claim("C6", TECHNIQUE, S24,
           "GPU utilisation alone hides the real bottleneck; monitor SM efficiency, IB retransmission "
           "rate, storage latency P99 and CPU cache hit rate against alert thresholds.",
           _figures(),
           "a healthy run meets all four thresholds; a run with low SM efficiency but high "
           "'GPU utilisation' shows why utilisation alone misleads",
           title="Monitor four metrics, not utilisation", headline="4 alert thresholds")
#: The claims this experiment declares (its SPEC's ``ClaimSet.declared``).
CLAIMS = (C6,)
