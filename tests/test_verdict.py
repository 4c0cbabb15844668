"""The verdict standard: intervals over launches, reference bands, three reachable outcomes, Holm.

The coverage tests at the end measure, by simulation with a known truth, how often each
interval holds it (Hoefler & Belli, SC15: state the interval's coverage, do not assume it).
"""

import functools
import math

import numpy as np
import pytest

from hpcbench.judge.verdict import (ESTIMATORS, MEAN_TIME, MEDIAN, MIN_LAUNCHES, MIN_STEPS, WORK_OVER_TIME_RATES,
                                    Interval, Reference, clopper_pearson, combine, gain_reference, holm, judge,
                                    judge_family, launch_estimator, paired_comparison, paired_ratio, ratio_pvalues,
                                    single_value)


def launches(center, n=6, steps=12, spread=0.02, seed=0):
    rng = np.random.default_rng(seed)
    return [list(center * (1 + spread * rng.standard_normal(steps))) for _ in range(n)]


def test_paired_ratio_estimate_and_interval_cover_the_truth():
    iv = paired_ratio(launches(150.0, seed=1), launches(100.0, seed=2))
    assert iv.estimate == pytest.approx(1.5, rel=0.02)
    assert iv.low < 1.5 < iv.high and iv.high - iv.low < 0.1
    assert (iv.launches, iv.steps) == (6, 12)


def test_interval_widens_with_launch_to_launch_spread():
    steady = paired_ratio(launches(150.0, seed=1), launches(100.0, seed=2))
    # Same steps, but each launch's level moves by +-20 %: the launches, not the steps, carry the spread.
    rng = np.random.default_rng(3)
    shaky = [[v * (1 + 0.2 * rng.standard_normal()) for v in launch] for launch in launches(150.0, seed=1)]
    wide = paired_ratio(shaky, launches(100.0, seed=2))
    assert (wide.high - wide.low) > 3 * (steady.high - steady.low)


def test_one_launch_has_no_interval_and_no_verdict():
    iv = paired_ratio(launches(150.0, n=1), launches(100.0, n=1))
    assert math.isinf(iv.low) and judge(iv, Reference(1.2, lower=1.2)).verdict == "inconclusive"


@pytest.mark.parametrize("low, high, verdict", [(1.3, 1.5, "reproduced"), (0.9, 1.1, "not reproduced"),
                                               (1.1, 1.3, "inconclusive")])
def test_judge_reaches_all_three_outcomes(low, high, verdict):
    iv = Interval(estimate=(low + high) / 2, low=low, high=high, launches=5, steps=10)
    assert judge(iv, Reference(1.2, lower=1.2)).verdict == verdict


def test_too_few_launches_or_steps_is_inconclusive_naming_n():
    ref = Reference(1.2, lower=1.2)
    for launches_, steps in ((MIN_LAUNCHES - 1, 2 * MIN_STEPS), (MIN_LAUNCHES, MIN_STEPS - 1)):
        outcome = judge(Interval(2.0, 1.9, 2.1, launches_, steps), ref)
        assert outcome.verdict == "inconclusive" and f"n = {launches_} launches x {steps} steps" in outcome.describe()


def test_two_sided_band():
    ref = Reference(1.0, lower=0.9, upper=1.1)
    assert judge(Interval(1.0, 0.95, 1.05, 5, 10), ref).verdict == "reproduced"
    assert judge(Interval(1.3, 1.2, 1.4, 5, 10), ref).verdict == "not reproduced"


def test_gain_reference_is_80_percent_of_the_claimed_gain():
    assert gain_reference(1.496, "C3").lower == pytest.approx(1.3968)
    assert gain_reference(3.2, "C2").lower == pytest.approx(2.76)


def test_holm_step_down():
    # Holm 1979: sorted p * (m - rank), made monotone.
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5]


