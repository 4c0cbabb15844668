"""Diagnostics (T-diag): the step breakdown, profiler traces, divergence checks on 2 real gloo ranks,
their use in the comm_modes experiment, and the Lustre inventory checks with a fake ``lfs``."""

import gzip
import json
import math
import os
import stat
import statistics
import time
from pathlib import Path

import pandas as pd
import pytest

from hpcbench.core.errors import ConfigError, HpcbenchError, ResultsError
from hpcbench.core.results import PATH_UNIT, RecordContext, RecordWriter, read_records
from hpcbench.diag import (PHASES, ClipStats, StepTimer, StepTimerError, breakdown_records,
                           clip_gradients, disable_tf32, jitter, parameter_checksum, profile_steps, tf32_state,
                           trace_summary, write_breakdown)
from hpcbench.diag import divergence
from hpcbench.system.inventory import ABSENT, collect_inventory, parse_lfs_df, parse_lfs_getstripe

torch = pytest.importorskip("torch")

WORLD = 2
#: Rank 1's extra backward time in the exposed-communication test.
SLOW_S = 0.4


def _tiny(seed: int):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


# -- step breakdown ---------------------------------------------------------------------------------

def test_jitter_is_the_sample_std_over_the_mean():
    xs = [1.0, 2.0, 3.0, 4.0]
    assert jitter(xs) == pytest.approx(statistics.stdev(xs) / 2.5)
    assert jitter(xs) > statistics.pstdev(xs) / 2.5  # not the population form
    assert jitter([0.5, 0.5]) == 0.0
    assert math.isnan(jitter([0.5]))
    for bad in ([], [0.0, 0.0]):
        with pytest.raises(ConfigError, match="step_times"):
            jitter(bad)


def test_cpu_step_timer_phases_add_up_to_the_step():
    model = _tiny(0)
    timer = StepTimer("cpu")
    for _ in range(3):
        with timer.phase("data_wait"):
            x = torch.randn(4, 8)
            time.sleep(0.01)
        with timer.phase("forward"):
            loss = model(x).square().mean()
        timer.backward(loss)
        with timer.phase("optimizer"), torch.no_grad():  # plain SGD (torch.optim imports dynamo: seconds)
            for p in model.parameters():
                p -= 0.1 * p.grad
                p.grad = None
        step = timer.end_step()
        assert list(step) == [*PHASES, "other", "step"]
        assert step["data_wait"] >= 0.009 and all(step[p] >= 0 for p in PHASES)
        assert step["other"] >= -1e-9
        assert sum(step[p] for p in (*PHASES, "other")) == pytest.approx(step["step"])
        # no DDP: nothing is left to wait for once the gradients are computed
        assert step["comm_wait"] < step["step"]
    assert len(timer.steps) == 3
    # a phase repeated within one step adds up; a phase not timed is absent, never 0
    for _ in range(2):
        with timer.phase("forward"):
            time.sleep(0.005)
    step = timer.end_step()
    assert set(step) == {"forward", "other", "step"} and step["forward"] >= 0.009


def test_step_timer_misuse_names_the_problem():
    timer = StepTimer("cpu")
    with pytest.raises(ConfigError, match="'fwd' is not a phase"):
        with timer.phase("fwd"):
            pass
    with pytest.raises(StepTimerError, match="inside phase 'forward'"):
        with timer.phase("forward"):
            with timer.phase("backward"):
                pass
    timer._marks.clear()
    with pytest.raises(StepTimerError, match="no phase"):
        timer.end_step()
    assert isinstance(StepTimerError("x"), HpcbenchError)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU-only: CUDA event timing needs a CUDA device")
def test_cuda_step_timer_uses_events():  # pragma: no cover - GPU-only
    model = _tiny(0).cuda()
    timer = StepTimer("cuda")
    x = torch.randn(256, 8, device="cuda")
    with timer.phase("forward"):
        loss = model(x).square().mean()
    timer.backward(loss)
    step = timer.end_step()
    assert timer.cuda and step["forward"] > 0 and step["backward"] > 0 and step["comm_wait"] >= 0


