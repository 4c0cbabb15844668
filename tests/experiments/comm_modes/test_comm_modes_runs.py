"""Communication modes: config errors before any process starts, the hooks' sums on 4 ranks
(2 emulated nodes x 2), gradients equal to plain DDP's for every mode that runs, hybrid's
"not applicable" on CPU, and the records of the comm-share and bucket-sweep measurements."""

import copy
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hpcbench.core.errors import ConfigError, RegistryError
from hpcbench.core.results import RecordContext, read_records
from hpcbench.dist import Topology, launch
from hpcbench.experiments.comm_modes.config import IB_MTU_BUCKET_MB, CommModesConfig
from hpcbench.experiments.comm_modes.summary import bucket_findings, mode_gains, summarize, verify_records
from hpcbench.experiments.comm_modes.worker import compare_gradients, run_worker
from hpcbench.parallel.hooks import padded_length
from hpcbench.parallel.modes import check_layout, hybrid_not_applicable_reason

#: The workers import hooks_entry from this file (its folder) and this file's imports (tests/).
WORKER_PATH = f"{Path(__file__).resolve().parent}:{Path(__file__).resolve().parents[2]}"


# -- bad input, before any process starts ----------------------------------------------

@pytest.mark.parametrize("values, field, words", [
    ({"modes": ["ddp", "ring_of_fire"]}, "modes", "ring_of_fire"),
    ({"models": ["gpt5"]}, "models", "gpt5"),
    ({"bucket_cap_mb": [25, 0]}, "bucket_cap_mb", "> 0"),
    ({"bucket_cap_mb": [-1.0]}, "bucket_cap_mb", "> 0"),
    ({"bucket_cap_mb": []}, "bucket_cap_mb", "empty"),
    ({"modes": ["hierarchical"], "nodes": 1, "ranks_per_node": 4}, "modes", "2 nodes and 2 ranks per node"),
    ({"modes": ["hierarchical_leader"], "nodes": 4, "ranks_per_node": 1}, "modes", "two-level"),
    ({"nodes": 1, "ranks_per_node": 1, "modes": ["ddp"]}, "ranks_per_node", "at least 2 ranks"),
    ({"models": ["gpt2_tiny"], "seq_len": 512}, "seq_len", "block size 128"),
])
def test_bad_config_names_the_field(values, field, words):
    with pytest.raises(ConfigError) as exc:
        CommModesConfig.from_dict(values)
    assert exc.value.field == field and words in str(exc.value)


def test_topology_the_mode_cannot_use():
    # 2 nodes x 3 ranks declared while the world has 4 ranks
    with pytest.raises(ConfigError) as exc:
        check_layout("hierarchical", Topology(nodes=2, ranks_per_node=3), world_size=4)
    assert exc.value.field == "topology" and "world has 4 ranks" in str(exc.value)
    with pytest.raises(ConfigError, match="two-level"):
        check_layout("hierarchical", Topology(nodes=1, ranks_per_node=4), world_size=4)
    with pytest.raises(RegistryError, match="registered: ddp, hierarchical"):
        check_layout("allgather_party", Topology(nodes=2, ranks_per_node=2), world_size=4)
    assert check_layout("ddp", Topology(nodes=2, ranks_per_node=2), world_size=4).name == "ddp"


def test_padding_and_hybrid_reasons():
    assert [padded_length(n, 2) for n in (1, 2, 7, 8)] == [2, 2, 8, 8]
    assert padded_length(10, 4) == 12
    assert "sees no GPU" in hybrid_not_applicable_reason(0, 2)
    assert "1 each" in hybrid_not_applicable_reason(8, 8)
    assert hybrid_not_applicable_reason(8, 1) is None


def test_mtu_bucket_is_4_kib():
    assert int(IB_MTU_BUCKET_MB * (1 << 20)) == 4096


# -- the hooks' arithmetic on 4 ranks -----------------------------------------------------

