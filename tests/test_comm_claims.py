"""Verdict rules of C2, C3, C10 (config fields), C16 (topology) and C17 on synthetic records written
with the real RecordWriter; and the NCCL settings reaching the workers' environment."""

import json

import pandas as pd
import pytest

from hpcbench.claims import evaluate_claim, get_claim
from hpcbench.collectives import NCCL_GLOO_REASON, CollectivesConfig, nccl_settings_note
from hpcbench.comm_modes import IB_MTU_BUCKET_MB
from hpcbench.dist import launch
from hpcbench.errors import ConfigError
from hpcbench.results import RecordContext, RecordWriter, read_records

GPU = {"device": "cuda", "emulated": False}
CPU = {"device": "cpu", "emulated": True}


def write(tmp_path, name, experiment, rows, *, params=None, node="n0"):
    path = tmp_path / f"{name}.parquet"
    ctx = RecordContext(run_id="r1", experiment=experiment, task_id=name, params=params or {"task": name},
                        node=node, world_size=4)
    with RecordWriter(path, ctx) as writer:
        for metric, value, unit, labels, text in rows:
            for step in range(3):
                writer.add(metric, value, unit, step=step, labels=labels, text=text)
    return read_records(path)


def tput(model, mode, value, *, where=GPU, bucket=25.0, unit="images/s"):
    return ("throughput", value, unit, {"model": model, "mode": mode, "bucket_cap_mb": bucket, "scope": "total",
                                        **where}, None)


# -- C3 ------------------------------------------------------------------------------------

def test_c3_reproduced_and_not_reproduced_on_gpus(tmp_path):
    good = write(tmp_path, "a", "comm_modes", [tput("resnet50", "ddp", 12_500), tput("resnet50", "hybrid_dp_ddp", 18_700),
                                                tput("gpt2_124M", "ddp", 8_200, unit="tokens/s"),
                                                tput("gpt2_124M", "hierarchical", 11_500, unit="tokens/s")])
    row = evaluate_claim(get_claim("C3"), good)
    assert row.verdict == "reproduced"
    assert "1.496x" in row.measured and "1.402x" in row.measured
    flat = write(tmp_path, "b", "comm_modes", [tput("resnet50", "ddp", 12_500), tput("resnet50", "hierarchical", 12_700)])
    assert evaluate_claim(get_claim("C3"), flat).verdict == "not reproduced"


def test_c3_on_emulated_cpu_nodes_is_inconclusive_with_the_ratio(tmp_path):
    rows = [tput("resnet_tiny", "ddp", 100.0, where=CPU), tput("resnet_tiny", "hierarchical", 90.0, where=CPU),
            ("throughput", None, "images/s", {"model": "resnet_tiny", "mode": "hybrid_dp_ddp", **CPU},
             "not applicable: nn.DataParallel splits a batch over the GPUs one process sees; no GPU")]
    row = evaluate_claim(get_claim("C3"), write(tmp_path, "c", "comm_modes", rows))
    assert row.verdict == "inconclusive"
    assert "0.900x" in row.measured and "not applicable" in row.measured
    assert "loopback" in row.detail


def test_c3_without_ddp_baseline_is_not_measured(tmp_path):
    rows = write(tmp_path, "d", "comm_modes", [tput("resnet50", "hierarchical", 100.0)])
    assert evaluate_claim(get_claim("C3"), rows).verdict == "not measured yet"


# -- C17 -----------------------------------------------------------------------------------

def sweep(where, values):
    return [tput("gpt2_124M", "ddp", v, where=where, bucket=b, unit="tokens/s") for b, v in values.items()]


def test_c17_optimum_away_from_the_mtu_is_not_reproduced(tmp_path):
    rows = write(tmp_path, "e", "comm_modes", sweep(GPU, {IB_MTU_BUCKET_MB: 40.0, 1.0: 90.0, 25.0: 100.0}))
    row = evaluate_claim(get_claim("C17"), rows)
    assert row.verdict == "not reproduced"
    assert "optimum at 25" in row.measured and "40%" in row.measured
    assert "_DEFAULT_FIRST_BUCKET_BYTES" in row.detail


def test_c17_mtu_optimum_is_reproduced_and_cpu_is_inconclusive(tmp_path):
    best_at_mtu = write(tmp_path, "f", "comm_modes", sweep(GPU, {IB_MTU_BUCKET_MB: 100.0, 25.0: 98.0}))
    assert evaluate_claim(get_claim("C17"), best_at_mtu).verdict == "reproduced"
    cpu = write(tmp_path, "g", "comm_modes", sweep(CPU, {IB_MTU_BUCKET_MB: 40.0, 25.0: 100.0}))
    row = evaluate_claim(get_claim("C17"), cpu)
    assert row.verdict == "inconclusive" and "no InfiniBand" in row.detail


def test_c17_without_the_mtu_point_is_not_measured(tmp_path):
    rows = write(tmp_path, "h", "comm_modes", sweep(GPU, {1.0: 90.0, 25.0: 100.0}))
    row = evaluate_claim(get_claim("C17"), rows)
    assert row.verdict == "not measured yet" and "4 KiB" in row.detail


# -- C2 ------------------------------------------------------------------------------------

def scaling(device, values, regime="larger_batch"):
    return [("throughput_per_rank", v, "images/s", {"regime": regime, "factor": f, "device": device}, None)
            for f, v in values.items()]