def test_breakdown_rows_follow_the_results_schema(tmp_path):
    steps = [{"forward": 0.1, "backward": 0.2, "comm_wait": 0.05, "other": 0.01, "step": 0.36},
             {"forward": 0.1, "backward": 0.3, "comm_wait": 0.0, "other": 0.02, "step": 0.42}]
    rows = breakdown_records(steps, {"model": "m"}, not_measured={"data_wait": "synthetic data"})
    phases = [r for r in rows if r["metric"] == "step_phase_seconds" and r["value"] is not None]
    assert len(phases) == 2 * 4 and {r["labels"]["phase"] for r in phases} == {"forward", "backward", "comm_wait",
                                                                               "other"}
    assert [r["value"] for r in rows if r["metric"] == "step_seconds"] == [0.36, 0.42]
    absent = [r for r in rows if r["value"] is None and r["metric"] == "step_phase_seconds"]
    assert absent[0]["labels"]["phase"] == "data_wait" and absent[0]["text"].startswith("not measured")
    (jit,) = [r for r in rows if r["metric"] == "step_jitter"]
    assert jit["value"] == pytest.approx(jitter([0.36, 0.42])) and jit["unit"] == "fraction"
    with RecordWriter(tmp_path / "b.parquet", RecordContext(experiment="x")) as writer:
        assert write_breakdown(writer, steps, {"model": "m"}) == len(rows) - 1
    df = read_records(tmp_path / "b.parquet")
    assert set(df["metric"]) == {"step_phase_seconds", "step_seconds", "step_jitter"}
    assert df[df["metric"] == "step_seconds"]["step"].tolist() == [0, 1]
    with pytest.raises(ConfigError, match="not_measured"):
        breakdown_records(steps, not_measured={"loading": "x"})


# -- traces -----------------------------------------------------------------------------------------

def test_profile_steps_writes_a_chrome_trace_per_rank(tmp_path):
    model = _tiny(0)
    timer = StepTimer("cpu")
    with profile_steps(tmp_path, steps=2, wait=1, warmup=1, rank=3) as prof:
        assert prof.total_steps == 4
        for _ in range(prof.total_steps):
            with timer.phase("forward"):
                loss = model(torch.randn(4, 8)).square().mean()
            timer.backward(loss)
            timer.end_step()
            prof.step()
    assert prof.paths == [tmp_path / "trace" / "3.json"] and not prof.error
    assert not list((tmp_path / "trace").glob(".*"))  # no partial file left
    summary = trace_summary(prof.paths[0], top=5)
    assert summary.profiler_steps == 2 and len(summary.top_ops) == 5
    assert all(op.device == "cpu" and op.self_s <= op.total_s + 1e-12 for op in summary.top_ops)
    assert [op.self_s for op in summary.top_ops] == sorted((op.self_s for op in summary.top_ops), reverse=True)
    assert summary.gaps.basis == "cpu_top_level_ops" and "not kernel gaps" in summary.gaps.note
    assert summary.gaps.span_s > 0 and 0 <= summary.gaps.idle_fraction < 1
    names = {e["name"] for e in json.loads(prof.paths[0].read_text())["traceEvents"]}
    assert {"phase:forward", "phase:backward+comm_wait"} <= names  # the timer's phases are in the trace

    with profile_steps(tmp_path, steps=1, wait=0, warmup=1, rank=0, compress=True, tag="gz") as prof:
        for _ in range(prof.total_steps):
            model(torch.randn(2, 8)).sum().backward()
            prof.step()
    assert prof.paths == [tmp_path / "trace" / "gz.0.json.gz"]
    assert trace_summary(prof.paths[0]).profiler_steps == 1
    with profile_steps(tmp_path / "off", enabled=False) as prof:
        prof.step()
    assert prof.paths == [] and not (tmp_path / "off").exists()
    with pytest.raises(ConfigError, match="steps"):
        profile_steps(tmp_path, steps=0)