def test_holm_family_is_stricter_than_its_members_alone():
    # One comparison whose p = 0.015 would pass alone (< 0.025, one side of a 95 % interval)...
    ref = Reference(1.2, lower=1.2)
    iv = Interval(1.3, 1.21, 1.4, 6, 12)
    alone = judge_family([iv, iv], [(0.015, 0.9), (0.001, 0.9)], [ref, ref])
    # ...passes in a family whose other member is strong (step-down: 0.015 x 1 after 0.001 x 2)...
    assert [o.verdict for o in alone] == ["reproduced", "reproduced"]
    # ...but not among two weak ones: 0.015 x 3 = 0.045 >= 0.025.
    family = judge_family([iv] * 3, [(0.015, 0.9), (0.6, 0.5), (0.7, 0.4)], [ref] * 3)
    assert [o.verdict for o in family] == ["inconclusive"] * 3
    assert "Holm-adjusted p = 0.045" in family[0].why
    # "not reproduced" needs the adjusted p of lying inside the band to be small.
    outside = judge_family([iv] * 2, [(0.9, 0.001), (0.9, 0.01)], [ref] * 2)
    assert [o.verdict for o in outside] == ["not reproduced", "not reproduced"]


def test_one_t_test_gives_the_interval_and_the_pvalues():
    nums, dens = launches(126.0, seed=0), launches(100.0, seed=10)
    comp = paired_comparison(nums, dens)
    assert comp.interval == paired_ratio(nums, dens)
    ref = Reference(1.2, lower=1.2)
    assert comp.pvalues(ref) == ratio_pvalues(nums, dens, ref)
    # The interval's lower bound sits above the band's edge exactly when p_outside is small.
    assert comp.interval.low > 1.2 and comp.pvalues(ref)[0] < 0.025


@pytest.mark.parametrize("edge", ["low", "high"])
def test_interval_bound_on_a_band_edge_is_p_of_one_side(edge):
    """The interval and the p-values are one t test: a bound exactly on an edge is p = 0.025."""
    comp = paired_comparison(launches(126.0, seed=0, spread=0.1), launches(100.0, seed=10, spread=0.1))
    iv = comp.interval
    inside = Reference(1.0, lower=iv.low) if edge == "low" else Reference(1.0, upper=iv.high)
    assert comp.pvalues(inside)[0] == pytest.approx(0.025)
    outside = Reference(1.0, upper=iv.low) if edge == "low" else Reference(1.0, lower=iv.high)
    assert comp.pvalues(outside)[1] == pytest.approx(0.025)


def test_two_sided_band_pvalues():
    comp = paired_comparison(launches(100.0, seed=0), launches(100.0, seed=10))
    p_out, p_in = comp.pvalues(Reference(1.0, lower=0.8, upper=1.25))
    assert p_out < 0.001 and p_in > 0.99  # clearly inside on both sides
    p_out, p_in = comp.pvalues(Reference(2.0, lower=1.8, upper=2.5))
    assert p_out > 0.99 and p_in < 0.001  # clearly below the lower edge


def test_single_value_interval():
    iv = single_value(launches(0.7, spread=0.01))
    assert iv.low < 0.7 < iv.high and judge(iv, Reference(0.65, lower=0.5, unit="")).verdict == "reproduced"


def test_combine_needs_every_part():
    ref = Reference(1.2, lower=1.2)
    yes = judge(Interval(1.5, 1.4, 1.6, 5, 10), ref)
    no = judge(Interval(1.0, 0.9, 1.1, 5, 10), ref)
    unsure = judge(Interval(1.2, 1.1, 1.3, 5, 10), ref)
    assert combine([yes, yes]) == "reproduced"
    assert combine([yes, no]) == "not reproduced"
    assert combine([yes, unsure]) == "inconclusive"


def test_interval_is_deterministic():
    a, b = launches(150.0, seed=1), launches(100.0, seed=2)
    assert paired_ratio(a, b) == paired_ratio(a, b)


