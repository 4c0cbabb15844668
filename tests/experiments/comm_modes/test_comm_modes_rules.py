"""comm_modes from recorded records, without torch: summary -> rules (C3, C17), every outcome reachable.

C3 is read in three parts (hpcbench.judge.feasibility), each tested on its own from inputs a platform
could produce: the guide's statements (the scale model), what the topology can show at the reached
regime, and the measurement (on 2 nodes x 8 ranks, where the band is reachable: 1.64x at 17 % busy).
"""

import pytest
from synthetic import GPU_IB, LOOPBACK, SHAPED, launches, noisy

from hpcbench.experiments.comm_modes import rules
from hpcbench.experiments.comm_modes.config import IB_MTU_BUCKET_MB
from hpcbench.experiments.comm_modes.claims import two_level_bytes_share
from hpcbench.experiments.comm_modes.prediction import guide_consistency
from hpcbench.experiments.comm_modes.rules import topology_reach
from hpcbench.experiments.comm_modes.summary import summarize
from hpcbench.judge.feasibility import Consistency
from hpcbench.report.ledger import evaluate_claim

#: 2 nodes x 8 ranks on one link per node: the two-level mode can reach the band in the guide's regime.
PARAMS = {"nodes": 2, "ranks_per_node": 8, "batch_size": 4, "steps": 12, "regime": "guide"}
#: 2 nodes x 2 ranks: it cannot (1.39x at 16 % busy, 1.38x at 17 %).
SMALL = {**PARAMS, "ranks_per_node": 2}


def regime(reached: float, rate: float = 1e8) -> dict:
    """The regime facts of a calibrated launch whose resnet ddp step reached ``reached`` busy at ``rate``."""
    return {"regime.target_busy": 0.158, "regime.reached_busy": reached, "regime.link_rate_bps": rate,
            "regime.model": "resnet_tiny"}


#: Calibrated on the shaped link, ddp 17 % busy in the judged steps: the guide's ResNet-50 regime.
GUIDE = {**SHAPED, **regime(0.17)}


def modes_rows(ratios: dict[str, float], *, seed: int = 0, spread: float = 0.02, grad_ok: bool = True,
               bucket: float = 25.0, base: float = 1000.0):
    """One launch: per model, ddp at ``base`` and hierarchical at ``ratio x base``."""
    rows = []
    for i, (model, ratio) in enumerate(ratios.items()):
        for mode, factor in (("ddp", 1.0), ("hierarchical", ratio)):
            labels = {"model": model, "mode": mode, "bucket_cap_mb": bucket, "scope": "total"}
            rows.append(("throughput", noisy(base * factor, spread=spread, seed=seed * 31 + i * 7 + len(mode)),
                         "samples/s", labels))
            rows.append(("grad_match", 1.0 if (grad_ok or mode == "ddp") else 0.0, "bool",
                         {"model": model, "mode": mode, "bucket_cap_mb": bucket}))
    return rows


@pytest.fixture
def consistent_guide(monkeypatch):
    """The guide's statements taken as consistent, so that the platform and the measurement decide."""
    monkeypatch.setattr(rules, "guide_consistency", lambda: Consistency(True, "taken as consistent", "test"))


def c3(tmp_path, ratios, n=6, facts=GUIDE, params=PARAMS, **kw):
    records = launches(tmp_path, "comm_modes", lambda k: modes_rows(ratios, seed=k, **kw), n,
                       params=params, facts=facts, backend="gloo")
    return evaluate_claim("C3", records)


def test_summary_keeps_the_steps_and_flags_wrong_gradients(tmp_path):
    records = launches(tmp_path, "comm_modes", lambda k: modes_rows({"resnet_tiny": 1.5}, grad_ok=False), 1,
                       params=PARAMS)
    summary = summarize(records)
    hier = summary[summary["mode"] == "hierarchical"].iloc[0]
    assert len(hier["samples"]) == 12 and hier["throughput_total_p50"] == pytest.approx(1500, rel=0.05)
    assert not hier["ok"] and "other gradients" in hier["problem"]
    assert summary[summary["mode"] == "ddp"].iloc[0]["ok"]


def test_the_guides_figure_is_implausible_on_its_own_platform():
    stated = guide_consistency()
    assert not stated.holds and "1.18x" in stated.reason and len(stated.reason.split()) <= 6
    assert "1.18x at 1 NIC per node and 1.04x at 8 NICs per node" in stated.arithmetic


def test_c3_reads_implausible_decided_by_arithmetic_with_the_measurement_shown(tmp_path):
    row = c3(tmp_path, {"resnet_tiny": 1.6})
    assert row.verdict == "implausible as stated" and row.decided_by == "arithmetic"
    assert row.outcomes[0].verdict == "reproduced" and "hierarchical / ddp" in row.measured


