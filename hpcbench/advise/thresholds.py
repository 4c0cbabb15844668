"""The advisor's thresholds, as data: where a run counts as bandwidth-bound, latency-sensitive or neither.

C14 (guide sec. 6) gives an order, not numbers: "if bandwidth-bound use gradient compression,
else if latency-sensitive use topology optimisation, else overlap computation and
communication". The numbers below are ours, each with why; they are read by
:func:`hpcbench.advise.classify.classify` only, and shown with every advice.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hpcbench.core.errors import ConfigError


@dataclass(frozen=True)
class Thresholds:
    """When the byte term, the latency term or neither decides a run's communication."""

    min_comm_share: float = 0.15
    """exposed communication / step below which communication is not what to optimise first: even
    removing all of it would gain less than 1 / (1 - 0.15) = 1.18x, so C14's fall-through
    (overlap) applies. Half of C12's 30 % gate, so a run the gate passes may still be advised on."""
    dominant_share: float = 0.6
    """share of the modelled communication time (alpha x steps + beta x bytes over the run's
    buckets) that one term must reach to dominate; between 0.4 and 0.6 neither does, and C14
    falls through to overlap. 0.6: a technique removing the dominant term then removes at least
    60 % of the communication, more than the other term could give."""

    def __post_init__(self) -> None:
        for name in ("min_comm_share", "dominant_share"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
                raise ConfigError(f"{value!r} is out of range; allowed: 0..1", field=name, config="Thresholds")
        if self.dominant_share < 0.5:
            # below one half both terms could "dominate" at once and the order of the checks would decide
            raise ConfigError(f"{self.dominant_share} is out of range; allowed: 0.5..1", field="dominant_share",
                              config="Thresholds")

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


#: The thresholds every advice uses unless told otherwise.
THRESHOLDS = Thresholds()

__all__ = ["THRESHOLDS", "Thresholds"]
