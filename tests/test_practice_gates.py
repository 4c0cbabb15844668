"""The gate before scaling out (C12, hpcbench.practice.gates) on synthetic records: each check passes, fails or is
absent with its reason; the communication share's sources in their order; the labels filter; no-op series."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from hpcbench.core.errors import ConfigError, RegistryError
from hpcbench.core.results import RecordContext, RecordWriter, read_records
from hpcbench.practice.gates import (GATE_THRESHOLDS, GATE_COMM_SHARE_MAX, GATE_READ_P99_MAX_S,
                                     GATE_STEP_TIME_CV_MAX, GateThreshold, evaluate_gate, gate_thresholds,
                                     is_noop_labels, task_gates)


def row(metric, value, step=0, rank=0, unit="s", task="t", **labels):
    return {"metric": metric, "value": value, "unit": unit, "step": step, "rank": rank, "task_id": task,
            "run_id": "r", "repetition": 0, "experiment": "x", "variant": "default",
            "labels": json.dumps(labels, sort_keys=True)}


def steps(times, rank=0, metric="step_time", task="t", **labels):
    return [row(metric, t, step=i, rank=rank, task=task, **labels) for i, t in enumerate(times)]


def frame(*parts):
    return pd.DataFrame([r for p in parts for r in p])


#: 10 steps with a sample std / mean of ~1 % and ~20 %.
STEADY = [0.100, 0.101, 0.099, 0.100, 0.102, 0.098, 0.100, 0.101, 0.099, 0.100]
JUMPY = [0.1, 0.14, 0.1, 0.07, 0.1, 0.14, 0.1, 0.07, 0.1, 0.13]


def test_thresholds_are_the_guides_figures_as_data():
    assert [(t.name, t.limit, t.unit) for t in GATE_THRESHOLDS] == [
        ("step_time_cv", GATE_STEP_TIME_CV_MAX, ""), ("comm_share", GATE_COMM_SHARE_MAX, ""),
        ("read_p99", GATE_READ_P99_MAX_S, "s")]
    assert (GATE_STEP_TIME_CV_MAX, GATE_COMM_SHARE_MAX, GATE_READ_P99_MAX_S) == (0.05, 0.30, 0.100)
    assert all("C12" in t.source for t in GATE_THRESHOLDS)


def test_step_time_cv_passes_fails_and_is_absent():
    ok = evaluate_gate(frame(steps(STEADY))).check("step_time_cv")
    assert ok.passed is True and ok.value == pytest.approx(pd.Series(STEADY).std() / pd.Series(STEADY).mean())
    bad = evaluate_gate(frame(steps(JUMPY))).check("step_time_cv")
    assert bad.passed is False and bad.value > 0.05
    absent = evaluate_gate(frame(steps([0.1]))).check("step_time_cv")  # one step: no spread to measure
    assert absent.passed is None and absent.value is None and "fewer than 2 steps" in absent.detail
    none = evaluate_gate(frame([row("throughput", 5.0, unit="samples/s")])).check("step_time_cv")
    assert none.passed is None and "no step_time rows" in none.detail


def test_step_time_cv_is_the_worst_series_of_the_median_rank():
    # series a: both ranks steady; series b: one jumpy rank of three -> the median rank is steady
    records = frame(steps(STEADY, rank=0, s="a"), steps(STEADY, rank=1, s="a"),
                    steps(STEADY, rank=0, s="b"), steps(STEADY, rank=1, s="b"), steps(JUMPY, rank=2, s="b"))
    assert evaluate_gate(records).check("step_time_cv").passed is True
    # two of three ranks jumpy in series b: the median rank is, and the worst series decides
    records = frame(steps(STEADY, rank=0, s="a"), steps(JUMPY, rank=1, s="b"), steps(JUMPY, rank=2, s="b"),
                    steps(STEADY, rank=0, s="b"))
    check = evaluate_gate(records).check("step_time_cv")
    assert check.passed is False and "worst of 2 series" in check.detail and '"s": "b"' in check.detail


def test_noop_series_are_never_judged_as_step_times():
    records = frame(steps(STEADY, comm="mode"), steps(JUMPY, comm="noop"), steps(JUMPY, compression="noop"),
                    steps(JUMPY, stage="ddp/noop"))
    check = evaluate_gate(records).check("step_time_cv")
    assert check.passed is True and "worst of" not in check.detail
    assert is_noop_labels({"comm": "noop"}) == "comm" and is_noop_labels({"stage": "a/noop"}) == "stage"
    assert is_noop_labels({"comm": "mode", "n": 1}) is None


def test_comm_share_from_comm_time_rows():
    records = frame(steps([0.1] * 10, comm="mode", m="x"), steps([0.04] * 10, metric="comm_time", m="x"))
    check = evaluate_gate(records).check("comm_share")
    assert check.passed is False and check.value == pytest.approx(0.4) and check.detail.startswith("comm_time")
    # labels equal on both rows (gradient_compression's way) pair too
    records = frame(steps([0.1] * 10, compression="fp16"), steps([0.02] * 10, metric="comm_time", compression="fp16"))
    assert evaluate_gate(records).check("comm_share").value == pytest.approx(0.2)


def test_comm_share_from_noop_twins_when_no_comm_time():
    records = frame(steps([0.1] * 10, comm="mode", m="x"), steps([0.08] * 10, comm="noop", m="x"))
    check = evaluate_gate(records).check("comm_share")
    assert check.passed is True and check.value == pytest.approx(0.2) and "no-op twin" in check.detail
    # one no-op twin shared by several series (compression="noop"); the worst series decides
    records = frame(steps([0.1] * 10, compression="noop"), steps([0.2] * 10, compression="none"),
                    steps([0.125] * 10, compression="fp16"))
    check = evaluate_gate(records).check("comm_share")
    assert check.value == pytest.approx(0.5) and '"compression": "none"' in check.detail


def test_comm_share_precedence_comm_time_first_then_twins_then_comm_share_rows():
    twins = [*steps([0.1] * 10, comm="mode"), *steps([0.09] * 10, comm="noop")]   # says 0.1
    comm = steps([0.05] * 10, metric="comm_time")                                   # says 0.5
    shares = [row("comm_share", 0.7, step=i, unit="fraction") for i in range(10)]   # says 0.7
    assert evaluate_gate(frame(twins, comm, shares)).check("comm_share").value == pytest.approx(0.5)
    assert evaluate_gate(frame(twins, shares)).check("comm_share").value == pytest.approx(0.1)
    only = evaluate_gate(frame(steps([0.1] * 10), shares)).check("comm_share")
    assert only.value == pytest.approx(0.7) and only.detail.startswith("comm_share rows")
    absent = evaluate_gate(frame(steps([0.1] * 10))).check("comm_share")
    assert absent.passed is None and "no comm_time rows" in absent.detail


def test_read_p99_pooled_over_ranks_and_series():
    reads = [row("read_time", 0.01, step=i, rank=i % 2, bytes=100 + i) for i in range(99)]
    ok = evaluate_gate(frame(reads)).check("read_p99")
    assert ok.passed is True and ok.value == pytest.approx(0.01) and "99 reads" in ok.detail
    slow = reads + [row("read_time", 0.5, step=i, rank=1, bytes=7) for i in range(3)]
    bad = evaluate_gate(frame(slow)).check("read_p99")
    assert bad.passed is False and bad.value > GATE_READ_P99_MAX_S
    absent = evaluate_gate(frame(steps(STEADY))).check("read_p99")
    assert absent.passed is None and "no read_time rows" in absent.detail
    # a value in another unit is not read as seconds
    assert evaluate_gate(frame([row("read_time", 5.0, unit="ms")])).check("read_p99").passed is None


def test_overall_verdict_failed_names_and_explain():
    good = frame(steps(STEADY, comm="mode"), steps([0.09] * 10, comm="noop"))
    result = evaluate_gate(good)
    assert result.passed is True and result.failed == ()
    assert result.explain().startswith("passes: step_time_cv") and "read_p99 not measured" in result.explain()
    bad = evaluate_gate(frame(steps(JUMPY, comm="mode"), steps([0.02] * 10, comm="noop")))
    assert bad.passed is False and bad.failed == ("step_time_cv", "comm_share")
    assert bad.explain().startswith("fails: step_time_cv") and ">= 0.05" in bad.explain()
    nothing = evaluate_gate(frame([row("throughput", 1.0, unit="x")]))
    assert nothing.passed is None and nothing.explain().startswith("not measured")
    assert evaluate_gate(pd.DataFrame()).passed is None


def test_labels_filter_one_phase():
    records = frame(steps(STEADY, fault="none"), steps(JUMPY, fault="slow_link"),
                    [row("read_time", 0.3, fault="slow_link")], [row("read_time", 0.01, fault="none")])
    assert evaluate_gate(records, labels={"fault": "none"}).passed is True
    phase = evaluate_gate(records, labels={"fault": "slow_link"})
    assert phase.failed == ("step_time_cv", "read_p99")
    assert evaluate_gate(records).failed == ("step_time_cv", "read_p99")  # the whole task: its worst phase
    # label values compare as text: an integer label matches its string
    assert evaluate_gate(frame(steps(STEADY, nodes=2)), labels={"nodes": "2"}).check("step_time_cv").passed is True
    assert evaluate_gate(records, labels={"fault": "other"}).passed is None


def test_overrides_and_custom_thresholds():
    records = frame(steps(JUMPY))
    loose = gate_thresholds({"step_time_cv": 1.0})
    assert evaluate_gate(records, loose).passed is True
    assert [t.limit for t in loose] == [1.0, 0.30, 0.100] and "override" in loose[0].source
    only = evaluate_gate(records, [GateThreshold("read_p99", 0.05, "s", "reads", "test")])
    assert [c.name for c in only.checks] == ["read_p99"]
    with pytest.raises(ConfigError, match="gate_limits.*unknown gate threshold 'jitter'"):
        gate_thresholds({"jitter": 0.1})
    with pytest.raises(ConfigError, match="comm_share"):
        gate_thresholds({"comm_share": math.nan})
    with pytest.raises(RegistryError, match="registered: comm_share, read_p99, step_time_cv"):
        evaluate_gate(records, [GateThreshold("nope", 1.0, "", "", "")])


def test_task_gates_one_row_per_task_that_steps():
    records = frame(steps(STEADY, task="a"), steps(JUMPY, task="b"), [row("read_time", 0.01, task="c")])
    table = task_gates(records)
    assert list(table["task_id"]) == ["a", "b"]  # c does not step: no gate
    assert list(table["gate"]) == [True, False] and list(table["gate_failed"]) == ["", "step_time_cv"]
    assert table.loc[0, "read_p99_passed"] is None and "no read_time rows" in table.loc[0, "read_p99_detail"]
    assert {"experiment", "variant", "repetition", "gate_text"} <= set(table.columns)
    assert task_gates(pd.DataFrame()).empty


def test_the_gate_reads_records_as_the_writer_stores_them(tmp_path):
    """Through a real RecordWriter and read_records: the schema's types (labels JSON, int steps)."""
    writer = RecordWriter(tmp_path / "w-rank00000.parquet", RecordContext(experiment="x", task_id="t"))
    for i, t in enumerate(STEADY):
        writer.add("step_time", t, "s", step=i, labels={"comm": "mode", "nodes": 2})
        writer.add("step_time", t * 0.9, "s", step=i, labels={"comm": "noop", "nodes": 2})
        writer.add("comm_time", t * 0.1, "s", step=i, labels={"nodes": 2})
        writer.add("read_time", 0.002, "s", step=i, labels={"bytes": 4096})
    writer.add("step_time", None, "s", text="not applicable: no such series")  # NaN rows are skipped
    records = read_records(writer.close())
    result = evaluate_gate(records, labels=None)
    assert result.passed is True, result.explain()
    assert result.check("comm_share").value == pytest.approx(0.1)
    assert evaluate_gate(records, labels={"nodes": 2}).check("read_p99").passed is None
