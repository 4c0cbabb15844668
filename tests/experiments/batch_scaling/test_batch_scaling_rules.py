"""batch_scaling from recorded records, without torch: summary -> rule (C2), every outcome reachable."""

import pytest
from synthetic import GPU_IB, SHAPED, launches, noisy

from hpcbench.experiments.batch_scaling.rules import accumulating_factor
from hpcbench.experiments.batch_scaling.summary import summarize
from hpcbench.report.ledger import evaluate_claim

PARAMS = {"factors": [1, 2, 4, 8], "regimes": ["larger_batch", "fixed_global_batch"], "base_batch": 4,
          "nodes": 2, "ranks_per_node": 1, "link_regime": "guide"}


def regime(reached: float, rate: float = 2e7) -> dict:
    """The regime facts of a calibrated launch whose 1x step reached ``reached`` busy at ``rate``."""
    return {"regime.target_busy": 1 / 12, "regime.reached_busy": reached, "regime.link_rate_bps": rate}


#: Calibrated on the shaped link, the 1x step 9 % busy in the judged steps: the guide's regime.
GUIDE = {**SHAPED, **regime(0.09)}


def rows(gain: float, seed: int):
    out = []
    for regime in ("larger_batch", "fixed_global_batch"):
        for factor in (1, 2, 4, 8):
            accumulation = 1 if regime == "larger_batch" else 8 // factor
            value = 100.0 * (gain if (regime, factor) == ("fixed_global_batch", 4) else 1.0)
            labels = {"regime": regime, "factor": factor, "micro_batch": 4 * factor, "accumulation": accumulation,
                      "batch_per_step": 4 * factor * accumulation}
            out.append(("throughput_per_rank", noisy(value, seed=seed * 11 + factor + len(regime)), "samples/s",
                        labels))
            out.append(("step_time", noisy(0.1, seed=seed), "s", labels))
    return out


def c2(tmp_path, gain, n=6, backend="gloo", facts=GUIDE, params=PARAMS):
    return evaluate_claim("C2", launches(tmp_path, "batch_scaling", lambda k: rows(gain, k), n, params=params,
                                         facts=facts, backend=backend))


def test_the_numerator_really_accumulates():
    # 8x global batch: the 4x micro-batch accumulates twice; 8x itself would not accumulate at all.
    assert accumulating_factor(PARAMS) == 4
    assert accumulating_factor({**PARAMS, "factors": [1, 2]}) is None  # no batch >= 4x
    assert accumulating_factor({**PARAMS, "regimes": ["larger_batch"]}) is None


def test_summary_keeps_the_steps(tmp_path):
    summary = summarize(launches(tmp_path, "batch_scaling", lambda k: rows(3.0, k), 1, params=PARAMS))
    row = summary[(summary["regime"] == "fixed_global_batch") & (summary["factor"] == 4)].iloc[0]
    assert row["accumulation"] == 2 and len(row["samples"]) == 12


@pytest.mark.parametrize("gain, verdict", [(3.3, "reproduced"), (1.3, "not reproduced")])
def test_c2_in_the_guides_regime_on_cpu_ranks(tmp_path, gain, verdict):
    row = c2(tmp_path, gain)
    assert row.verdict == verdict, row.measured
    assert "fixed_global_batch 8x by 2 x 4x micro-batches" in row.measured
    assert "8.3% busy +-5 points" in row.detail and "m = 11 c" in row.detail


def test_c2_on_gpus_in_the_guides_regime(tmp_path):
    row = c2(tmp_path, 3.3, backend="nccl", facts={**GPU_IB, **regime(0.1, float("nan"))})
    assert row.verdict == "reproduced", row.measured


@pytest.mark.parametrize("gain", [1.3, 3.3])
def test_c2_outside_the_regime_is_inconclusive_whatever_the_value(tmp_path, gain):
    row = c2(tmp_path, gain, facts={**SHAPED, **regime(0.5)})
    assert row.verdict == "inconclusive", row.measured
    assert "inconclusive: regime 50% busy (larger_batch 1x) vs the guide's 8% (+-5 points)" in row.measured


@pytest.mark.parametrize("params", [{**PARAMS, "link_regime": "fixed"},
                                    {k: v for k, v in PARAMS.items() if k != "link_regime"}])
def test_c2_on_a_fixed_link_is_a_context_row(tmp_path, params):
    row = c2(tmp_path, 1.3, facts=SHAPED, params=params)
    assert row.verdict == "inconclusive" and "context: a fixed link" in row.measured


def test_c2_on_one_node_has_no_synchronisation_to_spare(tmp_path):
    row = c2(tmp_path, 3.3, params={**PARAMS, "nodes": 1, "ranks_per_node": 2})
    assert row.verdict == "inconclusive" and "one node: there is no inter-node link" in row.measured


def test_c2_with_one_launch_is_inconclusive(tmp_path):
    row = c2(tmp_path, 3.3, n=1)
    assert row.verdict == "inconclusive" and "n = 1 launches" in row.measured


def test_guide_regime_arithmetic():
    from hpcbench.experiments.batch_scaling.config import GUIDE_REGIME, guide_sync_per_compute

    m = guide_sync_per_compute()
    assert m == pytest.approx(11.0) and 4 * (1 + m) / (4 + m) == pytest.approx(3.2)
    assert GUIDE_REGIME.target_busy == pytest.approx(1 / 12) and 1 - GUIDE_REGIME.target_busy == pytest.approx(0.9167,
                                                                                                           abs=1e-4)


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