def hooks_entry(cfg, topo, writer):
    """Runs on every rank: sums of odd lengths through both two-level reductions, a model whose
    one bucket has an odd length through parallelize, and a wrong topology."""
    import torch
    import torch.distributed as dist

    from hpcbench.parallel.hooks import HierarchicalState, hierarchical_allreduce_, leader_allreduce_
    from hpcbench.parallel.modes import parallelize

    state = HierarchicalState.from_topology(topo)
    world = topo.world_size
    # intra-node stages by all-reduce (the CPU default) and by reduce-scatter / all-gather (the GPU path)
    for via in (True, False):
        state.intra_via_allreduce = via
        for name, fn in (("hierarchical", hierarchical_allreduce_), ("leader", leader_allreduce_)):
            for n in (1, 7, 10):
                t = torch.arange(1, n + 1, dtype=torch.float32) * (topo.rank + 1)
                fn(t, state)
                want = torch.arange(1, n + 1, dtype=torch.float32) * (world * (world + 1) / 2)
                writer.add("sum_ok", float(torch.equal(t, want)), "bool", labels={"fn": name, "n": n, "via": via})
    state.intra_via_allreduce = None
    # 3x3 weights, no bias: one bucket of 9 elements, padded to 10 for the 2-rank reduce-scatter
    torch.manual_seed(0)
    base = torch.nn.Linear(3, 3, bias=False)
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(topo.rank))
    ref = parallelize(copy.deepcopy(base), "ddp", topo)
    ref(x).square().sum().backward()
    for mode in ("hierarchical", "hierarchical_leader"):
        m = parallelize(copy.deepcopy(base), mode, topo, state=state)
        m(x).square().sum().backward()
        diff, ok = compare_gradients([p.grad for p in m.parameters()], [p.grad for p in ref.parameters()])
        writer.add("odd_bucket_match", float(ok), "bool", labels={"mode": mode, "diff": diff})
    writer.add("padded_elements", state.padded_elements, "")
    try:
        parallelize(copy.deepcopy(base), "hierarchical", Topology(nodes=2, ranks_per_node=3), state=state)
    except ConfigError as exc:
        writer.add("wrong_topology", None, "", text=str(exc))
    dist.barrier()


@pytest.fixture(scope="module")
def hooks_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("hooks")
    cfg = CommModesConfig.from_dict({"models": ["gpt2_tiny"]})
    ctx = RecordContext(experiment="hooks_check", params=cfg.to_dict())
    mp = pytest.MonkeyPatch()
    mp.setenv("PYTHONPATH", WORKER_PATH)
    try:
        res = launch(hooks_entry, cfg, nodes=2, ranks_per_node=2, context=ctx, out_dir=out, tag="hooks", echo=None)
    finally:
        mp.undo()
    return pd.concat([read_records(p) for p in res.records], ignore_index=True)


def test_two_level_sums_are_exact_for_odd_lengths(hooks_run):
    sums = hooks_run[hooks_run["metric"] == "sum_ok"]
    assert len(sums) == 4 * 2 * 2 * 3 and (sums["value"] == 1.0).all()
    assert (hooks_run[hooks_run["metric"] == "padded_elements"]["value"] > 0).all()


def test_odd_bucket_gradients_equal_ddp(hooks_run):
    match = hooks_run[hooks_run["metric"] == "odd_bucket_match"]
    assert len(match) == 4 * 2 and (match["value"] == 1.0).all()


def test_parallelize_rejects_a_topology_that_does_not_fit_the_world(hooks_run):
    wrong = hooks_run[hooks_run["metric"] == "wrong_topology"]
    assert len(wrong) == 4
    assert all("topology" in t and "world has 4 ranks" in t for t in wrong["text"])


# -- the experiment on 4 ranks ------------------------------------------------------------

@pytest.fixture(scope="module")
def modes_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("modes")
    cfg = CommModesConfig.from_dict({"models": ["gpt2_tiny", "resnet_tiny"], "batch_size": 4,
                                     "bucket_cap_mb": [25, IB_MTU_BUCKET_MB], "steps": 2, "warmup_steps": 1})
    ctx = RecordContext(experiment="comm_modes", params=cfg.to_dict())
    res = launch(run_worker, cfg, nodes=2, ranks_per_node=2, context=ctx, out_dir=out, echo=None)
    return cfg, pd.concat([read_records(p) for p in res.records], ignore_index=True)


def _labels(frame):
    return frame["labels"].map(json.loads)


