"""The verdict standard: a measured ratio with a 95 % interval over launches, against a reference band.

How a claim is judged (Hoefler & Belli, "Scientific benchmarking of parallel computing
systems", SC15, rules 5-9; ReFrame's ``reference = (value, lower, upper)``):

* The unit of replication is an independent **launch** (one task of one suite
  repetition). A launch contributes the median of its steps after warm-up; pooling the
  steps of all launches as if independent would hide launch-to-launch variation, which is
  usually the larger one.
* The measured value of a comparison is the geometric mean over launches of the
  per-launch ratio of medians (paired: both series measured in the same launch, or in
  launches matched by run and repetition). Its 95 % interval comes from a two-level
  bootstrap: resample launches, then the steps inside each resampled launch, recompute.
* A :class:`Reference` is fixed in advance from the claim's words: a value and a band
  ``[lower, upper]`` (either may be open). The outcome is *reproduced* when the whole
  interval lies inside the band, *not reproduced* when it lies wholly outside, and
  *inconclusive* when it straddles a bound or when there are fewer than
  :data:`MIN_LAUNCHES` launches of :data:`MIN_STEPS` steps ("inconclusive (n = ...)").
* Several comparisons behind one claim (C5: hdf5 vs files and tfrecord vs files) are
  corrected with Holm's step-down method on one-sided bootstrap p-values, so that the
  family, not each member, keeps the 5 % error rate.

Pure numpy; no pandas, no torch. The bootstrap is seeded, so a report is reproducible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

#: Launches and steps per launch below which no verdict is given.
MIN_LAUNCHES = 5
MIN_STEPS = 10
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20151115  # SC15's opening day: any fixed seed makes reports reproducible

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Reference:
    """A claim's reference, ReFrame style: the figure and the band that counts as agreeing with it.

    ``lower``/``upper`` are absolute bounds of the band (``None`` = open); ``value`` is the
    guide's own figure, shown beside the band.
    """

    value: float
    lower: float | None = None
    upper: float | None = None
    unit: str = "x"
    source: str = ""
    """Where the reference comes from (the claim's words, the guide's figure)."""

    def __post_init__(self) -> None:
        assert self.lower is not None or self.upper is not None, "a reference needs at least one bound"
        assert self.lower is None or self.upper is None or self.lower <= self.upper, "lower > upper"

    def describe(self) -> str:
        if self.lower is not None and self.upper is not None:
            return f"reference {self.value:.3g}{self.unit} in [{self.lower:.2f}, {self.upper:.2f}]"
        if self.lower is not None:
            return f"reference >= {self.lower:.2f}{self.unit}"
        return f"reference <= {self.upper:.2f}{self.unit}"

    def contains(self, low: float, high: float) -> bool:
        return (self.lower is None or low >= self.lower) and (self.upper is None or high <= self.upper)

    def excludes(self, low: float, high: float) -> bool:
        return (self.lower is not None and high < self.lower) or (self.upper is not None and low > self.upper)


#: A claimed gain counts as reproduced from this share of it: +49.6 % is reproduced by +39.7 % or more.
GAIN_SHARE = 0.8


def gain_reference(claimed_ratio: float, source: str, share: float = GAIN_SHARE) -> Reference:
    """The band of a claimed speed-up: at least ``share`` of the claimed gain, no upper bound.

    A larger gain than claimed still supports "X beats Y"; a gain below ``share`` of the
    claimed one does not.
    """
    return Reference(value=claimed_ratio, lower=1.0 + share * (claimed_ratio - 1.0), upper=None, unit="x",
                     source=source)


@dataclass(frozen=True)
class Interval:
    """A measured value with its 95 % interval and how much data stands behind it."""

    estimate: float
    low: float
    high: float
    launches: int
    steps: int
    """The fewest steps any launch contributed (the weakest launch bounds the claim)."""
    unit: str = "x"

    def describe(self) -> str:
        if not math.isfinite(self.estimate):
            return f"no value ({self.launches} launches)"
        ci = (f" [{self.low:.2f}, {self.high:.2f}] 95 % CI" if math.isfinite(self.low) and math.isfinite(self.high)
              else " (no interval)")
        return f"{self.estimate:.2f}{self.unit}{ci}, {self.launches} launches x {self.steps} steps"

    def enough(self, min_launches: int = MIN_LAUNCHES, min_steps: int = MIN_STEPS) -> bool:
        return self.launches >= min_launches and self.steps >= min_steps


@dataclass(frozen=True)
class Outcome:
    """The verdict of one comparison: the outcome, the interval and the reference, as one sentence."""

    verdict: str
    interval: Interval
    reference: Reference
    why: str = ""

    def describe(self) -> str:
        text = f"{self.interval.describe()}, {self.reference.describe()} -> {self.verdict}"
        return f"{text} ({self.why})" if self.why else text


def _clean(samples: Sequence[float]) -> np.ndarray:
    arr = np.asarray(samples, dtype=float)
    return arr[np.isfinite(arr)]


@dataclass(frozen=True)
class PairedBootstrap:
    """One comparison's paired ratio: its interval and the bootstrap distribution behind it.

    Computed once per comparison; the interval and the p-values against a band both read
    the same resampled statistics (:meth:`pvalues`), so they can never disagree.
    """

    interval: Interval
    stats: np.ndarray | None  # resampled ratios (not logs); None with fewer than 2 launches

    def pvalues(self, reference: Reference) -> tuple[float, float]:
        """One-sided bootstrap p-values against a reference band: ``(p_outside, p_inside)``.

        Small ``p_outside`` is evidence the ratio lies inside the band (rejecting "outside"),
        small ``p_inside`` is evidence it lies outside. The percentile bootstrap's p-value for
        a band is the share of resampled statistics on the other side of it.
        """
        if self.stats is None:
            return 1.0, 1.0
        inside = np.ones(self.stats.size, dtype=bool)
        if reference.lower is not None:
            inside &= self.stats >= reference.lower
        if reference.upper is not None:
            inside &= self.stats <= reference.upper
        share_inside, resamples = float(inside.mean()), self.stats.size
        # +1 correction: a bootstrap never gives p = 0 from a finite number of resamples.
        return ((resamples * (1 - share_inside) + 1) / (resamples + 1),
                (resamples * share_inside + 1) / (resamples + 1))


def paired_bootstrap(numerators: Sequence[Sequence[float]], denominators: Sequence[Sequence[float]], *,
                     unit: str = "x", confidence: float = CONFIDENCE, resamples: int = BOOTSTRAP_RESAMPLES,
                     seed: int = BOOTSTRAP_SEED) -> PairedBootstrap:
    """The ratio of medians over paired launches, with a two-level bootstrap interval.

    Args:
        numerators, denominators: one sequence of step samples per launch; entry ``i`` of both
            comes from the same launch (or from launches matched by run and repetition).
        confidence: two-sided coverage of the percentile interval.

    Returns:
        The interval: the geometric mean over launches of median(num_i) / median(den_i), its
        bounds, the number of launches and the fewest steps of any launch (with fewer than 2
        launches the interval is infinite); and the resampled ratios, for :meth:`PairedBootstrap.pvalues`.
    """
    pairs = _pairs(numerators, denominators)
    n = len(pairs)
    if n == 0:
        return PairedBootstrap(Interval(math.nan, math.nan, math.nan, 0, 0, unit), None)
    steps = int(min(min(a.size, b.size) for a, b in pairs))
    estimate = float(math.exp(np.mean([math.log(np.median(a) / np.median(b)) for a, b in pairs])))
    if n < 2:
        return PairedBootstrap(Interval(estimate, -math.inf, math.inf, n, steps, unit), None)
    logs = _bootstrap_log_ratios(pairs, resamples, seed)
    alpha = 1.0 - confidence
    low, high = np.quantile(logs, [alpha / 2, 1 - alpha / 2])
    return PairedBootstrap(Interval(estimate, float(math.exp(low)), float(math.exp(high)), n, steps, unit),
                           np.exp(logs))


def paired_ratio(numerators: Sequence[Sequence[float]], denominators: Sequence[Sequence[float]],
                 **kwargs) -> Interval:
    """The interval of :func:`paired_bootstrap` alone."""
    return paired_bootstrap(numerators, denominators, **kwargs).interval


def _pairs(numerators: Sequence[Sequence[float]], denominators: Sequence[Sequence[float]]):
    if len(numerators) != len(denominators):
        raise ValueError(f"{len(numerators)} numerator launches vs {len(denominators)} denominator launches")
    pairs = [(_clean(a), _clean(b)) for a, b in zip(numerators, denominators)]
    # A launch whose median is not positive has no ratio (a throughput of 0 is a failed run).
    return [(a, b) for a, b in pairs if a.size and b.size and np.median(a) > 0 and np.median(b) > 0]


def _resampled_medians(rng: np.random.Generator, samples: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Medians of ``shape`` independent resamples (with replacement) of one launch's steps."""
    idx = rng.integers(0, samples.size, size=shape + (samples.size,))
    return np.median(samples[idx], axis=-1)


