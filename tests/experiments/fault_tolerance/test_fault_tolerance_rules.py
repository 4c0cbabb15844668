"""fault_tolerance from recorded records, without torch: summary -> rules (C11, C15), every outcome reachable."""

import numpy as np
import pytest
from synthetic import launches, noisy

from hpcbench.experiments.fault_tolerance.rules import affordable_save_s, failure_ratio, survival_reference
from hpcbench.experiments.fault_tolerance.summary import summarize
from hpcbench.judge.verdict import clopper_pearson
from hpcbench.report.ledger import evaluate_claim

MODELS, DTYPES = ["resnet_tiny", "gpt2_tiny"], ["float32", "bfloat16"]
PARAMS = {"models": MODELS, "dtypes": DTYPES, "zstd_level": 3, "light_interval_s": 600.0,
          "full_interval_s": 3600.0, "overhead_model": "gpt2_124M", "survival_jobs": 200}
ONE_MACHINE = {"cluster": "one machine", "infiniband": "absent", "gpus": 0.0}


def exact(share, n, seed):
    """n 0/1 values holding round(share * n) ones, shuffled."""
    k = int(round(share * n))
    values = np.array([1.0] * k + [0.0] * (n - k))
    np.random.default_rng(seed).shuffle(values)
    return list(values)


def ft_rows(seed=0, *, save_s=0.2, stall_s=0.2, ratio=1.08, lost_s=300.0, newest=1.0, p=0.5, wrapper_share=0.125,
            single_share=0.5, policy=1.0, repaired=1.0, jobs=200, tries=3, restored=1.0, fs="ext4 at /",
            sync_s=0.2, async_s=0.004):
    """One launch's records: saves per model x dtype x tier, stalls, work lost, both survival arms, checks."""
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
    over = {"phase": "overhead", "model": "gpt2_124M", "dtype": DTYPES[0], "tier": "light", "interval_s": 600.0}
    stalls = noisy(stall_s, n=10, spread=0.05, seed=seed + 5)
    rows += [("save_stall_seconds", stalls, "s", over),
             ("overhead_share", [100 * s / (600 + s) for s in stalls], "%", over),
             ("bytes_written", [1.38e9] * 10, "B", over)]
    fail = {"phase": "failure", "model": MODELS[0], "dtype": DTYPES[0], "cadence_s": 1.0}
    rng = np.random.default_rng(seed)
    lost = list(rng.uniform(0.2, 1.8, 12) * lost_s)
    rows += [("work_lost_seconds", lost, "s", fail), ("work_lost_share", [v / 600 for v in lost], "ratio", fail),
             ("restored_newest", exact(newest, 12, seed), "bool", fail),
             ("torn_checkpoint_skipped", 1.0, "bool", fail)]
    for arm, arm_tries, share in (("wrapper", tries, wrapper_share), ("single", 1, single_share)):
        surv = {"phase": "survival", "mode": arm, "tries": arm_tries}
        failed = np.array(exact(share, jobs, seed + 4))
        rows += [("job_failed", list(failed), "bool", surv),
                 ("job_tries", list(np.where(failed > 0, arm_tries, 1.0)), "count", surv),
                 ("wrapper_policy_followed", exact(policy, jobs, seed + 1), "bool", surv),
                 ("try_failed", exact(p, 2 * jobs, seed + 2), "bool", surv)]
    rows.append(("shard_repaired", exact(repaired, 40, seed + 3), "bool", {"phase": "repair", "tries": tries}))
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
    surv = summary[summary["phase"] == "survival"].set_index("mode")
    assert surv.loc["wrapper", "jobs"] == 200 and surv.loc["wrapper", "tries"] == 3 and surv.loc["single", "tries"] == 1
    assert surv["p_try"].tolist() == pytest.approx([0.5, 0.5]) and len(surv.loc["wrapper", "policy_samples"]) == 200
    failure = summary[summary["phase"] == "failure"].iloc[0]
    assert len(failure["samples"]) == 12 and len(failure["restored_newest_samples"]) == 12
    overhead = summary[summary["phase"] == "overhead"].iloc[0]
    assert overhead["save_p50_s"] == pytest.approx(0.2, rel=0.1)
    # the rate the save moved its bytes at: what the storage took, beside the stall it cost
    assert overhead["save_MB_per_s"] == pytest.approx(1380 / overhead["save_p50_s"])
    assert summary[summary["phase"] == "repair"]["repaired"].iloc[0] == 40
    assert summary["ok"].all() and not summary["problem"].any()
    bad = summarize(records(tmp_path / "bad", n=1, restored=0.0))
    assert not bad["ok"].any() and "differed" in bad["problem"].iloc[0]


