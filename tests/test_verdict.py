"""The verdict standard: intervals over launches, reference bands, three reachable outcomes, Holm.

The coverage tests at the end measure, by simulation with a known truth, how often each
interval holds it (Hoefler & Belli, SC15: state the interval's coverage, do not assume it).
"""

import math

import numpy as np
import pytest

from hpcbench.judge.verdict import (MIN_LAUNCHES, MIN_STEPS, Interval, Reference, clopper_pearson, combine,
                                    gain_reference, holm, judge, judge_family, paired_comparison, paired_ratio, ratio_pvalues, single_value)


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
