"""The scale_model experiment run for real: its notebook under papermill on one machine (one unshaped phase), and a
SLURM job on the emulated cluster at two link rates, the links reshaped per phase and put back afterwards.

Its summary and rule are tested from recorded records in tests/experiments/scale_model/test_scale_model_rules.py (named
apart from the model core's tests/test_scale_model.py: pytest imports test modules by basename).
"""

from __future__ import annotations

import json
import math

import nbformat
import pytest
from cluster_fixtures import SESSION_STATE_DIR, require_cluster_prerequisites, run_task_on_cluster

from hpcbench.cluster import network
from hpcbench.cluster.network import parse_rate
from hpcbench.experiments.scale_model.config import UNSHAPED, ScaleModelConfig
from hpcbench.experiments.scale_model.summary import summarize, verify_records
from hpcbench.experiments.scale_model.worker import NO_CLUSTER

#: Small enough for a few seconds per phase: 4 sizes of 1-64 KiB, 2 iterations, 3 timed steps per mode.
TINY = dict(min_bytes=1024, max_bytes=65536, iters=2, warmup_iters=1, steps=3, warmup_steps=1, codec_repeats=1)


def _outputs(path) -> tuple[str, list]:
    nb = nbformat.read(path, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    text += "".join(o.get("data", {}).get("text/plain", "") for o in outputs)
    return text, outputs


def test_notebook_runs_one_unshaped_phase_without_the_cluster(toy_runs):
    # the session's `hpcbench run scale_model --toy` (tests/toy_runs.py: one machine, no SLURM_CONF, so no
    # cluster to find; test_defaults reads it too)
    run = toy_runs.get("scale_model")
    run.check_size({**TINY, "modes": ["ddp", "quant2bit"]})
    df = run.records()
    s = summarize(df)
    steps = s[s["row"] == "step"]
    assert set(steps["link_rate"]) == {UNSHAPED} and list(steps["mode"]) == ["ddp", "quant2bit"]
    assert (steps["steps"] == 3).all() and steps["predicted_ms"].map(math.isfinite).all()
    assert steps["compute_ms"].gt(0).all() and steps.set_index("mode").loc["quant2bit", "codec_ms"] > 0
    # the prediction's two inputs measured without communication: overlap windows per bucket (the last one 0)
    # and, for the Python hook, its own work in a step (the twin with local collectives, kept as steps)
    windows = df[df["metric"] == "overlap_window"]
    assert len(windows) >= 2 and windows["value"].ge(0).all()
    assert (df["metric"] == "hook_cpu_time").sum() == 1 and steps["hidden_share"].between(0, 1).all()
    assert df["labels"].str.contains('"comm": "local"').sum() == 3
    assert {("all_reduce", g) for g in ("world", "intra_node", "inter_node")} <= \
        set(zip(s[s["row"] == "fit"]["op"], s[s["row"] == "fit"]["group"]))
    assert not (s["row"] == "c1").any()  # no shaped link, no efficiency
    driver = df[df["metric"] == "link_rate_bps"]
    assert driver["value"].isna().all() and driver["text"].iloc[0] == NO_CLUSTER
    assert not (df["metric"] == "link_restored").any()
    text, outputs = _outputs(run.notebook)
    assert "C1: inconclusive" in text and "shaped link" in text
    assert ("PASS" in text or "FAIL" in text) and "unshaped ddp" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)


@pytest.fixture(scope="module")
def cluster_run(emulated_cluster, tmp_path_factory):
    require_cluster_prerequisites()
    # 16 KiB .. 1 MiB: the two largest sizes exceed the links' token bucket (128 KiB), so the rate shows
    params = {**TINY, "link_rates": ["200mbit", "100mbit"], "modes": ["ddp", "hierarchical"], "ops": ["all_reduce"],
              "min_bytes": 16384, "max_bytes": 1 << 20}
    run_dir = tmp_path_factory.mktemp("scale_model") / "run"
    _, df = run_task_on_cluster(emulated_cluster, run_dir, "scale_model", params)
    return df, run_dir, params


def test_links_are_reshaped_per_phase_and_put_back(cluster_run):
    from hpcbench.cluster import load_cluster

    df, _, params = cluster_run
    phases = df[df["metric"] == "link_rate_bps"]
    shaped = {json.loads(lab)["link_rate"]: v for lab, v in zip(phases["labels"], phases["value"])}
    assert shaped == {r: parse_rate(r) for r in params["link_rates"]}
    assert all("reshaped to" in t for t in phases["text"])
    assert df[df["metric"] == "link_restored"]["value"].tolist() == [1.0]
    # the cluster and both ends of every link are back at the session's 1gbit
    info = load_cluster(SESSION_STATE_DIR)
    assert info.spec.link_rate == 1e9
    for node in info.nodes:
        ends = network.read_qdiscs(node.veth_host) + network.read_qdiscs(node.veth_node,
                                                                          netns=network.netns_path(node.netns))
        assert [q.rate_bps for q in ends if q.rate_bps is not None] == [parse_rate("1gbit")] * 2, ends
    # the ranks ran on both nodes in every phase, each phase's rows labelled with its rate
    ranks = df[df["metric"] == "step_time"]
    assert {json.loads(lab)["link_rate"] for lab in ranks["labels"]} == set(params["link_rates"])


def test_fits_predictions_and_residuals_are_finite_at_each_rate(cluster_run):
    df, _, params = cluster_run
    s = summarize(df)
    fits = s[s["row"] == "fit"]
    for rate in params["link_rates"]:
        mine = fits[fits["link_rate"] == rate]
        assert {"world", "intra_node", "inter_node"} <= set(mine[mine["op"] == "all_reduce"]["group"])
        inter = mine[(mine["op"] == "all_reduce") & (mine["group"] == "inter_node")].iloc[0]
        assert math.isfinite(inter["efficiency"]) and math.isfinite(inter["r2"])
    steps = s[s["row"] == "step"]
    assert len(steps) == 4
    assert steps["predicted_ms"].map(math.isfinite).all() and steps["residual"].map(math.isfinite).all()
    c1 = s[s["row"] == "c1"]
    assert list(c1["link_rate"]) == params["link_rates"] and c1["efficiency"].map(math.isfinite).all()
    text = str(verify_records(df, ScaleModelConfig.from_dict(params)))
    assert "links were not put back" not in text and "no records" not in text, text


def test_cluster_notebook_shows_residuals_and_an_inconclusive_c1(cluster_run):
    _, run_dir, _ = cluster_run
    (path,) = list((run_dir / "tasks").glob("*/notebook.ipynb"))
    text, outputs = _outputs(path)
    assert "C1: inconclusive" in text and ("n = 1 launches" in text or "No launch" in text)
    assert "200mbit ddp: predicted" in text and "100mbit hierarchical" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)
