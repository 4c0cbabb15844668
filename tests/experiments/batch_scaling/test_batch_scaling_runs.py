"""Batch scaling (C2): config errors, the step-cost model, and notebook 01 run by papermill at tiny sizes."""

import nbformat
import pandas as pd
import pytest

from hpcbench.core.errors import ConfigError
from hpcbench.experiments.batch_scaling.config import BatchScalingConfig
from hpcbench.experiments.batch_scaling.summary import step_cost_model


@pytest.mark.parametrize("values, field", [
    ({"factors": [1, 3, 8]}, "factors"),          # 3 does not divide 8: no fixed global batch
    ({"factors": []}, "factors"),
    ({"factors": [2, 2]}, "factors"),
    ({"model": "vgg"}, "model"),
    ({"mode": "hierarchical", "nodes": 1, "ranks_per_node": 2}, "mode"),
    ({"regimes": ["bigger"]}, "regimes"),
    ({"base_batch": 0}, "base_batch"),
    ({"precision": "fp16"}, "precision"),
    ({"channels_last": "yes"}, "channels_last"),
    ({"torch_compile": True, "warmup_steps": 0}, "warmup_steps"),  # the compiling step would be timed
])
def test_bad_config_names_the_field(values, field):
    with pytest.raises(ConfigError) as exc:
        BatchScalingConfig.from_dict(values)
    assert exc.value.field == field


def test_plans_keep_the_global_batch_fixed_when_asked():
    cfg = BatchScalingConfig.from_dict({"base_batch": 4, "factors": [1, 2, 4, 8]})
    assert [cfg.plan("larger_batch", f) for f in (1, 8)] == [(4, 1), (32, 1)]
    assert [cfg.plan("fixed_global_batch", f) for f in (1, 2, 8)] == [(4, 8), (8, 4), (32, 1)]


def test_step_cost_model_recovers_a_linear_step():
    # step = 2 ms per sample + 30 ms per step
    rows = [{"regime": "larger_batch", "batch_per_step": b, "step_p50_ms": 2 * b + 30} for b in (4, 8, 16, 32)]
    fit = step_cost_model(pd.DataFrame(rows))
    assert fit.per_sample_s == pytest.approx(0.002) and fit.per_step_s == pytest.approx(0.030)
    assert fit.fixed_share_at_1x == pytest.approx(30 / 38)
    assert fit.gain_bound == pytest.approx(38 / 8)
    assert "at most 4.75x" in fit.describe()


def test_batch_scaling_notebook_runs_tiny(toy_runs):
    # the session's `hpcbench run batch_scaling --toy` (tests/toy_runs.py; test_defaults reads it too)
    run = toy_runs.get("batch_scaling")
    run.check_size(dict(model="gpt2_tiny", base_batch=2, factors=[1, 4], steps=2, warmup_steps=1, seq_len=32))
    df = run.records()
    tput = df[df["metric"] == "throughput_per_rank"]
    assert len(tput) == 2 * 2 * 2 and (tput["value"] > 0).all()   # regimes x factors x steps
    mem = df[df["metric"] == "memory_per_rank"]
    assert len(mem) == 4 and (mem["value"] > 10).all() and mem["unit"].eq("MiB").all()
    nb = nbformat.read(run.notebook, as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "per sample" in text and "C2: " in text and "measured:" in text
    assert any("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)


# -- on the emulated cluster: the 1x step calibrated to the test regime (ours: a quarter busy) --------------------------------

#: 2 nodes x 1 rank, so that every synchronisation crosses the link; 2 calibration rates of 2 steps each.
ON_CLUSTER = {"nodes": 2, "ranks_per_node": 1, "backend": "gloo", "model": "resnet_tiny", "base_batch": 4,
              "factors": [1, 4], "warmup_steps": 1, "steps": 2, "link_regime": "guide",
              "calibration_rates": ["1gbit", "200mbit"], "calibration_steps": 2}


def test_on_the_cluster_the_1x_step_is_calibrated_to_the_test_regime(emulated_cluster, tmp_path):
    import json
    import re

    from cluster_fixtures import require_cluster_prerequisites, run_task_on_cluster

    from hpcbench.cluster import load_cluster
    from hpcbench.judge.evidence import facts_of

    require_cluster_prerequisites()
    _, df = run_task_on_cluster(emulated_cluster, tmp_path / "run", "batch_scaling", ON_CLUSTER)
    points = df[df["metric"] == "regime_calibration_busy"]
    rates = [json.loads(lab)["link_rate_bps"] for lab in points["labels"]]
    assert rates[:2] == [1e9, 2e8] and len(rates) <= 4  # the configured rates, then up to 2 refinements
    (note,) = df[df["metric"] == "regime_calibration"]["text"]
    print(f"regime: {note}")  # the regime reached, for the record (pytest -s)
    facts = facts_of(df)
    assert facts["regime.target_busy"] == pytest.approx(0.25) and 0 < facts["regime.reached_busy"] < 1.5
    if "not steered" not in note:
        assert 10e6 <= facts["regime.link_rate_bps"] <= 10e9
        # the rate recorded is the one the judged steps ran at: the solution's, not the cluster's own
        solved = re.search(r"25% busy (?:at|needs) ([0-9.]+) Mbit/s", note)
        if solved and 10 <= float(solved.group(1)) <= 10000:
            assert facts["regime.link_rate_bps"] == pytest.approx(float(solved.group(1)) * 1e6, rel=0.01)
    tput = df[df["metric"] == "throughput_per_rank"]
    assert len(tput) == 2 * 2 * 2 and (tput["value"] > 0).all()   # regimes x factors x steps
    assert load_cluster(emulated_cluster.state_dir).spec.link_rate == 1e9  # put back