def test_c11_reproduced_when_saves_are_cheap_compressed_and_lose_half_an_interval(tmp_path):
    row = evaluate_claim("C11", records(tmp_path))
    assert row.verdict == "reproduced", row.measured
    assert len(row.outcomes) == 2 * 2 * 3 + 1 + 2
    assert any("light: save / (600 s + save)" in label for label in row.labels)
    assert any("gpt2_124M light save's stall" in label for label in row.labels)
    # the storage's rate beside the bound's: 1,380 MB in a ~0.2 s stall; 1 % of 600 s needs 1380 / 6.06 MB/s
    assert "moved their 1380 MB at" in row.detail and "needs 228 MB/s" in row.detail


@pytest.mark.parametrize("change", [dict(save_s=30.0), dict(stall_s=19.9), dict(ratio=1.0), dict(lost_s=900.0),
                                    dict(newest=0.5)],
                         ids=["slow saves", "gpt2 save stalls 3 %", "incompressible", "work lost",
                              "restores fall back"])
def test_c11_not_reproduced_when_a_part_fails(tmp_path, change):
    row = evaluate_claim("C11", records(tmp_path, **change))
    assert row.verdict == "not reproduced", row.measured


def test_c11_inconclusive_with_few_launches(tmp_path):
    row = evaluate_claim("C11", records(tmp_path, n=2))
    assert row.verdict == "inconclusive" and "n = 2 launches" in row.measured


def test_c11_in_memory_checkpoints_are_not_applicable(tmp_path):
    row = evaluate_claim("C11", records(tmp_path, fs="tmpfs at /tmp", save_s=30.0, lost_s=900.0))
    assert row.verdict == "inconclusive" and "tmpfs" in row.measured


def test_c11_other_intervals_are_not_applicable_for_the_overhead(tmp_path):
    row = evaluate_claim("C11", records(tmp_path, params={**PARAMS, "light_interval_s": 60.0}))
    light = [o for o, label in zip(row.outcomes, row.labels) if "light: save" in label or "work lost" in label]
    assert light and all(o.verdict == "inconclusive" and "light_interval_s" in o.why for o in light)


def test_c11_launches_that_restored_wrong_state_do_not_count(tmp_path):
    row = evaluate_claim("C11", records(tmp_path, restored=0.0))
    assert row.verdict == "inconclusive" and "differed" in row.detail


def test_c15_reproduced_when_the_wrapper_reruns_repairs_and_jobs_fail_at_p_try_cubed(tmp_path):
    row = evaluate_claim("C15", records(tmp_path))
    assert row.verdict == "reproduced", row.measured
    assert len(row.outcomes) == 4 and "p_try = 0.50" in row.labels[3]


@pytest.mark.parametrize("change", [dict(wrapper_share=0.25), dict(wrapper_share=0.5), dict(policy=0.5),
                                    dict(repaired=0.0)],
                         ids=["jobs fail at p^2", "no better than one try", "wrapper stops early", "no repair"])
def test_c15_not_reproduced_when_a_part_fails(tmp_path, change):
    row = evaluate_claim("C15", records(tmp_path, **change))
    assert row.verdict == "not reproduced", row.measured


def test_c15_inconclusive_with_few_launches_or_too_few_expected_failures(tmp_path):
    row = evaluate_claim("C15", records(tmp_path / "few", n=2))
    assert row.verdict == "inconclusive" and "n = 2 launches" in row.measured
    row = evaluate_claim("C15", records(tmp_path / "rare", p=0.1, wrapper_share=0.0, single_share=0.1))
    assert row.verdict == "inconclusive" and "expect" in row.measured


def test_c15_another_try_count_is_not_applicable(tmp_path):
    row = evaluate_claim("C15", records(tmp_path, tries=2, wrapper_share=0.25))
    assert row.verdict == "inconclusive" and "[2] tries" in row.measured


def test_failure_ratio_brackets_the_truth_with_exact_bounds():
    rng = np.random.default_rng(1)
    failed = int((rng.random(1200) < 0.125).sum())
    interval = failure_ratio(failed, 1200, (0.125, 0.125, 0.125), launches=6, jobs=200)
    assert interval.launches == 6 and interval.steps == 200
    assert interval.low < 1.0 < interval.high and interval.high - interval.low < 0.5
    low, high = clopper_pearson(failed, 1200)
    assert (interval.low, interval.high) == pytest.approx((low / 0.125, high / 0.125))
    # a denominator with its own interval widens the ratio's: bounds over the opposite bounds
    wide = failure_ratio(failed, 1200, (0.5, 0.45, 0.55), launches=6, jobs=200)
    assert wide.low == pytest.approx(low / 0.55) and wide.high == pytest.approx(high / 0.45)
    band = survival_reference(0.5)
    assert band.lower == pytest.approx(0.5 ** 0.5) and band.upper == pytest.approx(2 ** 0.5)