def test_two_level_bytes_and_the_topologys_cap():
    assert two_level_bytes_share(2, 2) == pytest.approx(2 / 3)
    assert two_level_bytes_share(2, 8) == pytest.approx(1 / (2 * 15 / 16))
    assert two_level_bytes_share(1, 4) == 1.0 and two_level_bytes_share(4, 1) == 1.0
    small = topology_reach(SMALL, 0.158)
    assert small.cap == pytest.approx(1.39, abs=0.005) and small.needs == "2 nodes x 4 ranks per node"
    assert topology_reach(PARAMS, 0.17).cap > 1.6 and topology_reach(PARAMS, None) is None


@pytest.mark.parametrize("ratio", [1.2, 1.05])
def test_c3_on_2_by_2_is_not_testable_here_whatever_the_value(tmp_path, consistent_guide, ratio):
    row = c3(tmp_path, {"resnet_tiny": ratio}, params=SMALL)
    assert row.verdict == "not testable here" and row.decided_by == "arithmetic", row.measured
    assert "caps it at 1.38x" in row.reason and "not testable here: this platform caps it at 1.38x" in row.measured


def test_c3_reproduced_with_an_interval_on_the_shaped_link(tmp_path, consistent_guide):
    row = c3(tmp_path, {"resnet_tiny": 1.5, "gpt2_tiny": 1.5})
    assert row.verdict == "reproduced" and row.decided_by == "measurement", row.measured
    assert "95 % CI, 6 launches x 12 steps" in row.measured and "reference >= 1.4" in row.measured
    assert len(row.outcomes) == 2 and all(o.interval.low > o.reference.lower for o in row.outcomes)


def test_c3_not_reproduced_when_the_gain_is_small(tmp_path, consistent_guide):
    row = c3(tmp_path, {"resnet_tiny": 1.05, "gpt2_tiny": 1.5})
    assert row.verdict == "not reproduced", row.measured


def test_c3_inconclusive_with_too_few_launches_even_for_a_large_gain(tmp_path, consistent_guide):
    row = c3(tmp_path, {"resnet_tiny": 2.0}, n=3)
    assert row.verdict == "inconclusive" and "n = 3 launches" in row.measured


def test_c3_inconclusive_when_the_interval_straddles_the_band(tmp_path, consistent_guide):
    # Launches alternate 1.2x and 1.6x: the mean sits at the 1.40 bound, the interval on both sides.
    records = launches(tmp_path, "comm_modes", lambda k: modes_rows({"resnet_tiny": 1.2 if k % 2 else 1.6}, seed=k),
                       6, params=PARAMS, facts=GUIDE)
    row = evaluate_claim("C3", records)
    assert row.verdict == "inconclusive" and "straddles" in row.measured, row.measured


@pytest.mark.parametrize("ratio", [1.05, 2.0])
def test_c3_on_one_loopback_is_inconclusive_whatever_the_value(tmp_path, consistent_guide, ratio):
    row = c3(tmp_path, {"resnet_tiny": ratio}, facts=LOOPBACK)
    assert row.verdict == "inconclusive" and "not applicable" in row.measured and "loopback" in row.measured


def test_c3_drops_launches_whose_gradients_were_wrong_and_names_them(tmp_path, consistent_guide):
    row = c3(tmp_path, {"resnet_tiny": 1.6}, grad_ok=False)
    assert row.verdict == "inconclusive" and "other gradients" in row.detail


def test_c3_failed_tasks_never_count(tmp_path):
    records = launches(tmp_path, "comm_modes", lambda k: modes_rows({"resnet_tiny": 1.6}, seed=k), 6,
                       params=PARAMS, facts=SHAPED)
    statuses = {(run, task): ("failed" if task.endswith("r0") else "done")
                for run, task in zip(records["run_id"], records["task_id"])}
    row = evaluate_claim("C3", records, statuses=statuses)
    assert "5 launches" in row.measured and "task failed" in row.detail


def bucket_rows(mtu_ratio: float, seed: int):
    rows = []
    for bucket, factor in ((25.0, 1.0), (IB_MTU_BUCKET_MB, mtu_ratio)):
        rows.append(("throughput", noisy(1000 * factor, seed=seed * 13 + int(factor * 10)), "samples/s",
                     {"model": "gpt2_tiny", "mode": "ddp", "bucket_cap_mb": bucket, "scope": "total"}))
    return rows


@pytest.mark.parametrize("ratio, verdict", [(1.02, "reproduced"), (0.5, "not reproduced")])
def test_c17_on_nccl_over_infiniband(tmp_path, ratio, verdict):
    records = launches(tmp_path, "comm_modes", lambda k: bucket_rows(ratio, k), 6, params=PARAMS, facts=GPU_IB,
                       backend="nccl")
    assert evaluate_claim("C17", records).verdict == verdict


def test_c17_without_infiniband_is_inconclusive(tmp_path):
    records = launches(tmp_path, "comm_modes", lambda k: bucket_rows(0.5, k), 6, params=PARAMS, facts=SHAPED,
                       backend="gloo")
    row = evaluate_claim("C17", records)
    assert row.verdict == "inconclusive" and "no active InfiniBand" in row.measured