def test_every_mode_that_runs_gives_ddp_gradients(modes_run):
    cfg, df = modes_run
    match = df[df["metric"] == "grad_match"]
    ran = match[match["value"].notna()]
    combos = {(lab["model"], lab["mode"], lab["bucket_cap_mb"]) for lab in _labels(ran)}
    assert combos == {(m, mode, b) for m in cfg.models for mode in ("ddp", "hierarchical", "hierarchical_leader")
                      for b in cfg.bucket_cap_mb}
    assert (ran["value"] == 1.0).all()
    diffs = df[df["metric"] == "grad_max_abs_diff"]["value"]
    assert (diffs < 1e-5).all()


def test_hybrid_is_not_applicable_on_cpu_with_the_reason(modes_run):
    _, df = modes_run
    hybrid = df[_labels(df).map(lambda lab: lab.get("mode") == "hybrid_dp_ddp")]
    assert len(hybrid) and hybrid["value"].isna().all()
    assert hybrid["text"].str.startswith("not applicable: nn.DataParallel").all()
    assert hybrid["text"].str.contains("sees no GPU").all()
    assert set(hybrid["metric"]) == {"throughput", "step_time", "comm_share", "grad_match"}


def test_comm_share_and_bucket_sweep_records(modes_run):
    cfg, df = modes_run
    s = summarize(df)
    ran = s[s["note"] == ""]
    assert len(ran) == 2 * 3 * 2 and (ran["steps"] == cfg.steps).all()
    assert ran[["throughput_total_p50", "step_p50_ms", "noop_step_p50_ms", "comm_share_p50"]].notna().all().all()
    assert (ran["comm_share_p50"] < 1).all()
    # total = world x per rank
    np.testing.assert_allclose(ran["throughput_total_p50"], 4 * ran["throughput_rank_p50"], rtol=1e-9)
    assert set(ran["unit"]) == {"tokens/s", "images/s"}
    # an MTU-sized cap gives many more buckets than DDP's default 25 MiB (one bucket for these models)
    for model in cfg.models:
        m = ran[(ran["model"] == model) & (ran["mode"] == "ddp")].set_index("bucket_cap_mb")
        assert m.loc[IB_MTU_BUCKET_MB, "buckets"] > m.loc[25.0, "buckets"]
    assert verify_records(df, cfg).ok
    gains = mode_gains(s)
    assert (gains[gains["mode"] == "ddp"]["ratio_vs_ddp"].dropna() == 1.0).all()
    findings = bucket_findings(s)
    assert any("4 KiB (IB MTU) bucket" in f for f in findings)
    assert any("_DEFAULT_FIRST_BUCKET_BYTES" in f for f in findings)
    steps = df[(df["metric"] == "step_time") & df["value"].notna()]
    assert {lab["comm"] for lab in _labels(steps)} == {"mode", "noop"}


def test_the_first_resnet_records_its_regime_without_a_cluster_to_steer(modes_run):
    from hpcbench.judge.evidence import facts_of

    _, df = modes_run
    facts = facts_of(df)
    assert facts["regime.model"] == "resnet_tiny"
    assert facts["regime.target_busy"] == pytest.approx(0.158, abs=1e-3)
    # Recorded, not judged: a busy share of 4 oversubscribed ranks is noise (a no-op twin can take longer than the
    # step itself: 1.66 once under load), so only that it is a measured, positive number is asserted here.
    reached = facts["regime.reached_busy"]
    assert math.isfinite(reached) and reached > 0 and facts["regime.link_rate_bps"] is None  # NaN: not shaped
    (note,) = df[df["metric"] == "regime_calibration"]["text"]
    assert "not steered: no emulated cluster" in note and "judged steps: resnet_tiny ddp" in note


def test_comm_modes_notebook_runs_tiny(tmp_path):
    from conftest import execute_notebook

    df, _ = execute_notebook("comm_modes", tmp_path, models=["gpt2_tiny"], modes=["ddp", "hierarchical", "hybrid_dp_ddp"],
                     bucket_cap_mb=[25.0, IB_MTU_BUCKET_MB], steps=2, warmup_steps=1, batch_size=2, seq_len=32)
    assert (df[df["metric"] == "grad_match"]["value"].dropna() == 1.0).all()
    nb = __import__("nbformat").read(tmp_path / "comm_modes.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "PASS" in text and "C3: implausible as stated" in text and "C17: inconclusive" in text
    assert "4 KiB (IB MTU) bucket" in text
    assert any("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
