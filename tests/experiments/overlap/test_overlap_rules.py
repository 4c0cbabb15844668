"""overlap from recorded records, without torch: summary -> rule C9, every outcome reachable."""

import pytest
from synthetic import GPU_IB, LOOPBACK, SHAPED, launches, noisy

from hpcbench.experiments.overlap.config import OverlapExperimentConfig
from hpcbench.experiments.overlap.rules import C9_MIN_GAIN
from hpcbench.experiments.overlap.summary import summarize, verify_records
from hpcbench.report.ledger import evaluate_claim

B, WORLD, STEPS = 4, 2, 12
PARAMS = {"nodes": 2, "ranks_per_node": 1, "batch_size": B, "steps": STEPS, "micro_steps": [1, 4]}
GRAD_BYTES = 1_491_200
SERIES = ((1, True), (4, True), (4, False))


def overlap_rows(gain: float = 1.3, *, k1: float = 0.9, fewer: float = 4.0, seed: int = 0, spread: float = 0.02,
                 failed: str = "", failed_series: tuple[int, bool] = (4, True), models=("weather_tiny",)):
    """One launch: per model the three series, k=4 with no_sync() at ``gain`` x the samples/s of k=4
    synchronising every micro-step (C9's baseline), k=1 at ``k1`` x it, and k=4 with no_sync()
    ``fewer`` x fewer synchronisations per sample; ``failed`` names a check that ``failed_series``
    (k, no_sync) failed."""
    rows = []
    for i, model in enumerate(models):
        for k, no_sync in SERIES:
            labels = {"model": model, "micro_steps": k, "no_sync": no_sync, "batch_size": B}
            guide = k == 4 and no_sync
            syncs = k / fewer if guide else (1 if no_sync else k)
            tput = 100.0 * (gain if guide else k1 if k == 1 else 1.0)
            step = k * B * WORLD / tput
            s = seed * 31 + i * 7 + k + no_sync
            rows += [
                ("throughput", noisy(tput, STEPS, spread, s), "samples/s", {**labels, "scope": "total"}),
                ("step_time", noisy(step, STEPS, spread, s + 1), "s", {**labels, "comm": "mode"}),
                ("step_time", noisy(0.8 * step, STEPS, spread, s + 2), "s", {**labels, "comm": "noop"}),
                ("time_per_sample", noisy(step / (k * B), STEPS, spread, s + 1), "s", {**labels, "comm": "mode"}),
                ("time_per_sample", noisy(0.8 * step / (k * B), STEPS, spread, s + 2), "s", {**labels, "comm": "noop"}),
                ("syncs", [float(syncs)] * STEPS, "", labels),
                ("syncs_per_sample", [syncs / (k * B * WORLD)] * STEPS, "1/sample", labels),
                ("allreduce_bytes", [syncs * GRAD_BYTES] * STEPS, "B", labels),
                ("sync_alone_time", noisy(0.5 * step / max(syncs, 1), 10, spread, s + 3), "s", labels),
            ]
            for check in ("params_agree",) + (("grad_match", "loss_match") if k > 1 else ()):
                failing = (k, no_sync) == failed_series and check == failed
                rows.append((check, 0.0 if failing else 1.0, "bool", labels))
    return rows


def c9(tmp_path, n=6, facts=SHAPED, params=PARAMS, **kw):
    records = launches(tmp_path, "overlap", lambda j: overlap_rows(seed=j, **kw), n, params=params, facts=facts,
                       backend="gloo")
    return evaluate_claim("C9", records)


def test_summary_medians_counts_and_overlapped_share(tmp_path):
    records = launches(tmp_path, "overlap", lambda j: overlap_rows(), 1, params=PARAMS)
    s = summarize(records)
    assert [(r.micro_steps, r.no_sync) for r in s.itertuples()] == [(1, True), (4, True), (4, False)]
    guide = s.iloc[1]
    assert len(guide["samples"]) == STEPS and len(guide["sync_samples"]) == STEPS
    assert guide["syncs_per_step"] == 1 and s.iloc[2]["syncs_per_step"] == 4
    assert s.iloc[0]["syncs_per_sample"] / guide["syncs_per_sample"] == 4.0
    # exposed = step - no-op step (20 % of it), total = alone (50 % of the step) x syncs: 60 % hidden
    assert guide["overlapped_share"] == pytest.approx(0.6, abs=0.05)
    assert guide["exposed_comm_ms"] == pytest.approx(0.2 * guide["step_p50_ms"], rel=0.1)
    assert s["ok"].all() and guide["grad_match"] and guide["loss_match"] and s.iloc[0]["loss_match"] is None


@pytest.mark.parametrize("check, words", [("loss_match", "not within 5 %"), ("grad_match", "one big step"),
                                          ("params_agree", "different parameters")])
def test_summary_flags_a_failed_check(tmp_path, check, words):
    records = launches(tmp_path, "overlap", lambda j: overlap_rows(failed=check), 1, params=PARAMS)
    s = summarize(records).set_index(["micro_steps", "no_sync"])
    assert not s.loc[(4, True), "ok"] and words in s.loc[(4, True), "problem"]
    assert s.loc[(1, True), "ok"] and s.loc[(4, False), "ok"]
    cfg = OverlapExperimentConfig.from_dict({**PARAMS, "batch_size": 4})
    assert words in str(verify_records(records, cfg))


def test_verify_flags_a_count_that_is_not_the_expected_one(tmp_path):
    records = launches(tmp_path, "overlap", lambda j: overlap_rows(fewer=1.0), 1, params=PARAMS)
    text = str(verify_records(records, OverlapExperimentConfig.from_dict(PARAMS)))
    assert "FAIL" in text and "k=4 no_sync=True: 12 of 12 steps counted 4 synchronisations, expected 1" in text


