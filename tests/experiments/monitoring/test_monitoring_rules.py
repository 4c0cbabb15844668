"""monitoring from recorded records, without torch: sampler rows in phase windows -> summary -> rule C6.

Every outcome is reachable: reproduced (quiet baseline, hidden faults caught), not reproduced
(a hidden fault missed; a noisy baseline), inconclusive (too few launches; no fault hidden from
utilisation; every C6 metric absent; faults not applied). Absent metrics never count.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from synthetic import SHAPED

from hpcbench.core.results import RecordContext, RecordWriter, read_records
from hpcbench.experiments.monitoring.config import MonitoringConfig
from hpcbench.experiments.monitoring.summary import summarize, verify_records
from hpcbench.judge.verdict import clopper_pearson
from hpcbench.report.ledger import evaluate_claim
from hpcbench.system.facts import write_facts

FAULTS = ["none", "lossy_link", "slow_storage", "cpu_contention"]
PARAMS = {"nodes": 2, "ranks_per_node": 1, "faults": FAULTS, "sustain": 3, "interval_s": 1.0, "min_steps": 10}
PHASE_S, TICKS, STEPS, T0 = 20.0, 15, 12, 1_700_000_000.0
ABSENT = {"sm_activity": "dcgmi not found", "ib_retransmission_rate": "no InfiniBand",
          "cpu_cache_hit_rate": "perf: cache-references <not supported>"}
HEALTHY = {"cpu_utilization": 0.97, "tcp_retransmission_rate": 0.0, "storage_read_p99": 0.004}
#: What each fault does to the sampled metrics by default: lossy and storage are caught, utilisation stays high.
EFFECT = {"none": {}, "lossy_link": {"tcp_retransmission_rate": 0.05}, "slow_storage": {"storage_read_p99": 0.4},
          "cpu_contention": {}}


def write_launch(tmp_path, k: int, effect=EFFECT, *, util=None, absent=ABSENT, injected=True, faults=FAULTS):
    """One launch's records: facts, per phase its window, steps and the injector's record, and each node's samples."""
    path = tmp_path / f"m-r{k}.parquet"
    ctx = RecordContext(run_id="run1", experiment="monitoring", task_id=f"monitoring.r{k}", repetition=k,
                        params={**PARAMS, "faults": faults}, node="n1", world_size=2)
    with RecordWriter(path, ctx) as w:
        write_facts(w, SHAPED)
        w.add("backend", None, "", text="gloo")
        for metric, reason in absent.items():
            w.add(metric, None, "fraction", labels={"node": "n2"}, text=f"not available: {reason}")
        for i, fault in enumerate(faults):
            start = T0 + i * (PHASE_S + 5)
            w.add("phase", PHASE_S, "s", labels={"fault": fault},
                  text=json.dumps({"start": start, "end": start + PHASE_S}), when=start)
            w.add("fault_injected", None if fault == "none" or not injected else 1.0, "bool",
                  labels={"fault": fault, "node": "n2"},
                  text="baseline: no fault" if fault == "none" else ("applied" if injected else "not injected: why"))
            for s in range(STEPS):
                w.add("step_time", 0.3 * (1 if fault == "none" else 2) * (1 + 0.01 * ((s + k) % 3)), "s", step=s,
                      labels={"fault": fault, "node": "n2"})
            values = {**HEALTHY, **effect.get(fault, {})}
            if util is not None:
                values["cpu_utilization"] = util.get(fault, values["cpu_utilization"])
            for tick in range(TICKS):
                when = start + 2 + tick
                for metric, value in values.items():
                    if metric in absent:
                        continue
                    w.add(metric, value, "fraction" if metric != "storage_read_p99" else "s", step=tick,
                          labels={"node": "n2", "source": "x"}, when=when)
            # a sample just outside the window belongs to no phase
            w.add("storage_read_p99", 9.0, "s", labels={"node": "n2", "source": "x"}, when=start + PHASE_S + 3)
    return read_records(path)


def c6(tmp_path, n=8, **kw):
    records = pd.concat([write_launch(tmp_path, k, **kw) for k in range(n)], ignore_index=True)
    return evaluate_claim("C6", records)


def test_summary_assigns_samples_to_phases_and_reads_alerts(tmp_path):
    s = summarize(write_launch(tmp_path, 0)).set_index("fault")
    assert list(s.index) == FAULTS
    assert s.loc["lossy_link", "alerts"] == ("tcp_retransmission_rate",) and s.loc["lossy_link", "caught"]
    assert s.loc["slow_storage", "alerts"] == ("storage_read_p99",)
    assert s.loc["none", "alerts"] == () and not s.loc["none", "caught"]
    assert s.loc["slow_storage", "storage_read_p99_worst"] == pytest.approx(0.4)  # the 9 s sample fell outside
    # cpu_contention's own metrics (SM activity, cache hits) are absent: neither caught nor missed
    assert s.loc["cpu_contention", "caught"] is None and s.loc["cpu_contention", "util_healthy"]
    assert s.loc["lossy_link", "slowdown"] == pytest.approx(2.0, rel=0.02)
    assert any("cpu_cache_hit_rate" in a for a in s.loc["none", "c6_absent"])
    assert s.loc["none", "injected"] is None and s.loc["lossy_link", "injected"] == True  # noqa: E712
    cfg = MonitoringConfig.from_dict({**PARAMS, "min_steps": STEPS})
    assert verify_records(write_launch(tmp_path, 1), cfg).ok


