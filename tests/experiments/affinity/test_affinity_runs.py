"""The affinity experiment run for real: its notebook under papermill on 2 gloo ranks at a tiny size, the config's
refusals and the estimate.

Its cost verdicts and presenter are tested from recorded records in tests/experiments/affinity/test_affinity_rules.py; the binding
library (topology, plan, emit, applied) in its own tests."""

from __future__ import annotations

import json

import nbformat
import pytest

from hpcbench.affinity import read_topology
from hpcbench.core.errors import ConfigError
from hpcbench.experiments.affinity.config import AffinityConfig
from hpcbench.experiments.affinity.summary import summarize, verify_records
from hpcbench.experiments.affinity.worker import THP_ENABLED, _thp_setting

TINY = dict(ranks_per_node=2, batch_size=2, image_size=16, warmup_steps=1, steps=2, loader_batches=1, sample_work=1,
            buffer_bytes=16 << 20, reads_per_step=1 << 14)


@pytest.fixture(scope="module")
def tiny_run(toy_runs):
    """The session's `hpcbench run affinity --toy` (tests/toy_runs.py; test_defaults reads it too), at TINY."""
    run = toy_runs.get("affinity")
    run.check_size(TINY)
    return run.records(), run.task_dir, run.notebook


def rows(df, metric, **where):
    picked = df[df["metric"] == metric]
    keep = [all(json.loads(s).get(k) == v for k, v in where.items()) for s in picked["labels"]]
    return picked[keep]


def test_every_pair_is_timed_interleaved_and_really_applied(tiny_run):
    df, _, _ = tiny_run
    s = summarize(df)
    assert verify_records(df, AffinityConfig.from_dict(TINY)).ok, verify_records(df, AffinityConfig.from_dict(TINY))
    timed = s[s["setting"] != ""]
    assert set(timed["mistake"]) >= {"oversubscription", "binding", "loader"}
    assert (timed["steps"] == TINY["steps"]).all() and timed["ok"].all()
    # every rank checked both settings of the two rank pairs; rank 0 alone the single-rank ones
    for mistake in ("oversubscription", "binding"):
        assert len(rows(df, "setting_applied", mistake=mistake)) == 2 * 2
    assert len(rows(df, "setting_applied", mistake="loader")) == 2


def test_bound_ranks_got_the_plan_and_unbound_ranks_every_cpu(tiny_run):
    from hpcbench.affinity import plan_binding

    df, _, _ = tiny_run
    plan = plan_binding(read_topology(), TINY["ranks_per_node"])
    for b in plan.bindings:
        got = json.loads(rows(df, "observed_binding", mistake="binding", setting="right",
                              local_rank=b.local_rank)["text"].iloc[0])
        assert got["cpus"] == list(b.cpus) and got["torch_threads"] == b.threads
        free = json.loads(rows(df, "observed_binding", mistake="binding", setting="mistake",
                               local_rank=b.local_rank)["text"].iloc[0])
        assert len(free["cpus"]) > len(b.cpus)
    over = rows(df, "setting_applied", mistake="oversubscription", setting="mistake")
    assert over["text"].str.contains(f"{len(read_topology().cpus)} intra-op threads").all()


def test_memory_pairs_say_what_they_got(tiny_run):
    df, _, _ = tiny_run
    numa = rows(df, "not_applicable", mistake="numa")
    if len(read_topology().numa) == 1:
        assert len(numa) == 1 and numa["text"].iloc[0].startswith("1 NUMA node")
        assert rows(df, "step_time", mistake="numa").empty
    if _thp_setting(THP_ENABLED) in ("always", "madvise"):
        share = rows(df, "huge_page_share", mistake="hugepages")
        got = dict(zip([json.loads(x)["setting"] for x in share["labels"]], share["value"]))
        applied = rows(df, "setting_applied", mistake="hugepages", setting="right")
        assert got["mistake"] == 0.0 and (got["right"] >= 0.5 or applied["value"].iloc[0] == 0.0)


def test_notebook_shows_plan_costs_plot_and_an_inconclusive_verdict(tiny_run):
    df, _, notebook = tiny_run
    assert set(df["experiment"]) == {"affinity"}
    nb = nbformat.read(notebook, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    assert "## plan.srun" in text and "--cpu-bind=" in text and "#SBATCH" in text
    assert "PASS" in text and "oversubscription: inconclusive" in text and "n = 1 launches" in text
    assert "slower by" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert any("slowdown" in o.get("data", {}).get("text/html", "") for o in outputs)


@pytest.mark.parametrize("values, field, words", [
    ({"nodes": 2}, "nodes", "out of range"),
    ({"ranks_per_node": 1}, "ranks_per_node", "at least 2 ranks"),
    ({"mistakes": ["loader", "loader"]}, "mistakes", "distinct"),
    ({"mistakes": ["affinity"]}, "mistakes", "out of range"),
    ({"model": "gpt2_tiny"}, "model", "kind 'text'"),
    ({"backend": "nccl"}, "backend", "out of range"),
])
def test_config_rejects_bad_values(values, field, words):
    with pytest.raises(ConfigError) as exc:
        AffinityConfig.from_dict(values)
    assert exc.value.field == field and words in str(exc.value)


def test_single_rank_mistakes_run_on_one_rank():
    assert AffinityConfig.from_dict({"ranks_per_node": 1, "mistakes": ["loader", "hugepages", "numa"]})


def test_estimate_grows_with_the_buffer_and_the_steps():
    from hpcbench.experiments import EXPERIMENTS

    spec = EXPERIMENTS.get("affinity")
    est = lambda **p: spec.estimate(AffinityConfig.from_dict(p))  # noqa: E731
    default = est()
    assert default.ranks == 2 and default.seconds and "buffers" in default.basis
    assert est(buffer_bytes=4 << 30).memory_per_rank > default.memory_per_rank
    assert est(steps=40).seconds > default.seconds
    assert est(mistakes=["oversubscription"]).memory_per_rank < default.memory_per_rank
