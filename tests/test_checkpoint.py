"""Checkpoints (guide sec. 2.5, C11): two tiers, zstd, manifests, atomic writes, resume exactness.

Real files, real processes, real signals, no mocks: torn checkpoints are made by tearing
files, the mid-write kill by SIGKILL, the full disk by a small tmpfs, the resume check by
killing a two-rank torchrun run and resuming it.
"""

from __future__ import annotations

import copy
import errno
import io
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest
import torch

from conftest import REPO, missing
from hpcbench.core.errors import CheckpointError, ConfigError
from hpcbench.fault.async_save import AsyncCheckpointer
from hpcbench.fault.checkpoint import (CheckpointManager, CheckpointPolicy, compress_bytes, write_compressed,
                                       decompress_bytes, remove_torn, serialize_state)
from hpcbench.fault.sharded import apply_model_optimizer_state, load_sharded, model_optimizer_state, save_sharded
from hpcbench.fault.state import capture_full, capture_light, params_sha256, restore
from hpcbench.fault.train import MODELS, TrainConfig, train

MARKER = "HPCBENCH_CHECKPOINT_TEST"


# -- helpers ----------------------------------------------------------------------------------------
def _model_and_optimizer(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.2), torch.nn.Linear(16, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    for _ in range(3):
        model(torch.randn(4, 8)).pow(2).mean().backward()
        optimizer.step()
        scheduler.step()
    return model, optimizer, scheduler


def _same(a, b) -> bool:
    """Structural equality where tensors compare bit for bit."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _policy(**kw) -> CheckpointPolicy:
    # time-based intervals off: these tests drive the steps
    return CheckpointPolicy.from_dict({"full_every_s": 0, "light_every_s": 0, **kw})


def _marked(marker: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(MARKER) == marker and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return out


def _kill_all(marker: str) -> None:
    """SIGKILL every process of a launch (torchrun starts each rank in its own session, so no killpg)."""
    for p in _marked(marker):
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    deadline = time.monotonic() + 20
    while _marked(marker):
        assert time.monotonic() < deadline, "processes survived SIGKILL"
        time.sleep(0.05)


def _wait_for(predicate, timeout_s: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process ended ({proc.returncode}) before {what}: {_tail(proc)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


def _tail(proc: subprocess.Popen) -> str:
    path = getattr(proc, "out_path", None)
    return path.read_text()[-3000:] if path and path.exists() else ""


def _read_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- round trips, names, manifest -------------------------------------------------------------------
@pytest.mark.parametrize("level", [0, 3])
def test_round_trip_both_tiers_with_manifest_and_name(tmp_path, monkeypatch, level):
    if level:
        monkeypatch.setenv("SLURM_JOB_ID", "424242")
    else:
        monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    model, opt, sched = _model_and_optimizer()
    manager = CheckpointManager(tmp_path, _policy(zstd_level=level), host="node-a01")
    full = capture_full(model, opt, scheduler=sched, loader_state={"epoch": 1, "batch": 3}, epoch=1, step=7,
                        extra={"best": 0.5})
    expected_draw = torch.rand(3)  # what the RNG gives right after the capture
    light = capture_light(model, opt, loader_state={"epoch": 1, "batch": 4}, epoch=1, step=8, scheduler=sched)
    job = "424242" if level else "local"
    for tier, step, state in (("full", 7, full), ("light", 8, light)):
        saved = manager.save(tier, step, state)
        assert saved.path.name == f"{tier}-node-a01-job{job}-step{step:08d}"
        fname = "state.pt.zst" if level else "state.pt"
        data = (saved.path / fname).read_bytes()
        manifest = json.loads((saved.path / "manifest.json").read_text())
        assert manifest["files"] == {fname: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}}
        assert (manifest["tier"], manifest["step"], manifest["host"], manifest["job_id"]) == (tier, step, "node-a01",
                                                                                             job)
        assert manifest["compression"]["level"] == level and saved.sha256 == manifest["files"][fname]["sha256"]
        assert (saved.bytes_written < saved.bytes_raw) if level else (saved.bytes_written == saved.bytes_raw)
        assert _same(manager.load(saved.path), state)
    # restore into a fresh model: weights, optimizer, scheduler and RNG come back
    model2, opt2, sched2 = _model_and_optimizer(seed=1)
    info = restore(manager.load(manager.list()[0]), model2, opt2, scheduler=sched2)
    assert (info["tier"], info["step"], info["loader_state"], info["extra"]) == ("full", 7, {"epoch": 1, "batch": 3},
                                                                                 {"best": 0.5})
    assert info["rng_restored"] and torch.equal(torch.rand(3), expected_draw)
    assert params_sha256(model2) == params_sha256(model) and sched2.state_dict() == sched.state_dict()
    assert manager.latest_valid().tier == "light"


def test_due_follows_steps_and_wall_time(tmp_path):
    now = [0.0]
    m = CheckpointManager(tmp_path, _policy(full_every_steps=4, light_every_steps=2), clock=lambda: now[0])
    assert [m.due(s) for s in range(1, 9)] == [None, "light", None, "full", None, "light", None, "full"]
    t = CheckpointManager(tmp_path, CheckpointPolicy(full_every_s=3600, light_every_s=600), clock=lambda: now[0])
    now[0] = 599.0
    assert t.due(1) is None
    now[0] = 600.0
    assert t.due(2) == "light"
    t.mark_saved("light")
    now[0] = 1199.0
    assert t.due(3) is None
    now[0] = 3600.0
    assert t.due(4) == "full"  # full wins when both are due
    t.mark_saved("full")  # a full one restarts the light clock too
    now[0] = 4199.0
    assert t.due(5) is None
    with pytest.raises(ConfigError, match="zstd_level"):
        CheckpointPolicy(zstd_level=23)


def test_maybe_save_writes_the_due_tier_and_light_ones_in_the_background(tmp_path):
    manager = CheckpointManager(tmp_path, _policy(full_every_steps=2, light_every_steps=1, async_light=True), host="h")
    calls = []

    def state(tier, step):
        calls.append((tier, step))
        return {"w": torch.full((4,), float(step))}

    results = [manager.maybe_save(s, lambda s=s: state("full", s), lambda s=s: state("light", s)) for s in (1, 2, 3, 4)]
    assert calls == [("light", 1), ("full", 2), ("light", 3), ("full", 4)]
    assert [r is None for r in results] == [True, False, True, False]  # light ones went to the background
    assert manager.wait().step == 3
    assert [(i.tier, i.step) for i in manager.list()] == [("light", 1), ("full", 2), ("light", 3), ("full", 4)]


def test_compress_helpers_round_trip_and_refuse_a_truncated_frame():
    data = bytes(range(256)) * 1000
    packed = compress_bytes(data, 3)
    assert len(packed) < len(data) and decompress_bytes(packed) == data
    assert compress_bytes(data, 0) is data
    with pytest.raises(CheckpointError, match="zstd"):
        decompress_bytes(packed[:-4])


def test_serialize_into_a_reused_buffer_gives_torch_saves_bytes():
    import io

    big = {"w": torch.randn(50_000), "m": [torch.arange(7.0), {"step": 3}]}
    small = {"w": torch.randn(10)}
    expected = {}
    for name, state in (("big", big), ("small", small)):
        plain = io.BytesIO()
        torch.save(state, plain)
        expected[name] = plain.getvalue()
    buf, n = serialize_state(small)  # sized from the tensors
    assert bytes(buf[:n]) == expected["small"]
    grown, n = serialize_state(big, buf)  # a larger state grows the buffer it is given
    assert bytes(grown[:n]) == expected["big"] and len(grown) >= n
    again, n = serialize_state(small, grown)  # a smaller one reuses it; bytes past n are the last save's
    assert again is grown and bytes(again[:n]) == expected["small"]
    assert torch.equal(torch.load(io.BytesIO(bytes(again[:n])), weights_only=True)["w"], small["w"])


def test_write_compressed_streams_one_sized_frame_and_its_hash():
    import hashlib
    import zstandard

    data = bytes(range(256)) * 80_000  # > two 8 MiB input slices
    fh = io.BytesIO()
    n, digest, compressing = write_compressed(memoryview(data), 3, fh)
    frame = fh.getvalue()
    assert n == len(frame) < len(data) and digest == hashlib.sha256(frame).hexdigest() and compressing > 0
    assert zstandard.get_frame_parameters(frame).content_size == len(data)
    assert decompress_bytes(frame) == data
    with pytest.raises(CheckpointError, match="zstd"):
        decompress_bytes(frame[:-4])
    with pytest.raises(CheckpointError, match="level 0"):
        write_compressed(memoryview(data), 0, io.BytesIO())


def test_write_compressed_raises_the_writers_error_and_leaves_no_thread():
    class FullDisk(io.BytesIO):
        def write(self, b):
            if self.tell() > 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(b)

    data = os.urandom(1 << 20) * 30  # ~4 compressed slices: the first is written, the second fails
    with pytest.raises(OSError) as exc:
        write_compressed(memoryview(data), 1, FullDisk())
    assert exc.value.errno == errno.ENOSPC
    assert not [t for t in threading.enumerate() if t.name == "checkpoint-writer"]


def test_saves_of_changing_sizes_through_one_manager_each_load_whole(tmp_path):
    manager = CheckpointManager(tmp_path, _policy(keep_full=5, keep_light=5, zstd_level=3), host="h")
    states = [{"w": torch.randn(n)} for n in (1000, 100_000, 10)]
    for step, state in enumerate(states, 1):
        manager.save("full", step, state)
    for info, state in zip(manager.list(), states):
        assert info.valid and torch.equal(manager.load(info)["w"], state["w"])


def test_retention_keeps_the_last_k_of_each_tier(tmp_path):
    manager = CheckpointManager(tmp_path, _policy(keep_full=2, keep_light=3, zstd_level=1), host="h")
    state = {"w": torch.arange(10.0)}
    for step in range(1, 5):
        manager.save("full", step, state)
    for step in range(5, 11):
        manager.save("light", step, state)
    kept = [(i.tier, i.step) for i in manager.list()]
    assert kept == [("full", 3), ("full", 4), ("light", 8), ("light", 9), ("light", 10)]
    assert all(i.valid for i in manager.list()) and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# -- torn checkpoints -------------------------------------------------------------------------------
def test_torn_checkpoints_are_skipped_named_and_removed(tmp_path):
    warnings: list[str] = []
    manager = CheckpointManager(tmp_path, _policy(keep_full=10), host="h", warn=warnings.append)
    saved = {s: manager.save("full", s, {"step": s, "w": torch.full((1000,), float(s))}) for s in range(1, 5)}
    (saved[4].path / "manifest.json").unlink()  # killed before the manifest
    data3 = saved[3].path / "state.pt.zst"
    data3.write_bytes(data3.read_bytes()[:-10])  # truncated
    data2 = saved[2].path / "state.pt.zst"
    raw = bytearray(data2.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # same size, other bytes
    data2.write_bytes(bytes(raw))
    leftover = tmp_path / ".full-h-joblocal-step00000005.abc.tmp"  # what a killed write leaves
    leftover.mkdir()

    best = manager.latest_valid()
    assert best.step == 1 and manager.load(best)["step"] == 1
    reasons = {i.step: i.reason for i in manager.skipped}
    assert set(reasons) == {2, 3, 4}
    assert "manifest.json missing" in reasons[4] and "truncated" in reasons[3] and "sha256" in reasons[2]
    for step in (2, 3, 4):
        assert any(saved[step].path.name in w for w in warnings)
    with pytest.raises(CheckpointError, match="sha256"):
        manager.load(saved[2].path)

    removed = remove_torn(tmp_path)
    assert removed == sorted([saved[2].path, saved[3].path, saved[4].path, leftover])
    assert [i.step for i in manager.list()] == [1] and sorted(p.name for p in tmp_path.iterdir()) == [
        saved[1].path.name]


_WRITER = textwrap.dedent("""
    import sys, torch
    from hpcbench.fault.checkpoint import CheckpointManager, CheckpointPolicy
    manager = CheckpointManager(sys.argv[1], CheckpointPolicy(full_every_s=0, light_every_s=0, zstd_level=0,
                                                              keep_full=2), host="h")
    big = torch.randn(12 * 2**20)  # 48 MiB: the write takes long enough to be caught in the middle
    step = 0
    while True:
        step += 1
        big[0] = step
        manager.save("full", step, {"marker": torch.tensor(step), "big": big})
        print("saved", step, flush=True)
""")


def test_sigkill_during_a_write_never_leaves_a_loadable_torn_checkpoint(tmp_path):
    root = tmp_path / "ckpt"
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    out = tmp_path / "writer.out"
    with open(out, "w") as fh:
        proc = subprocess.Popen([sys.executable, str(script), str(root)], stdout=fh, stderr=subprocess.STDOUT,
                                cwd=REPO)
    proc.out_path = out
    try:
        _wait_for(lambda: "saved 1" in out.read_text(), 60, "the first complete checkpoint", proc)

        def data_being_written():
            # the data file's own temporary, inside the checkpoint's temporary directory
            return [f for d in root.glob(".full-*.tmp") for f in d.glob(".state.pt.*.tmp")]

        _wait_for(data_being_written, 30, "a write in progress", proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert [p for p in root.glob(".full-*.tmp")], "the kill should have landed mid-write"
    manager = CheckpointManager(root, _policy(), host="h")
    assert all(i.valid for i in manager.list())  # no visible torn directory, ever
    best = manager.latest_valid()
    state = manager.load(best)
    assert int(state["marker"]) == best.step == int(state["big"][0]) and state["big"].numel() == 12 * 2**20
    assert remove_torn(root) and not list(root.glob(".*"))


# -- full disk --------------------------------------------------------------------------------------
def test_full_disk_raises_a_clear_error_and_keeps_the_previous_checkpoint(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        missing("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        missing(f"cannot mount a 1 MiB tmpfs: {mounted.stderr.strip()}")
    try:
        manager = CheckpointManager(mnt, _policy(zstd_level=0), host="h")
        first = manager.save("full", 1, {"w": torch.randn(50_000)})  # ~200 KB: fits
        with pytest.raises(CheckpointError) as err:
            manager.save("full", 2, {"w": torch.randn(500_000)})  # ~2 MB: does not
        text = str(err.value)
        assert str(mnt) in text and "no space left" in text and "needs" in text and "bytes" in text
        assert sorted(p.name for p in mnt.iterdir()) == [first.path.name]  # no partial dir, no hidden leftover
        assert manager.latest_valid().step == 1 and manager.load(first.path)["w"].numel() == 50_000
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


# -- weights_only -----------------------------------------------------------------------------------
class Payload:
    """A custom class: unpickling it means importing and running this module's code."""

    def __init__(self):
        self.note = "not a tensor"


def test_loading_refuses_a_checkpoint_holding_arbitrary_objects(tmp_path):
    manager = CheckpointManager(tmp_path, _policy(), host="h")
    saved = manager.save("full", 1, {"w": torch.ones(3), "payload": Payload()})
    with pytest.raises(CheckpointError, match=r"weights_only=True"):
        manager.load(saved.path)
    with pytest.raises(CheckpointError, match="not a hpcbench checkpoint state"):
        restore({"w": torch.ones(3)}, *_model_and_optimizer()[:2])


# -- async ------------------------------------------------------------------------------------------
def test_async_save_writes_the_snapshot_not_the_later_model(tmp_path):
    model, opt, sched = _model_and_optimizer()
    state = capture_full(model, opt, scheduler=sched, loader_state={"batch": 1}, epoch=0, step=3)
    expected = copy.deepcopy(state)
    writer = AsyncCheckpointer(CheckpointManager(tmp_path / "async", _policy(), host="h"))
    writer.save("full", 3, state)
    with torch.no_grad():  # training goes on, in place, while the write runs
        for p in model.parameters():
            p.add_(1.0)
        for s in opt.state.values():
            s["exp_avg"].mul_(3.0)
    saved = writer.wait()
    assert writer.stall_seconds >= 0 and saved.step == 3
    synced = CheckpointManager(tmp_path / "sync", _policy(), host="h").save("full", 3, expected)
    loaded = writer.manager.load(saved.path)
    assert _same(loaded, expected) and _same(loaded, writer.manager.load(synced.path))

    # an error in the background surfaces on the next call
    broken = tmp_path / "broken"
    failing = AsyncCheckpointer(CheckpointManager(broken, _policy(), host="h"))
    shutil.rmtree(broken)
    broken.write_text("a file where the folder was")
    failing.save("light", 4, {"w": torch.ones(2)})
    with pytest.raises(CheckpointError, match="broken"):
        failing.wait()


# -- DCP --------------------------------------------------------------------------------------------
def test_sharded_save_round_trip_single_process(tmp_path):
    model, opt, _ = _model_and_optimizer()
    saved = save_sharded(model_optimizer_state(model, opt), tmp_path / "dcp")
    assert saved.bytes_written > 0 and (tmp_path / "dcp" / ".metadata").is_file()
    assert not list(tmp_path.glob(".*"))
    model2, opt2, _ = _model_and_optimizer(seed=5)
    state = load_sharded(model_optimizer_state(model2, opt2), tmp_path / "dcp")
    apply_model_optimizer_state(model2, opt2, state)
    assert params_sha256(model2) == params_sha256(model)
    assert _same(opt2.state_dict()["state"], opt.state_dict()["state"])


# -- resume exactness: two ranks, killed, resumed ----------------------------------------------------
STEPS = 12


def _torchrun(tmp_path: Path, name: str, ckpt: Path, *extra: str) -> subprocess.Popen:
    """Start ``torchrun --standalone --nproc-per-node 2 -m hpcbench train`` with a marker."""
    marker = f"{name}-{uuid.uuid4().hex}"
    out = tmp_path / f"{name}.out"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "hpcbench", "train", "--",  # "--": torchrun would read --log as its --log-dir
           "--checkpoint-dir", str(ckpt), "--steps", str(STEPS), "--log", str(tmp_path / f"{name}.jsonl"),
           "--log-params", "--seed", "3", *extra]
    env = {**os.environ, MARKER: marker, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    env.pop("SLURM_JOB_ID", None)
    with open(out, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    proc.marker, proc.out_path = marker, out
    return proc


def _finish(proc: subprocess.Popen) -> None:
    try:
        rc = proc.wait(timeout=120)
    finally:
        _kill_all(proc.marker)
    assert rc == 0, _tail(proc)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A straight 12-step run; a run killed after step 6 (light checkpoint every step, full every 4) resumed
    from its full checkpoint. Three torchrun launches, ~12 s each here."""
    tmp = tmp_path_factory.mktemp("resume")
    straight = _torchrun(tmp, "straight", tmp / "ckpt-straight")
    _finish(straight)

    killed = _torchrun(tmp, "killed", tmp / "ckpt-killed", "--light-every-steps", "1", "--full-every-steps", "4",
                       "--step-sleep", "0.3")
    log = tmp / "killed.jsonl"
    try:
        _wait_for(lambda: any(r.get("step") == 6 for r in _read_log(log)), 90, "step 6 in the log", killed)
    finally:
        _kill_all(killed.marker)
        killed.wait(timeout=30)
    # the same checkpoints with only the full ones: a resume from full-00000004
    shutil.copytree(tmp / "ckpt-killed", tmp / "ckpt-full", ignore=shutil.ignore_patterns("light-*"))
    _finish(_torchrun(tmp, "resume-full", tmp / "ckpt-full"))
    return tmp


def _steps(records: list[dict]) -> dict[int, dict]:
    return {r["step"]: r for r in records if "step" in r and "event" not in r}


def test_resume_from_full_is_bit_identical_to_a_straight_run(runs):
    straight = _steps(_read_log(runs / "straight.jsonl"))
    assert sorted(straight) == list(range(1, STEPS + 1))
    killed = _steps(_read_log(runs / "killed.jsonl"))
    # checkpointing does not perturb training
    assert max(killed) >= 6 and all(killed[s] == straight[s] for s in killed)
    resumed = _read_log(runs / "resume-full.jsonl")
    assert resumed[0]["event"] == "resume" and (resumed[0]["tier"], resumed[0]["step"]) == ("full", 4)
    after = _steps(resumed)
    assert sorted(after) == list(range(5, STEPS + 1))
    assert [after[s]["loss"] for s in after] == [straight[s]["loss"] for s in after]
    final = json.loads((runs / "ckpt-full" / "final.json").read_text())
    assert final["params_sha256"] == json.loads((runs / "ckpt-straight" / "final.json").read_text())[
        "params_sha256"] == straight[STEPS]["params_sha256"]


def test_the_killed_run_left_a_light_checkpoint_within_one_interval(runs):
    """What a rerun of the killed run resumes from: its newest valid checkpoint, a light one at the last
    logged step (light every step; a kill between save and log may leave one more), holding exactly the
    straight run's weights of that step."""
    straight = _steps(_read_log(runs / "straight.jsonl"))
    last_logged = max(_steps(_read_log(runs / "killed.jsonl")))
    manager = CheckpointManager(runs / "ckpt-killed", _policy())
    best = manager.latest_valid()
    assert best.tier == "light" and best.step in (last_logged, last_logged + 1)
    model = MODELS.get("tiny")(16, 4, 0.1)
    opt = torch.optim.AdamW(model.parameters())
    info = restore(manager.load(best), model, opt)
    assert info["step"] == best.step and params_sha256(model) == straight[best.step]["params_sha256"]


def _train_in_process(ckpt: Path, log: Path, **cfg) -> dict:
    return train(TrainConfig.from_dict({"steps": STEPS, "seed": 3, "log_params": True, **cfg}),
                 _policy(light_every_steps=3), ckpt, log_path=log)


@pytest.mark.parametrize("dropout", [0.1, 0.0])
def test_light_resume_loses_under_one_interval_and_differs_only_by_rng(tmp_path, dropout):
    """Light every 3 steps, lost after step 8: the resume starts at step 6 (2 < 3 steps lost) with the exact
    weights and optimizer of step 6; the RNG is reseeded, not restored, so with dropout the later losses
    differ, and without any randomness in the step the light resume is bit-identical too."""
    straight_final = _train_in_process(tmp_path / "straight", tmp_path / "straight.jsonl", dropout=dropout)
    straight = _steps(_read_log(tmp_path / "straight.jsonl"))
    # the checkpoints a run killed after step 8 would have left: light 3 and 6
    shutil.copytree(tmp_path / "straight", tmp_path / "cut", ignore=lambda d, names: [
        n for n in names if n == "final.json" or n.startswith("light-") and int(n[-8:]) > 8])
    resumed_final = _train_in_process(tmp_path / "cut", tmp_path / "resumed.jsonl", dropout=dropout)
    resumed = _read_log(tmp_path / "resumed.jsonl")
    assert (resumed[0]["event"], resumed[0]["tier"], resumed[0]["step"]) == ("resume", "light", 6)
    assert resumed[0]["params_sha256"] == straight[6]["params_sha256"]
    after = _steps(resumed)
    assert sorted(after) == list(range(7, STEPS + 1))
    same = [after[s]["loss"] for s in after] == [straight[s]["loss"] for s in after]
    same_final = resumed_final["params_sha256"] == straight_final["params_sha256"]
    assert (same, same_final) == ((False, False) if dropout else (True, True))


# -- the fault_tolerance experiment's training state ------------------------------------------------
def test_a_grid_model_trains_and_restores_in_bfloat16():
    """A weather model's float inputs follow its bfloat16 weights (else the patch embedding refuses the
    float32 fields), a step trains, and a fresh copy restored from the full tier holds the same state."""
    from hpcbench.experiments.fault_tolerance.config import FaultToleranceConfig
    from hpcbench.experiments.fault_tolerance.worker import build_training, capture, fresh_like, restored_equals
    from hpcbench.fault.state import restore as restore_state

    cfg = FaultToleranceConfig.from_dict({"models": ["weather_tiny"], "dtypes": ["bfloat16"], "batch_size": 1})
    tr = build_training(cfg, "weather_tiny", "bfloat16", torch.device("cpu"))
    assert tr.inputs.dtype == torch.bfloat16 and tr.targets.shape == (1, 8, 32, 64)
    before = copy.deepcopy(tr.model.head.weight.detach())
    tr.train(1)
    assert not torch.equal(before, tr.model.head.weight)  # the step changed the weights
    saved = copy.deepcopy(capture(tr, "full"))
    fresh = fresh_like(tr, cfg, torch.device("cpu"))
    assert not restored_equals(fresh, saved)
    restore_state(saved, fresh.model, fresh.optimizer)
    assert restored_equals(fresh, saved)