def test_identical_launches_give_a_point_interval_and_sharp_pvalues():
    same = [[2.0] * 10] * 5
    comp = paired_comparison(same, [[1.0] * 10] * 5)
    assert (comp.interval.low, comp.interval.estimate, comp.interval.high) == pytest.approx((2.0, 2.0, 2.0))
    assert comp.pvalues(Reference(1.5, lower=1.5)) == (0.0, 1.0)
    assert comp.pvalues(Reference(3.0, lower=3.0)) == (1.0, 0.0)


# -- coverage, measured ------------------------------------------------------------------------
#
# Each setting draws DATASETS suites of n launches x `steps` steps of two arms whose true ratio is
# known, through the real functions. A step's time is level x launch effect x step noise:
#   shared:  a launch effect both arms see (the machine's state in that launch);
#   arm:     a launch effect of each arm alone (the arms' own drifts inside a launch);
#   step:    log-normal step noise, or 10 % outlier steps 3x slower, or heavy-tailed (t with 3 df);
# each arm draws its own steps from the same law, so median(num) / median(den) is centred on the
# truth on a log scale and any under-coverage is the interval's, not the simulation's.

DATASETS = 2000
EDGE_DATASETS = 6000
#: Steps per launch: the verdict standard's minimum (5) and twice it. The interval is a Student-t over
#: the launches' medians, so fewer steps only make each launch's median noisier, which the interval
#: carries; these settings show that it still covers at the minimum.
STEP_COUNTS = (MIN_STEPS, 2 * MIN_STEPS)
TRUE_RATIO = 1.5
SETTINGS = {
    "launch spread only": dict(shared=0.10, arm=0.05, step=0.0, tail=None),
    "step noise only": dict(shared=0.0, arm=0.0, step=0.05, tail=None),
    "launch and step noise": dict(shared=0.10, arm=0.04, step=0.05, tail=None),
    "large launch spread": dict(shared=0.20, arm=0.15, step=0.05, tail=None),
    "10 % outliers": dict(shared=0.05, arm=0.03, step=0.03, tail="outliers"),
    "heavy-tailed steps": dict(shared=0.05, arm=0.03, step=0.05, tail="t3"),
}


def _steps(rng, n, s, shape):
    if s["tail"] == "t3":
        noise = np.exp(s["step"] * rng.standard_t(3, size=shape))
    else:
        noise = np.exp(s["step"] * rng.standard_normal(shape))
    if s["tail"] == "outliers":
        noise = np.where(rng.random(shape) < 0.10, 3.0 * noise, noise)
    return noise


def simulate(rng, n, s, ratio=TRUE_RATIO, steps=MIN_STEPS):
    """(numerator launches, denominator launches) of one simulated suite with a true ratio ``ratio``."""
    shared = np.exp(s["shared"] * rng.standard_normal((n, 1)))
    num = ratio * shared * np.exp(s["arm"] * rng.standard_normal((n, 1))) * _steps(rng, n, s, (n, steps))
    den = shared * np.exp(s["arm"] * rng.standard_normal((n, 1))) * _steps(rng, n, s, (n, steps))
    return num, den


@pytest.mark.parametrize("steps", STEP_COUNTS)
@pytest.mark.parametrize("n", [5, 10])
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_paired_ratio_interval_covers_95_percent(setting, n, steps):
    rng = np.random.default_rng([n, list(SETTINGS).index(setting), 2015, steps])
    hits = 0
    for _ in range(DATASETS):
        num, den = simulate(rng, n, SETTINGS[setting], steps=steps)
        iv = paired_ratio(num, den)
        hits += iv.low <= TRUE_RATIO <= iv.high
    coverage = hits / DATASETS
    assert 0.93 <= coverage <= 0.97, (f"{setting}, n = {n} x {steps} steps: the 95 % interval covered the truth "
                                      f"{coverage:.3f}")


