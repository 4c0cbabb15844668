"""hpcbench.scale.regime: the fit recovers a known step model, the solve inverts it, clamps and refuses."""

import math

import pandas as pd
import pytest

from hpcbench.scale.regime import (FACT_REACHED, FIXED, MATCHED, MAX_RATE_BPS, MIN_RATE_BPS, MISSED, GuideRegime,
                                   RegimeError, RegimePoint, calibrate, fit_regime, key_launches_by_regime,
                                   regime_applies, regime_facts, regime_status, solve_rate, with_measured_busy)

# The truth: compute 0.2 s, latency 0.01 s, 4 Mbit of gradients per step (B / r seconds at r bit/s).
C, A, B = 0.2, 0.01, 4e6


def busy(rate: float) -> float:
    return C / (C + A + B / rate)


def points(*rates: float, noise=None) -> list[RegimePoint]:
    noise = noise or [0.0] * len(rates)
    return [RegimePoint(r, busy(r) + e) for r, e in zip(rates, noise)]


def test_fit_recovers_the_normalised_latency_and_bytes_terms():
    fit = fit_regime(points(1e9, 3e8, 1e8))
    assert fit.latency == pytest.approx(A / C) and fit.bytes_term == pytest.approx(B / C)
    assert fit.busy_at(5e7) == pytest.approx(busy(5e7)) and fit.residual() < 1e-12
    two = fit_regime(points(1e9, 1e8))  # two points: the line through both
    assert two.bytes_term == pytest.approx(B / C)


def test_solve_inverts_the_fit_to_the_rate_of_the_target_busy_share():
    fit = fit_regime(points(1e9, 3e8, 1e8))
    sol = solve_rate(fit, 0.61)
    # truth: 1/0.61 - 1 = A/C + (B/C)/r  ->  r = (B/C) / (1/0.61 - 1 - A/C)
    want = (B / C) / (1 / 0.61 - 1 - A / C)
    assert sol.reachable and sol.link_rate_bps == pytest.approx(want) and busy(sol.link_rate_bps) == pytest.approx(0.61)
    assert sol.predicted_busy == pytest.approx(0.61) and "61% busy at" in sol.why


def test_noisy_points_still_land_within_the_tolerance():
    fit = fit_regime(points(1e9, 3e8, 1e8, noise=[0.01, -0.01, 0.005]))
    sol = solve_rate(fit, 0.61)
    assert abs(busy(sol.link_rate_bps) - 0.61) < 0.05


def test_a_rate_outside_what_tc_shapes_is_clamped_and_unreachable():
    fit = fit_regime(points(1e9, 3e8, 1e8))
    slow = solve_rate(fit, 0.0001)  # needs far below 10 Mbit/s
    assert not slow.reachable and slow.link_rate_bps == MIN_RATE_BPS and slow.unclamped_bps < MIN_RATE_BPS
    assert "outside what tc shapes" in slow.why and slow.predicted_busy == pytest.approx(busy(MIN_RATE_BPS))
    # 94 % busy needs A/C + B/(C r) = 0.0638: r = 20e6 / 0.0138 = 1.45 Gbit/s, inside; with a 1 Gbit/s cap, not
    capped = solve_rate(fit, 0.94, max_rate_bps=1e9)
    assert not capped.reachable and capped.link_rate_bps == 1e9


def test_a_target_beyond_the_latency_term_is_unreachable_at_any_rate():
    fit = fit_regime(points(1e9, 3e8, 1e8))
    top = 1 / (1 + A / C)  # 95.2 %: the busiest an infinitely fast link allows
    sol = solve_rate(fit, (top + 1) / 2)
    assert not sol.reachable and sol.unclamped_bps == math.inf and sol.link_rate_bps == MAX_RATE_BPS
    assert "no link rate reaches it" in sol.why


