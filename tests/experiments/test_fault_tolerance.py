"""fault_tolerance from recorded records, without torch: summary -> rules (C11, C15), every outcome reachable."""

import numpy as np
import pytest
from synthetic import launches, noisy

from hpcbench.experiments.fault_tolerance.rules import failure_ratio, survival_reference
from hpcbench.experiments.fault_tolerance.summary import summarize
from hpcbench.report.ledger import evaluate_claim

MODELS, DTYPES = ["resnet_tiny", "gpt2_tiny"], ["float32", "bfloat16"]
PARAMS = {"models": MODELS, "dtypes": DTYPES, "zstd_level": 3, "light_interval_s": 600.0,
          "full_interval_s": 3600.0, "failure_p": 0.5, "survival_jobs": 200}
ONE_MACHINE = {"cluster": "one machine", "infiniband": "absent", "gpus": 0.0}


def ft_rows(seed=0, *, save_s=0.2, ratio=1.08, lost_s=300.0, p=0.5, failed_share=0.125, jobs=500, tries=3,
            restored=1.0, fs="ext4 at /", sync_s=0.2, async_s=0.004):
    """One launch's records: saves per model x dtype x tier, stalls, work lost, survival jobs, checks."""
    rows = [("storage.filesystem", None, "", {}, fs)]
    for i, model in enumerate(MODELS):
        for j, dtype in enumerate(DTYPES):
            k = seed * 31 + i * 7 + j
            for tier, interval in (("light", 600.0), ("full", 3600.0)):
                labels = {"phase": "save", "model": model, "dtype": dtype, "tier": tier, "level": 3,
                          "interval_s": interval}
                secs = noisy(save_s, n=10, spread=0.05, seed=k)
                rows += [("save_seconds", secs, "s", labels),
                         ("overhead_share", [100 * s / (interval + s) for s in secs], "%", labels),
                         ("compression_ratio", noisy(ratio, n=10, spread=0.001, seed=k + 1), "x", labels),
                         ("bytes_raw", 6e7, "B", labels), ("bytes_written", 6e7 / ratio, "B", labels)]
                rec = {"phase": "recovery", "model": model, "dtype": dtype, "tier": tier}
                rows += [("recovery_seconds", noisy(0.1, n=10, seed=k + 2), "s", rec),
                         ("restore_equal", [restored] * 3, "bool", rec), ("checkpoint_named", 1.0, "bool", rec)]
            for mode, secs in (("sync", sync_s), ("async", async_s)):
                rows.append(("stall_seconds", noisy(secs, n=10, seed=k + 3), "s",
                             {"phase": "stall", "model": model, "dtype": dtype, "tier": "light", "mode": mode}))
    fail = {"phase": "failure", "model": MODELS[0], "dtype": DTYPES[0], "light_every_steps": 8}
    rng = np.random.default_rng(seed)
    rows += [("work_lost_seconds", list(rng.uniform(0.2, 1.8, 12) * lost_s), "s", fail),
             ("work_lost_expected_seconds", 300.0, "s", fail), ("torn_checkpoint_skipped", 1.0, "bool", fail)]
    surv = {"phase": "survival", "p": p, "tries": tries}
    failed = (rng.random(jobs) < failed_share).astype(float)
    rows += [("job_failed", list(failed), "bool", surv),
             ("job_tries", list(np.where(failed > 0, tries, 1.0)), "count", surv)]
    return rows


def records(tmp_path, n=6, params=None, **kw):
    return launches(tmp_path, "fault_tolerance", lambda k: ft_rows(seed=k, **kw), n, params=params or PARAMS,
                    facts=ONE_MACHINE)