@pytest.mark.parametrize("steps", STEP_COUNTS)
@pytest.mark.parametrize("n", [5, 10])
@pytest.mark.parametrize("setting", ["launch and step noise", "10 % outliers", "heavy-tailed steps"])
def test_truth_on_the_band_edge_is_reproduced_at_most_at_the_nominal_rate(setting, n, steps):
    """With the true ratio exactly on the lower edge, "reproduced" is a false positive: <= 2.5 % nominal.

    EDGE_DATASETS, not DATASETS: a rate of 2.5 % measured on 2,000 datasets has a standard error of
    0.35 points, so the 3 % bound sat 1.4 of them away and a fair seed failed it (63 of 2,000 at n = 10
    x 10 heavy-tailed steps; the same setting gave 2.53 % on 20,000). On 6,000 it sits 2.5 away.
    """
    rng = np.random.default_rng([n, list(SETTINGS).index(setting), 1979, steps])
    reference = gain_reference(TRUE_RATIO, "edge")  # lower edge 1.4
    edge = reference.lower
    single = family = 0
    for _ in range(EDGE_DATASETS):
        num, den = simulate(rng, n, SETTINGS[setting], ratio=edge, steps=steps)
        comp = paired_comparison(num, den)
        single += judge(comp.interval, reference).verdict == "reproduced"
        # A family of two such members, Holm-corrected, errs no more often per member.
        other = paired_comparison(*simulate(rng, n, SETTINGS[setting], ratio=edge, steps=steps))
        outcomes = judge_family([comp.interval, other.interval], [comp.pvalues(reference), other.pvalues(reference)],
                                [reference, reference])
        family += outcomes[0].verdict == "reproduced"
    single, family = single / EDGE_DATASETS, family / EDGE_DATASETS
    assert single <= 0.03, f"{setting}, n = {n} x {steps}: reproduced {single:.3f} on the edge"
    assert family <= 0.03, f"{setting}, n = {n} x {steps}: reproduced {family:.3f} in a family"


@pytest.mark.parametrize("steps", STEP_COUNTS)
@pytest.mark.parametrize("n", [5, 10])
@pytest.mark.parametrize("setting", ["launch spread only", "launch and step noise", "heavy-tailed steps"])
def test_single_value_interval_covers_95_percent(setting, n, steps):
    """Levels (a share, seconds) over launches: symmetric noise around a known value."""
    rng = np.random.default_rng([n, list(SETTINGS).index(setting), 1927, steps])
    s, truth, hits = SETTINGS[setting], 0.6, 0
    for _ in range(DATASETS):
        launch = truth + 0.6 * s["shared"] * rng.standard_normal((n, 1))
        step = (rng.standard_t(3, size=(n, steps)) if s["tail"] == "t3" else rng.standard_normal((n, steps)))
        iv = single_value(launch + 0.6 * s["step"] * step)
        hits += iv.low <= truth <= iv.high
    coverage = hits / DATASETS
    assert 0.93 <= coverage <= 0.97, f"{setting}, n = {n}: covered {coverage:.3f}"


@pytest.mark.parametrize("n", [5, 10, 20, 35, 50, 100])
def test_share_interval_never_covers_less_than_95_percent(n):
    """Clopper-Pearson's coverage, computed exactly over every k, at true shares across [0, 1]."""
    from scipy.stats import binom

    bounds = [clopper_pearson(k, n) for k in range(n + 1)]
    for p in np.linspace(0.01, 0.99, 99):
        coverage = sum(binom.pmf(k, n, p) for k, (low, high) in enumerate(bounds) if low <= p <= high)
        assert coverage >= 0.95 - 1e-9, f"n = {n}, p = {p:.2f}: coverage {coverage:.4f}"


def test_launch_median_is_numpys():
    """The one-sort median the intervals use gives np.median's value at every size, odd and even."""
    from hpcbench.judge.verdict import _median

    rng = np.random.default_rng(3)
    for size in range(1, 40):
        values = rng.lognormal(size=size)
        assert _median(values) == float(np.median(values)), size


