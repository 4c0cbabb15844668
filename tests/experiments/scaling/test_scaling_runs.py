"""The scaling experiment run for real: its notebook under papermill on one machine with stages 1 and 2, where a gate
that fails at stage 1 stops the run before stage 2 with the reason recorded; and the three stages 1 -> 2 -> 4 in a
SLURM job on the emulated cluster brought up with 4 nodes (the session's 2-node cluster is taken down for it and
restored after).

Its rule is tested from synthetic records in tests/experiments/scaling/test_scaling_rules.py; the gate in
tests/test_practice_gates.py.
"""

from __future__ import annotations

import json
import math
import os

import nbformat
import pandas as pd
import pytest
from cluster_fixtures import require_cluster_prerequisites, taking_over_the_session_cluster
from conftest import execute_notebook

from hpcbench.core.results import expand_labels, find_record_files, read_records
from hpcbench.experiments.scaling.config import ScalingConfig
from hpcbench.experiments.scaling.summary import summarize, verify_records

#: Tiny stages: gpt2_tiny on 2 sequences of 32 tokens, the fewest steps a verdict accepts.
TINY = dict(model="gpt2_tiny", batch_size=2, seq_len=32, steps=10, warmup_steps=1, calibration_steps=10)
#: Limits no CPU step on a shared machine can break: these runs check the mechanics, not the machine.
LENIENT = {"step_time_cv": 100.0, "comm_share": 100.0}
#: A short path (slurmd's socket paths max out at 108 bytes), apart from the session cluster's.
FOUR_NODES_STATE_DIR = "/tmp/hpcbench-test-cluster4"


def _outputs(path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_notebook_stops_before_stage_two_when_the_gate_fails_at_stage_one(tmp_path):
    # no real step time varies by less than a billionth: the step-time check fails at 1 node
    limits = {"step_time_cv": 1e-9}
    records, out_dir = execute_notebook("scaling", tmp_path, stages=[1, 2], gate_limits=limits, **TINY)
    assert (out_dir / "logs" / "scaling-n1.log").is_file() and not (out_dir / "logs" / "scaling-n2.log").exists()
    assert set(expand_labels(records[records["metric"] == "step_time"])["nodes"]) == {1}
    outcome = records[records["metric"] == "scaling_outcome"]
    assert len(outcome) == 1 and json.loads(outcome["labels"].iloc[0]) == {"stopped": True}
    assert outcome["text"].iloc[0].startswith("stopped after stage 1 (1 node(s)): gate fails: step_time_cv")
    assert ">= 1e-09" in outcome["text"].iloc[0]
    # C12's regime: the stage that gated the step out calibrated its healthy spread first, the launch records it
    healthy = expand_labels(records[records["metric"] == "healthy_step_cv"])
    assert len(healthy) == 1 and set(healthy["nodes"]) == {1} and set(healthy["phase"]) == {"calibration"}
    (fact,) = records.loc[records["metric"] == "fact.regime.healthy_step_cv", "value"]
    assert fact == pytest.approx(healthy["value"].iloc[0]) and fact > 0
    checks = expand_labels(records[records["metric"] == "stage_gate_check"]).set_index("check")
    assert checks.loc["step_time_cv", "text"].startswith("fail:")
    assert checks.loc["comm_share", "text"].startswith("pass:")
    assert checks.loc["read_p99", "text"].startswith("absent: no read_time rows")
    s = summarize(records)
    assert list(s["ran"]) == [True, False] and s["stopped_here"].iloc[0] and s["gate_failed"].iloc[0] == "step_time_cv"
    assert s["efficiency"].iloc[0] == 1.0 and s["gate_text"].iloc[1].startswith("not run: stopped after stage 1")
    assert verify_records(records, ScalingConfig.from_dict({"stages": [1, 2], "gate_limits": limits, **TINY})).ok
    # the notebook showed the table, the figure, the sanity check and a verdict that says why there is none
    text = _outputs(tmp_path / "scaling.ipynb")
    assert "PASS" in text and "stopped after stage 1" in text and "C13: inconclusive" in text
    nb = nbformat.read(tmp_path / "scaling.ipynb", as_version=4)
    assert any("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)


@pytest.fixture(scope="module")
def four_node_run(tmp_path_factory):
    """Stages 1, 2, 4 as one SLURM job on a 4-node emulated cluster; the session's cluster is restored after."""
    require_cluster_prerequisites()
    from hpcbench.cluster import ClusterSpec
    from hpcbench.run.runner import run_suite
    from hpcbench.run.suite import parse_suite

    saved = dict(os.environ)
    spec = ClusterSpec(nodes=4, link_rate="1gbit", link_delay="0ms", state_dir=FOUR_NODES_STATE_DIR)
    try:
        with taking_over_the_session_cluster(spec) as info:
            os.environ.update(info.env())
            run_dir = tmp_path_factory.mktemp("scaling") / "run"
            suite = parse_suite({"name": "s", "tasks": [{"experiment": "scaling",
                                                         "params": {**TINY, "gate_limits": LENIENT}}]})
            (status,) = run_suite(suite, run_dir, backend="slurm", progress=False)
            nodes = [n.name for n in info.nodes]
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert status.state == "done", status.error
    df = pd.concat([read_records(p) for p in find_record_files(run_dir / "tasks")], ignore_index=True)
    return df, nodes


@pytest.mark.cluster  # its own 4-node cluster in place of the session's: never beside another cluster test
def test_three_stages_run_on_four_cluster_nodes(four_node_run):
    df, nodes = four_node_run
    assert nodes == ["n1", "n2", "n3", "n4"]
    s = summarize(df)
    assert list(s["nodes"]) == [1, 2, 4] and s["ran"].all() and list(s["steps"]) == [TINY["steps"]] * 3
    assert all(math.isfinite(e) and e > 0 for e in s["efficiency"]) and s["efficiency"].iloc[0] == 1.0
    assert list(s["gate"]) == [True, True, True] and s["cleared"].all()
    assert all(math.isfinite(v) for v in s["comm_share"]) and s["read_p99"].isna().all()
    assert verify_records(df, ScalingConfig.from_dict({**TINY, "gate_limits": LENIENT})).ok
    # each stage on its own first k cluster nodes, and the facts of the shaped link
    steps = expand_labels(df[df["metric"] == "step_time"])
    assert {k: sorted(set(steps[steps["nodes"] == k]["node"])) for k in (1, 2, 4)} == \
        {1: ["n1"], 2: ["n1", "n2"], 4: ["n1", "n2", "n3", "n4"]}
    facts = df[df["metric"].str.startswith("fact.")].set_index("metric")
    assert facts.loc["fact.cluster", "text"] == "emulated cluster, shaped link"
    assert facts.loc["fact.host_cpus", "value"] == float(os.cpu_count())
    gates = expand_labels(df[df["metric"] == "stage_gate"])
    assert sorted(gates["nodes"]) == [1, 2, 4] and (gates["value"] == 1.0).all()