def test_bucket_findings_without_the_no_op_run(tmp_path):
    # measure_noop off logs no bucket layout: the findings say so instead of failing the notebook.
    from hpcbench.experiments.comm_modes.summary import bucket_findings

    records = launches(tmp_path, "comm_modes", lambda k: bucket_rows(0.5, k), 1, params=PARAMS)
    lines = bucket_findings(summarize(records))
    assert "reaches 50%" in lines[0] and "not logged (measure_noop off)" in lines[0]


# -- C3: the regime (dynamic similarity) ---------------------------------------------------------------------

def test_c3_gpt2_is_never_judged_the_guides_figures_imply_an_unreachable_regime(tmp_path, consistent_guide):
    row = c3(tmp_path, {"resnet_tiny": 1.5, "gpt2_tiny": 1.0})  # gpt2 far below its band: still not counted
    assert row.verdict == "reproduced", row.measured
    gpt2 = row.measured.split("gpt2_tiny")[1]
    assert "inconclusive: the guide's figures imply a regime where GPT-2 DDP runs at 0.12% of its" in gpt2
    assert "not reproduced" not in row.measured


@pytest.mark.parametrize("ratio", [1.05, 1.6])
def test_c3_outside_the_regime_is_inconclusive_whatever_the_value(tmp_path, consistent_guide, ratio):
    row = c3(tmp_path, {"resnet_tiny": ratio}, facts={**SHAPED, **regime(0.8)})
    assert row.verdict == "inconclusive", row.measured
    assert "inconclusive: regime 80% busy (ddp) vs the guide's 16% (+-5 points)" in row.measured


def test_c3_fixed_link_is_a_context_row_with_ddps_measured_busy_share(tmp_path, consistent_guide):
    def with_share(k):
        out = modes_rows({"resnet_tiny": 1.05}, seed=k)
        ddp = {"model": "resnet_tiny", "mode": "ddp", "bucket_cap_mb": 25.0}
        return out + [("comm_share", [0.25] * 12, "fraction", ddp),
                      ("step_time", [0.075] * 12, "s", {**ddp, "comm": "noop"})]

    records = launches(tmp_path, "comm_modes", with_share, 6, params={**PARAMS, "regime": "fixed"}, facts=SHAPED,
                       backend="gloo")
    row = evaluate_claim("C3", records)
    assert row.verdict == "inconclusive", row.measured
    assert "context: a fixed link, ddp at 75% busy against the guide's 16%" in row.measured


def test_guide_regime_arithmetic():
    from hpcbench.experiments.comm_modes.claims import GPT2_SHARE, GUIDE_REGIME

    # 12,500 images/s against 32 GPUs x 256 images per 0.1036 s step (NVIDIA's A100 rate)
    assert GUIDE_REGIME.target_busy == pytest.approx(12_500 / (32 * 256 / 0.10364), rel=1e-3)
    assert GUIDE_REGIME.target_busy == pytest.approx(0.158, abs=1e-3)
    assert GPT2_SHARE == pytest.approx(8_200 / (32 * 65_536 / 0.3), rel=1e-3) and GPT2_SHARE < 0.0013


def test_regime_config_calibrates_the_first_resnet_at_ddps_bucket_or_nothing():
    from hpcbench.core.errors import ConfigError
    from hpcbench.experiments.comm_modes.config import CommModesConfig

    assert CommModesConfig().calibrated_model() == "resnet_tiny"
    assert CommModesConfig.from_dict({"models": ["gpt2_tiny", "resnet18", "resnet_tiny"]}).calibrated_model() == "resnet18"
    for values in ({"models": ["gpt2_tiny"]}, {"modes": ["hierarchical"]}, {"bucket_cap_mb": [1.0]},
                   {"regime": "fixed"}):
        assert CommModesConfig.from_dict(values).calibrated_model() is None
    with pytest.raises(ConfigError) as exc:
        CommModesConfig.from_dict({"calibration_rates": ["1gbit"]})
    assert exc.value.field == "calibration_rates" and "2-3 distinct" in str(exc.value)
    assert CommModesConfig.from_dict({"regime": "fixed", "calibration_rates": ["1gbit", "1mbit"]})


def test_the_verdict_states_the_scale_models_gain_at_1_and_8_nics_in_the_guides_regime(tmp_path):
    from hpcbench.experiments.comm_modes.prediction import nic_gains_at_guide_regime

    gains = nic_gains_at_guide_regime()
    # one NIC per node leaves the inter-node link scarcer, which is where the two-level reduction pays;
    # neither end reaches the band's 1.40x (the guide's +49.6 %)
    assert set(gains) == {1, 8} and 1.0 < gains[8] < gains[1] < 1.397
    row = c3(tmp_path, {"resnet_tiny": 1.6})
    assert "1.18x at 1 NIC per node and 1.04x at 8 NICs per node" in row.detail
    # at a regime where DDP is all compute nothing is gained, whatever the NICs
    assert all(g == pytest.approx(1.0) for g in nic_gains_at_guide_regime(busy=0.999999).values())