# -- throughput with stalled steps --------------------------------------------------------------
#
# The guide's figures are throughputs: work over wall time, stalls included. Here the numerator arm's
# steps stall: each step, independently with probability `share`, takes 3-10x (uniform) its time, on top
# of the "launch and step noise" setting's launch effects and step noise. Samples are per-step RATES (the
# same work per step / the step's time), as a samples/s series records them.
#
# Two truths, both stated exactly:
#   long-run: true total work / true expected total time, arm over arm = TRUE_RATIO / E[stall factor]
#       (launch effects and step noise have the same law in both arms, so they cancel);
#   window:   exp(E[log(window throughput ratio)]) over a window of `steps` timed steps: what the geometric
#       mean over launches of per-launch total work / total time estimates, and what its t interval is
#       built around. A few steps see a random number of stalls, and E[log] of a ratio of window means
#       is not the log of the ratio of expectations (Jensen): the window truth lies above the long-run one,
#       by less the more steps a launch times (1.075 vs 0.968 at 5 steps with 10 % stalls, 1.028 at 10).

STALL_SHARES = (0.10, 0.20)
STALL_FACTORS = (3.0, 10.0)
STALL_NOISE = SETTINGS["launch and step noise"]
STALL_DATASETS = 10_000


def _stall(rng, share, shape):
    return np.where(rng.random(shape) < share, rng.uniform(*STALL_FACTORS, size=shape), 1.0)


def stalled_rates(rng, n, steps, share, s=STALL_NOISE, ratio=TRUE_RATIO, launch_effects=True, work=1.0):
    """(numerator rates, denominator rates), ``n`` launches x ``steps`` steps: work / step time; numerator stalls."""
    shared = np.exp(s["shared"] * rng.standard_normal((n, 1))) if launch_effects else 1.0
    arm = (lambda: np.exp(s["arm"] * rng.standard_normal((n, 1)))) if launch_effects else (lambda: 1.0)
    time_num = shared * arm() * np.exp(s["step"] * rng.standard_normal((n, steps))) / ratio
    time_num = time_num * _stall(rng, share, (n, steps))
    time_den = shared * arm() * np.exp(s["step"] * rng.standard_normal((n, steps)))
    return work / time_num, work / time_den


def long_run_throughput_ratio(share, ratio=TRUE_RATIO):
    """True total work / true expected total time, numerator over denominator: analytic."""
    return ratio / (1.0 + share * (sum(STALL_FACTORS) / 2 - 1.0))


@functools.lru_cache(maxsize=None)
def window_throughput_ratio(share, steps, windows=400_000):
    """exp(E[log(work / time of numerator window / that of the denominator's)]) from 400,000 windows.

    Launch effects are left out: the shared one cancels in every ratio and the arms' own have log-mean 0.
    The standard error of the log is 0.0005-0.0008, under a hundredth of the narrowest interval's half-width.
    """
    rng = np.random.default_rng([2024, steps, int(share * 100)])
    num, den = stalled_rates(rng, windows, steps, share, launch_effects=False)
    logs = np.log(steps / np.sum(1.0 / num, axis=1)) - np.log(steps / np.sum(1.0 / den, axis=1))
    return float(np.exp(logs.mean()))


def _stall_coverage(share, n, steps, estimator, truths, seed, datasets=STALL_DATASETS):
    rng = np.random.default_rng([n, steps, int(share * 100), seed])
    hits = np.zeros(len(truths))
    for _ in range(datasets):
        iv = paired_ratio(*stalled_rates(rng, n, steps, share), estimator=estimator)
        hits += [iv.low <= truth <= iv.high for truth in truths]
    return hits / datasets


#: The one cell whose throughput interval falls clearly short, measured on 400,000 replicas of the same
#: simulation (vectorised, outside these functions; 0.902 on this test's 10,000): 5 launches x 5 steps with
#: 10 % stalls covers the window truth 0.898 of the time (the long-run one 0.865). 0.9 ** 25 = 7.2 % of such
#: suites time no stall at all: their interval is narrow around the stall-free ratio, and no interval that is
#: narrow on stall-free data can hold a truth the data never showed, so about 0.93 is the ceiling there for
#: any method. A throughput claim with rare stalls needs more than 5 x 5 timed steps.
SHORT_OF_STALLS = {(0.10, 5, 5): 0.898}


