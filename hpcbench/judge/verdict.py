"""The verdict standard: a measured ratio with a 95 % interval over launches, against a reference band.

How a claim is judged (Hoefler & Belli, "Scientific benchmarking of parallel computing
systems", SC15, rules 5-9; ReFrame's ``reference = (value, lower, upper)``):

* The unit of replication is an independent **launch** (one task of one suite
  repetition). A launch contributes one value from its steps after warm-up (its
  *estimator*, below); pooling the steps of all launches as if independent would hide
  launch-to-launch variation, which is usually the larger one.
* The measured value of a comparison is the geometric mean over launches of the
  per-launch ratio of those values (paired: both series measured in the same launch, or in
  launches matched by run and repetition). Its 95 % interval is a Student-t interval on
  the per-launch log ratios (df = launches - 1). Each launch's value already carries its
  step noise, so the launches are the only level to resample; a percentile bootstrap over
  5 launches uses normal-like quantiles where t(4) is 2.78, and covered the truth only
  79-89 % of the time in simulation. ``tests/test_verdict.py`` measures the coverage of
  every interval here on >= 2,000 simulated datasets per noise setting.
* **Which per-launch value** (``estimator=``, :data:`ESTIMATORS`) follows from what the
  claim is about:

  - :data:`MEDIAN` (the default): the median step. For a claim about a *typical* step
    (a step's latency, a kernel's time): it ignores rare slow steps by design.
  - :data:`WORK_OVER_TIME_RATES`: for a *throughput* claim (images/s, tokens/s) on a series
    whose samples are per-step RATES (work of the step / its time) with the same work in
    every step. The guide's throughputs are work over wall time, stalls included, and a
    launch's total work / total time over its timed window is the HARMONIC mean of its
    per-step rates. A median hides stalled steps: with 10-20 % of the steps of one arm
    stalled 3-10x, the median's interval covered the throughput ratio in only 0-26 % of
    simulated suites (``tests/test_verdict.py``).
  - :data:`MEAN_TIME`: the same throughput claim on a series whose samples are step TIMES
    (seconds per step or per micro-step, equal work each): time per unit of work over the
    window = the arithmetic MEAN of the times. Its ratio is the reciprocal of the
    throughput ratio (a time ratio < 1 is a speed-up).

  What a throughput interval covers: the geometric mean of per-launch *window* throughput
  ratios, ``exp(E[log ratio])`` over a window of as many timed steps as the launches have.
  With stalls that is not quite the long-run ratio E[work] / E[time]: a few timed steps
  see a random number of stalls, and the log of a ratio of window means sits below the
  log of the ratio of expectations (Jensen), by less the more steps a launch times. The
  tests state both and measure the coverage of each, per stall share, launches and steps.
* A :class:`Reference` is fixed in advance from the claim's words: a value and a band
  ``[lower, upper]`` (either may be open). The outcome is *reproduced* when the whole
  interval lies inside the band, *not reproduced* when it lies wholly outside, and
  *inconclusive* when it straddles a bound or when there are fewer than
  :data:`MIN_LAUNCHES` launches of :data:`MIN_STEPS` steps ("inconclusive (n = ...)").
* Several comparisons behind one claim (C5: hdf5 vs files and tfrecord vs files) are
  corrected with Holm's step-down method on one-sided t-test p-values, so that the
  family, not each member, keeps the 5 % error rate. The p-values are the same t test's,
  so a member's interval and its p-values can never disagree.
* An interval speaks for the session that measured it: launches of one session share the
  machine's state (other load, the link's calibration, the page cache), so two sessions can
  give disjoint intervals for the same comparison. The rule kit judges each session apart
  and flags disagreement (:mod:`hpcbench.judge.rulekit`).

numpy and scipy (Student's t); no pandas, no torch. Deterministic: a report is reproducible.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

#: Launches and steps per launch below which no verdict is given. The interval is a Student-t over
#: the launches' medians, so the steps only set how noisy each launch's median is, and the interval
#: carries that noise: ``tests/test_verdict.py`` measures its coverage at 5 and at 10 steps per
#: launch (0.93-0.97 in every noise setting, outliers and heavy tails included). 5 steps, not 10:
#: a whole reproduce run's records judged again on each launch's last 5 timed steps gave every verdict
#: unchanged, with wider intervals, and the suite needs the time.
MIN_LAUNCHES = 5
MIN_STEPS = 5
CONFIDENCE = 0.95

#: Per-launch estimators (``estimator=`` of :func:`paired_comparison`); see the module docstring for which
#: claim each one answers.
MEDIAN = "median"
"""The median step: a typical step, rare slow steps ignored (the default)."""
WORK_OVER_TIME_RATES = "work_over_time"
"""Per-step rates (work / step time, equal work per step): total work / total time = their harmonic mean."""
MEAN_TIME = "mean_time"
"""Per-step times (equal work per step): time per unit of work over the window = their arithmetic mean."""

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
#: What arithmetic decides before a measurement can (:mod:`hpcbench.judge.feasibility`).
IMPLAUSIBLE = "implausible as stated"
NOT_TESTABLE = "not testable here"
#: Which of the two decided a verdict.
ARITHMETIC, MEASUREMENT = "arithmetic", "measurement"


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


@functools.lru_cache(maxsize=256)
def _t_quantile(confidence: float, df: int) -> float:
    """The two-sided Student-t quantile of ``confidence`` at ``df`` degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(1 - (1 - confidence) / 2, df))


