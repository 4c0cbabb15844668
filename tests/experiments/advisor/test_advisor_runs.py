"""The advisor experiment run for real, at tiny sizes on 4 gloo ranks (2 nodes x 2):

* its toy run through the CLI (`hpcbench run advisor --toy`, shared with tests/test_defaults.py): emulated
  nodes on one loopback, so the phases run unshaped, recorded with why; the advisor still fits the loopback
  from the baseline's probe and picks;
* its notebook in a SLURM job on the emulated cluster, one launch per link phase (the slow link; then the
  latency and compute regimes, both on the cluster's 1 Gbit/s), the links reshaped for each phase and put
  back (checked in the records, in cluster.json and in tc's own report);
* the estimate and the presenter.

Its rule is tested from recorded records in tests/experiments/advisor/test_advisor_rules.py; the advisor in tests/test_advise.py.
"""

from __future__ import annotations

import json

import nbformat
import pytest
from cluster_fixtures import require_cluster_prerequisites, run_task_on_cluster

from hpcbench.experiments import EXPERIMENTS
from hpcbench.experiments.advisor.config import REGIME_NAMES, TECHNIQUES, AdvisorConfig
from hpcbench.experiments.advisor.summary import summarize, verify_records

#: Seconds per phase kept small: the experiment's toy size (1 warm-up + 2 timed steps, one layout repeat, a 3-size
#: probe of 1 iteration whose largest size is beyond the token bucket's 128 KiB burst: smaller messages pass a tbf
#: at line rate).
TINY = dict(EXPERIMENTS.get("advisor").toy)
#: On the cluster the slow phase at 50 Mbit/s (weather_tiny's 1.5 MB then take ~0.4 s per ring all-reduce).
SLOW = "50mbit"


def labels(df, metric):
    rows = df[df["metric"] == metric]
    return [(json.loads(t), v, x) for t, v, x in zip(rows["labels"], rows["value"], rows["text"])]


@pytest.fixture(scope="module")
def local_run(toy_runs):
    """The session's `hpcbench run advisor --toy` (tests/toy_runs.py: one machine, no SLURM_CONF, so the
    unshaped path; test_defaults reads it too)."""
    run = toy_runs.get("advisor")
    run.check_size(TINY)
    return run.records(), run.notebook


def test_local_notebook_runs_every_regime_and_technique_unshaped(local_run):
    df, _ = local_run
    s = summarize(df)
    assert list(dict.fromkeys(s["regime"])) == list(REGIME_NAMES)
    assert set(s["technique"]) == {"baseline", *TECHNIQUES} and (s["steps"] == TINY["steps"]).all()
    assert s["ok"].all() and (s["sample_p50_ms"] > 0).all()
    # the no_sync step trains 4 micro-batches: its time per sample is its step / (4 x batch)
    ns = s[(s["regime"] == "compute") & (s["technique"] == "no_sync")].iloc[0]
    assert ns["sample_p50_ms"] == pytest.approx(ns["step_p50_ms"] / (4 * TINY["compute_batch_size"]), rel=0.3)
    # no cluster: every phase says it ran unshaped and why; no rate is claimed for it
    shaped = labels(df, "link_shaped")
    assert [lab["regime"] for lab, _, _ in shaped] == list(REGIME_NAMES)
    assert all(v == 0.0 and "no emulated cluster" in text for _, v, text in shaped)
    assert df[df["metric"] == "link_rate_bps"]["value"].isna().all()
    # the advisor picked in every regime from the baseline's probe, fitted on the loopback
    assert s["pick"].isin(TECHNIQUES).all() and s["link_fit"].eq("fitted").all()
    assert verify_records(df, AdvisorConfig.from_dict(TINY)).ok


def test_local_notebook_shows_the_advice_table_plot_and_an_inconclusive_verdict(local_run):
    _, notebook = local_run
    nb = nbformat.read(notebook, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    assert text.count("  regime: ") == 3 and "byte term (beta x bytes)" in text and "predicted gain" in text
    assert "PASS" in text and "C14: inconclusive" in text and "loopback" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)


@pytest.fixture(scope="module")
def cluster_run(emulated_cluster, tmp_path_factory):
    require_cluster_prerequisites()
    run_dir = tmp_path_factory.mktemp("advisor") / "run"
    _, df = run_task_on_cluster(emulated_cluster, run_dir, "advisor", {**TINY, "bandwidth_link_rate": SLOW})
    return df, run_dir, emulated_cluster


