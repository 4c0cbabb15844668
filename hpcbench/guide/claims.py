"""What a claim of the field guide is: the :class:`Claim` type, its kinds and the guide's sections.

Each of the guide's claims C1-C17 is *declared* once, in the ``claims.py`` of the experiment that
rules on it (``hpcbench/experiments/<name>/claims.py``): its words and figures (checked against the
Chinese original; our digest is ``hpcbench/guide/README.md``), the numbers they state, the guide's
own arithmetic, the comparison's band, the regime and the guide statement it comes from, and what
the platform can show. :func:`hpcbench.experiments.all_claims` gathers them in order. This module
holds only what every declaration shares, so that a lower layer can name a claim's kind or check a
claim id without seeing the experiments.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.core.errors import HpcbenchError


class ClaimError(HpcbenchError, KeyError):
    """An unknown claim id; the message lists the valid ones."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


#: The three kinds of statement the guide makes; a verdict is read in its kind's words.
FIGURE = "figure"
TECHNIQUE = "technique"
ANECDOTE = "anecdote"
KINDS = {
    FIGURE: "a figure the guide measured (a gain, a share, a step time): judged against the figure, in the "
            "guide's regime",
    TECHNIQUE: "a technique the guide recommends: judged on whether it works as described, by a test that can "
               "fail",
    ANECDOTE: "an anecdote or context: checked for consistency with the scale model, every assumption stated",
}


@dataclass(frozen=True)
class Claim:
    """One claim of the guide, as the guide states it."""

    id: str
    """``"C1"`` .. ``"C17"``, as the guide's claims are numbered (hpcbench/guide/README.md)."""
    kind: str
    """One of :data:`KINDS`: what sort of statement it is decides what a verdict on it can say."""
    section: str
    """The guide's section, e.g. ``"2.1 Wrong communication mode"``."""
    wording: str
    """The claim in one English sentence, faithful to the original."""
    figures: tuple[tuple[str, str], ...]
    """(what, the guide's figure) pairs, quoted exactly."""
    predicted: str
    """What the guide's figures predict (checked arithmetic), or ``""``."""
    title: str = ""
    """The claim in at most six words, for the ledger's one-line summary."""
    headline: str = ""
    """The guide's main figure in at most six words (the summary's "guide" column)."""

    def __post_init__(self) -> None:
        assert self.kind in KINDS, f"{self.id}: kind {self.kind!r} not in {list(KINDS)}"
        # The summary row has a word budget (30 words): the short forms must stay short.
        assert len(self.title.split()) <= 6 and len(self.headline.split()) <= 6, f"{self.id}: title/headline too long"

    def claimed(self) -> str:
        """The figures as one readable line."""
        return "; ".join(f"{what}: {figure}" for what, figure in self.figures)


# -- formatting ---------------------------------------------------------------------

def gain_percent(base: float, new: float) -> float:
    """Relative gain of ``new`` over ``base`` in percent."""
    return (new / base - 1.0) * 100.0


#: The guide's sections, as the declarations name them.
S1 = "1 AI parallel-computing architecture on supercomputers"
S11 = "1.1 Typical supercomputer architecture"
S21 = "2.1 Wrong communication mode"
S22 = "2.2 Storage I/O bottleneck"
S24 = "2.4 Wrong monitoring metrics"
S25 = "2.5 Too little fault tolerance"
S3 = "3 Tuning case: weather-forecast model, 3.2x faster"
S4 = "4 Recommended tool chain"
S6 = "6 Best practices"

#: The guide numbers its claims C1..C17.
CLAIM_IDS = tuple(f"C{i}" for i in range(1, 18))


def check_claim_id(claim_id: str) -> str:
    """``claim_id`` when the guide numbers a claim so, for layers below the experiments (which declare them).

    Raises:
        ClaimError: listing the valid ids.
    """
    if claim_id not in CLAIM_IDS:
        raise ClaimError(f"unknown claim {claim_id!r}; valid: {', '.join(CLAIM_IDS)}")
    return claim_id
