"""The collective benchmark: pure core against a reference, and a real 4-rank run (2 emulated nodes x 2)."""

import json

import numpy as np
import pandas as pd
import pytest

from hpcbench.core.errors import ConfigError
from hpcbench.experiments.collectives.config import NCCL_GLOO_REASON, CollectivesConfig
from hpcbench.experiments.collectives.summary import nccl_settings_note, summarize, verify_records
from hpcbench.experiments.collectives.worker import OPS, aligned_size, run_worker, size_sweep
from hpcbench.dist import launch
from hpcbench.core.errors import LaunchError
from hpcbench.core.metrics import busbw_factor
from hpcbench.core.results import RecordContext, read_records


def test_size_sweep_like_nccl_tests():
    assert size_sweep(8, 128, 2) == [8, 16, 32, 64, 128]
    assert size_sweep(1024, 5000, 4) == [1024, 4096]
    assert aligned_size(1000, 4, 4) == 992
    assert aligned_size(3, 4, 4) == 16


def _reference(op: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """What each rank must hold after the op, computed with numpy."""
    n = len(inputs)
    if op == "all_reduce":
        return [sum(inputs)] * n
    if op == "all_gather":
        return [np.concatenate(inputs)] * n
    if op == "reduce_scatter":
        return list(np.split(sum(inputs), n))
    if op == "broadcast":
        return [inputs[0]] * n
    raise AssertionError(op)


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast"])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_fill_and_expected_values_agree_with_reference(op, n):
    spec = OPS.get(op)
    elems = 12 * n
    inputs = []
    for r in range(n):
        chunks = spec.in_chunks(r, n)
        length = spec.in_elems(elems, n)
        inputs.append(np.concatenate([np.full(length // len(chunks), v) for v in chunks]))
    expected = _reference(op, inputs)
    for r in range(n):
        chunks = spec.expected_chunks(r, n)
        out_len = spec.out_elems(elems, n)
        mine = np.concatenate([np.full(out_len // len(chunks), v) for v in chunks])
        np.testing.assert_array_equal(mine, expected[r])


@pytest.fixture(scope="module")
def two_by_two(tmp_path_factory):
    out = tmp_path_factory.mktemp("coll")
    cfg = CollectivesConfig.from_dict({"nodes": 2, "ranks_per_node": 2, "min_bytes": "1K",
                                       "max_bytes": "16K", "iters": 4, "warmup_iters": 1})
    ctx = RecordContext(run_id="t", experiment="collectives", task_id="coll", params=cfg.to_dict())
    res = launch(run_worker, cfg, nodes=2, ranks_per_node=2, context=ctx, out_dir=out, echo=None)
    df = pd.concat([read_records(p) for p in res.records], ignore_index=True)
    return cfg, res, df


def test_four_ranks_produce_correct_results(two_by_two):
    cfg, res, df = two_by_two
    assert res.world_size == 4 and len(res.records) == 4
    assert sorted(df["rank"].unique()) == [0, 1, 2, 3]
    checks = df[df["metric"] == "correct"]
    # 4 ops x 3 sizes (1K, 4K, 16K) x (1 world group + 2 intra + 2 inter groups)
    assert len(checks) == 4 * 3 * 5
    assert (checks["value"] == 1.0).all()
    assert verify_records(df, cfg).ok


def test_records_name_both_emulated_nodes_and_groups(two_by_two):
    _, _, df = two_by_two
    assert df["node"].str.endswith("/node0").any() and df["node"].str.endswith("/node1").any()
    labels = df[df["metric"] == "busbw"]["labels"].map(json.loads)
    assert {lab["group"] for lab in labels} == {"world", "intra_node", "inter_node"}
    assert {lab["group_ranks"] for lab in labels if lab["group"] == "world"} == {4}
    assert {lab["group_ranks"] for lab in labels if lab["group"] != "world"} == {2}


def test_busbw_is_algbw_times_factor_per_iteration(two_by_two):
    _, _, df = two_by_two
    keyed = df.assign(key=df["labels"] + df["step"].astype(str) + df["rank"].astype(str))
    alg = keyed[keyed["metric"] == "algbw"].set_index("key")["value"]
    bus = keyed[keyed["metric"] == "busbw"].set_index("key")
    t = keyed[keyed["metric"] == "time"].set_index("key")["value"]
    for key, row in bus.iterrows():
        lab = json.loads(row["labels"])
        assert row["value"] == pytest.approx(alg[key] * busbw_factor(lab["op"], lab["group_ranks"]))
        assert alg[key] == pytest.approx(lab["size_bytes"] / t[key] / 1e9)


def test_summary_has_p50_p99(two_by_two):
    _, _, df = two_by_two
    s = summarize(df)
    assert set(s["group"]) == {"world", "intra_node", "inter_node"}
    assert (s["time_p99_us"] >= s["time_p50_us"]).all()
    world = s[(s["op"] == "all_reduce") & (s["group"] == "world")]
    assert (world["iterations"] == 4).all()


def test_single_node_marks_inter_node_not_applicable(tmp_path):
    cfg = CollectivesConfig.from_dict({"nodes": 1, "ranks_per_node": 2, "ops": "all_reduce",
                                       "groups": "inter_node", "max_bytes": "1K", "iters": 1})
    ctx = RecordContext(experiment="collectives", params=cfg.to_dict())
    res = launch(run_worker, cfg, nodes=1, ranks_per_node=2, context=ctx, out_dir=tmp_path, echo=None)
    df = pd.concat([read_records(p) for p in res.records])
    na = df[df["text"].fillna("").str.startswith("not applicable")]
    assert len(na) == 1 and np.isnan(na["value"].iloc[0])
    assert not (df["metric"] == "time").any()  # no number was made up


def test_failing_ranks_raise_with_log_tail(tmp_path):
    cfg = CollectivesConfig.from_dict({"nodes": 2, "ranks_per_node": 2, "max_bytes": "1K"})
    ctx = RecordContext(experiment="collectives", params=cfg.to_dict())
    with pytest.raises(LaunchError) as exc:
        launch(run_worker, cfg, nodes=1, ranks_per_node=2, context=ctx, out_dir=tmp_path, echo=None)
    assert "config asks for 2 x 2" in str(exc.value)
    assert exc.value.log_path and (tmp_path / "logs" / "collectives.log").is_file()


# -- NCCL settings in the collectives config ---------------------------------------------

def test_nccl_fields_become_worker_env_and_are_checked():
    cfg = CollectivesConfig.from_dict({"nccl_algo": "Tree", "nccl_buffsize": "4M", "nccl_nsocks_perthread": 4,
                                       "nccl_socket_nthreads": 8})
    assert cfg.worker_env() == {"NCCL_ALGO": "Tree", "NCCL_BUFFSIZE": "4194304", "NCCL_NSOCKS_PERTHREAD": "4",
                                "NCCL_SOCKET_NTHREADS": "8"}
    assert CollectivesConfig().worker_env() == {}
    with pytest.raises(ConfigError) as exc:
        CollectivesConfig.from_dict({"nccl_algo": "Butterfly"})
    assert exc.value.field == "nccl_algo"
    with pytest.raises(ConfigError) as exc:
        CollectivesConfig.from_dict({"nccl_nsocks_perthread": 16, "nccl_socket_nthreads": 8})
    assert exc.value.field == "nccl_socket_nthreads" and "64" in str(exc.value)


def env_entry(cfg, topo, writer):
    """Records the NCCL variables the rank sees, then runs the collectives worker."""
    import os

    from hpcbench.experiments.collectives.worker import run_worker

    for name in ("NCCL_ALGO", "NCCL_BUFFSIZE", "NCCL_NSOCKS_PERTHREAD", "NCCL_SOCKET_NTHREADS"):
        writer.add("env", None, "", labels={"name": name}, text=os.environ.get(name, "unset"))
    run_worker(cfg, topo, writer)


def test_nccl_settings_reach_the_workers_and_gloo_says_not_applicable(tmp_path, monkeypatch):
    from pathlib import Path

    monkeypatch.setenv("PYTHONPATH", f"{Path(__file__).resolve().parent}:{Path(__file__).resolve().parents[2]}")
    monkeypatch.delenv("NCCL_ALGO", raising=False)
    cfg = CollectivesConfig.from_dict({"nodes": 1, "ranks_per_node": 2, "ops": "all_reduce", "groups": "world",
                                       "max_bytes": "1K", "iters": 1, "warmup_iters": 0, "backend": "gloo",
                                       "nccl_algo": "Tree", "nccl_buffsize": 4194304})
    ctx = RecordContext(experiment="collectives", params=cfg.to_dict())
    res = launch(env_entry, cfg, nodes=1, ranks_per_node=2, context=ctx, out_dir=tmp_path, echo=None)
    df = pd.concat([read_records(p) for p in res.records], ignore_index=True)
    rows = df[df["metric"] == "env"]
    env = {(r, json.loads(lab)["name"]): t for r, lab, t in zip(rows["rank"], rows["labels"], rows["text"])}
    assert env[(0, "NCCL_ALGO")] == env[(1, "NCCL_ALGO")] == "Tree"
    assert env[(1, "NCCL_BUFFSIZE")] == "4194304" and env[(0, "NCCL_SOCKET_NTHREADS")] == "unset"
    na = df[df["metric"] == "nccl_settings"]
    assert len(na) == 1 and na["value"].isna().all() and na["text"].iloc[0] == NCCL_GLOO_REASON
    assert (df["metric"] == "busbw").any()  # gloo's own busbw is still measured
    note = nccl_settings_note(df, cfg)
    assert "not applicable" in note and "On GPUs" in note