# -- the repair checks of the survival phase (pure: a wrapper's log and the injector's record) ---------------

def _run(attempts, repaired=None, intact=None, said=None):
    from hpcbench.experiments.fault_tolerance.worker import JobRun

    return JobRun(exit_status=attempts[-1][2], attempts=attempts, repaired_after=repaired or {},
                  intact_at_start=intact or {}, said_after=said or {})


def _flip(at, shard, done=None):
    from hpcbench.experiments.fault_tolerance.worker import InjectedEvent

    return InjectedEvent(at, "corrupt", (0, "wrapper"), shard, at + 0.001 if done is None else done)


def test_repair_checks_count_a_listed_shard_and_fail_an_unlisted_one():
    from hpcbench.experiments.fault_tolerance.worker import repair_checks

    tries = [(0.0, 1.0, 1), (1.5, 2.5, 1), (3.0, 4.0, 0)]
    flips = [_flip(0.5, "a"), _flip(2.0, "b")]
    assert repair_checks(_run(tries, {1: {"a"}, 2: {"b"}}), flips) == [(True, ""), (True, "")]
    # a failed check carries the job's timeline: tries, what each repair listed, the injector's strikes
    timeline = (" [timeline: try 1 0.000-1.000 rc 1, repaired ['a']; try 2 1.500-2.500 rc 1; try 3 3.000-4.000 rc 0; "
                "corrupt a at 0.500-0.501; corrupt b at 2.000-2.001]")
    assert repair_checks(_run(tries, {1: {"a"}}), flips) == [
        (True, ""), (False, "after try 2: ['b'] not repaired" + timeline)]
    # listed, but the next try found a bad shard at its start: not repaired either
    assert repair_checks(_run(tries, {1: {"a"}, 2: {"b"}}, {3: 0}), flips)[1] == (
        False, "after try 2: try 3 found a bad shard at its start" + timeline.replace(
            "try 2 1.500-2.500 rc 1;", "try 2 1.500-2.500 rc 1, repaired ['b'];"))


def test_a_flip_across_a_tries_end_is_not_judged_either_way():
    # Stamped before try 2 ended, written after: it may have landed after the repair checked the shard.
    from hpcbench.experiments.fault_tolerance.worker import repair_checks

    tries = [(0.0, 1.0, 1), (1.5, 2.5, 1), (3.0, 4.0, 0)]
    across = [_flip(0.5, "a"), _flip(2.499, "b", done=2.6)]
    (first, second) = repair_checks(_run(tries, {1: {"a"}}), across)
    assert first == (True, "") and second[0] is None and "['b'] flipped across the try's end" in second[1]
    # the same flip, listed by the repair anyway: judged, and repaired
    assert repair_checks(_run(tries, {1: {"a"}, 2: {"b"}}), across)[1] == (True, "")
    # a flip written well inside the try: an unlisted shard is a real failure, quoting what the wrapper said
    inside = [_flip(0.5, "a"), _flip(2.0, "b", done=2.1)]
    timeline = (" [timeline: try 1 0.000-1.000 rc 1, repaired ['a']; try 2 1.500-2.500 rc 1; try 3 3.000-4.000 rc 0; "
                "corrupt a at 0.500-0.501; corrupt b at 2.000-2.100]")
    assert repair_checks(_run(tries, {1: {"a"}}), inside)[1] == (False, "after try 2: ['b'] not repaired" + timeline)
    said = {2: ["after attempt 2: node states n1=idle", "repair step exited 1; trying again anyway"]}
    assert repair_checks(_run(tries, {1: {"a"}}, said=said), inside)[1] == (
        False, "after try 2: ['b'] not repaired (the wrapper said: after attempt 2: node states n1=idle | "
               "repair step exited 1; trying again anyway)" + timeline)


def test_the_affordable_save_costs_exactly_the_bound():
    """C11's bound as a save time: at 600 s, 1 % of the wall time is a save of 600 / 99 s (6.06 s)."""
    longest = affordable_save_s(600.0)
    assert longest == pytest.approx(600 / 99)
    assert 100 * longest / (600 + longest) == pytest.approx(1.0)
    assert 100 * (longest * 1.01) / (600 + longest * 1.01) > 1.0