def _x(name, cat, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def test_trace_summary_self_times_and_kernel_gaps_on_a_recorded_trace(tmp_path):
    events = [
        _x("ProfilerStep#1", "user_annotation", 0, 200),
        _x("aten::linear", "cpu_op", 0, 100), _x("aten::addmm", "cpu_op", 10, 60),
        _x("aten::relu", "cpu_op", 130, 20),
        # stream 7: kernels at 0-10, 15-35, 100-110 -> gaps 5 and 65; stream 8: one kernel, no gap
        _x("gemm", "kernel", 1000, 10, pid=0, tid=7, stream=7), _x("gemm", "kernel", 1015, 20, pid=0, tid=7, stream=7),
        _x("relu_kernel", "kernel", 1100, 10, pid=0, tid=7, stream=7),
        _x("Memcpy HtoD", "gpu_memcpy", 1000, 50, pid=0, tid=8, stream=8),
    ]
    path = tmp_path / "gpu.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events + [{"ph": "M", "name": "process_name"}]}, fh)
    s = trace_summary(path, top=3)
    assert s.gaps.basis == "gpu_kernels" and s.gaps.lanes == 2 and s.gaps.gaps == 2
    assert s.gaps.total_s == pytest.approx(70e-6) and s.gaps.largest_s == pytest.approx(65e-6)
    assert s.gaps.span_s == pytest.approx((110 + 50) * 1e-6)
    assert [(o.name, o.device) for o in s.top_ops] == [("aten::addmm", "cpu"), ("Memcpy HtoD", "gpu"),
                                                       ("aten::linear", "cpu")]
    linear = s.top_ops[2]
    assert linear.self_s == pytest.approx(40e-6) and linear.total_s == pytest.approx(100e-6)
    gemm = trace_summary(path, top=10).top_ops
    assert next(o for o in gemm if o.name == "gemm").calls == 2
    # without GPU work: gaps between top-level CPU ops (addmm is nested in linear: no gap inside)
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps({"traceEvents": events[:4]}))
    g = trace_summary(cpu).gaps
    assert (g.basis, g.gaps, g.total_s, g.span_s) == ("cpu_top_level_ops", 1, pytest.approx(30e-6),
                                                      pytest.approx(150e-6))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ResultsError, match="bad.json"):
        trace_summary(bad)


# -- divergence: single process ------------------------------------------------------------------------

def test_tf32_state_and_disable(monkeypatch):
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision())
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        state = tf32_state()
        assert state["NVIDIA_TF32_OVERRIDE"] == "unset" and state["cuda.matmul.allow_tf32"] is True
        assert {"cudnn.allow_tf32", "float32_matmul_precision"} <= set(state)
        before = disable_tf32()
        assert before == state
        after = tf32_state()
        assert after["NVIDIA_TF32_OVERRIDE"] == "0" and os.environ["NVIDIA_TF32_OVERRIDE"] == "0"
        assert after["cuda.matmul.allow_tf32"] is False and after["cudnn.allow_tf32"] is False
        assert after["float32_matmul_precision"] == "highest"
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
        torch.set_float32_matmul_precision(saved[2])


def test_clip_gradients_returns_the_norm_before_clipping_and_counts_nonfinite():
    model = _tiny(0)
    model(torch.randn(4, 8)).square().sum().mul(100).backward()
    want = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])).item()
    stats = ClipStats()
    assert clip_gradients(model, 1.0, stats=stats) == pytest.approx(want, rel=1e-5)
    assert clip_gradients(model, 1.0, stats=stats) == pytest.approx(1.0, rel=1e-4)  # clipped to max_norm
    next(model.parameters()).grad[0, 0] = float("inf")
    assert math.isinf(clip_gradients(model, 1.0, stats=stats))
    assert (stats.calls, stats.clipped, stats.nonfinite, len(stats.norms)) == (3, 1, 1, 3)
    with pytest.raises(ConfigError, match="max_norm"):
        clip_gradients(model, 0)


def test_checksum_moved_from_overlap_without_a_copy():
    from hpcbench.parallel import overlap

    assert overlap.parameter_checksum is divergence.parameter_checksum
    assert overlap.ranks_agree is divergence.ranks_agree
    assert {"parameter_checksum", "ranks_agree"} <= set(overlap.__all__)
    a, b = _tiny(1), _tiny(1)
    assert parameter_checksum(a) == parameter_checksum(b) != parameter_checksum(_tiny(2))


# -- 2 real gloo ranks: divergence, exposed communication, and the comm_modes experiment ----------------

