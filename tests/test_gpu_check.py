"""The GPU check on a CPU: its no-GPU exit, table, FLOPs/MFU arithmetic, records round trip, and
each check's code path run on the CPU (gloo instead of NCCL, tiny models instead of the real ones)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from hpcbench.core.metrics import peak_dense_bf16_flops
from hpcbench.core.results import RecordContext, read_records
from hpcbench.bench import gpu_check as gc
from conftest import REPO


# -- without a GPU ------------------------------------------------------------------------------

def test_no_gpu_prints_the_message_and_exits_with_the_documented_code(tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, "-m", "hpcbench", "gpu-check", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert done.returncode == gc.NO_GPU_EXIT == 0, done.stderr
    assert done.stdout.strip() == "no CUDA GPU present: nothing to check"
    assert not (tmp_path / "o").exists()


def test_makefile_has_the_target():
    text = (REPO / "Makefile").read_text()
    assert "gpu-check:" in text
    assert "hpcbench gpu-check --out results/gpu-check" in text


# -- FLOPs and MFU, by hand -----------------------------------------------------------------------

def test_resnet50_train_flops_by_hand():
    # 3 x 2 FLOPs x 4.09e9 multiply-adds x 128 images = 3.14112e12
    assert gc.resnet50_train_flops(128) == pytest.approx(3.14112e12)
    assert gc.resnet50_train_flops(128, image_size=112) == pytest.approx(3.14112e12 / 4)


def test_resnet50_constant_matches_torch_flop_counter():
    from torch.utils.flop_counter import FlopCounterMode

    from hpcbench.models import MODELS

    with torch.device("meta"):
        model = MODELS.get("resnet50").build()
        x = torch.empty(1, 3, 224, 224)
    with FlopCounterMode(display=False) as counter:
        model(x)
    assert counter.get_total_flops() == pytest.approx(2 * gc.RESNET50_FORWARD_MACS_224, rel=0.005)


def test_gpt2_124m_flops_by_hand():
    from hpcbench.models.gpt2 import gpt2

    with torch.device("meta"):
        model = gpt2("124M")
    # 124,439,808 parameters (tied head once) minus wpe 1024 x 768
    assert gc.gpt2_counted_params(model) == 124_439_808 - 786_432 == 123_653_376
    # 6 N = 741,920,256; 12 L H Q T = 12 x 12 x 12 x 64 x 1024 = 113,246,208
    per_token = gc.gpt2_flops_per_token(123_653_376, n_layer=12, n_head=12, head_dim=64, seq_len=1024)
    assert per_token == 855_166_464
    plan = gc.TrainPlan("gpt2_124M", batch_size=16, seq_len=1024)
    step = gc.STEP_FLOPS["gpt2_124M"](model, plan)
    assert step == 855_166_464 * 16 * 1024 == 14_011_047_346_176
    # 14.011 TFLOP in 0.1 s on a 989.4 TFLOP/s part
    assert gc.mfu(step, 0.1, 989.4e12) == pytest.approx(0.141611, rel=1e-5)


def test_mfu_without_a_peak_is_none_and_rejects_bad_times():
    assert gc.mfu(1e12, 0.5, None) is None
    assert gc.mfu(1e12, 0.5, 4e12) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="positive"):
        gc.mfu(1e12, 0.0, 1e15)


@pytest.mark.parametrize("name,peak", [
    ("NVIDIA H200", 989.4e12), ("NVIDIA H100 80GB HBM3", 989.4e12), ("NVIDIA H100 PCIe", 756e12),
    ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA A100 80GB PCIe", 312e12),
    ("NVIDIA H200 NVL", None), ("Tesla V100-SXM2-32GB", None),
])
def test_peak_table_lookup(name, peak):
    assert peak_dense_bf16_flops(name) == peak


# -- the table --------------------------------------------------------------------------------------

def test_format_table_columns_errors_and_summary():
    results = [
        gc.CheckResult("train_resnet50", "pass", "2,950 images/s, MFU 7.3%", 12.34),
        gc.CheckResult("nccl_world1", "fail", "", 3.0, error="AssertionError: child exited with 1\nlong tail"),
        gc.CheckResult("cuda_memory_records", "skip", "", 0.0, error="CUDA memory statistics need a GPU"),
    ]
    lines = gc.format_table(results).splitlines()
    assert [c.strip() for c in lines[0].split("|")] == ["check", "result", "key number", "seconds"]
    assert set(lines[1]) <= {"-", "+"}
    assert [c.strip() for c in lines[2].split("|")] == ["train_resnet50", "pass", "2,950 images/s, MFU 7.3%", "12.3"]
    assert [c.strip() for c in lines[3].split("|")] == ["nccl_world1", "fail", "AssertionError: child exited with 1",
                                                        "3.0"]
    assert lines[4].split("|")[1].strip() == "skip"
    assert lines[-1] == "1 passed, 1 failed, 1 skipped"
    # columns line up: every row has its separators where the header has them
    bars = [i for i, ch in enumerate(lines[0]) if ch == "|"]
    assert all([i for i, ch in enumerate(line) if ch == "|"] == bars for line in lines[2:5])
    assert gc.exit_code(results) == gc.FAILED_EXIT == 1
    assert gc.exit_code([results[0], results[2]]) == 0


def test_long_errors_are_cut_in_the_table_only(tmp_path):
    long = "RuntimeError: " + "x" * 500
    r = gc.CheckResult("c", "fail", error=long)
    row = gc.format_table([r]).splitlines()[2]
    assert len(row) < 160 and "x... |" in row
    path = gc.write_table_json([r], tmp_path / "t.json", {"device": "cpu"})
    assert json.loads(path.read_text())["checks"][0]["error"] == long


def test_result_status_is_validated():
    with pytest.raises(ValueError, match="result"):
        gc.CheckResult("c", "ok")


def test_table_json_writes_nan_as_null(tmp_path):
    r = gc.CheckResult("c", "pass", "k", 1.0, details={"mfu": float("nan"), "step_s": [0.1, 0.2]})
    data = json.loads(gc.write_table_json([r], tmp_path / "t.json", {"device": "x"}).read_text())
    assert data["checks"][0]["details"] == {"mfu": None, "step_s": [0.1, 0.2]}
    assert data["exit_code"] == 0 and data["system"] == {"device": "x"}


def test_a_raising_check_fails_alone_and_the_others_run(tmp_path, capsys):
    def boom(ctx):
        raise RuntimeError("device fell off the bus")

    def skip(ctx):
        raise gc.SkipCheck("needs a GPU")

    checks = (gc.Check("boom", boom), gc.Check("skipped", skip),
              gc.Check("fine", lambda ctx: gc.CheckResult("", "pass", "42")))
    ctx = gc.CheckContext(device=torch.device("cpu"), out_dir=tmp_path)
    results = gc.run_checks(checks, ctx, echo=lambda s: None)
    assert [(r.check, r.result) for r in results] == [("boom", "fail"), ("skipped", "skip"), ("fine", "pass")]
    assert results[0].error == "RuntimeError: device fell off the bus"
    assert "device fell off the bus" in capsys.readouterr().err  # the traceback is printed at once


# -- records round trip -------------------------------------------------------------------------

def test_records_round_trip(tmp_path):
    rows = [gc.Row("step_time", 0.0123, "s", step=i, labels={"model": "resnet50"}) for i in range(3)]
    rows += [gc.Row("cuda_max_memory_allocated", 12_884_901_888, "B", labels={"model": "gpt2_124M"}, text="how"),
             gc.Row("mfu", None, "fraction", labels={"model": "x"}, text="not applicable: no peak")]
    ctx = RecordContext(run_id="r", suite="gpu-check", experiment="gpu_check", params={"quick": True})
    path = tmp_path / "records" / gc.RECORDS_NAME
    assert gc.write_and_read_back(rows, path, ctx) == 5
    frame = read_records(path)
    mem = frame[frame["metric"] == "cuda_max_memory_allocated"]
    assert mem["value"].tolist() == [12_884_901_888.0] and mem["unit"].tolist() == ["B"]
    assert math.isnan(frame[frame["metric"] == "mfu"]["value"].iloc[0])


def test_memory_check_skips_without_cuda(tmp_path):
    ctx = gc.CheckContext(device=torch.device("cpu"), out_dir=tmp_path)
    assert gc.run_check(gc.Check("m", gc.check_memory_records), ctx, echo=lambda s: None).result == "skip"


# -- each check's code path on the CPU ----------------------------------------------------------------

@pytest.mark.parametrize("plan", [
    gc.TrainPlan("gpt2_tiny", batch_size=2, warmup=1, steps=2, seq_len=32),
    gc.TrainPlan("resnet_tiny", batch_size=2, warmup=1, steps=2, image_size=32),
])
def test_training_measurement_on_cpu(tmp_path, plan):
    ctx = gc.CheckContext(device=torch.device("cpu"), out_dir=tmp_path)
    result = gc.measure_training(plan, ctx)
    assert result.result == "pass", result.error
    assert len(result.details["step_s"]) == 2 and all(t > 0 for t in result.details["step_s"])
    assert all(math.isfinite(v) for v in result.details["losses"])
    assert result.details["mfu"] is None and "MFU n/a" in result.key  # no peak for a CPU
    if plan.model == "gpt2_tiny":
        assert result.details["flops_per_step"] > 0
    assert [r.step for r in ctx.rows if r.metric == "step_time"] == [0, 1]


def test_training_runs_the_experiments_tuned_step_and_reports_its_first_step_apart(tmp_path):
    plan = gc.TrainPlan("resnet_tiny", batch_size=2, warmup=2, steps=2, image_size=32)
    ctx = gc.CheckContext(device=torch.device("cpu"), out_dir=tmp_path)
    result = gc.measure_training(plan, ctx)
    assert result.result == "pass", result.error
    settings = result.details["settings"]
    assert (settings["dtype"], settings["channels_last"], settings["optimizer"]) == ("bfloat16", True, "adamw")
    (first,) = [r for r in ctx.rows if r.metric == "first_step_time"]
    assert first.value == result.details["first_step_s"] > 0 and "cuDNN" in first.text
    assert first.labels["compiled"] is False and "batch 2" in result.key
    assert not [r for r in ctx.rows if r.metric == "micro_batch"]  # chosen from memory only on a GPU
    # the new rows and labels go through the records file as the GPU run writes them
    context = RecordContext(run_id="r", suite="gpu-check", experiment="gpu_check", params={"quick": True})
    assert gc.write_and_read_back(ctx.rows, tmp_path / gc.RECORDS_NAME, context) == len(ctx.rows)
    frame = read_records(tmp_path / gc.RECORDS_NAME)
    assert set(frame["metric"]) == {"step_time", "throughput", "mfu", "first_step_time"}


def test_the_gpu_plans_choose_their_batch_from_memory_and_compile_on_request():
    full = gc.gpu_plans(quick=False)
    assert {p.max_batch_size for p in full.values()} == {512, 64} and not any(p.compile for p in full.values())
    assert all(p.max_batch_size is None and p.compile for p in gc.gpu_plans(quick=True, compile=True).values())
    with pytest.raises(ValueError, match="first step compiles"):
        gc.TrainPlan("gpt2_tiny", batch_size=2, warmup=0, compile=True)
    with pytest.raises(ValueError, match="max_batch_size"):
        gc.TrainPlan("gpt2_tiny", batch_size=8, max_batch_size=4)


def test_prefetch_check_on_cpu(tmp_path):
    ctx = gc.CheckContext(device=torch.device("cpu"), out_dir=tmp_path)
    result = gc.check_prefetch(ctx)
    assert result.result == "pass" and result.details["batches"] == 8


def test_world1_worker_on_gloo(tmp_path):
    ctx = gc.CheckContext(device=torch.device("cpu"), out_dir=tmp_path, backend="gloo")
    result = gc.check_nccl_world1(ctx)
    assert result.result == "pass", result.error
    assert result.key == "gloo, 4/4 ops correct"


def test_hooks_worker_on_gloo(tmp_path):
    ctx = gc.CheckContext(device=torch.device("cpu"), out_dir=tmp_path, backend="gloo")
    result = gc.check_hooks_world1(ctx)
    assert result.result == "pass", result.error
    assert set(result.details["checks"]) >= {"pack_unpack", "error_feedback", "uint8_collectives", "hook_quant2bit",
                                             "hook_powersgd", "hook_fp16", "no_sync_accumulation"}


def test_launcher_path_on_gloo(tmp_path):
    ctx = gc.CheckContext(device=torch.device("cpu"), out_dir=tmp_path, backend="gloo")
    result = gc.check_nccl_launcher(ctx)
    assert result.result == "pass", result.error
    assert result.key.startswith("8/8 op x size correct, all_reduce 4 MiB p50 ")
    assert (tmp_path / "nccl-launcher" / "logs" / "nccl-launcher.log").exists()


def test_nvml_sampler_check_skips_without_cuda(tmp_path):
    ctx = gc.CheckContext(device=torch.device("cpu"), out_dir=tmp_path)
    result = gc.run_check(gc.Check("nvml_sampler", gc.check_nvml_sampler), ctx, echo=lambda _: None)
    assert result.result == "skip" and "NVIDIA GPU" in result.error
