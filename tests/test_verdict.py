"""The verdict standard: intervals over launches, reference bands, three reachable outcomes, Holm."""

import math

import numpy as np
import pytest

from hpcbench.report.verdict import (Interval, Reference, bootstrap_pvalues, combine, gain_reference, holm, judge,
                                     judge_family, paired_bootstrap, paired_ratio, single_value)


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
    for launches_, steps in ((4, 10), (5, 9)):
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


def test_one_bootstrap_gives_the_interval_and_the_pvalues():
    nums, dens = launches(126.0, seed=0), launches(100.0, seed=10)
    boot = paired_bootstrap(nums, dens)
    assert boot.interval == paired_ratio(nums, dens)
    ref = Reference(1.2, lower=1.2)
    assert boot.pvalues(ref) == bootstrap_pvalues(nums, dens, ref)
    # The interval's lower bound sits above the band's edge exactly when p_outside is small.
    assert boot.interval.low > 1.2 and boot.pvalues(ref)[0] < 0.025


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


def test_bootstrap_is_seeded_and_reproducible():
    a, b = launches(150.0, seed=1), launches(100.0, seed=2)
    assert paired_ratio(a, b) == paired_ratio(a, b)