def _t_sf(statistic: float, df: int) -> float:
    """P(T > statistic) for Student's t with ``df`` degrees of freedom (statistic may be +-inf)."""
    from scipy.stats import t

    return float(t.sf(statistic, df))


@dataclass(frozen=True)
class PairedRatio:
    """One comparison's paired ratio: its interval and the t statistics behind it.

    Computed once per comparison; the interval and the p-values against a band both read
    the same mean and standard error of the per-launch log ratios (:meth:`pvalues`), so they
    can never disagree: the interval's low bound is above a band's lower edge exactly when
    the one-sided p-value of lying below it is < (1 - confidence) / 2.
    """

    interval: Interval
    log_mean: float
    log_se: float
    """Standard error of the mean log ratio (0 when every launch gave the same ratio)."""
    df: int
    """Degrees of freedom (launches - 1); 0 with fewer than 2 launches (no test)."""

    def _p_above(self, log_bound: float) -> float:
        """One-sided p-value of "the true log ratio is <= bound" (small: evidence it is above)."""
        if self.log_se == 0:
            return 0.0 if self.log_mean > log_bound else 1.0
        return _t_sf((self.log_mean - log_bound) / self.log_se, self.df)

    def pvalues(self, reference: Reference) -> tuple[float, float]:
        """One-sided t-test p-values against a reference band: ``(p_outside, p_inside)``.

        Small ``p_outside`` is evidence the ratio lies inside the band (every side of it
        rejected: the intersection-union test), small ``p_inside`` is evidence it lies outside
        (below the lower edge or above the upper one, whichever is nearer).
        """
        if self.df < 1:
            return 1.0, 1.0
        p_outside, p_inside = 0.0, 1.0
        if reference.lower is not None:
            above = self._p_above(math.log(reference.lower))
            p_outside, p_inside = max(p_outside, above), min(p_inside, 1.0 - above)
        if reference.upper is not None:
            above = self._p_above(math.log(reference.upper))
            p_outside, p_inside = max(p_outside, 1.0 - above), min(p_inside, above)
        return p_outside, p_inside