def test_c9_works_as_described_when_every_model_gains(tmp_path):
    row = c9(tmp_path, gain=1.3)
    assert row.verdict == "reproduced" and row.verdict_text == "works as described", row.measured
    assert len(row.outcomes) == 1 and "6 launches x 12 steps" in row.measured
    gain, = row.outcomes
    assert gain.interval.low > C9_MIN_GAIN and "our bound" in gain.reference.source
    assert "sanity check, not a verdict part" in row.detail.lower()


def test_c9_does_not_work_as_described_without_a_gain(tmp_path):
    row = c9(tmp_path, gain=1.0)
    assert row.verdict == "not reproduced" and row.verdict_text == "does not work as described", row.measured


def test_c9_compares_no_sync_with_k4_synchronising_every_micro_step_not_with_k1(tmp_path):
    # k=4 under no_sync() is 1.3x k=1 but no faster than k=4 synchronising every micro-step: the gain
    # over k=1 comes from the larger batch per optimizer step, not from the technique
    row = c9(tmp_path, gain=1.0, k1=1 / 1.3)
    assert row.verdict == "not reproduced", row.measured
    label, = row.labels
    assert "k=4 no_sync / k=4 sync each micro-step" in label and "k=1" not in label
    gain, = row.outcomes
    assert gain.interval.high < C9_MIN_GAIN and gain.interval.low > 0.9
    assert "synchronising every micro-step" in row.detail


def test_c9_works_as_described_when_no_sync_beats_its_own_baseline_but_not_k1(tmp_path):
    # the technique gains 1.3x over k=4 synchronising every micro-step while k=1 is as fast as
    # k=4 no_sync(): the technique works, whatever k=1 does
    row = c9(tmp_path, gain=1.3, k1=1.3)
    assert row.verdict == "reproduced", row.measured
    gain, = row.outcomes
    assert gain.interval.low > 1.2


def test_c9_a_baseline_that_failed_its_checks_leaves_nothing_to_judge(tmp_path):
    # the denominator is k=4 synchronising every micro-step: if it failed a check, C9 has no baseline
    row = c9(tmp_path, gain=1.3, failed="params_agree", failed_series=(4, False))
    assert row.verdict == "inconclusive" and "k=4 no_sync=False" in row.detail, row.measured


@pytest.mark.parametrize("fewer", [2.0, 1.0])
def test_c9_a_wrong_synchronisation_count_is_a_failed_sanity_check_not_a_verdict(tmp_path, fewer):
    # no_sync() saving only half, or none, of the synchronisations: the run did not do what it says,
    # so its k=4 series does not count whatever its gain, and nothing is left to judge
    row = c9(tmp_path, gain=1.3, fewer=fewer)
    assert row.verdict == "inconclusive", row.measured
    assert "counted" in row.detail and "expected 1" in row.detail


def test_c9_inconclusive_with_too_few_launches(tmp_path):
    row = c9(tmp_path, n=3, gain=2.0)
    assert row.verdict == "inconclusive" and "n = 3 launches" in row.measured


def test_c9_inconclusive_when_the_gain_straddles_the_bound(tmp_path):
    records = launches(tmp_path, "overlap", lambda j: overlap_rows(gain=1.0 if j % 2 else 1.11, seed=j), 6,
                       params=PARAMS, facts=SHAPED)
    row = evaluate_claim("C9", records)
    gain, = row.outcomes
    # the gain's interval reaches both sides of 1.05
    assert gain.interval.low < C9_MIN_GAIN < gain.interval.high
    assert row.verdict == "inconclusive" and "straddles" in row.measured, row.measured


@pytest.mark.parametrize("facts, params, words", [
    (LOOPBACK, PARAMS, "loopback"),
    (SHAPED, {**PARAMS, "nodes": 1, "ranks_per_node": 2}, "one node"),
])
@pytest.mark.parametrize("gain", [1.0, 1.5])
def test_c9_without_an_inter_node_link_is_inconclusive_whatever_the_values(tmp_path, facts, params, words, gain):
    row = c9(tmp_path, facts=facts, params=params, gain=gain)
    assert row.verdict == "inconclusive" and "not applicable" in row.measured and words in row.measured


def test_c9_applies_on_slurm_nodes(tmp_path):
    assert c9(tmp_path, facts=GPU_IB, gain=1.3).verdict == "reproduced"


def test_c9_drops_series_whose_checks_failed_and_names_them(tmp_path):
    row = c9(tmp_path, gain=1.3, failed="loss_match")
    assert row.verdict == "inconclusive" and "not within 5 %" in row.detail


def test_c9_a_few_failed_launches_leave_too_few(tmp_path):
    records = launches(tmp_path, "overlap", lambda j: overlap_rows(seed=j, failed="params_agree" if j < 2 else ""),
                       6, params=PARAMS, facts=SHAPED)
    row = evaluate_claim("C9", records)
    assert row.verdict == "inconclusive" and "n = 4 launches" in row.measured and "different parameters" in row.detail


def test_c9_judges_every_model(tmp_path):
    # one model reproduces, the other gains nothing: the claim is not reproduced
    records = launches(tmp_path, "overlap",
                       lambda j: overlap_rows(seed=j, gain=1.3, models=("weather_tiny",))
                       + overlap_rows(seed=j + 50, gain=1.0, models=("gpt2_tiny",)),
                       6, params={**PARAMS, "models": ["weather_tiny", "gpt2_tiny"]}, facts=SHAPED)
    row = evaluate_claim("C9", records)
    assert row.verdict == "not reproduced" and len(row.outcomes) == 2
    assert any("gpt2_tiny: samples/s" in label for label in row.labels)
