"""Arithmetic first, then measurement: what decides a figure's verdict, and which of the two decided it.

A measured interval can only speak for a figure when two things hold before anything is measured:

1. **The guide's own statements fit together** (:class:`Consistency`). A figure that its other
   figures or its stated platform contradict — by arithmetic (61 % utilisation caps a
   communication-only gain at 1 / 0.61 = 1.64x, yet the guide reports 3.2x) or by the scale model
   (4x accumulation gives ResNet-50 +1.7 % on the guide's platform, not +220 %) — is
   **"implausible as stated"**. No measurement can reproduce what the guide's own numbers rule out.
2. **This platform can show the band** (:class:`Reach`). From the regime a launch reached (Amdahl:
   removing a share ``1 - b`` of the step gives at most ``1 / b``) and its topology (a two-level
   reduction on one link per node saves at most the bytes the node-level step keeps off that link),
   the largest effect the platform can show is computed. A band whose lower edge lies above it gives
   **"not testable here: this platform caps it at X"**, never "not reproduced": an interval below an
   unreachable band says nothing about the claim.

Only then does the measurement decide (reproduced, not reproduced, inconclusive). :func:`decide`
applies the consistency check last, over a judgement whose comparisons the rule kit already read
against their reach (:func:`hpcbench.judge.rulekit.judge_comparisons`), and records which decided
(:attr:`~hpcbench.judge.evidence.Judgement.decided_by`); the ledger
shows all three, each computed and stated on its own, so a reader sees both what the arithmetic says
and what was measured.

Numbers in, text out; no pandas, no torch: experiments' ``claims.py`` import it, and so do their ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

from hpcbench.judge.verdict import (ARITHMETIC, IMPLAUSIBLE, INCONCLUSIVE, MEASUREMENT, NOT_REPRODUCED, NOT_TESTABLE,
                                    REPRODUCED, Outcome, Reference)

if TYPE_CHECKING:  # the judgement's module imports pandas; declarations (claims.py) import this one in ranks
    from hpcbench.judge.evidence import Judgement

#: The short reasons shown in the ledger's summary row stay within this many words.
REASON_WORDS = 8


def _short(reason: str) -> str:
    assert len(reason.split()) <= REASON_WORDS, f"reason {reason!r} is over {REASON_WORDS} words"
    return reason


@dataclass(frozen=True)
class Consistency:
    """Whether the guide's figure, its other figures and its stated platform fit together.

    Computed from the guide's statements and the scale model alone, never from a measurement.
    """

    holds: bool
    reason: str
    """At most :data:`REASON_WORDS` words: why it does not hold (or what holds), for the summary row."""
    arithmetic: str
    """The whole argument, every number in it, for the detail."""

    def __post_init__(self) -> None:
        _short(self.reason)

    def describe(self) -> str:
        word = "consistent" if self.holds else IMPLAUSIBLE
        return f"Guide's statements: {word} ({self.arithmetic})."


@dataclass(frozen=True)
class Reach:
    """The largest effect (a ratio, ``x``) this platform can show in the regime a launch reached."""

    cap: float
    basis: str
    """How the cap follows (Amdahl at the reached busy share, the topology's bytes), with its numbers."""
    needs: str = ""
    """What a platform would need to reach the band (e.g. "a step <= 36 % busy")."""

    def blocks(self, reference: Reference) -> bool:
        """True when the band's lower edge lies above the cap: no outcome but "below the band" is possible."""
        return reference.lower is not None and math.isfinite(self.cap) and reference.lower > self.cap

    def describe(self, reference: Reference | None = None) -> str:
        text = f"this platform caps it at {self.cap:.2f}x ({self.basis})"
        if reference is not None and self.blocks(reference):
            text += f", under the band's {reference.lower:.2f}x" + (f"; needs {self.needs}" if self.needs else "")
        return text


def amdahl_cap(busy: float) -> float:
    """The largest speed-up from removing everything but the busy share ``busy`` of a step: ``1 / busy``."""
    if not 0.0 < busy <= 1.0:
        raise ValueError(f"busy share {busy} is not in (0, 1]")
    return 1.0 / busy


def partial_cap(busy: float, kept: float) -> float:
    """The speed-up when the non-busy share of a step shrinks to ``kept`` of itself (Amdahl's law).

    A step of ``1 / busy`` computes (one compute = 1) whose ``1 / busy - 1`` of waiting becomes
    ``kept`` times as long: ``(1 / busy) / (1 + (1 / busy - 1) kept)``.
    """
    if not 0.0 <= kept:
        raise ValueError(f"kept share {kept} is negative")
    whole = amdahl_cap(busy)
    return whole / (1.0 + (whole - 1.0) * kept)


def accumulation_cap(busy: float, samples_per_sync: float) -> float:
    """Per-sample speed-up of synchronising once per ``samples_per_sync`` times the work, compute linear.

    A 1x step computes ``c`` and synchronises ``m`` (busy share ``b = c / (c + m)``); ``k`` times the
    work per synchronisation takes ``k c + m``, so ``k (c + m) / (k c + m) = k / (k b + 1 - b)``.
    """
    if samples_per_sync < 1:
        raise ValueError(f"samples_per_sync {samples_per_sync} is below 1")
    if not 0.0 < busy <= 1.0:
        raise ValueError(f"busy share {busy} is not in (0, 1]")
    return samples_per_sync / (samples_per_sync * busy + 1.0 - busy)


def not_testable(outcome: Outcome, reach: Reach) -> Outcome:
    """``outcome`` re-read as "not testable here": its interval stays, shown beside the reachable cap."""
    return Outcome(NOT_TESTABLE, outcome.interval, outcome.reference,
                   f"{NOT_TESTABLE}: {reach.describe(outcome.reference)}")


def read_parts(verdicts: Sequence[str]) -> str:
    """The verdict of a claim whose parts are all required, "not testable here" among them.

    A part measured outside its band fails the claim whatever else holds; otherwise a part this platform
    cannot show leaves the whole "not testable here"; otherwise the parts' own combination.
    """
    if NOT_REPRODUCED in verdicts:
        return NOT_REPRODUCED
    if NOT_TESTABLE in verdicts:
        return NOT_TESTABLE
    if verdicts and all(v == REPRODUCED for v in verdicts):
        return REPRODUCED
    return INCONCLUSIVE


def decide(judgement: "Judgement", consistency: Consistency | None = None) -> "Judgement":
    """The judgement read in order: the guide's consistency, then what the platform can show, then measurement.

    The measurement (with each comparison's reach already applied by the rule kit) is kept whole in
    ``measured`` and the outcomes; only the verdict, who decided it and the short reason change.

    Returns:
        "implausible as stated", decided by arithmetic, when ``consistency`` does not hold; else the
        judgement with :attr:`~hpcbench.judge.evidence.Judgement.decided_by` set: arithmetic for "not
        testable here", measurement otherwise.
    """
    head = consistency.describe() + " " if consistency is not None else ""
    if consistency is not None and not consistency.holds:
        return replace(judgement, verdict=IMPLAUSIBLE, decided_by=ARITHMETIC, reason=consistency.reason,
                       consistency=consistency.describe(),
                       detail=f"{head}Measured here, shown and not deciding: {judgement.detail}")
    decided_by = ARITHMETIC if judgement.verdict == NOT_TESTABLE else MEASUREMENT
    return replace(judgement, decided_by=decided_by, consistency=consistency.describe() if consistency else "",
                   detail=head + judgement.detail)
