"""C14's decision, from measured figures: bandwidth-bound, latency-sensitive, or neither.

C14 (guide sec. 6): "if bandwidth-bound use gradient compression, else if latency-sensitive
use topology optimisation, else overlap computation and communication". The three regimes
and the technique each calls for are :data:`REGIMES`; :func:`classify` applies the order to
a series' figures with the :class:`~hpcbench.advise.thresholds.Thresholds`:

1. communication share (exposed communication / step) below ``min_comm_share``: neither
   (compute dominates the step; nothing to win on the wire first);
2. the byte term (beta x bytes) at least ``dominant_share`` of the modelled communication:
   bandwidth-bound;
3. the latency term (alpha x steps over the buckets) at least ``dominant_share``:
   latency-sensitive (many small buckets, each paying the link's latency);
4. otherwise neither.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.advise.figures import Figure, Measured
from hpcbench.advise.thresholds import THRESHOLDS, Thresholds
from hpcbench.core.registry import Registry


@dataclass(frozen=True)
class Regime:
    """One branch of C14: what the run is, and what the guide says to do about it."""

    name: str
    description: str
    """C14's word for it"""
    advice: str
    """C14's technique, in its words"""
    technique: str
    """the hpcbench technique that implements it (a scale-model mode, see recommend.TECHNIQUES)"""


BANDWIDTH_BOUND, LATENCY_SENSITIVE, NEITHER = "bandwidth_bound", "latency_sensitive", "neither"
REGIMES: Registry[Regime] = Registry("advisor regime")
REGIMES.register(BANDWIDTH_BOUND, Regime(BANDWIDTH_BOUND, "bandwidth-bound", "gradient compression", "quant2bit"))
REGIMES.register(LATENCY_SENSITIVE, Regime(LATENCY_SENSITIVE, "latency-sensitive", "topology optimisation",
                                           "hierarchical"))
REGIMES.register(NEITHER, Regime(NEITHER, "neither bandwidth-bound nor latency-sensitive",
                                 "compute/communication overlap", "no_sync"))


@dataclass(frozen=True)
class Classification:
    """The regime, why, and the figures the decision read."""

    regime: Regime
    reason: str
    latency_s: float
    byte_s: float
    figures: tuple[Figure, ...]

    @property
    def byte_share(self) -> float:
        total = self.latency_s + self.byte_s
        return self.byte_s / total if total > 0 else 0.0

    @property
    def latency_share(self) -> float:
        total = self.latency_s + self.byte_s
        return self.latency_s / total if total > 0 else 0.0


def classify(measured: Measured, latency_s: float, byte_s: float, how: str = "",
             thresholds: Thresholds = THRESHOLDS) -> Classification:
    """C14's regime of one series.

    Args:
        measured: the series' figures (:func:`hpcbench.advise.figures.measure`).
        latency_s, byte_s: one synchronisation's latency and byte terms on the series' link
            (:func:`hpcbench.advise.link.terms`).
        how: how the link was obtained (``fitted`` / ``inferred``), shown with the terms.
        thresholds: see :class:`~hpcbench.advise.thresholds.Thresholds`.

    Returns:
        The :class:`Classification`; ``reason`` quotes the figures and thresholds that decided it.
    """
    total = latency_s + byte_s
    byte_share = byte_s / total if total > 0 else 0.0
    latency_share = latency_s / total if total > 0 else 0.0
    buckets = len(measured.layout)
    per_bucket_latency = latency_s / buckets if buckets else 0.0
    crossover = per_bucket_latency / (byte_s / measured.grad_bytes) if byte_s > 0 else float("inf")
    small = sum(1 for b in measured.layout if b < crossover)
    term_source = f"scale model on the {how} link, over the {buckets} buckets of one synchronisation"
    figures = (Figure("latency term (alpha x steps)", latency_s, "s", term_source),
               Figure("byte term (beta x bytes)", byte_s, "s", term_source),
               Figure("byte share", byte_share, "fraction", "byte term / (latency + byte term)"),
               Figure("latency share", latency_share, "fraction", "latency term / (latency + byte term)"),
               Figure("crossover bucket size", crossover, "B",
                      "bucket bytes whose byte term equals the latency term (n 1/2)"),
               Figure("buckets below the crossover", float(small), "", "buckets whose latency term exceeds "
                                                                       "their byte term"))
    share, th = measured.comm_share, thresholds
    if share < th.min_comm_share:
        regime = REGIMES.get(NEITHER)
        reason = (f"communication share {share:.0%} < {th.min_comm_share:.0%}: compute dominates the step, so "
                  f"C14 falls through to overlap")
    elif byte_share >= th.dominant_share:
        regime = REGIMES.get(BANDWIDTH_BOUND)
        reason = (f"communication share {share:.0%} >= {th.min_comm_share:.0%} and the byte term is "
                  f"{byte_share:.0%} >= {th.dominant_share:.0%} of the communication: bandwidth-bound")
    elif latency_share >= th.dominant_share:
        regime = REGIMES.get(LATENCY_SENSITIVE)
        reason = (f"communication share {share:.0%} >= {th.min_comm_share:.0%} and the latency term is "
                  f"{latency_share:.0%} >= {th.dominant_share:.0%} of the communication ({small} of {buckets} "
                  f"buckets below the {crossover:.3g} B crossover): latency-sensitive")
    else:
        regime = REGIMES.get(NEITHER)
        reason = (f"communication share {share:.0%} >= {th.min_comm_share:.0%}, but neither term reaches "
                  f"{th.dominant_share:.0%} (bytes {byte_share:.0%}, latency {latency_share:.0%}): C14 falls "
                  f"through to overlap")
    return Classification(regime, reason, latency_s, byte_s, figures)


__all__ = ["BANDWIDTH_BOUND", "Classification", "LATENCY_SENSITIVE", "NEITHER", "REGIMES", "Regime", "classify"]
