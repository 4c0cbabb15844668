"""The overlap experiment run for real: its notebook under papermill on 2 gloo ranks (2 emulated nodes x 1) at a
tiny size, the config's refusals, the estimate and the presenter.

Its rule is tested from recorded records in tests/experiments/overlap/test_overlap_rules.py; the library's invariants in
tests/test_overlap_accumulation.py."""

from __future__ import annotations

import json

import nbformat
import pytest

from hpcbench.core.errors import ConfigError
from hpcbench.experiments.overlap.config import OverlapExperimentConfig
from hpcbench.experiments.overlap.summary import summarize, verify_records

TINY = dict(models=["weather_tiny"], micro_steps=[1, 4], batch_size=2, warmup_steps=1, steps=2, layout_repeats=2,
            loss_samples=8)


@pytest.fixture(scope="module")
def tiny_run(toy_runs):
    """The session's `hpcbench run overlap --toy` (tests/toy_runs.py; test_defaults reads it too), at TINY."""
    run = toy_runs.get("overlap")
    run.check_size(TINY)
    return run.records(), run.task_dir, run.notebook


def one(df, metric, **where):
    rows = df[df["metric"] == metric]
    keep = [all(json.loads(s).get(k) == v for k, v in where.items()) for s in rows["labels"]]
    return rows[keep]


def test_notebook_counts_the_synchronisations(tiny_run):
    df, _, _ = tiny_run
    assert set(df["experiment"]) == {"overlap"}
    grad_bytes = one(df, "gradient_bytes")["value"].iloc[0]
    for k, no_sync, syncs in ((1, True, 1), (4, True, 1), (4, False, 4)):
        at = dict(micro_steps=k, no_sync=no_sync)
        # the hook saw every gradient byte once per synchronisation, in every timed step
        sent = one(df, "allreduce_bytes", **at)["value"]
        assert len(sent) == TINY["steps"] and (sent == syncs * grad_bytes).all()
        calls = one(df, "allreduce_calls", **at)["value"]
        assert (calls == syncs * one(df, "bucket_count", **at)["value"].iloc[0]).all()
    s = summarize(df).set_index(["micro_steps", "no_sync"])
    assert s.loc[(1, True), "syncs_per_sample"] / s.loc[(4, True), "syncs_per_sample"] == 4.0
    assert s.loc[(4, False), "syncs_per_sample"] == s.loc[(1, True), "syncs_per_sample"]
    assert (s["steps"] == TINY["steps"]).all() and s["throughput_total_p50"].gt(0).all()
    assert s[["exposed_comm_ms", "total_comm_ms", "overlapped_share"]].notna().all().all()
    assert (s["total_comm_ms"] > 0).all()


def test_notebook_checks_hold(tiny_run):
    df, _, _ = tiny_run
    s = summarize(df)
    assert s["ok"].all(), s["problem"].tolist()
    for check in ("grad_match", "loss_match"):
        rows = df[df["metric"] == check]
        assert len(rows) == 2 and (rows["value"] == 1.0).all()  # both k=4 series
    agree = df[df["metric"] == "params_agree"]
    assert len(agree) == 3 and (agree["value"] == 1.0).all()
    # every optimizer step of the loss run was checked (8 samples: 4 steps at k=1, 1 at k=4), + one after timing
    assert sorted(agree["text"].str.extract(r"after (\d+) of")[0].astype(int)) == [2, 2, 5]
    assert (df[df["metric"] == "grad_max_abs_diff"]["value"] < 1e-6).all()
    # training moved the loss, so the 5 % comparison is not between two untouched models
    before = df[df["metric"] == "loss_before"]["value"].iloc[0]
    assert (df[df["metric"] == "loss_after"]["value"] < 0.95 * before).all()
    assert verify_records(df, OverlapExperimentConfig.from_dict(TINY)).ok


