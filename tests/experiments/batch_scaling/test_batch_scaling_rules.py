"""batch_scaling from recorded records, without torch: summary -> rule (C2), every outcome reachable.

C2 is read in three parts (hpcbench.judge.feasibility): the guide's statements (arithmetic and the
scale model), what the platform can show at the regime a launch reached (Amdahl), and the mechanism
measured. Each part is tested on its own, from inputs a platform could produce.
"""

import pytest
from synthetic import GPU_IB, SHAPED, launches, noisy

from hpcbench.experiments.batch_scaling import rules
from hpcbench.experiments.batch_scaling.claims import MIN_GAIN, accumulating_factor, guide_sync_share, mechanism_reach
from hpcbench.experiments.batch_scaling.prediction import guide_consistency
from hpcbench.experiments.batch_scaling.summary import summarize
from hpcbench.judge.feasibility import Consistency
from hpcbench.report.ledger import evaluate_claim

PARAMS = {"factors": [1, 2, 4, 8], "regimes": ["larger_batch", "fixed_global_batch"], "base_batch": 4,
          "nodes": 2, "ranks_per_node": 1, "link_regime": "guide"}


def regime(reached: float, rate: float = 2e7) -> dict:
    """The regime facts of a calibrated launch whose 1x step reached ``reached`` busy at ``rate``."""
    return {"regime.target_busy": 0.25, "regime.reached_busy": reached, "regime.link_rate_bps": rate}


#: Calibrated on the shaped link, the 1x step a quarter busy: Amdahl gives 8x accumulation 2.91x, the band 2.53x.
QUARTER = {**SHAPED, **regime(0.25)}


def rows(gain: float, seed: int):
    out = []
    for regime_name in ("larger_batch", "fixed_global_batch"):
        for factor in (1, 2, 4, 8):
            accumulation = 1 if regime_name == "larger_batch" else 8 // factor
            value = 100.0 * (gain if (regime_name, factor) == ("fixed_global_batch", 4) else 1.0)
            labels = {"regime": regime_name, "factor": factor, "micro_batch": 4 * factor,
                      "accumulation": accumulation, "batch_per_step": 4 * factor * accumulation}
            out.append(("throughput_per_rank", noisy(value, seed=seed * 11 + factor + len(regime_name)), "samples/s",
                        labels))
            out.append(("step_time", noisy(0.1, seed=seed), "s", labels))
    return out


def c2(tmp_path, gain, n=6, backend="gloo", facts=QUARTER, params=PARAMS):
    return evaluate_claim("C2", launches(tmp_path, "batch_scaling", lambda k: rows(gain, k), n, params=params,
                                         facts=facts, backend=backend))


@pytest.fixture
def consistent_guide(monkeypatch):
    """The guide's statements taken as consistent, so that the measurement decides (tests of that part alone)."""
    monkeypatch.setattr(rules, "guide_consistency", lambda: Consistency(True, "taken as consistent", "test"))


def test_the_numerator_really_accumulates():
    # 8x global batch: the 4x micro-batch accumulates twice; 8x itself would not accumulate at all.
    assert accumulating_factor(PARAMS) == 4
    assert accumulating_factor({**PARAMS, "factors": [1, 2]}) is None  # no batch >= 4x
    assert accumulating_factor({**PARAMS, "regimes": ["larger_batch"]}) is None


def test_summary_keeps_the_steps(tmp_path):
    summary = summarize(launches(tmp_path, "batch_scaling", lambda k: rows(3.0, k), 1, params=PARAMS))
    row = summary[(summary["regime"] == "fixed_global_batch") & (summary["factor"] == 4)].iloc[0]
    assert row["accumulation"] == 2 and len(row["samples"]) == 12


# -- the guide's statements ----------------------------------------------------------------------

def test_the_guides_figure_needs_a_step_92_percent_synchronisation():
    share = guide_sync_share()
    assert share == pytest.approx(11 / 12)
    m_over_c = share / (1 - share)
    assert 4 * (1 + m_over_c) / (4 + m_over_c) == pytest.approx(3.2)


