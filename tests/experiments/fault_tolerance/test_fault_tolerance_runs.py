"""The fault_tolerance experiment run for real: notebook under papermill at a tiny size, config, presenter.

Its rules are tested from recorded records in tests/experiments/fault_tolerance/test_fault_tolerance_rules.py."""

from __future__ import annotations

import json

import nbformat
import pandas as pd
import pytest

from hpcbench.core.errors import ConfigError
from hpcbench.experiments import EXPERIMENTS
from hpcbench.experiments.fault_tolerance.config import FaultToleranceConfig
from hpcbench.experiments.fault_tolerance.summary import summarize, verify_records

#: The experiment's toy size, which the shared run below ran at.
TINY = dict(EXPERIMENTS.get("fault_tolerance").toy)


@pytest.fixture(scope="module")
def tiny_run(toy_runs):
    """The session's `hpcbench run fault_tolerance --toy` (tests/toy_runs.py; test_defaults reads it too)."""
    run = toy_runs.get("fault_tolerance")
    run.check_size(TINY)
    return run.records(), run.task_dir, run.notebook


def labelled(df, metric, **where):
    rows = df[df["metric"] == metric]
    keep = [all(json.loads(s).get(k) == v for k, v in where.items()) for s in rows["labels"]]
    return rows[pd.Series(keep, index=rows.index, dtype=bool)]  # a mask, so that no match keeps the columns


def test_notebook_runs_tiny(tiny_run):
    df, out_dir, notebook = tiny_run
    assert set(df["experiment"]) == {"fault_tolerance"}
    summary = summarize(df)
    assert summary["ok"].all(), summary["problem"].iloc[0]
    assert "FAIL" not in verify_records(df)
    # every restored state equalled the saved one: tier recoveries and every injected failure
    restored = df[df["metric"] == "restore_equal"]
    assert len(restored) == 2 * 2 * TINY["repeats"] + TINY["failures"] and (restored["value"] == 1).all()
    named = df[df["metric"] == "checkpoint_named"]
    assert len(named) == 4 and (named["value"] == 1).all() and named["text"].str.contains("-job").all()
    # both tiers, both dtypes, the repeats as samples; zstd shrinks bfloat16 more than float32
    save = summary[summary["phase"] == "save"]
    assert len(save) == 4 and (save["n"] == TINY["repeats"]).all() and (save["ratio"] > 1.0).all()
    ratio = save.set_index(["dtype", "tier"])["ratio"]
    assert ratio["bfloat16", "light"] > ratio["float32", "light"]
    raw = labelled(df, "compression_ratio", phase="compression", level=0)
    assert len(raw) == 2 * TINY["repeats"] and (raw["value"] == 1.0).all()
    # both saves' stalls measured, alternating; the asynchronous one's write overlapped training steps. Which
    # stalls less is a timing, and the toy model's saves take ~20 ms either way: the fault_tolerance bench
    # measures it (async <= 5 % of sync), not this test.
    runs = len(set(labelled(df, "stall_seconds", phase="stall")["labels"].map(lambda s: json.loads(s)["dtype"])))
    assert runs >= 1
    for mode in ("sync", "async"):
        mine = labelled(df, "stall_seconds", phase="stall", mode=mode)["value"]
        assert len(mine) == runs * TINY["repeats"] and (mine > 0).all() and (mine < 60).all()
    overlapped = labelled(df, "overlap_slowdown_seconds", phase="stall", mode="async")
    assert len(overlapped) == runs * TINY["repeats"] and overlapped["text"].str.contains("steps during the write").all()
    # work lost, in wall time: positive, restore included, from the newest complete checkpoint; a torn one skipped
    lost = labelled(df, "work_lost_share")
    assert len(lost) == TINY["failures"] and (lost["value"] > 0).all()
    scaled = labelled(df, "work_lost_seconds")["value"].to_numpy()
    assert scaled == pytest.approx(lost["value"].to_numpy() * 600)
    assert (labelled(df, "restored_newest")["value"] == 1).all()
    assert (df[df["metric"] == "torn_checkpoint_skipped"]["value"] == 1).all()
    # the overhead model's light saves stall its training loop
    assert len(labelled(df, "save_stall_seconds", phase="overhead")) == TINY["overhead_saves"]
    # and what each of those saves wrote, with its compression and write times (the storage's share of the stall)
    for metric in ("bytes_written", "compress_seconds", "write_seconds"):
        assert len(labelled(df, metric, phase="overhead")) == TINY["overhead_saves"], metric
    assert (labelled(df, "bytes_written", phase="overhead")["value"] > 0).all()
    # survival, both arms: the wrapper made 1..3 tries, a failed job all 3, and followed its policy; one try alone
    for arm, most in (("wrapper", 3), ("single", 1)):
        failed = labelled(df, "job_failed", phase="survival", mode=arm)["value"].to_numpy()
        tries = labelled(df, "job_tries", phase="survival", mode=arm)["value"].to_numpy()
        assert len(failed) == TINY["survival_jobs"] and ((tries >= 1) & (tries <= most)).all()
        assert (tries[failed == 1] == most).all()
        assert (labelled(df, "wrapper_policy_followed", mode=arm)["value"] == 1).all()
    # each repair check (after a failed try that left damaged shards and has a next try) found them repaired;
    # how many there are is the injector's draw: a toy run of 4 jobs may corrupt no shard at all
    repaired = labelled(df, "shard_repaired", phase="repair")
    corrupted = labelled(df, "job_corruptions", phase="survival", mode="wrapper")["value"].sum()
    assert (repaired["value"] == 1).all() and len(repaired) <= corrupted
    assert labelled(df, "try_failed", phase="survival")["value"].sum() > 0  # the injector struck
    # the wrapper's tries again, by attempt (context for p_try^3): the same tries and failures, one first attempt
    # per job, and an attempt k > 1 only after k - 1 failed ones of that job
    attempts = labelled(df, "attempt_failed", phase="attempts")
    wrapper_tries = labelled(df, "try_failed", phase="survival", mode="wrapper")
    assert len(attempts) == len(wrapper_tries) and attempts["value"].sum() == wrapper_tries["value"].sum()
    numbers = [json.loads(s)["attempt"] for s in attempts["labels"]]
    assert numbers.count(1) == TINY["survival_jobs"] and set(numbers) <= {1, 2, 3}
    failed_at = {k: sum(v for n, v in zip(numbers, attempts["value"]) if n == k) for k in (1, 2)}
    assert numbers.count(2) == failed_at[1] and numbers.count(3) == failed_at[2]
    assert not list(out_dir.glob("checkpoints-*"))            # removed (keep_checkpoints off)
    nb = nbformat.read(notebook, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    assert "C11:" in text and "C15:" in text and "inconclusive" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)