def _stall_cells():
    for share in STALL_SHARES:
        for n in (5, 10):
            for steps in STEP_COUNTS:
                known = SHORT_OF_STALLS.get((share, n, steps))
                marks = [pytest.mark.xfail(strict=True, reason=f"known: covers {known} ({n} launches x {steps} "
                                                                   f"steps, {share:.0%} stalls)")] if known else []
                yield pytest.param(share, n, steps, marks=marks, id=f"{share:.0%}-stalls-{n}x{steps}")


@pytest.mark.parametrize("share, n, steps", list(_stall_cells()))
def test_work_over_time_interval_covers_the_throughput_ratio_with_stalls(share, n, steps):
    """Per-step rates with stalled steps in one arm: the work-over-time interval holds the window truth.

    The truth is the window throughput ratio, exp(E[log ratio]) over a window of ``steps`` timed steps
    (:func:`window_throughput_ratio`): what the geometric mean of per-launch total work / total time targets.
    The interval is a t over launches whose per-launch log ratios are a mixture (0, 1, 2... stalls in the
    window), skewed, so it covers a little less than a normal-noise one. Measured on 400,000 replicas (n
    launches x steps), the coverage of the window truth is 0.946-0.947 at 20 % stalls except 5 x 5 (0.930), and
    at 10 % stalls 0.945 at 10 x 10, 0.934 at 5 x 10, 0.932 at 10 x 5 and 0.898 at 5 x 5 (:data:`SHORT_OF_STALLS`,
    expected to fail). The long-run ratio (total work / expected total time) is covered 0.85-0.945: less the
    fewer the steps, and less with more launches, whose interval narrows around the window truth. Three cells
    sit on the 0.93 bound, so a point estimate on any number of datasets passes or fails with the seed: the
    assertion allows the estimate's own Monte-Carlo error, two standard errors (0.0044 at 10,000 datasets), on
    each side of [0.93, 0.97]. At this seed every cell but 5 x 5 at 10 % is >= 0.930 without it.
    """
    window = window_throughput_ratio(share, steps)
    coverage = _stall_coverage(share, n, steps, WORK_OVER_TIME_RATES, (window,), seed=1984)[0]
    slack = 2 * math.sqrt(0.95 * 0.05 / STALL_DATASETS)
    assert 0.93 - slack <= coverage <= 0.97 + slack, (
        f"{share:.0%} stalls, n = {n} x {steps} steps: the 95 % work-over-time interval covered the window "
        f"throughput ratio {window:.3f} {coverage:.3f} of the time")


@pytest.mark.parametrize("steps", STEP_COUNTS)
@pytest.mark.parametrize("n", [5, 10])
@pytest.mark.parametrize("share", STALL_SHARES)
def test_median_interval_misses_the_throughput_ratio_with_stalls(share, n, steps):
    """Why throughput needs work over time: the median's interval rarely holds the throughput ratio.

    The median of a launch's rates skips its stalled steps, so its interval sits around the stall-free ratio
    (1.5 here), far above what the arm delivers over wall time: long-run 0.97 (10 % stalls) or 0.71 (20 %).
    Measured (1,000 datasets a cell): 0.002-0.26 of the time for the long-run ratio and 0.003-0.26 for the
    window one, the most at 20 % stalls on 5 x 5 steps, where the median of 5 steps often lands on a stalled one.
    """
    truths = (long_run_throughput_ratio(share), window_throughput_ratio(share, steps))
    coverage = _stall_coverage(share, n, steps, MEDIAN, truths, seed=1990, datasets=1000)
    assert max(coverage) <= 0.5, (f"{share:.0%} stalls, n = {n} x {steps}: the median interval covered the "
                                  f"throughput ratio {coverage.round(3)}")