def test_a_step_the_link_does_not_limit_cannot_be_steered():
    flat = fit_regime([RegimePoint(1e9, 0.8), RegimePoint(1e8, 0.81)])
    sol = solve_rate(flat, 0.61)
    assert not sol.reachable and sol.link_rate_bps is None and "cannot steer" in sol.why


@pytest.mark.parametrize("pts, words", [
    ([RegimePoint(1e9, 0.8)], "a line needs 2"),
    ([RegimePoint(1e9, 0.8), RegimePoint(1e9, 0.7)], "1 distinct rate"),
    ([RegimePoint(1e9, 0.8), RegimePoint(0.0, 0.7)], "not a positive rate"),
    ([RegimePoint(1e9, 0.0), RegimePoint(1e8, 0.7)], "not in (0, 1.5)"),
])
def test_unfittable_points_are_refused(pts, words):
    with pytest.raises(RegimeError, match=words.replace("(", r"\(").replace(")", r"\)")):
        fit_regime(pts)


def test_calibrate_measures_each_rate_then_solves():
    seen = []

    def measure(rate):
        seen.append(rate)
        return busy(rate)

    cal = calibrate(measure, [1e9, 3e8, 1e8], 0.61, refine=0)
    assert seen == [1e9, 3e8, 1e8] and cal.solution.reachable
    assert busy(cal.link_rate_bps) == pytest.approx(0.61)
    assert "calibration measured" in cal.describe() and "61% busy at" in cal.describe()
    failed = calibrate(lambda r: 0.8, [1e9, 1e9], 0.61)
    assert failed.solution is None and failed.link_rate_bps is None and "a line needs 2" in failed.why_not


def test_refinement_stops_on_target_and_otherwise_refines_twice():
    # exact measurements: the first refinement lands on the target, so no second one
    seen = []
    cal = calibrate(lambda r: seen.append(r) or busy(r), [1e9, 1e8], 0.61)
    assert len(seen) == 3 and busy(seen[-1]) == pytest.approx(0.61)
    # a machine that reads every point 10 points too busy beyond the two given rates: never on target
    noisy = []
    off = calibrate(lambda r: noisy.append(r) or (busy(r) if len(noisy) <= 2 else min(busy(r) + 0.10, 0.99)),
                    [1e9, 1e8], 0.61)
    assert len(noisy) == 4 and len(off.points) == 4  # two refinements, then the fit of all four


REGIME = GuideRegime("C7", 0.61, "original", "420 ms at 61 %")


def test_guide_regime_matches_within_five_points():
    assert REGIME.matches(0.61) and REGIME.matches(0.655) and REGIME.matches(0.565)
    assert not REGIME.matches(0.67) and not REGIME.matches(None) and not REGIME.matches(math.nan)
    with pytest.raises(ValueError, match="not in"):
        GuideRegime("CX", 1.2, "b", "")


def test_status_and_reason_from_params_and_facts():
    assert regime_status({"regime": "guide"}, regime_facts(0.61, 0.63, 3e8), REGIME) == MATCHED
    assert regime_status({"regime": "guide"}, regime_facts(0.61, 0.85, 3e8), REGIME) == MISSED
    assert regime_status({"regime": "guide"}, {}, REGIME) == MISSED
    assert regime_status({"regime": "fixed"}, regime_facts(0.61, 0.61, 3e8), REGIME) == FIXED
    assert regime_status({}, {}, REGIME) == FIXED  # recorded before the parameter existed
    assert math.isnan(regime_facts(0.61, 0.6, None)["regime.link_rate_bps"])