def _bootstrap_log_ratios(pairs, resamples: int, seed: int) -> np.ndarray:
    """Two-level bootstrap: launches with replacement, then steps inside each chosen launch.

    Every pick of a launch gets a fresh resample of its steps (vectorised: one matrix of
    resampled medians per launch, indexed by replicate and slot).
    """
    rng = np.random.default_rng(seed)
    n = len(pairs)
    chosen = rng.integers(0, n, size=(resamples, n))
    logs = np.empty((resamples, n))
    for i, (a, b) in enumerate(pairs):
        mask = chosen == i
        logs[mask] = np.log(_resampled_medians(rng, a, (resamples, n))[mask]
                            / _resampled_medians(rng, b, (resamples, n))[mask])
    return logs.mean(axis=1)


def wilson(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval of a share ``k / n`` (Wilson 1927); (nan, nan) for ``n = 0``.

    The interval for shares over launches (alerts that fired, faults a gate caught, jobs that
    failed): unlike the normal approximation it stays inside [0, 1] and is not empty at 0 or n.
    """
    if n == 0:
        return math.nan, math.nan
    from statistics import NormalDist

    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def share_outcome(k: int, n: int, reference: "Reference", *, launches: int | None = None, steps: int,
                  confidence: float = CONFIDENCE) -> "Outcome":
    """A share ``k / n`` judged against ``reference`` with its Wilson interval.

    Args:
        k, n: successes and trials (trials may be several per launch).
        launches: independent launches behind the trials (default ``n``): the standard's minimum applies to them.
        steps: the fewest timed steps of those launches.
    """
    low, high = wilson(k, n, confidence)
    return judge(Interval(k / n if n else math.nan, low, high, n if launches is None else launches, steps, ""),
                 reference)


def single_value(launch_samples: Sequence[Sequence[float]], *, unit: str = "", confidence: float = CONFIDENCE,
                 resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> Interval:
    """The mean over launches of each launch's median, with a two-level bootstrap interval.

    For quantities that are not ratios (C4's idle share): launches as the unit, steps
    resampled inside each launch.
    """
    launches = [s for s in (_clean(x) for x in launch_samples) if s.size]
    n = len(launches)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0, 0, unit)
    steps = int(min(s.size for s in launches))
    medians = np.array([np.median(s) for s in launches])
    estimate = float(medians.mean())
    if n < 2:
        return Interval(estimate, -math.inf, math.inf, n, steps, unit)
    rng = np.random.default_rng(seed)
    chosen = rng.integers(0, n, size=(resamples, n))
    picked = np.empty((resamples, n))
    for i, samples in enumerate(launches):
        mask = chosen == i
        picked[mask] = _resampled_medians(rng, samples, (resamples, n))[mask]
    stats = picked.mean(axis=1)
    alpha = 1.0 - confidence
    low, high = np.quantile(stats, [alpha / 2, 1 - alpha / 2])
    return Interval(estimate, float(low), float(high), n, steps, unit)


def judge(interval: Interval, reference: Reference, *, min_launches: int = MIN_LAUNCHES,
          min_steps: int = MIN_STEPS) -> Outcome:
    """Reproduced inside the band, not reproduced outside it, inconclusive otherwise or on too little data."""
    if not math.isfinite(interval.estimate):
        return Outcome(INCONCLUSIVE, interval, reference, "nothing measured")
    if not interval.enough(min_launches, min_steps):
        return Outcome(INCONCLUSIVE, interval, reference,
                       f"n = {interval.launches} launches x {interval.steps} steps; a verdict needs "
                       f">= {min_launches} x {min_steps}")
    if reference.contains(interval.low, interval.high):
        return Outcome(REPRODUCED, interval, reference)
    if reference.excludes(interval.low, interval.high):
        return Outcome(NOT_REPRODUCED, interval, reference)
    return Outcome(INCONCLUSIVE, interval, reference, "the interval straddles a bound of the band")


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979): family-wise error control without independence."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def bootstrap_pvalues(numerators: Sequence[Sequence[float]], denominators: Sequence[Sequence[float]],
                      reference: Reference, *, resamples: int = BOOTSTRAP_RESAMPLES,
                      seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """``(p_outside, p_inside)`` of a paired ratio against a band (see :meth:`PairedBootstrap.pvalues`)."""
    return paired_bootstrap(numerators, denominators, resamples=resamples, seed=seed).pvalues(reference)


def judge_family(intervals: Sequence[Interval], pvalues: Sequence[tuple[float, float]],
                 references: Sequence[Reference], *, alpha: float = (1 - CONFIDENCE) / 2,
                 min_launches: int = MIN_LAUNCHES, min_steps: int = MIN_STEPS) -> list[Outcome]:
    """Verdicts of several comparisons behind one claim, each against its own band, Holm-corrected.

    A member is reproduced when Holm's adjusted ``p_outside`` < ``alpha`` (one-sided, as
    a 95 % two-sided interval's bound is), not reproduced when the adjusted ``p_inside``
    is, inconclusive otherwise or on too little data. A family of one is judged by its
    interval alone (:func:`judge`): no correction is needed.
    """
    if len(intervals) == 1:
        return [judge(intervals[0], references[0], min_launches=min_launches, min_steps=min_steps)]
    adj_out = holm([p[0] for p in pvalues])
    adj_in = holm([p[1] for p in pvalues])
    outcomes = []
    for interval, reference, p_out, p_in in zip(intervals, references, adj_out, adj_in):
        if not interval.enough(min_launches, min_steps) or not math.isfinite(interval.estimate):
            outcomes.append(judge(interval, reference, min_launches=min_launches, min_steps=min_steps))
        elif p_out < alpha:
            outcomes.append(Outcome(REPRODUCED, interval, reference, f"Holm-adjusted p = {p_out:.3f}"))
        elif p_in < alpha:
            outcomes.append(Outcome(NOT_REPRODUCED, interval, reference, f"Holm-adjusted p = {p_in:.3f}"))
        else:
            outcomes.append(Outcome(INCONCLUSIVE, interval, reference,
                                    f"Holm-adjusted p = {min(p_out, p_in):.3f} >= {alpha:g}"))
    return outcomes


def combine(outcomes: Sequence[Outcome]) -> str:
    """A claim made of several required parts: reproduced if all are, not reproduced if any is not."""
    verdicts = [o.verdict for o in outcomes]
    if not verdicts:
        return INCONCLUSIVE
    if NOT_REPRODUCED in verdicts:
        return NOT_REPRODUCED
    if all(v == REPRODUCED for v in verdicts):
        return REPRODUCED
    return INCONCLUSIVE