def diag_entry(cfg, topo, writer):
    """Every rank (under the project's launcher): same / different seeds through check_same_start,
    DDP's exposed wait behind a slow rank, then the comm_modes worker itself (one launch for all:
    each rank process pays torch's start-up once)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from hpcbench.diag import DivergenceError, StepTimer, check_same_start, ranks_agree, write_breakdown
    from hpcbench.experiments.comm_modes.worker import run_worker

    same = _tiny(42)
    writer.add("t_same", None, "", text=check_same_start(same))
    writer.add("t_same_in_group", None, "", text=check_same_start(same, group=dist.new_group([0, 1])))
    odd = _tiny(42 + topo.rank)  # rank 1 forgot to seed like the others
    try:
        check_same_start(odd)
        writer.add("t_odd", None, "", text="passed")
    except DivergenceError as exc:
        writer.add("t_odd", None, "", labels={"ranks": exc.ranks}, text=str(exc))
    writer.add("t_odd_agree", float(ranks_agree(odd)), "bool")

    model = DDP(_tiny(0))
    timer = StepTimer("cpu")
    for _ in range(3):
        dist.barrier()
        with timer.phase("forward"):
            y = model(torch.randn(4, 8))
            if topo.rank == 1:  # runs first in backward: rank 1 computes its gradients SLOW_S late
                y.register_hook(lambda g: (time.sleep(SLOW_S), g)[1])
            loss = y.square().mean()
        timer.backward(loss)
        timer.end_step()
    write_breakdown(writer, timer.steps, {"test": "slow_rank"})
    dist.barrier()
    run_worker(cfg, topo, writer)


@pytest.fixture(scope="module")
def dist_run(tmp_path_factory):
    from hpcbench.dist import launch
    from hpcbench.experiments.comm_modes.config import CommModesConfig

    out = tmp_path_factory.mktemp("diag")
    cfg = CommModesConfig.from_dict({"models": ["gpt2_tiny"], "modes": ["ddp"], "nodes": 1, "ranks_per_node": WORLD,
                                     "batch_size": 2, "seq_len": 16, "steps": 3, "warmup_steps": 1,
                                     "check": False})
    assert cfg.trace is True
    ctx = RecordContext(experiment="comm_modes", params=cfg.to_dict())
    mp = pytest.MonkeyPatch()
    mp.setenv("PYTHONPATH", str(Path(__file__).resolve().parent))  # the workers import diag_entry from here
    try:
        res = launch(diag_entry, cfg, nodes=1, ranks_per_node=WORLD, context=ctx, out_dir=out, echo=None)
    finally:
        mp.undo()
    return cfg, out, pd.concat([read_records(p) for p in res.records], ignore_index=True)


def _labels(frame):
    return frame["labels"].map(json.loads)


def _by_rank(df, metric):
    return df[df["metric"] == metric].sort_values("rank")


def test_same_seed_passes_on_every_rank(dist_run):
    _, _, df = dist_run
    same, group = _by_rank(df, "t_same")["text"].tolist(), _by_rank(df, "t_same_in_group")["text"].tolist()
    assert len(same) == WORLD and len(set(same + group)) == 1 and len(same[0]) == 64


def test_a_rank_seeded_differently_is_caught_and_named(dist_run):
    _, _, df = dist_run
    odd = _by_rank(df, "t_odd")
    assert len(odd) == WORLD  # every rank raises alike, so none hangs waiting for the others
    for labels, message in zip(_labels(odd), odd["text"]):
        assert labels["ranks"] == [1]
        assert "from rank 0's on rank 1 " in message and "manual_seed" in message
    assert (_by_rank(df, "t_odd_agree")["value"] == 0.0).all()


def test_exposed_comm_wait_is_the_wait_for_the_slow_rank(dist_run):
    _, _, df = dist_run
    rows = df[(df["metric"] == "step_phase_seconds") & df["labels"].str.contains("slow_rank") & (df["step"] > 0)]
    rows = rows.assign(phase=[lab["phase"] for lab in _labels(rows)])  # step 0 has DDP's bucket rebuild
    wide = rows.pivot_table(index=["rank", "step"], columns="phase", values="value")
    fast, slow = wide.loc[0], wide.loc[1]
    assert (slow["backward"] >= 0.95 * SLOW_S).all()  # the slow rank's delay is its own compute
    # the fast rank cannot finish loss.backward() before the slow rank's gradients arrive ...
    assert (fast["backward"] + fast["comm_wait"] >= 0.9 * SLOW_S).all()
    # ... and that wait comes after its own (millisecond) gradient compute: exposed communication.
    # (max over steps: a loaded machine may deschedule the fast rank's compute in one of them)
    assert fast["comm_wait"].max() >= 0.5 * SLOW_S and (fast["comm_wait"] - fast["backward"]).max() > 0
    assert slow["comm_wait"].min() < fast["comm_wait"].max()


def _experiment_rows(df):
    """The comm_modes worker's own rows (not the checks above)."""
    return df[~df["metric"].str.startswith("t_") & ~df["labels"].str.contains("slow_rank")]