def test_summary_rows_and_checks(tmp_path):
    summary = summarize(records(tmp_path, n=1))
    save = summary[summary["phase"] == "save"]
    assert len(save) == 2 * 2 * 2 and (save["interval_s"].isin([600.0, 3600.0])).all()
    assert all(len(s) == 10 for s in save["samples"]) and all(len(s) == 10 for s in save["ratio_samples"])
    stall = summary[(summary["phase"] == "stall") & (summary["mode"] == "async")]
    assert (stall["stall_vs_sync"] < 0.05).all()
    surv = summary[summary["phase"] == "survival"].iloc[0]
    assert surv["jobs"] == 500 and surv["predicted"] == pytest.approx(0.125) and surv["tries"] == 3
    assert summary["ok"].all() and not summary["problem"].any()
    bad = summarize(records(tmp_path / "bad", n=1, restored=0.0))
    assert not bad["ok"].any() and "differed" in bad["problem"].iloc[0]


def test_c11_reproduced_when_saves_are_cheap_compressed_and_lose_half_an_interval(tmp_path):
    row = evaluate_claim("C11", records(tmp_path))
    assert row.verdict == "reproduced", row.measured
    assert len(row.outcomes) == 2 * 2 * 3 + 1
    assert any("light: save / (600 s + save)" in label for label in row.labels)


@pytest.mark.parametrize("change", [dict(save_s=30.0), dict(ratio=1.0), dict(lost_s=1500.0)],
                         ids=["slow saves", "incompressible", "work lost"])
def test_c11_not_reproduced_when_a_part_fails(tmp_path, change):
    row = evaluate_claim("C11", records(tmp_path, **change))
    assert row.verdict == "not reproduced", row.measured


def test_c11_inconclusive_with_few_launches(tmp_path):
    row = evaluate_claim("C11", records(tmp_path, n=2))
    assert row.verdict == "inconclusive" and "n = 2 launches" in row.measured


def test_c11_in_memory_checkpoints_are_not_applicable(tmp_path):
    row = evaluate_claim("C11", records(tmp_path, fs="tmpfs at /tmp", save_s=30.0))
    assert row.verdict == "inconclusive" and "tmpfs" in row.measured


def test_c11_other_intervals_are_not_applicable_for_the_overhead(tmp_path):
    row = evaluate_claim("C11", records(tmp_path, params={**PARAMS, "light_interval_s": 60.0}))
    light = [o for o, label in zip(row.outcomes, row.labels) if "light: save" in label]
    assert light and all(o.verdict == "inconclusive" and "light_interval_s" in o.why for o in light)


def test_c11_launches_that_restored_wrong_state_do_not_count(tmp_path):
    row = evaluate_claim("C11", records(tmp_path, restored=0.0))
    assert row.verdict == "inconclusive" and "differed" in row.detail


def test_c15_reproduced_when_jobs_fail_at_p_cubed(tmp_path):
    row = evaluate_claim("C15", records(tmp_path))
    assert row.verdict == "reproduced", row.measured
    assert "p = 0.5" in row.labels[0]


def test_c15_not_reproduced_when_jobs_fail_at_p_squared(tmp_path):
    row = evaluate_claim("C15", records(tmp_path, failed_share=0.25))
    assert row.verdict == "not reproduced", row.measured


def test_c15_inconclusive_with_few_launches_or_too_few_expected_failures(tmp_path):
    row = evaluate_claim("C15", records(tmp_path / "few", n=2))
    assert row.verdict == "inconclusive" and "n = 2 launches" in row.measured
    row = evaluate_claim("C15", records(tmp_path / "rare", p=0.1, failed_share=0.0))
    assert row.verdict == "inconclusive" and "expect" in row.measured


def test_c15_another_try_count_is_not_applicable(tmp_path):
    row = evaluate_claim("C15", records(tmp_path, tries=2, failed_share=0.25))
    assert row.verdict == "inconclusive" and "2 tries" in row.measured


def test_failure_ratio_interval_brackets_the_truth():
    rng = np.random.default_rng(1)
    outcomes = [list((rng.random(400) < 0.125).astype(float)) for _ in range(6)]
    interval = failure_ratio(outcomes, 0.125)
    assert interval.launches == 6 and interval.steps == 400
    assert interval.low < 1.0 < interval.high and interval.high - interval.low < 0.6
    band = survival_reference(0.5)
    assert band.lower == pytest.approx(0.5 ** 0.5) and band.upper == pytest.approx(2 ** 0.5)