@pytest.mark.parametrize("device, values, verdict", [
    ("cuda", {1: 100.0, 2: 180.0, 4: 330.0, 8: 340.0}, "reproduced"),
    ("cuda", {1: 100.0, 4: 150.0}, "not reproduced"),
    ("cpu", {1: 100.0, 4: 130.0, 8: 131.0}, "inconclusive"),
])
def test_c2_gain_at_4x_and_more(tmp_path, device, values, verdict):
    row = evaluate_claim(get_claim("C2"), write(tmp_path, "s", "batch_scaling", scaling(device, values)))
    assert row.verdict == verdict
    best = max(v for f, v in values.items() if f >= 4) / values[1]
    assert f"{best:.2f}x" in row.measured


def test_c2_uses_the_unaccumulated_1x_batch_as_baseline(tmp_path):
    rows = scaling("cuda", {1: 100.0, 8: 150.0}) + scaling("cuda", {1: 50.0, 8: 340.0}, regime="fixed_global_batch")
    row = evaluate_claim(get_claim("C2"), write(tmp_path, "t", "batch_scaling", rows))
    assert row.verdict == "reproduced" and "fixed_global_batch at 8x: 3.40x" in row.measured


# -- C10 and C16 ---------------------------------------------------------------------------

def busbw(value):
    labels = {"op": "all_reduce", "size_bytes": 64 << 20, "group": "inter_node", "group_index": 0, "group_ranks": 2}
    return ("busbw", value, "GB/s", labels, None)


def test_c10_reads_the_config_fields_and_the_backend_that_ran(tmp_path):
    tuned_params = CollectivesConfig.from_dict({"nccl_algo": "Tree", "nccl_buffsize": "4M", "nccl_nsocks_perthread": 4,
                                                "nccl_socket_nthreads": 8}).to_dict()
    default_params = CollectivesConfig().to_dict()
    nccl = ("backend", None, "", {}, "nccl")
    tuned = write(tmp_path, "tuned", "collectives", [busbw(12.0), nccl], params=tuned_params)
    default = write(tmp_path, "default", "collectives", [busbw(10.0), nccl], params=default_params)
    row = evaluate_claim(get_claim("C10"), pd.concat([tuned, default], ignore_index=True))
    assert row.verdict == "reproduced" and "1.20x" in row.measured
    gloo = ("backend", None, "", {}, "gloo")
    tuned = write(tmp_path, "tuned_gloo", "collectives", [busbw(12.0), gloo], params=tuned_params)
    default = write(tmp_path, "default_gloo", "collectives", [busbw(10.0), gloo], params=default_params)
    row = evaluate_claim(get_claim("C10"), pd.concat([tuned, default], ignore_index=True))
    assert row.verdict == "not measured yet" and "gloo" in row.detail


def test_c16_shows_the_topology_measured_here(tmp_path):
    params = CollectivesConfig.from_dict({"nodes": 2, "ranks_per_node": 2}).to_dict()
    rows = write(tmp_path, "topo", "collectives", [busbw(1.0)], params=params, node="vm/node1")
    row = evaluate_claim(get_claim("C16"), rows)
    assert row.verdict == "context"
    assert "topology measured here: 2 node(s) x 2 rank(s) (emulated on one machine)" in row.measured


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

    from hpcbench.collectives import run_worker

    for name in ("NCCL_ALGO", "NCCL_BUFFSIZE", "NCCL_NSOCKS_PERTHREAD", "NCCL_SOCKET_NTHREADS"):
        writer.add("env", None, "", labels={"name": name}, text=os.environ.get(name, "unset"))
    run_worker(cfg, topo, writer)


def test_nccl_settings_reach_the_workers_and_gloo_says_not_applicable(tmp_path, monkeypatch):
    from pathlib import Path

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent))
    monkeypatch.delenv("NCCL_ALGO", raising=False)
    cfg = CollectivesConfig.from_dict({"nodes": 1, "ranks_per_node": 2, "ops": "all_reduce", "groups": "world",
                                       "max_bytes": "1K", "iters": 1, "warmup_iters": 0, "backend": "gloo",
                                       "nccl_algo": "Tree", "nccl_buffsize": 4194304})
    ctx = RecordContext(experiment="collectives", params=cfg.to_dict())
    res = launch(env_entry, cfg, nodes=1, ranks_per_node=2, context=ctx, out_dir=tmp_path, echo=None)
    df = pd.concat([read_records(p) for p in res.records], ignore_index=True)
    env = {(r, json.loads(lab)["name"]): t for r, lab, t in zip(df["rank"], df["labels"], df["text"])
           if lab and "name" in lab and t}
    assert env[(0, "NCCL_ALGO")] == env[(1, "NCCL_ALGO")] == "Tree"
    assert env[(1, "NCCL_BUFFSIZE")] == "4194304" and env[(0, "NCCL_SOCKET_NTHREADS")] == "unset"
    na = df[df["metric"] == "nccl_settings"]
    assert len(na) == 1 and na["value"].isna().all() and na["text"].iloc[0] == NCCL_GLOO_REASON
    assert (df["metric"] == "busbw").any()  # gloo's own busbw is still measured
    note = nccl_settings_note(df, cfg)
    assert "not applicable" in note and "On GPUs" in note