def test_comm_modes_records_the_step_breakdown(dist_run):
    from hpcbench.experiments.comm_modes.summary import summarize, verify_records

    cfg, _, df = dist_run
    df = _experiment_rows(df)
    phases = df[(df["metric"] == "step_phase_seconds") & df["value"].notna()]
    labs = _labels(phases)
    assert set(phases["rank"]) == {0, 1}
    assert {lab["phase"] for lab in labs} == {"forward", "backward", "comm_wait", "optimizer", "other"}
    assert {lab["comm"] for lab in labs} == {"mode", "noop"}
    assert len(phases) == WORLD * 2 * cfg.steps * 5  # ranks x (mode, noop) x steps x phases
    absent = df[(df["metric"] == "step_phase_seconds") & df["value"].isna()]
    assert (absent["text"].str.contains("no data loading")).all() and len(absent) == WORLD * 2
    assert len(df[df["metric"] == "step_seconds"]) == WORLD * 2 * cfg.steps
    assert df[df["metric"] == "step_jitter"]["value"].notna().all()
    s = summarize(df).iloc[0]
    assert s["backward_p50_ms"] > 0 and s["comm_wait_p50_ms"] >= 0 and s["jitter_max"] >= 0
    assert verify_records(df, cfg).ok


def test_comm_modes_records_tf32_same_start_and_a_trace_per_rank(dist_run):
    _, out, df = dist_run
    tf32 = df[df["metric"] == "tf32_state"]
    assert set(tf32["rank"]) == {0, 1}
    assert {lab["setting"] for lab in _labels(tf32)} >= {"NVIDIA_TF32_OVERRIDE", "cuda.matmul.allow_tf32"}
    same = df[df["metric"] == "same_start"]
    assert len(same) == 1 and same["value"].iloc[0] == 1.0 and "equal on all 2 ranks" in same["text"].iloc[0]
    traces = _by_rank(df, "trace_file")
    # Relative to the run directory (a task run by hand is its own), so that the run can move.
    assert list(traces["text"]) == [f"trace/{r}.json" for r in (0, 1)] and set(traces["unit"]) == {PATH_UNIT}
    assert all((out / t).is_file() for t in traces["text"])
    ops = df[df["metric"] == "trace_op_self_seconds"]
    assert len(ops) == WORLD * 5 and (ops["value"] > 0).all()
    idle = df[df["metric"] == "trace_idle_fraction"]
    assert {lab["basis"] for lab in _labels(idle)} == {"cpu_top_level_ops"}


def test_comm_modes_report_links_the_traces(dist_run):
    from hpcbench.core.results import expand_labels
    from hpcbench.experiments import EXPERIMENTS
    from hpcbench.experiments.comm_modes.summary import summarize
    from hpcbench.judge.evidence import summarize_launches
    from hpcbench.present.kit import ExperimentData
    from hpcbench.report.aggregate import series_stats

    _, out, df = dist_run
    df = _experiment_rows(df).assign(source="run")
    stats = expand_labels(series_stats(df[df["value"].notna()]))
    text = expand_labels(df[df["value"].isna() & df["text"].notna()])
    summaries = summarize_launches(df, summarize, "comm_modes").assign(source="run")
    (section,) = EXPERIMENTS.get("comm_modes").present(ExperimentData("comm_modes", ["run"], stats, text, None,
                                                                      summaries))
    tables = {t.id: t for t in section.tables}
    breakdown = tables["comm-modes-step-breakdown"]
    assert len(breakdown.rows) == 1 and "comm_wait p50 (ms)" in breakdown.columns
    traces = tables["comm-modes-traces"]
    # the report writer copies each linked trace into the report folder (kit.file_link)
    assert [r[-1].file.path for r in traces.rows] == [Path(f"trace/{r}.json") for r in (0, 1)]
    checks = tables["comm-modes-divergence-checks"]
    assert any("same initial weights" in r[1].text and r[2].text == "yes" for r in checks.rows)
    assert "fail" not in (checks.row_classes or [])
    shown = [t for t in section.tables if t.caption.startswith("Not measured")]
    assert not shown or not any(r[2].text in ("tf32_state", "trace_file") for r in shown[0].rows)


# -- Lustre checks in the inventory ----------------------------------------------------------------------

LFS_DF = """UUID                       bytes        Used   Available Use% Mounted on
scratch-MDT0000_UUID         1.1T        2.3G        1.0T   1% /lustre/scratch[MDT:0]
scratch-OST0000_UUID        14.5T        9.9T        4.6T  69% /lustre/scratch[OST:0]
scratch-OST0001_UUID        14.5T       13.1T        1.4T  91% /lustre/scratch[OST:1]
scratch-OST0002_UUID        14.5T       10.2T        4.3T  71% /lustre/scratch[OST:2]

filesystem_summary:        43.5T       33.2T       10.3T  77% /lustre/scratch
"""
GETSTRIPE = "stripe_count:  1 stripe_size:   1048576 pattern:       raid0 stripe_offset: -1\n"