def test_launches_are_keyed_by_regime_and_the_reason_names_the_groups_median():
    import json

    launches = pd.DataFrame({
        "run_id": ["r"] * 4, "task_id": ["a", "b", "c", "d"],
        "params": [json.dumps({"regime": "guide"})] * 3 + [json.dumps({"regime": "fixed"})],
        FACT_REACHED: [0.62, 0.84, 0.86, None],
    })
    filled = with_measured_busy(launches, {("r", "d"): 0.9, ("r", "a"): 0.1})
    assert list(filled[FACT_REACHED])[0] == 0.62 and list(filled[FACT_REACHED])[3] == 0.9  # a fact is never overwritten
    keyed = key_launches_by_regime(filled, REGIME)
    status = [json.loads(p)["regime_status"] for p in keyed["params"]]
    assert status == [MATCHED, MISSED, MISSED, FIXED]
    applies = regime_applies(keyed, REGIME)
    assert applies(keyed.iloc[0]) is None
    assert applies(keyed.iloc[1]) == "inconclusive: regime 86% busy (original) vs the guide's 61% (+-5 points)"
    assert applies(keyed.iloc[3]).startswith("context: a fixed link, original at 90% busy")


def test_refinement_measures_at_the_solved_rate_and_pins_the_line_there():
    # a noisy first pair (the 1 Gbit/s point reads 8 points low) misplaces the solution; the refinement
    # point, measured where the first solve landed, pulls the line back near the truth
    noise = {1e9: -0.08, 1e8: 0.0}
    seen = []

    def measure(rate):
        seen.append(rate)
        return busy(rate) + noise.get(rate, 0.0)

    rough = calibrate(measure, [1e9, 1e8], 0.61, refine=0)
    seen.clear()
    cal = calibrate(measure, [1e9, 1e8], 0.61, refine=1)
    assert len(seen) == 3 and seen[2] == pytest.approx(rough.link_rate_bps) and len(cal.points) == 3
    assert abs(busy(cal.link_rate_bps) - 0.61) < abs(busy(rough.link_rate_bps) - 0.61)
    assert abs(busy(cal.link_rate_bps) - 0.61) < 0.05
    # exact points: the solved rate is already measured... or measured once and found on the line
    seen.clear()
    exact = calibrate(lambda r: (seen.append(r), busy(r))[1], [1e9, 3e8], 0.61, refine=2)
    assert len(seen) == 3 and busy(exact.link_rate_bps) == pytest.approx(0.61)


def test_a_launch_on_a_real_clusters_own_link_is_judged_by_the_regime_it_reached():
    """On a GPU cluster nothing shapes the link (no rate recorded): a launch that measured the guide's regime
    is judged, one that did not says how far it was, and the sentence says the link was the cluster's own."""
    from hpcbench.scale.regime import FACT_RATE, FACT_TARGET, regime_reason, regime_status, regime_summary

    inside, outside = {FACT_REACHED: 0.63}, {FACT_REACHED: 0.90}
    assert regime_status({"regime": "guide"}, inside, REGIME) == MATCHED
    assert regime_status({"regime": "guide"}, outside, REGIME) == MISSED
    assert regime_reason(MISSED, [0.90], REGIME) == "inconclusive: regime 90% busy (original) vs the guide's 61% (+-5 points)"
    launches = pd.DataFrame({FACT_TARGET: [0.61, 0.61], FACT_REACHED: [0.63, 0.90], FACT_RATE: [math.nan, math.nan]})
    sentence = regime_summary(REGIME, launches)
    assert "on the cluster's own link (nothing shaped it)" in sentence and "1 of 2" in sentence, sentence


def test_a_busy_share_above_one_is_noise_and_gives_no_reach():
    """A no-op twin slower than its step (a shared machine's noise) measures no regime: the group's reachable
    effect is computed from the launches that measured one, or not at all, and the rule never fails on it."""
    from hpcbench.scale.regime import group_reached_busy

    launches = pd.DataFrame({"params": ["a", "a", "a"], FACT_REACHED: [1.06, 0.5, 0.7]})
    assert group_reached_busy(launches, launches.iloc[0]) == 0.7
    assert group_reached_busy(launches.assign(**{FACT_REACHED: [1.06, 1.2, math.nan]}), launches.iloc[0]) is None