def test_cluster_phases_reshape_the_link_and_put_it_back(cluster_run):
    from hpcbench.cluster import load_cluster, network
    from hpcbench.cluster.network import parse_rate

    df, _, cluster = cluster_run
    assert {"n1", "n2"} <= set(df["node"])
    wanted = {"bandwidth": SLOW, "latency": "1gbit", "compute": "1gbit"}
    rates = {lab["regime"]: v for lab, v, _ in labels(df, "link_rate_bps")}
    assert rates == {r: parse_rate(rate) for r, rate in wanted.items()}
    assert all(v == 1.0 for _, v, _ in labels(df, "link_shaped"))
    restored = labels(df, "link_restored")
    assert [lab["regime"] for lab, _, _ in restored] == list(REGIME_NAMES)
    assert all(v == 1.0 and "back at 1 Gbit/s" in text for _, v, text in restored)
    # after the run: cluster.json and both ends of every link at the cluster's own rate again
    assert load_cluster(cluster.state_dir).spec.link_rate == cluster.spec.link_rate == 1e9
    for node in cluster.nodes:
        ends = network.read_qdiscs(node.veth_host) + network.read_qdiscs(node.veth_node,
                                                                          netns=network.netns_path(node.netns))
        assert [q.rate_bps for q in ends if q.rate_bps is not None] == [parse_rate("1gbit")] * 2, ends
    # and the slow phase really ran slow: its probe's largest world all-reduce could not have crossed a 50 Mbit/s
    # link faster than its bytes allow (a ring sends ~1.5x the buffer each way between 2 nodes of 2 ranks; the
    # bound takes 1x), and it took clearly longer than at 1 Gbit/s. Not 5x: the toy probe times one all-reduce,
    # and at 1 Gbit/s that one is CPU-bound on 2 busy cores (38 ms for 4 ms of bytes in a make test of
    # 2026-12-03, against 133 ms at 50 Mbit/s).
    probe = {(lab["regime"], lab["group"], lab["size_bytes"]): v for lab, v, _ in labels(df, "time")}
    big = max(size for _, _, size in probe)
    slow = probe[("bandwidth", "world", big)]
    assert slow >= big * 8 / parse_rate(SLOW), (slow, big)
    assert slow > 2 * probe[("latency", "world", big)], probe


def test_cluster_run_gives_every_regime_a_pick(cluster_run):
    df, run_dir, _ = cluster_run
    s = summarize(df)
    assert list(dict.fromkeys(s["regime"])) == list(REGIME_NAMES)
    assert s["pick"].isin(TECHNIQUES).all() and s["shaped"].eq(True).all()
    assert verify_records(df, AdvisorConfig.from_dict({**TINY, "bandwidth_link_rate": SLOW})).ok
    bandwidth = s[s["regime"] == "bandwidth"].iloc[0]
    assert bandwidth["advisor_regime"] == "bandwidth_bound", bandwidth["advice_reason"]
    # one launch per link phase: consecutive regimes on the same rate share one
    logs = {p.name for p in (run_dir / "tasks").glob("*/logs/advisor-*.log")}
    assert logs == {"advisor-bandwidth.log", "advisor-latency-compute.log"}


def test_presenter_renders_a_run(local_run):
    from hpcbench.core.results import expand_labels
    from hpcbench.experiments import EXPERIMENTS
    from hpcbench.judge.evidence import summarize_launches
    from hpcbench.present.kit import ExperimentData
    from hpcbench.report.aggregate import series_stats

    df = local_run[0].assign(source="run")
    stats = expand_labels(series_stats(df[df["value"].notna()]))
    text = expand_labels(df[df["value"].isna() & df["text"].notna()])
    summaries = summarize_launches(df, summarize, "advisor").assign(source="run")
    (section,) = EXPERIMENTS.get("advisor").present(ExperimentData("advisor", ["run"], stats, text, None, summaries))
    table = next(t for t in section.tables if t.id == "advisor-gains")
    assert [r[2].text for r in table.rows] == [r for r in REGIME_NAMES for _ in range(4)]
    assert section.figures and section.figures[0].data


def test_estimate_grows_with_steps_and_a_slower_link():
    from hpcbench.experiments import EXPERIMENTS

    spec = EXPERIMENTS.get("advisor")
    est = lambda **p: spec.estimate(AdvisorConfig.from_dict(p))  # noqa: E731
    default = est()
    assert default.ranks == 4 and default.seconds and "probe" in default.basis
    assert est(steps=40).seconds > default.seconds
    assert est(bandwidth_link_rate="5mbit").seconds > default.seconds
    assert est(regimes=["latency"]).seconds < default.seconds
    assert est(compute_batch_size=256).memory_per_rank > default.memory_per_rank
