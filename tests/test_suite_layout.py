"""A suite sized by its cluster (guide-scale): --layout fills it, --toy rehearses it, bind travels to the ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
from hpcbench.core.errors import SuiteError
from hpcbench.core.results import find_record_files, read_records
from hpcbench.experiments import EXPERIMENTS
from hpcbench.run.runner import run_suite
from hpcbench.run.suite import Layout, TOY_KEEPS, load_suite, parse_suite

#: What guide-scale must hold: the guide's comparisons, each experiment with the claims it rules on.
GUIDE_SCALE_EXPERIMENTS = {"environment", "collectives", "comm_modes", "batch_scaling", "weather_case",
                           "gradient_compression", "overlap"}


def test_a_layout_is_nodes_x_gpus_per_node():
    assert Layout.parse("4x8") == Layout(4, 8) and str(Layout.parse(" 2 X 2 ")) == "2x2"
    for bad in ("4", "4x", "x8", "0x8", "4x0", "4*8", "four by eight"):
        with pytest.raises(SuiteError, match="--layout"):
            Layout.parse(bad)


def test_guide_scale_without_a_layout_is_refused_naming_the_option():
    with pytest.raises(SuiteError, match=r"sized by the cluster .* --layout NODESxGPUS_PER_NODE"):
        load_suite("guide-scale")


def test_guide_scale_fills_every_task_from_the_layout_over_nccl_with_the_plan():
    suite = load_suite("guide-scale", layout=Layout(4, 8))
    assert {t.experiment for t in suite.tasks} == GUIDE_SCALE_EXPERIMENTS
    assert suite.bind == "plan"
    sized = [t for t in suite.tasks if "ranks_per_node" in t.params and t.experiment != "environment"]
    assert sized and all((t.params["nodes"], t.params["ranks_per_node"], t.params["backend"]) == (4, 8, "nccl")
                         for t in sized)
    # the guide's models, and every comparison with the launches a verdict needs
    modes = next(t for t in suite.tasks if t.task_id == "comm_modes.modes.r0")
    assert set(modes.params["models"]) == {"resnet50", "gpt2_124M"}
    assert {"ddp", "hybrid_dp_ddp", "hierarchical"} <= set(modes.params["modes"])
    assert min(next(t for t in suite.tasks if t.task_id == "comm_modes.buckets.r0").params["bucket_cap_mb"]) \
        == 4096 / 2**20
    assert sum(t.experiment == "comm_modes" and t.variant == "modes" for t in suite.tasks) == 5
    # every figure measures the regime its launch reached, so that the ledger judges it only in the guide's
    regimes = {t.params.get("regime", t.params.get("link_regime")) for t in suite.tasks
               if t.experiment in {"comm_modes", "batch_scaling", "weather_case", "gradient_compression"}}
    assert regimes == {"guide"}


def test_toy_keeps_the_layout_and_regime_and_runs_each_variant_once():
    real = load_suite("guide-scale", layout=Layout(2, 2))
    toy = load_suite("guide-scale", layout=Layout(2, 2), toy=True)
    assert sorted({(t.experiment, t.variant) for t in toy.tasks}) == sorted({(t.experiment, t.variant)
                                                                                for t in real.tasks})
    assert all(t.repetition == 0 for t in toy.tasks)
    by_id = {t.task_id: t for t in real.tasks}
    for t in toy.tasks:
        kept = {k: v for k, v in by_id[t.task_id].params.items() if k in TOY_KEEPS}
        assert {k: t.params[k] for k in kept} == kept, t.task_id
        assert t.params.get("backend", "auto") == "auto"  # gloo on CPU stand-ins, NCCL with a GPU per rank
        for key, value in EXPERIMENTS.get(t.experiment).toy.items():
            if key not in TOY_KEEPS:
                assert t.params[key] == value, (t.task_id, key)


def test_dry_run_prints_every_job_with_its_gpus_memory_and_time():
    done = subprocess.run([sys.executable, "-m", "hpcbench", "suite", "guide-scale", "--layout", "4x8",
                           "--backend", "local", "--dry-run"], capture_output=True, text=True, cwd=REPO, timeout=120)
    out = done.stdout
    assert "dry run of suite guide-scale: 41 task(s)" in out, out[:500]
    rows = [line for line in out.splitlines() if line.startswith("comm_modes.modes.r")]
    assert len(rows) == 5 and all(" 4 x 8 " in r and "GiB" in r for r in rows), rows
    assert "on the GPU" in out and "total: 41 task(s), at most 32 ranks" in out
    # this machine has no GPU and 2 cores: the dry run says so and a real run would start nothing
    assert done.returncode == 2 and "REFUSED" in out


def test_a_suites_bind_reaches_every_rank(tmp_path, monkeypatch):
    monkeypatch.delenv("HPCBENCH_BIND", raising=False)
    suite = parse_suite({"name": "bound", "bind": "plan", "tasks": [{"experiment": "collectives", "params": {
        **EXPERIMENTS.get("collectives").toy, "nodes": 1, "ranks_per_node": 2}}]})
    (status,) = run_suite(suite, tmp_path / "run", backend="local", progress=False)
    assert status.state == "done", status.error
    rows = [read_records(p) for p in find_record_files(tmp_path / "run" / "tasks")]
    modes = {json.loads(labels).get("bind") for frame in rows
             for labels in frame.loc[frame["metric"] == "rank_binding", "labels"]}
    assert modes == {"plan"}
    assert "HPCBENCH_BIND" not in os.environ  # put back after the run
    with pytest.raises(SuiteError, match="bind 'tight'"):
        parse_suite({"name": "x", "bind": "tight", "tasks": [{"experiment": "environment"}]})