def test_notebook_shows_table_plot_and_an_inconclusive_verdict_on_loopback(tiny_run):
    _, _, notebook = tiny_run
    nb = nbformat.read(notebook, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    assert "PASS" in text and "C9: inconclusive" in text and "not applicable" in text and "loopback" in text
    assert "k=4 no_sync: synchronisations per sample k=1 / this = 4x" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert any("overlapped_share" in o.get("data", {}).get("text/html", "") for o in outputs)


@pytest.mark.parametrize("values, field, words", [
    ({"micro_steps": [4]}, "micro_steps", "lacks 1"),
    ({"micro_steps": [1, 4, 4]}, "micro_steps", "distinct"),
    ({"models": ["resnet_tiny"]}, "models", "BatchNorm"),
    ({"models": ["gpt2_tiny"], "seq_len": 512}, "seq_len", "block size"),
    ({"loss_samples": 10}, "loss_samples", "multiple of batch_size x every k (16)"),
    ({"nodes": 1, "ranks_per_node": 1}, "ranks_per_node", "at least 2 ranks"),
])
def test_config_rejects_bad_values(values, field, words):
    with pytest.raises(ConfigError) as exc:
        OverlapExperimentConfig.from_dict(values)
    assert exc.value.field == field and words in str(exc.value)


def test_estimate_grows_with_batch_steps_and_model():
    from hpcbench.experiments import EXPERIMENTS

    spec = EXPERIMENTS.get("overlap")
    est = lambda **p: spec.estimate(OverlapExperimentConfig.from_dict(p))  # noqa: E731
    default = est()
    assert default.ranks == 2 and default.seconds and "copies" in default.basis
    assert est(batch_size=2, loss_samples=32).memory_per_rank < default.memory_per_rank
    assert est(micro_steps=[1, 8], loss_samples=64).memory_per_rank > default.memory_per_rank
    assert est(steps=40).seconds > default.seconds
    assert est(models=["weather_small"]).memory_per_rank > default.memory_per_rank


def test_presenter_renders_the_tiny_run(tiny_run):
    from hpcbench.core.results import expand_labels
    from hpcbench.experiments import EXPERIMENTS
    from hpcbench.judge.evidence import summarize_launches
    from hpcbench.present.kit import ExperimentData
    from hpcbench.report.aggregate import series_stats

    df = tiny_run[0].assign(source="run")
    stats = expand_labels(series_stats(df[df["value"].notna()]))
    text = expand_labels(df[df["value"].isna() & df["text"].notna()])
    summaries = summarize_launches(df, summarize, "overlap").assign(source="run")
    sections = EXPERIMENTS.get("overlap").present(ExperimentData("overlap", ["run"], stats, text, None, summaries))
    table = next(t for t in sections[0].tables if t.id == "overlap-weather-tiny")
    assert len(table.rows) == 3 and "overlapped share" in table.columns
    assert [r[2].text for r in table.rows] == ["1", "4", "4"]
    assert sections[0].figures and sections[0].figures[0].data
    assert any(n.cls == "ok" for n in sections[0].notes)


def test_diagnostics_step_phases_same_start_and_tf32(tiny_run):
    """T-diag: the breakdown of extra untimed steps per series (no data loading here), the start check, TF32."""
    from hpcbench.diag.records import BREAKDOWN_STEPS

    df, _, _ = tiny_run
    world = 2
    phases = df[(df["metric"] == "step_phase_seconds") & df["value"].notna()]
    labs = phases["labels"].map(json.loads)
    assert {lab["phase"] for lab in labs} == {"forward", "backward", "comm_wait", "optimizer", "other"}
    series = 3  # (1, True), (4, True), (4, False)
    assert len(phases) == world * series * BREAKDOWN_STEPS * 5
    absent = df[(df["metric"] == "step_phase_seconds") & df["value"].isna()]
    assert len(absent) == world * series and absent["text"].str.contains("no data loading").all()
    s = summarize(df)
    assert (s["backward_p50_ms"] > 0).all() and s["jitter_max"].notna().all()
    same = df[df["metric"] == "same_start"]
    assert len(same) == 1 and same["value"].iloc[0] == 1.0
    assert set(df[df["metric"] == "tf32_state"]["rank"]) == {0, 1}