def paired_comparison(numerators: Sequence[Sequence[float]], denominators: Sequence[Sequence[float]], *,
                      unit: str = "x", confidence: float = CONFIDENCE, estimator: str = MEDIAN) -> PairedRatio:
    """The ratio of per-launch values over paired launches, with a Student-t interval over launches.

    Args:
        numerators, denominators: one sequence of step samples per launch; entry ``i`` of both
            comes from the same launch (or from launches matched by run and repetition).
        confidence: two-sided coverage of the interval.
        estimator: each launch's value from its steps, a name in :data:`ESTIMATORS`:
            :data:`MEDIAN` (default), :data:`WORK_OVER_TIME_RATES` (throughput from per-step
            rates) or :data:`MEAN_TIME` (time per unit of work from per-step times).

    Returns:
        The interval: the geometric mean over launches of value(num_i) / value(den_i) and
        ``exp(mean +- t * sd / sqrt(n))`` of the per-launch log ratios, the number of launches
        and the fewest steps of any launch (with fewer than 2 launches the interval is
        infinite); and the t statistics, for :meth:`PairedRatio.pvalues`.

    Raises:
        ValueError: ``estimator`` is not a name in :data:`ESTIMATORS`.
    """
    pairs = _pairs(numerators, denominators, estimator=estimator)
    n = len(pairs)
    if n == 0:
        return PairedRatio(Interval(math.nan, math.nan, math.nan, 0, 0, unit), math.nan, math.nan, 0)
    steps = int(min(size for _, _, size in pairs))
    logs = np.array([math.log(a / b) for a, b, _ in pairs])
    mean = float(logs.mean())
    if n < 2:
        return PairedRatio(Interval(math.exp(mean), -math.inf, math.inf, n, steps, unit), mean, math.inf, 0)
    se = float(logs.std(ddof=1) / math.sqrt(n))
    half = _t_quantile(confidence, n - 1) * se
    return PairedRatio(Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n, steps, unit),
                       mean, se, n - 1)


def paired_ratio(numerators: Sequence[Sequence[float]], denominators: Sequence[Sequence[float]], *,
                 estimator: str = MEDIAN, **kwargs) -> Interval:
    """The interval of :func:`paired_comparison` alone (same arguments)."""
    return paired_comparison(numerators, denominators, estimator=estimator, **kwargs).interval


def _pairs(numerators: Sequence[Sequence[float]], denominators: Sequence[Sequence[float]], *,
           estimator: str = MEDIAN) -> list[tuple[float, float, int]]:
    """(value of numerator, value of denominator, fewer steps of the two) per launch with a ratio.

    The value is ``estimator``'s (:data:`ESTIMATORS`) of the launch's finite samples.
    """
    value = launch_estimator(estimator)
    if len(numerators) != len(denominators):
        raise ValueError(f"{len(numerators)} numerator launches vs {len(denominators)} denominator launches")
    pairs = []
    for a, b in zip(numerators, denominators):
        a, b = _clean(a), _clean(b)
        if not (a.size and b.size):
            continue
        ma, mb = value(a), value(b)
        # A launch whose value is not positive (or not defined: nan) has no ratio (a throughput of 0 is a failed run).
        if ma > 0 and mb > 0:
            pairs.append((ma, mb, min(a.size, b.size)))
    return pairs


def _median(arr: np.ndarray) -> float:
    """np.median of a clean 1-d array, by one sort: the same value at a fraction of the cost on the few
    steps of a launch (the coverage tests take it tens of thousands of times)."""
    s = np.sort(arr)
    k = s.size // 2
    return float(s[k]) if s.size % 2 else float((s[k - 1] + s[k]) / 2)


def _work_over_time(rates: np.ndarray) -> float:
    """Total work / total time of a launch from its per-step rates (equal work per step): their harmonic mean.

    Step i does work w in time w / r_i, so the window's throughput is n w / sum(w / r_i) = n / sum(1 / r_i):
    a stalled step weighs by the time it took. Not defined (nan, so the launch has no ratio) when a rate is
    not positive: a step with no work, or a negative one, is not a step of that series.
    """
    if rates.min() <= 0:
        return math.nan
    return float(rates.size / np.sum(1.0 / rates))


def _mean_time(times: np.ndarray) -> float:
    """Time per unit of work over a launch's window from its per-step times (equal work per step): their mean."""
    return float(times.mean())


