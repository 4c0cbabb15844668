"""The verdict standard: intervals over launches, reference bands, three reachable outcomes, Holm."""

import math

import numpy as np
import pytest

from hpcbench.report.verdict import (Interval, Reference, bootstrap_pvalues, combine, gain_reference, holm, judge,
                                     judge_family, paired_ratio, single_value)


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
    # Three comparisons each just past the bound: alone each is borderline, as a family not all hold.
    nums = [launches(126.0, seed=s) for s in range(3)]
    dens = [launches(100.0, seed=10 + s) for s in range(3)]
    ref = Reference(1.2, lower=1.2)
    ivs = [paired_ratio(n, d) for n, d in zip(nums, dens)]
    ps = [bootstrap_pvalues(n, d, ref) for n, d in zip(nums, dens)]
    family = judge_family(ivs, ps, [ref] * 3)
    assert all(o.verdict in ("reproduced", "inconclusive") for o in family)
    adjusted = holm([p[0] for p in ps])
    assert all(a >= p[0] for a, p in zip(adjusted, ps))


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