def _fake_tools(folder: Path, log: Path) -> None:
    """``lfs`` and ``lctl`` scripts answering as a Lustre client would, logging their arguments."""
    folder.mkdir()
    scripts = {
        "lfs": f"""#!/bin/sh
echo "lfs $*" >> {log}
case "$1" in
  df) cat <<'EOF'
{LFS_DF}EOF
  ;;
  getstripe) [ "$3" = /missing ] && {{ echo "lfs getstripe: $3: No such file or directory" >&2; exit 2; }}
     printf '%s' '{GETSTRIPE}' ;;
  *) exit 1 ;;
esac
""",
        "lctl": f"""#!/bin/sh
echo "lctl $*" >> {log}
name=$(echo "$2" | sed 's/llite\\.\\*\\.//')
echo "llite.scratch-ffff9a.$name=64"
""",
    }
    for name, text in scripts.items():
        path = folder / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _lustre_items(tmp_path, env):
    from hpcbench.experiments.environment.config import EnvironmentConfig

    cfg = EnvironmentConfig(sysfs_root=str(tmp_path), include_commands=True, command_timeout_s=10)
    return {it.name: it for it in collect_inventory(cfg, env=env, collectors=["lustre"])}


def test_lustre_checks_with_a_fake_lfs(tmp_path):
    log = tmp_path / "calls.log"
    _fake_tools(tmp_path / "bin", log)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HPCBENCH_LUSTRE_DIRS": "/lustre/scratch/data:/missing"}
    items = _lustre_items(tmp_path, env)
    assert all(it.category == "storage" for it in items.values())
    assert "scratch-OST0001_UUID" in items["lustre.df"].value
    assert items["lustre.scratch.ost_count"].numeric == 3.0
    spread = items["lustre.scratch.ost_use_spread"]
    assert (spread.numeric, spread.unit) == (22.0, "%") and "69 % to 91 %" in spread.value
    assert items["lustre.stripe_count[/lustre/scratch/data]"].numeric == 1.0
    assert items["lustre.stripe_size[/lustre/scratch/data]"].numeric == 1048576.0
    assert items["lustre.getstripe[/missing]"].value.startswith("error: `lfs getstripe -d /missing` exited")
    ra = items["lustre.max_read_ahead_mb"]
    assert (ra.numeric, ra.unit, ra.value) == (64.0, "MiB", "llite.scratch-ffff9a.max_read_ahead_mb=64")
    calls = log.read_text().splitlines()
    assert "lfs df -h" in calls and "lfs getstripe -d /lustre/scratch/data" in calls
    assert "lctl get_param llite.*.max_read_ahead_mb" in calls
    # without $HPCBENCH_LUSTRE_DIRS: the Lustre mounts of /proc/mounts
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "mounts").write_text("10.0.0.1@o2ib:/scratch /lustre/scratch lustre rw,flock 0 0\n"
                                              "/dev/sda1 / ext4 rw 0 0\n")
    items = _lustre_items(tmp_path, {"PATH": env["PATH"]})
    assert items["lustre.stripe_count[/lustre/scratch]"].numeric == 1.0


def test_lustre_absent_without_lfs(tmp_path):
    items = _lustre_items(tmp_path, {"PATH": str(tmp_path)})
    assert list(items) == ["lustre"]
    assert items["lustre"].value == f"{ABSENT}: lfs not found on PATH" and items["lustre"].numeric is None


def test_lfs_parsers():
    assert parse_lfs_df(LFS_DF) == {"scratch": {"mount": "/lustre/scratch", "ost_use_pct": [69, 91, 71]}}
    assert parse_lfs_getstripe(GETSTRIPE) == {"stripe_count": 1, "stripe_size": 1048576}
    yaml_like = "lcm_layout_gen: 0\n  lcme_id: N/A\n    lmm_stripe_count:  8\n    lmm_stripe_size:   4194304\n"
    assert parse_lfs_getstripe(yaml_like) == {"stripe_count": 8, "stripe_size": 4194304}
    assert parse_lfs_df("") == {} and parse_lfs_getstripe("") == {}