def test_config_rejects_bad_values(tmp_path):
    with pytest.raises(ConfigError, match="dtypes"):
        FaultToleranceConfig.from_dict({"dtypes": ["float16"]})
    with pytest.raises(ConfigError, match="zstd_levels"):
        FaultToleranceConfig.from_dict({"zstd_levels": [3, 3]})
    with pytest.raises(ConfigError, match="seq_len"):
        FaultToleranceConfig.from_dict({"models": ["gpt2_tiny"], "seq_len": 1000})
    with pytest.raises(ConfigError, match="checkpoint_dir"):
        FaultToleranceConfig.from_dict({"checkpoint_dir": str(tmp_path / "nope")})


def test_estimate_counts_the_state_copies():
    from hpcbench.experiments import EXPERIMENTS

    spec = EXPERIMENTS.get("fault_tolerance")
    small = spec.estimate(FaultToleranceConfig.from_dict(TINY))
    big = spec.estimate(FaultToleranceConfig.from_dict({"models": ["gpt2_124M"], "repeats": 10}))
    assert 0 < small.memory_per_rank < big.memory_per_rank and big.memory_per_rank > 5 * 12 * 124e6
    assert small.seconds < big.seconds and "copies" in big.basis


def test_presenter_renders_the_tiny_run(tiny_run):
    from hpcbench.core.results import expand_labels
    from hpcbench.experiments import EXPERIMENTS
    from hpcbench.present.kit import ExperimentData
    from hpcbench.report.aggregate import series_stats

    df = tiny_run[0].assign(source="run")
    stats = expand_labels(series_stats(df[df["value"].notna()]))
    text = expand_labels(df[df["value"].isna() & df["text"].notna()])
    sections = EXPERIMENTS.get("fault_tolerance").present(ExperimentData("fault_tolerance", ["run"], stats, text, None))
    ids = [t.id for t in sections[0].tables]
    assert {"fault-tolerance-tiers", "fault-tolerance-levels", "fault-tolerance-stall", "fault-tolerance-recovery",
            "fault-tolerance-survival", "fault-tolerance-overhead", "fault-tolerance-attempts"} <= set(ids)
    by_attempt = sections[0].tables[ids.index("fault-tolerance-attempts")]
    assert [row[1].text for row in by_attempt.rows][0] == "1" and int(by_attempt.rows[0][2].text) == TINY["survival_jobs"]
    tiers = sections[0].tables[ids.index("fault-tolerance-tiers")]
    assert len(tiers.rows) == 4
    assert sections[0].figures and sections[0].figures[0].data


def test_a_restart_trains_even_when_the_kill_left_autograd_off(tmp_path):
    # The simulated kill is an exception raised by SIGALRM wherever the loop is; inside optimizer.step it
    # can skip torch's own restore of the grad mode. The restart must train as a new process would.
    import torch

    from hpcbench.experiments.fault_tolerance.worker import build_training, recover

    cfg = FaultToleranceConfig(models=["gpt2_tiny"], batch_size=2, seq_len=16)
    tr = build_training(cfg, "gpt2_tiny", "float32", torch.device("cpu"))
    torch.set_grad_enabled(False)  # what a kill between optimizer.step's no_grad and its finally leaves
    try:
        fresh, info, _ = recover(tr, cfg, tmp_path / "none-yet", torch.device("cpu"))
        assert info is None  # nothing saved: a restart from scratch
        assert len(fresh.train(1)) == 1 and fresh.step == 1
    finally:
        torch.set_grad_enabled(True)