def test_reproduced_when_the_baseline_is_quiet_and_every_hidden_fault_is_caught(tmp_path):
    effect = {**EFFECT, "cpu_contention": {"storage_read_p99": 0.2}}
    row = c6(tmp_path, effect=effect)
    assert row.verdict == "reproduced", row.measured
    assert "lossy_link: detected 8/8, missed 0/8" in row.measured and "baseline" in row.measured


def test_not_reproduced_when_a_fault_utilisation_hid_is_missed(tmp_path):
    row = c6(tmp_path, effect={**EFFECT, "slow_storage": {}})  # reads slow, P99 recorded but never breached
    assert row.verdict == "not reproduced", row.measured
    assert "slow_storage: detected 0/8, missed 8/8" in row.measured


def test_the_ranks_own_utilisation_comes_before_the_hosts(tmp_path):
    """On CPU the host-wide share counts every other process on the shared cores: the ranks' own busy share
    is the plain utilisation (here it shows slow storage, which the host's 97 % hides)."""
    records = write_launch(tmp_path, 0)
    ctx = RecordContext(run_id="run1", experiment="monitoring", task_id="monitoring.r0", params=PARAMS, node="n2",
                        rank=1, world_size=2)
    with RecordWriter(tmp_path / "rank.parquet", ctx) as w:
        for fault in FAULTS:
            w.add("rank_cpu_utilization", 0.3 if fault == "slow_storage" else 0.95, "fraction",
                  labels={"fault": fault, "node": "n2"})
    s = summarize(pd.concat([records, read_records(tmp_path / "rank.parquet")], ignore_index=True))
    s = s.set_index("fault")
    assert set(s["util_metric"]) == {"rank_cpu_utilization"}
    assert s.loc["slow_storage", "utilisation"] == pytest.approx(0.3) and not s.loc["slow_storage", "util_healthy"]
    assert s.loc["lossy_link", "util_healthy"]


def test_an_alert_of_another_metric_does_not_catch_a_fault(tmp_path):
    """A storage alert during cpu_contention is shown, but that fault is judged by its own metrics (absent here)."""
    s = summarize(write_launch(tmp_path, 0, effect={**EFFECT, "cpu_contention": {"storage_read_p99": 0.2}}))
    row = s.set_index("fault").loc["cpu_contention"]
    assert row["alerts"] == ("storage_read_p99",) and row["caught"] is None


def test_not_reproduced_when_the_baseline_raises_false_alarms(tmp_path):
    effect = {**EFFECT, "none": {"storage_read_p99": 0.3}, "cpu_contention": {"storage_read_p99": 0.2}}
    row = c6(tmp_path, effect=effect)
    assert row.verdict == "not reproduced" and "false alarms" in row.measured


def test_inconclusive_with_too_few_launches(tmp_path):
    effect = {**EFFECT, "cpu_contention": {"storage_read_p99": 0.2}}
    row = c6(tmp_path, n=3, effect=effect)
    assert row.verdict == "inconclusive" and "n = 3 launches" in row.measured


def test_faults_utilisation_showed_do_not_test_the_claim(tmp_path):
    low = {f: 0.4 for f in FAULTS if f != "none"}
    row = c6(tmp_path, util=low)
    assert row.verdict == "inconclusive"
    assert "utilisation showed the fault itself" in row.detail and "did not arise" in row.detail


def test_absent_metrics_never_count_as_missed(tmp_path):
    # every C6 metric absent: nothing is caught or missed, whatever the faults did
    absent = {**ABSENT, "tcp_retransmission_rate": "no /proc/net/snmp", "storage_read_p99": "no feed"}
    row = c6(tmp_path, absent=absent)
    assert row.verdict == "inconclusive" and "recorded absent" in row.detail
    assert "missed 8/8" not in row.measured


def test_faults_not_applied_do_not_count(tmp_path):
    row = c6(tmp_path, injected=False)
    assert row.verdict == "inconclusive" and "was not applied in any launch" in row.detail


def test_exact_share_interval_quoted_in_the_rule():
    low, high = clopper_pearson(8, 8)
    assert low == pytest.approx(0.025 ** (1 / 8)) and high == 1.0  # k = n: the bound has a closed form
    assert clopper_pearson(8, 8, 1 - 0.05 / 3)[0] == pytest.approx(0.55, abs=0.005)
    assert clopper_pearson(5, 5, 1 - 0.05 / 3)[0] == pytest.approx(0.38, abs=0.005)
    assert clopper_pearson(0, 8)[0] == 0.0
    assert all(math.isnan(v) for v in clopper_pearson(0, 0))  # no launches: no interval


@pytest.mark.parametrize("values, field, words", [
    ({"faults": ["lossy_link"]}, "faults", "lacks 'none'"),
    ({"faults": ["none", "none"]}, "faults", "repeats"),
    ({"model": "gpt2_tiny"}, "model", "not a weather"),
    ({"slow_link_rate": "fast"}, "slow_link_rate", "not a tc rate"),
    ({"nodes": 1}, "nodes", "between 2"),
])
def test_config_rejects_bad_values(values, field, words):
    from hpcbench.core.errors import ConfigError

    with pytest.raises(ConfigError) as exc:
        MonitoringConfig.from_dict(values)
    assert exc.value.field == field and words in str(exc.value)
