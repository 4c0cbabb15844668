"""The rule kit on hand-made evidence: strict groups, one session at a time, disagreement flagged."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from hpcbench.judge.evidence import Evidence
from hpcbench.judge.rulekit import Comparison, judge_comparisons
from hpcbench.judge.verdict import WORK_OVER_TIME_RATES, gain_reference

COMPARISON = Comparison("fast / slow", {"arm": "fast"}, {"arm": "slow"}, gain_reference(1.5, "test"))


def evidence(sessions: dict[str, float], launches: int = 6, spread: float = 0.01) -> Evidence:
    """Launches of each session (run_id -> true ratio), both arms in every launch, 12 steps each."""
    rng = np.random.default_rng(0)
    rows, launch_rows = [], []
    for run_id, ratio in sessions.items():
        for k in range(launches):
            task = f"t.r{k}"
            launch_rows.append({"run_id": run_id, "task_id": task, "experiment": "x", "variant": "v",
                                "repetition": k, "params": json.dumps({"nodes": 2})})
            for arm, level in (("fast", ratio), ("slow", 1.0)):
                rows.append({"run_id": run_id, "task_id": task, "arm": arm,
                             "samples": list(level * (1 + spread * rng.standard_normal(12)))})
    return Evidence("x", pd.DataFrame(rows), pd.DataFrame(launch_rows), pd.DataFrame())


def judge(ev: Evidence):
    return judge_comparisons(ev, [COMPARISON], applies=lambda launch: None, what="Test.")


def test_one_session_is_judged_without_naming_it():
    j = judge(evidence({"run1": 1.6}))
    assert j.verdict == "reproduced" and "session" not in j.measured and "sessions" not in j.detail


def test_two_agreeing_sessions_are_judged_apart_and_both_shown():
    j = judge(evidence({"run1": 1.6, "run2": 1.62}))
    assert j.verdict == "reproduced"
    assert "session run1" in j.measured and "session run2" in j.measured and len(j.outcomes) == 2


def test_sessions_that_reach_different_verdicts_leave_the_claim_inconclusive():
    j = judge(evidence({"run1": 1.6, "run2": 1.1}))
    assert [o.verdict for o in j.outcomes] == ["reproduced", "not reproduced"]
    assert j.verdict == "inconclusive"
    assert "the sessions reach different verdicts" in j.detail and "run1:" in j.detail and "run2:" in j.detail


def test_disjoint_intervals_with_one_verdict_are_flagged_but_keep_it():
    j = judge(evidence({"run1": 1.6, "run2": 2.4}))
    assert j.verdict == "reproduced"
    assert "agree on the verdict but their intervals are disjoint" in j.detail


def test_work_over_time_comparison_counts_the_stalled_step_that_the_median_skips():
    """One step in 12 of the fast arm stalls 5x: its throughput is 12 / (11 / 1.6 + 5 / 1.6) = 1.2, its median 1.6."""
    ev = evidence({"run1": 1.6})
    summaries = ev.summaries.copy()
    fast = summaries["arm"] == "fast"
    summaries.loc[fast, "samples"] = pd.Series([s[:3] + [s[3] / 5] + s[4:] for s in summaries.loc[fast, "samples"]],
                                               index=summaries.index[fast])
    ev = Evidence("x", summaries, ev.launches, pd.DataFrame())
    by_median = judge(ev)
    by_throughput = judge_comparisons(ev, [replace(COMPARISON, estimator=WORK_OVER_TIME_RATES)],
                                      applies=lambda launch: None, what="Test.")
    assert by_median.outcomes[0].interval.estimate == pytest.approx(1.6, rel=0.01)
    assert by_throughput.outcomes[0].interval.estimate == pytest.approx(1.2, rel=0.01)
    # The claimed 1.5x (band from 1.4x) holds for the typical step, not for work over wall time.
    assert (by_median.verdict, by_throughput.verdict) == ("reproduced", "not reproduced")
