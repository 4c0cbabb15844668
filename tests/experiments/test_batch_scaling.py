"""batch_scaling from recorded records, without torch: summary -> rule (C2), every outcome reachable."""

import pytest
from synthetic import GPU_IB, launches, noisy

from hpcbench.experiments.batch_scaling.rules import accumulating_factor
from hpcbench.experiments.batch_scaling.summary import summarize
from hpcbench.report.ledger import evaluate_claim

PARAMS = {"factors": [1, 2, 4, 8], "regimes": ["larger_batch", "fixed_global_batch"], "base_batch": 4,
          "nodes": 1, "ranks_per_node": 2}


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


def c2(tmp_path, gain, n=6, backend="nccl"):
    return evaluate_claim("C2", launches(tmp_path, "batch_scaling", lambda k: rows(gain, k), n, params=PARAMS,
                                         facts=GPU_IB, backend=backend))


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
def test_c2_on_gpus(tmp_path, gain, verdict):
    row = c2(tmp_path, gain)
    assert row.verdict == verdict, row.measured
    assert "fixed_global_batch 8x by 2 x 4x micro-batches" in row.measured


@pytest.mark.parametrize("gain", [1.3, 3.3])
def test_c2_on_cpu_is_inconclusive_whatever_the_value(tmp_path, gain):
    row = c2(tmp_path, gain, backend="gloo")
    assert row.verdict == "inconclusive" and "not applicable" in row.measured


def test_c2_with_one_launch_is_inconclusive(tmp_path):
    row = c2(tmp_path, 3.3, n=1)
    assert row.verdict == "inconclusive" and "n = 1 launches" in row.measured