def test_window_truth_nears_the_long_run_one_as_windows_grow():
    """The Jensen gap of the window truth shrinks with the window: 5, 10 and 40 steps, 20 % stalls."""
    long_run = long_run_throughput_ratio(0.20)
    gaps = [math.log(window_throughput_ratio(0.20, steps, windows=100_000) / long_run) for steps in (5, 10, 40)]
    assert gaps[0] > gaps[1] > gaps[2] > 0 and gaps[2] < 0.25 * gaps[0], gaps


# -- per-launch estimators ------------------------------------------------------------------------


def test_work_over_time_is_total_work_over_total_time():
    """Four steps of 32 samples: 0.1, 0.1, 0.4 (a stall) and 0.2 s -> 128 samples in 0.8 s = 160 samples/s."""
    work, times = 32.0, np.array([0.1, 0.1, 0.4, 0.2])
    rates = work / times  # 320, 320, 80, 160 samples/s per step
    assert ESTIMATORS[WORK_OVER_TIME_RATES](rates) == pytest.approx(4 * work / times.sum()) == pytest.approx(160.0)
    assert ESTIMATORS[MEDIAN](rates) == pytest.approx(240.0)  # the median hides the stall
    # Two launches: the comparison's value is the geometric mean of per-launch work / time ratios.
    other = [list(rates), [100.0] * 4]
    iv = paired_ratio(other, [[80.0] * 4, [100.0] * 4], estimator=WORK_OVER_TIME_RATES)
    assert iv.estimate == pytest.approx(math.sqrt(160.0 / 80.0 * 1.0))


def test_mean_time_is_time_per_unit_of_work_and_the_reciprocal_of_work_over_time():
    times = np.array([0.1, 0.1, 0.4, 0.2])
    assert ESTIMATORS[MEAN_TIME](times) == pytest.approx(0.2)
    # The same launches as times and as rates: the time ratio is the reciprocal of the throughput ratio, bound
    # for bound, so the work-over-time coverage above holds for step-time series too.
    rng = np.random.default_rng(5)
    num, den = stalled_rates(rng, 6, 10, 0.2)
    by_rate = paired_ratio(num, den, estimator=WORK_OVER_TIME_RATES)
    by_time = paired_ratio(1.0 / num, 1.0 / den, estimator=MEAN_TIME)
    assert (by_time.estimate, by_time.low, by_time.high) == pytest.approx(
        (1 / by_rate.estimate, 1 / by_rate.high, 1 / by_rate.low))


def test_median_stays_the_default():
    num, den = launches(150.0, seed=1), launches(100.0, seed=2)
    assert paired_ratio(num, den) == paired_ratio(num, den, estimator=MEDIAN)
    assert paired_comparison(num, den) == paired_comparison(num, den, estimator="median")
    ref = Reference(1.2, lower=1.2)
    assert ratio_pvalues(num, den, ref) == ratio_pvalues(num, den, ref, estimator=MEDIAN)
    assert ratio_pvalues(num, den, ref, estimator=WORK_OVER_TIME_RATES) == paired_comparison(
        num, den, estimator=WORK_OVER_TIME_RATES).pvalues(ref)


def test_a_launch_with_a_non_positive_rate_has_no_work_over_time_ratio():
    iv = paired_ratio([[2.0, 2.0], [2.0, 0.0], [2.0, 2.0]], [[1.0, 1.0]] * 3, estimator=WORK_OVER_TIME_RATES)
    assert iv.launches == 2 and iv.estimate == pytest.approx(2.0)


def test_unknown_estimator_is_an_error_naming_the_valid_ones():
    with pytest.raises(ValueError, match="mean_rate.*'median', 'work_over_time', 'mean_time'"):
        paired_comparison([[1.0]], [[1.0]], estimator="mean_rate")
    with pytest.raises(ValueError, match="valid"):
        paired_ratio([], [], estimator="harmonic")
    with pytest.raises(ValueError, match="valid"):
        launch_estimator("p50")
