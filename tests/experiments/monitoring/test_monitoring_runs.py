"""The monitoring experiment run for real: its notebook under papermill in a SLURM job on the emulated cluster
(2 nodes x 1 gloo rank), every fault applied for real on n2 at a short phase, the estimate and the presenter.

Its rule is tested from recorded records in tests/experiments/monitoring/test_monitoring_rules.py; the faults themselves in
tests/test_node_faults.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from cluster_fixtures import require_cluster_prerequisites, run_task_on_cluster

from hpcbench.cluster import network
from hpcbench.core.tc import parse_rate
from hpcbench.fault.inject.storage import BLKIO_ROOT, CGROUP_PREFIX
from hpcbench.experiments.monitoring.config import FAULTS, MonitoringConfig
from hpcbench.experiments.monitoring.summary import summarize, verify_records

#: Every fault, 4 s each at 2 Hz: ~8 samples per phase, enough for a 3-sample alert; ~100 s in all.
# 4 busy processes per CPU in cpu_contention (2 by default): make test runs this beside the other lane's
# tests, whose load the baseline phase may share and the faulty one not; with 2 per CPU the contended rank
# was once only 1.08x slower than its baseline there (2.2-3.2x for the other faults).
SHORT = dict(phase_s=4.0, interval_s=0.5, min_steps=4, warmup_steps=1, contention_per_cpu=4)


@pytest.fixture(scope="module")
def cluster_run(emulated_cluster, tmp_path_factory):
    require_cluster_prerequisites()
    run_dir = tmp_path_factory.mktemp("monitoring") / "run"
    _, df = run_task_on_cluster(emulated_cluster, run_dir, "monitoring", SHORT)
    return df, run_dir, emulated_cluster


def test_every_fault_is_applied_on_n2_and_undone(cluster_run):
    df, _, cluster = cluster_run
    assert set(df["node"]) == {"n1", "n2"}
    s = summarize(df).set_index("fault")
    assert list(s.index) == list(FAULTS)
    assert all(s.loc[f, "injected"] == True for f in FAULTS if f != "none")  # noqa: E712
    logs = "\n".join(df[df["metric"] == "fault_injected"]["text"].dropna())
    assert logs.count("on n2: undone") == 4 and "blkio.throttle.read_bps_device" in logs and "pinned to CPU" in logs
    # nothing left behind: both ends of n2's link back at the cluster's rate, no throttle cgroup
    n2 = cluster.node("n2")
    ends = network.read_qdiscs(n2.veth_host) + network.read_qdiscs(n2.veth_node, netns=network.netns_path(n2.netns))
    assert [q.rate_bps for q in ends if q.rate_bps is not None] == [parse_rate("1gbit")] * 2, ends
    assert not list(BLKIO_ROOT.glob(f"{CGROUP_PREFIX}-*"))
    assert verify_records(df, MonitoringConfig.from_dict(SHORT)).ok


def test_the_c6_metrics_catch_the_faults_they_can_see(cluster_run):
    df, _, _ = cluster_run
    s = summarize(df).set_index("fault")
    # the short queue drops segments: the node's own counters and the sampler's rate both show it
    dropped = df[df["metric"] == "fault_tcp_retransmitted"]
    lossy = [json.loads(lab)["fault"] == "lossy_link" for lab in dropped["labels"]]
    assert dropped[lossy]["value"].iloc[0] > 0.001
    assert "tcp_retransmission_rate" in s.loc["lossy_link", "alerts"]
    # throttled reads: the loader's P99 breaks 50 ms, on n2
    assert "storage_read_p99" in s.loc["slow_storage", "alerts"] and s.loc["slow_storage", "read_p99_ms"] > 50
    alerts = df[(df["metric"] == "monitor_alert")]
    assert any(json.loads(lab).get("node") == "n2" and json.loads(lab)["alert_metric"] == "storage_read_p99"
               for lab in alerts["labels"])
    # the baseline raised none, and what this machine lacks is absent, never a number
    assert s.loc["none", "alerts"] == ()
    absent = " ".join(s.loc["none", "c6_absent"])
    assert "sm_activity" in absent and "ib_retransmission_rate" in absent
    assert s["util_metric"].eq("rank_cpu_utilization").all() and s["utilisation"].notna().all()
    assert (s.drop(index="none")["slowdown"] > 1.2).all()


def test_notebook_shows_table_plot_findings_and_an_inconclusive_verdict(cluster_run):
    _, run_dir, _ = cluster_run
    (path,) = list((run_dir / "tasks").glob("*/notebook.ipynb"))
    nb = nbformat.read(path, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    assert "C6: inconclusive" in text and "n = 1 launches" in text and "PASS" in text
    assert "lossy_link: step p50" in text and "caught by tcp_retransmission_rate" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert any("utilisation" in o.get("data", {}).get("text/html", "") for o in outputs)


def test_presenter_renders_the_run(cluster_run):
    from hpcbench.core.results import expand_labels
    from hpcbench.experiments import EXPERIMENTS
    from hpcbench.judge.evidence import summarize_launches
    from hpcbench.present.kit import ExperimentData
    from hpcbench.report.aggregate import series_stats

    df = cluster_run[0].assign(source="run")
    stats = expand_labels(series_stats(df[df["value"].notna()]))
    text = expand_labels(df[df["value"].isna() & df["text"].notna()])
    summaries = summarize_launches(df, summarize, "monitoring").assign(source="run")
    sections = EXPERIMENTS.get("monitoring").present(ExperimentData("monitoring", ["run"], stats, text, None,
                                                                    summaries))
    table = next(t for t in sections[0].tables if t.id == "monitoring-faults")
    assert [r[2].text for r in table.rows] == list(FAULTS)
    assert sections[0].figures and sections[0].figures[0].data


def test_estimate_grows_with_phases_and_model():
    from hpcbench.experiments import EXPERIMENTS

    spec = EXPERIMENTS.get("monitoring")
    est = lambda **p: spec.estimate(MonitoringConfig.from_dict(p))  # noqa: E731
    default = est()
    assert default.ranks == 2 and default.seconds and "sampler" in default.basis
    assert est(phase_s=60.0).seconds > default.seconds
    assert est(faults=["none"]).seconds < default.seconds
    assert est(model="weather_small").memory_per_rank > default.memory_per_rank


def test_notebook_parameters_match_the_config():
    params = nbformat.read(Path(__file__).resolve().parents[3] / "notebooks" / "07_monitoring.ipynb", as_version=4)
    cell = next(c for c in params.cells if "parameters" in c.metadata.get("tags", []))
    for name in MonitoringConfig.field_names():
        assert f"\n{name} = {getattr(MonitoringConfig(), name)!r}" in cell.source