def test_the_guides_220_percent_is_implausible_on_its_platform_and_a_modest_gain_is_not():
    stated = guide_consistency()
    assert not stated.holds and "92%" in stated.reason and len(stated.reason.split()) <= 8
    # A gain the model's most communication-bound guide workload can give: consistent (the other outcome).
    modest = guide_consistency(gain=1.05)
    assert modest.holds, modest.arithmetic


def test_c2_reads_implausible_decided_by_arithmetic_with_the_measurement_shown(tmp_path):
    row = c2(tmp_path, 2.8)
    assert row.verdict == "implausible as stated" and row.decided_by == "arithmetic"
    assert "synchronisation" in row.reason
    assert row.outcomes[0].verdict == "reproduced" and "accumulated 8x / 1x batch" in row.measured
    assert "Measured here, shown and not deciding" in row.detail


# -- what the platform can show, then the measurement --------------------------------------------

def test_the_band_follows_the_reached_regime_never_the_figure():
    quarter, lower = mechanism_reach(PARAMS, 0.25)
    assert quarter.cap == pytest.approx(8 / (8 * 0.25 + 0.75)) and lower == pytest.approx(1 + 0.8 * (quarter.cap - 1))
    busy, low_busy = mechanism_reach(PARAMS, 0.97)
    assert low_busy == MIN_GAIN and busy.cap < MIN_GAIN  # no room: not testable
    assert mechanism_reach(PARAMS, None) is None


@pytest.mark.parametrize("gain, verdict", [(2.8, "reproduced"), (1.5, "not reproduced")])
def test_c2_mechanism_decides_when_the_guide_is_consistent(tmp_path, consistent_guide, gain, verdict):
    row = c2(tmp_path, gain)
    assert row.verdict == verdict and row.decided_by == "measurement", row.measured
    assert "reference >= 2.53x" in row.measured


def test_c2_mechanism_on_gpus(tmp_path, consistent_guide):
    row = c2(tmp_path, 2.8, backend="nccl", facts={**GPU_IB, **regime(0.25, float("nan"))})
    assert row.verdict == "reproduced", row.measured


def test_c2_with_no_room_to_show_is_not_testable_here(tmp_path, consistent_guide):
    row = c2(tmp_path, 1.01, facts={**SHAPED, **regime(0.97)})
    assert row.verdict == "not testable here" and row.decided_by == "arithmetic", row.measured
    assert "caps it at 1.03x" in row.reason


def test_c2_without_a_recorded_busy_share_is_not_applicable(tmp_path, consistent_guide):
    row = c2(tmp_path, 2.8, facts=SHAPED, params={**PARAMS, "link_regime": "fixed"})
    assert row.verdict == "inconclusive" and "no busy share of the 1x step recorded" in row.measured


def test_c2_on_one_node_has_no_synchronisation_to_spare(tmp_path, consistent_guide):
    row = c2(tmp_path, 2.8, params={**PARAMS, "nodes": 1, "ranks_per_node": 2})
    assert row.verdict == "inconclusive" and "one node: there is no inter-node link" in row.measured


def test_c2_with_one_launch_is_inconclusive(tmp_path, consistent_guide):
    row = c2(tmp_path, 2.8, n=1)
    assert row.verdict == "inconclusive" and "n = 1 launches" in row.measured


def test_the_test_regime_is_ours_and_says_so():
    from hpcbench.experiments.batch_scaling.config import TEST_REGIME

    assert TEST_REGIME.ours and "not the guide's" in TEST_REGIME.arithmetic
    assert "220" not in TEST_REGIME.arithmetic  # never derived from the figure it would judge


@pytest.mark.parametrize("values, field, words", [
    ({"factors": [2, 4, 8]}, "link_regime", "larger_batch 1x"),
    ({"calibration_rates": ["100mbit"]}, "calibration_rates", "2-3 distinct"),
    ({"calibration_rates": ["100mbit", "5mbit"]}, "calibration_rates", "within 10..10000"),
])
def test_bad_regime_config_names_the_field(values, field, words):
    from hpcbench.core.errors import ConfigError
    from hpcbench.experiments.batch_scaling.config import BatchScalingConfig

    with pytest.raises(ConfigError) as exc:
        BatchScalingConfig.from_dict(values)
    assert exc.value.field == field and words in str(exc.value)
