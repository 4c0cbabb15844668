"""C12's regime: a platform on which a healthy run's step time is steady well inside the gate's 5 %.

The gate's first check fails a run whose step-time standard deviation reaches 5 % of its mean.
That can tell a fault from a healthy run only where a healthy run's own spread is small beside
5 %: the guide's platform, tuned GPU jobs on nodes of their own, whose step time varies by a
percent or two. The dimensionless quantity that decides the claim is therefore the healthy
spread over the gate's limit. On two emulated nodes sharing two CPU cores it exceeds 1 (a
healthy run's own spread is above the limit), so a gate that "fails the healthy baseline" there
says that the emulator is noisy, not that the gate stops healthy jobs: a figure judged outside
the guide's regime.

**The regime, fixed before any value was looked at:** a healthy spread below **half** the gate's
limit, 2.5 %. Why half: the sample std / mean over n steps scatters around the true spread h with
a relative standard error of about 1 / sqrt(2 (n - 1)), 0.24 at the gate's 10 steps. A healthy
run at h = 2.5 % then measures below 2.5 % + 2 x 0.6 % = 3.7 % in 97.5 % of launches, and the 5 %
limit lies four standard errors away: it passes whatever the sampling noise. At h = 5 % it fails
half the time, whatever the gate is worth.

**Measured apart from what is judged.** Before the phases, each launch trains healthy for
``calibration_s`` and records the spread of those steps, computed as the gate computes it (per rank
std / mean, the median over ranks), as the fact ``regime.healthy_step_cv``. The judged baseline is
a later phase with steps of its own, so a launch in the regime whose baseline still fails the gate
is a real false alarm and counts against the claim.

**Here, below the experiments,** because more than one experiment reads it: ``practice`` (C12)
judges only launches in the regime, and ``scaling`` (C13), which splits its arms by the same gate's
decisions before each step out, records the same fact (a healthy calibration of its own before each
stage it gates) and reads only the gates of launches in the regime. Experiments do not import each
other; :mod:`hpcbench.experiments.practice.regime` re-exports this module, and
:mod:`hpcbench.experiments.practice.claims` declares :data:`GATE_REGIME` as C12's regime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpcbench.practice.gates import GATE_STEP_TIME_CV_MAX
from hpcbench.scale.regime import finite_number

#: The launch fact: the calibration phase's step-time spread (std / mean, the gate's way).
FACT_HEALTHY_CV = "regime.healthy_step_cv"
#: The launch fact: how many steps the calibration timed.
FACT_HEALTHY_STEPS = "regime.healthy_steps"
#: A launch's standing (:meth:`SpreadRegime.status`).
IN_REGIME, OUT_OF_REGIME, NOT_RECORDED = "in regime", "out of regime", "regime not recorded"


@dataclass(frozen=True)
class SpreadRegime:
    """A gate's regime: the healthy step-time spread must lie below :attr:`max_cv` (see the module docstring)."""

    claim: str
    max_cv: float
    limit: float
    """the gate's own limit on the spread"""

    def status(self, cv: Any) -> str:
        """:data:`IN_REGIME`, :data:`OUT_OF_REGIME` or :data:`NOT_RECORDED` for a launch's recorded spread."""
        v = finite_number(cv)
        return NOT_RECORDED if v is None else IN_REGIME if v < self.max_cv else OUT_OF_REGIME

    def _spreads(self, launches: Any) -> list[float | None]:
        column = launches[FACT_HEALTHY_CV] if len(launches) and FACT_HEALTHY_CV in launches.columns else []
        return [finite_number(v) for v in column] or [None] * len(launches)

    def guide(self) -> str:
        return (f"a healthy run's step-time spread below {self.max_cv:.1%} (half the gate's {self.limit:.0%}: "
                f"tuned jobs on nodes of their own)")

    def reason(self, spreads: list[float | None]) -> str:
        """Why launches outside the regime are not judged: ``inconclusive: regime ...``."""
        got = sorted(v for v in spreads if v is not None)
        if not got:
            return (f"inconclusive: regime not recorded (no calibration of the healthy step-time spread, fact "
                    f"{FACT_HEALTHY_CV}) vs the guide's < {self.max_cv:.1%}")
        return (f"inconclusive: regime: healthy step-time spread {got[len(got) // 2]:.1%} (median of {len(got)} "
                f"calibration(s)) vs the guide's < {self.max_cv:.1%}")

    def in_regime(self, launches: Any) -> list[bool]:
        """Per launch (rows of a launches frame), whether its recorded calibration lies in the regime.

        A launch without the fact is not in it. This is what decides whether a gate the launch ran
        speaks for C12's gate: C12 judges only such launches, and a rule that splits its arms by
        gate decisions (C13: the gate before each step out) must read only theirs.
        """
        return [self.status(v) == IN_REGIME for v in self._spreads(launches)]

    def no_gate_reason(self, launches: Any) -> str:
        """Why none of ``launches`` ran a gate in the regime: ``inconclusive: no gate ran in C12's regime (...)``."""
        got = sorted(v for v in self._spreads(launches) if v is not None)
        if not got:
            why = (f"no launch calibrated the healthy step-time spread, fact {FACT_HEALTHY_CV}; the guide's "
                   f"< {self.max_cv:.1%}")
        else:
            why = (f"healthy step-time spread {got[len(got) // 2]:.1%}, median of {len(got)} calibration(s), vs "
                   f"the guide's < {self.max_cv:.1%}")
        return f"inconclusive: no gate ran in {self.claim}'s regime ({why})"

    def summary(self, launches: Any) -> str:
        """One sentence for the ledger: the guide's regime and the spreads the launches' calibrations measured."""
        spreads = self._spreads(launches)
        got = sorted(v for v in spreads if v is not None)
        head = f"guide's regime: {self.guide()}"
        if not got:
            return f"{head}; reached: no launch calibrated it, so the figure is not judged"
        within = sum(self.status(v) == IN_REGIME for v in got)
        return (f"{head}; reached: median {got[len(got) // 2]:.1%} ({got[0]:.1%}-{got[-1]:.1%}); {within} of "
                f"{len(spreads)} launch(es) within it")

    def brief(self, launches: Any) -> str:
        """:meth:`summary` in a few words: ``spread < 2.5%: 0/7 in``."""
        spreads = self._spreads(launches)
        within = sum(self.status(v) == IN_REGIME for v in spreads)
        return f"spread < {self.max_cv:.1%}: {within}/{len(spreads)} in"


#: C12's regime (see the module docstring for the arithmetic).
GATE_REGIME = SpreadRegime("C12", max_cv=GATE_STEP_TIME_CV_MAX / 2, limit=GATE_STEP_TIME_CV_MAX)
