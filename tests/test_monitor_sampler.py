"""The sampler process, thresholds and alerts.

The process test runs the real sampler at 0.2 s intervals on this machine (CPU, TCP, disks,
a read feed) for about two seconds: it must start, write rows on the tick grid, record
the sources this VM lacks as absent with their reasons, and stop cleanly on SIGTERM.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest

from hpcbench.core.errors import ConfigError, RegistryError
from hpcbench.core.results import RecordContext, RecordWriter, read_records
from hpcbench.monitor import ReadLatencyFeed, Sampler
from hpcbench.monitor.sampler import ABSENT_SOURCE_METRIC, absent_reasons, run
from hpcbench.monitor.sources.infiniband import InfinibandSource
from hpcbench.monitor.thresholds import (C6_THRESHOLDS, ALERT_CACHE_HIT_MIN, ALERT_IB_RETRANS_MAX,
                                         ALERT_SM_EFFICIENCY_MIN, ALERT_STORAGE_P99_MAX_S, Threshold,
                                         alert_records, evaluate, load_thresholds)

FIX = Path(__file__).parent / "fixtures" / "monitor"


def labels_of(frame: pd.DataFrame) -> list[dict]:
    return [json.loads(s) for s in frame["labels"]]


def wait_for_file(path: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} not written within {timeout} s"
        time.sleep(0.05)


def test_sampler_process_writes_rows_and_stops_cleanly(tmp_path):
    feed = ReadLatencyFeed(tmp_path / "reads.feed")
    out = tmp_path / "monitor.parquet"
    ctx = RecordContext(run_id="r1", experiment="monitoring", node="node-a")
    sampler = Sampler(out, interval_s=0.2, sources=["cpu", "tcp", "storage", "nvml", "infiniband", "perf_cache"],
                      labels={"fault": "none"}, feed=feed, context=ctx, flush_every_s=0.5)
    with sampler:
        assert sampler._wait_ready(30) and sampler.running
        wait_for_file(out)    # the first tick is flushed at once: it has started sampling
        for i in range(40):
            feed.record_read(0.001 * (i + 1))
            time.sleep(0.04)
        time.sleep(0.3)
    assert not sampler.running
    frame = read_records(out)
    assert set(frame["run_id"]) == {"r1"} and set(frame["node"]) == {"node-a"}
    assert all(lab.get("fault") == "none" for lab in labels_of(frame))

    cpu = frame[frame["metric"] == "cpu_utilization"].sort_values("step")
    assert len(cpu) >= 5
    assert cpu["step"].is_monotonic_increasing and cpu["value"].between(0, 1).all()
    gaps = cpu["time"].diff().dt.total_seconds().dropna()
    assert 0.15 <= gaps.median() <= 0.3, gaps.tolist()        # the 0.2 s grid
    p99 = frame[frame["metric"] == "storage_read_p99"]
    assert len(p99) >= 1 and (p99["value"] <= 0.040 + 1e-9).all()
    assert frame[frame["metric"] == "storage_read_count"]["value"].sum() == 40
    assert "tcp_out_segs_per_s" in set(frame["metric"])

    absent = frame[frame["metric"] == ABSENT_SOURCE_METRIC]
    reasons = {lab["source"]: text for lab, text in zip(labels_of(absent), absent["text"])}
    assert set(reasons) >= {"nvml", "infiniband"}          # this VM
    assert reasons["nvml"] in ("no NVIDIA driver: libnvidia-ml.so.1 not found",
                               "nvidia-ml-py is not installed (pip install nvidia-ml-py)")
    assert absent["value"].isna().all()
    missing = absent_reasons(frame)
    assert missing["sm_activity"].startswith(reasons["nvml"])
    assert "cpu_cache_hit_rate" in missing or "cpu_cache_hit_rate" in set(frame["metric"])
    assert not frame[frame["metric"] == "gpu_utilization"]["value"].notna().any()   # never a made-up number


def test_sampler_ends_with_its_parent(tmp_path):
    out = tmp_path / "m.parquet"
    sampler = Sampler(out, interval_s=0.2, sources=["cpu"]).start(wait_ready=True)
    wait_for_file(out)
    sampler._proc.stdin.close()          # what the parent's death does to the pipe
    assert sampler._proc.wait(timeout=20) == 0
    assert (read_records(out)["metric"] == "monitor_sample_duration").any()


def test_sampler_rejects_bad_arguments(tmp_path):
    with pytest.raises(RegistryError, match="registered: cpu"):
        Sampler(tmp_path / "m.parquet", sources=["gpu"])
    with pytest.raises(ConfigError, match="interval_s"):
        Sampler(tmp_path / "m.parquet", interval_s=0)


def test_run_in_process_records_absent_sources(tmp_path):
    # 50 ms between ticks: /proc/stat counts in 10 ms jiffies, and two reads within one jiffy have no time between
    # them to share out (the source then records nothing rather than a made-up share; at 10 ms, once in make test).
    path = run(tmp_path / "m.parquet", interval_s=0.05, sources=["cpu", "nvml"], max_ticks=3)
    frame = read_records(path)
    assert sorted(set(frame[frame["metric"] == "monitor_sample_duration"]["step"])) == [0, 1, 2]
    assert (frame["metric"] == "cpu_utilization").sum() == 2     # the first tick primes the rate


# -- thresholds ------------------------------------------------------------------------------------
def series(metric: str, values: list[float], *, labels: dict | None = None, node: str = "n1") -> pd.DataFrame:
    t0 = pd.Timestamp("2025-01-01", tz="UTC")
    return pd.DataFrame({"metric": metric, "value": values, "node": node,
                         "labels": json.dumps(labels or {}, sort_keys=True),
                         "time": [t0 + pd.Timedelta(seconds=i) for i in range(len(values))],
                         "step": range(len(values))})


def test_c6_thresholds_come_from_the_guide_figures():
    got = {t.metric: (t.op, t.value, t.unit) for t in C6_THRESHOLDS}
    assert got == {"sm_activity": (">", ALERT_SM_EFFICIENCY_MIN, "fraction"),
                   "ib_retransmission_rate": ("<", ALERT_IB_RETRANS_MAX, "fraction"),
                   "storage_read_p99": ("<", ALERT_STORAGE_P99_MAX_S, "s"),
                   "cpu_cache_hit_rate": (">", ALERT_CACHE_HIT_MIN, "fraction"),
                   "tcp_retransmission_rate": ("<", ALERT_IB_RETRANS_MAX, "fraction")}
    assert (ALERT_SM_EFFICIENCY_MIN, ALERT_IB_RETRANS_MAX, ALERT_STORAGE_P99_MAX_S,
            ALERT_CACHE_HIT_MIN) == (0.80, 0.001, 0.050, 0.90)


def test_sustained_breach_fires_and_short_one_does_not():
    frame = pd.concat([
        series("sm_activity", [0.9, 0.5, 0.4, 0.45, 0.9, 0.3, 0.2, 0.9], labels={"gpu": "0"}),   # runs of 3, 2
        series("sm_activity", [0.95] * 8, labels={"gpu": "1"}),
        series("storage_read_p99", [0.01, math.nan, 0.2, 0.3, 0.25, 0.01]),                     # NaN skipped
        series("gpu_utilization", [0.0] * 8),                                                   # no threshold
    ])
    alerts = evaluate(frame, C6_THRESHOLDS, sustain=3)
    assert [(a.metric, a.labels, a.observed, a.samples) for a in alerts] == [
        ("sm_activity", {"node": "n1", "gpu": "0"}, 0.4, 3),
        ("storage_read_p99", {"node": "n1"}, 0.3, 3),
    ]
    assert alerts[0].first_time == pd.Timestamp("2025-01-01 00:00:01", tz="UTC")
    assert alerts[0].last_time == pd.Timestamp("2025-01-01 00:00:03", tz="UTC")
    assert len(evaluate(frame, C6_THRESHOLDS, sustain=2)) == 3
    assert evaluate(frame, C6_THRESHOLDS, sustain=4) == []
    with pytest.raises(ConfigError, match="sustain"):
        evaluate(frame, C6_THRESHOLDS, sustain=0)


def test_ib_fixture_breaches_the_guide_rate(tmp_path):
    root = tmp_path / "ib"
    shutil.copytree(FIX / "ib_sysfs" / "t0", root)
    times = iter([0.0, 2.0])
    src = InfinibandSource(root=root, clock=lambda: next(times))
    src.sample()
    shutil.copytree(FIX / "ib_sysfs" / "t1", root, dirs_exist_ok=True)
    rows = [{"metric": s.metric, "value": s.value, "labels": json.dumps(s.labels), "step": 0} for s in src.sample()]
    (alert,) = evaluate(pd.DataFrame(rows), C6_THRESHOLDS, sustain=1)
    assert alert.metric == "ib_retransmission_rate" and alert.observed == pytest.approx(0.0011)


def test_alert_records_are_written_in_the_results_schema(tmp_path):
    alerts = evaluate(series("tcp_retransmission_rate", [0.01, 0.02, 0.03]), C6_THRESHOLDS, sustain=3)
    with RecordWriter(tmp_path / "alerts.parquet", RecordContext(experiment="monitoring")) as writer:
        for row in alert_records(alerts):
            writer.add(**row)
    frame = read_records(tmp_path / "alerts.parquet")
    assert list(frame["metric"]) == ["monitor_alert"] and frame["value"][0] == pytest.approx(0.03)
    lab = labels_of(frame)[0]
    assert lab["alert_metric"] == "tcp_retransmission_rate" and lab["threshold"] == "0.001" and lab["samples"] == "3"
    assert "tcp_retransmission_rate = 0.03 fraction breaks tcp_retransmission_rate < 0.001" in frame["text"][0]
    assert frame["time"][0] == pd.Timestamp("2025-01-01", tz="UTC")


def test_load_thresholds_overrides(tmp_path):
    got = {t.metric: t for t in load_thresholds({"sm_activity": {"op": ">=", "value": 0.7},
                                                 "gpu_utilization": "< 0.5", "cpu_cache_hit_rate": None})}
    assert (got["sm_activity"].op, got["sm_activity"].value) == (">=", 0.7)
    assert got["sm_activity"].source == "override (thresholds)"
    assert got["gpu_utilization"] == Threshold("gpu_utilization", "<", 0.5, "fraction", "override (thresholds)")
    assert "cpu_cache_hit_rate" not in got and "storage_read_p99" in got
    path = tmp_path / "t.yaml"
    path.write_text("storage_read_p99: {value: 0.1}\n")
    (p99,) = [t for t in load_thresholds(path) if t.metric == "storage_read_p99"]
    assert (p99.op, p99.value, p99.source) == ("<", 0.1, f"override ({path})")
    assert load_thresholds(None) == list(C6_THRESHOLDS)


@pytest.mark.parametrize("spec, message", [
    ({"sm_activty": {"op": ">", "value": 0.8}}, "sm_activty: unknown metric.*did you mean 'sm_activity'"),
    ({"sm_activity": {"op": "=>", "value": 0.8}}, r"sm_activity\.op: op must be one of"),
    ({"sm_activity": {"op": ">", "value": "high"}}, r"sm_activity\.value: value must be a number"),
    ({"sm_activity": {"op": ">", "valu": 0.8}}, r"sm_activity: unknown fields \['valu'\]"),
    ({"sm_activity": {"value": 0.8, "unit": "%"}}, r"sm_activity\.unit"),
    ({"sm_activity": "> 0.8 please"}, "expected 'op value'"),
])
def test_load_thresholds_errors_name_the_key(spec, message):
    with pytest.raises(ConfigError, match=message):
        load_thresholds(spec)


def test_load_thresholds_file_errors(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("- sm_activity\n")
    with pytest.raises(ConfigError, match=f"{path}: must be a mapping"):
        load_thresholds(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_thresholds(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="metric"):
        Threshold("nope", ">", 1.0, "", "test")


def test_guide_name_sm_efficiency_is_an_alias():
    (sm,) = [t for t in load_thresholds({"sm_efficiency": "> 0.75"}) if t.metric == "sm_activity"]
    assert sm.value == 0.75