#: Per-launch estimator by name: a clean (finite) 1-d array of one launch's step samples -> one value.
ESTIMATORS: Mapping[str, Callable[[np.ndarray], float]] = {
    MEDIAN: _median,
    WORK_OVER_TIME_RATES: _work_over_time,
    MEAN_TIME: _mean_time,
}


def launch_estimator(name: str) -> Callable[[np.ndarray], float]:
    """The per-launch estimator called ``name`` (:data:`ESTIMATORS`); ValueError naming the valid ones."""
    try:
        return ESTIMATORS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown per-launch estimator {name!r}; valid: {', '.join(map(repr, ESTIMATORS))}") from None


def mean_interval(values: Sequence[float], *, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """``(mean, low, high)`` of per-launch values with a Student-t interval (df = n - 1).

    With fewer than 2 values the bounds are infinite; with none, everything is nan.
    """
    arr = _clean(values)
    if arr.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(arr.mean())
    if arr.size < 2:
        return mean, -math.inf, math.inf
    half = _t_quantile(confidence, arr.size - 1) * float(arr.std(ddof=1)) / math.sqrt(arr.size)
    return mean, mean - half, mean + half


def clopper_pearson(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Exact (Clopper-Pearson 1934) interval of a share ``k / n``; (nan, nan) for ``n = 0``.

    The interval for shares over launches and jobs (alerts that fired, faults a gate caught,
    jobs that failed). Its coverage is >= the nominal one at every true share and every n
    (``tests/test_verdict.py`` computes it exactly); Wilson's score interval, used before,
    dips to 0.91 at n = 10 and 0.92 at n = 50, so a "reproduced" share could be claimed
    on a 91 % interval.
    """
    if n == 0:
        return math.nan, math.nan
    from scipy.stats import beta

    alpha = 1.0 - confidence
    low = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return low, high


def share_outcome(k: int, n: int, reference: "Reference", *, launches: int | None = None, steps: int,
                  confidence: float = CONFIDENCE) -> "Outcome":
    """A share ``k / n`` judged against ``reference`` with its exact (Clopper-Pearson) interval.

    Args:
        k, n: successes and trials (trials may be several per launch).
        launches: independent launches behind the trials (default ``n``): the standard's minimum applies to them.
        steps: the fewest timed steps of those launches.
    """
    low, high = clopper_pearson(k, n, confidence)
    return judge(Interval(k / n if n else math.nan, low, high, n if launches is None else launches, steps, ""),
                 reference)


def single_value(launch_samples: Sequence[Sequence[float]], *, unit: str = "",
                 confidence: float = CONFIDENCE) -> Interval:
    """The mean over launches of each launch's median, with a Student-t interval over launches.

    For quantities that are not ratios (C4's idle share): launches are the unit, each
    represented by its median (:func:`mean_interval`).
    """
    launches = [s for s in (_clean(x) for x in launch_samples) if s.size]
    if not launches:
        return Interval(math.nan, math.nan, math.nan, 0, 0, unit)
    estimate, low, high = mean_interval([float(np.median(s)) for s in launches], confidence=confidence)
    return Interval(estimate, low, high, len(launches), int(min(s.size for s in launches)), unit)


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


def ratio_pvalues(numerators: Sequence[Sequence[float]], denominators: Sequence[Sequence[float]],
                 reference: Reference, *, estimator: str = MEDIAN) -> tuple[float, float]:
    """``(p_outside, p_inside)`` of a paired ratio against a band (see :meth:`PairedRatio.pvalues`)."""
    return paired_comparison(numerators, denominators, estimator=estimator).pvalues(reference)


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
    return combine_verdicts([o.verdict for o in outcomes])


def combine_verdicts(verdicts: Sequence[str]) -> str:
    """:func:`combine` of the parts' verdicts alone: inconclusive when there are none, or some are and none fails."""
    if not verdicts:
        return INCONCLUSIVE
    if NOT_REPRODUCED in verdicts:
        return NOT_REPRODUCED
    if all(v == REPRODUCED for v in verdicts):
        return REPRODUCED
    return INCONCLUSIVE
