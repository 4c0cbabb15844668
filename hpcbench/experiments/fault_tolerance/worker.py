"""Checkpoints and the job wrapper, measured (T-fault; claims C11 and C15). Runs in the notebook's process.

For every model of ``models`` and dtype of ``dtypes`` (weights, and so the AdamW moments, in
that dtype), after a few real AdamW steps on synthetic inputs:

1. **compression**: the weights (``state_dict``) serialized with ``torch.save`` and compressed
   by zstd at every level of ``zstd_levels`` (0 = stored raw), ``repeats`` times each;
2. **save**: ``repeats`` synchronous saves of each tier (:func:`hpcbench.fault.state.capture_full`
   / ``capture_light`` through :class:`hpcbench.fault.checkpoint.CheckpointManager` at
   ``zstd_level``), alternating tiers, one training step between saves: raw and written bytes,
   seconds to serialize, compress and write (with fsyncs), the whole save, and its share of the
   wall time when repeated at the guide's interval, ``save / (interval + save)``;
3. **stall**: the same light save done synchronously and through
   :class:`hpcbench.fault.async_save.AsyncCheckpointer`, alternating, ``steps_between_saves``
   training steps after each (the asynchronous write overlaps them and, while it runs, more
   steps): the time the loop waited per save, and how much the steps that overlapped the write
   slowed down against the median step;
4. **recovery**: the newest valid checkpoint of each tier found (sha256 checked), loaded and
   restored into a fresh model and optimizer, timed, and the restored state compared tensor
   for tensor with a copy of what was saved; the checkpoint's name checked to carry the host
   and the job id.

Then, for the smallest model (fewest parameters x work per item) in the first dtype,
**failure** in wall time: training with a light checkpoint every ``failure_light_every_s``
seconds (standing for the 600 s interval, scaled down), ``failures`` failures at exponential
wall times (mean ``failure_mtbf_s``) drawn without looking at the cadence: SIGALRM interrupts
the loop wherever it is (a step, a save), the process state is dropped, a fresh model and
optimizer are restored from the newest valid checkpoint and training continues. Work lost =
wall seconds from the kill until the resumed training has again completed the steps it had
completed at the kill (restore included), plus the wall time between that last completed step
and the kill; as a share of the cadence, and times ``light_interval_s``. After the failures, a
torn newest checkpoint (its data file cut in half after the write, as storage that lost bytes
leaves it) must be skipped by recovery.

**Overhead**: ``overhead_saves`` synchronous light saves of ``overhead_model`` (GPT-2 124M in
the reproduce suite), one training step apart: how long each stalls the training loop, and
its share of the wall time at ``light_interval_s``.

Last, **survival**: ``survival_jobs`` jobs per arm through the guide's wrapper made real,
``slurm/run_with_retries.sh --tries 3 --data DATA``, and the same jobs with ``--tries 1``,
alternating. A try (:mod:`survival_try`) is a real process in its own process group that
works ``survival_try_s`` seconds checking a small sharded data set's sha256 at each of 10 steps.
An independent injector (a thread that knows which job runs, not its tries) fails at
exponential times (mean ``survival_mtbf_s``): it SIGKILLs the running try's process group or,
with ``survival_corrupt_share``, flips a byte of a shard (the try fails its check; the
wrapper's repair step must copy the shard back from the pristine source before the next try).
Measured from the wrapper's own log: each job's tries and exit status, whether its decisions
followed the policy, the per-try failure rate p_try, and whether every damaged shard was
repaired (listed by the repair step and found intact by the next try's check).

The failure times are drawn per launch (:func:`launch_key`): launches are the verdicts' unit
of replication.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from hpcbench.core.results import RecordWriter
from hpcbench.experiments.fault_tolerance.config import FaultToleranceConfig
from hpcbench.experiments.fault_tolerance.claims import GUIDE_C15_TRIES

#: The injected try: exits 1 when its attempt number is in the job's plan, else 0.
INJECTED_TRY = 'case "$HPCBENCH_INJECT_FAIL" in *" $HPCBENCH_ATTEMPT "*) exit 1;; esac; exit 0'
#: AdamW steps before anything is saved: every moment exists and holds trained values.
WARMUP_STEPS = 3
#: Training steps timed for the step-time median the stall's slowdown is measured against.
TIMED_STEPS = 5


@dataclass
class Training:
    """A model, its AdamW optimizer and one synthetic batch on the run's device, in one dtype."""

    spec: Any
    dtype_name: str
    model: Any
    optimizer: Any
    inputs: Any
    targets: Any
    sync: Callable[[], None]
    step: int = 0

    def train(self, steps: int) -> list[float]:
        """``steps`` optimizer steps; returns the seconds of each."""
        times = []
        for _ in range(steps):
            self.sync()
            t0 = time.perf_counter()
            self.optimizer.zero_grad(set_to_none=True)
            self.spec.loss(self.model(self.inputs), self.targets).float().backward()
            self.optimizer.step()
            self.sync()
            times.append(time.perf_counter() - t0)
            self.step += 1
        return times


def _torch_dtype(name: str):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]


def build_training(cfg: FaultToleranceConfig, model_name: str, dtype: str, device) -> Training:
    """A fresh model and optimizer, seeded by ``cfg.seed`` (the same weights for every dtype)."""
    import torch

    from hpcbench.models import MODELS

    spec = MODELS.get(model_name)
    torch.manual_seed(cfg.seed)
    model = spec.build().to(device=device, dtype=_torch_dtype(dtype))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = spec.synthetic_batch(cfg.batch_size, device=device, seed=cfg.seed, image_size=cfg.image_size,
                                seq_len=cfg.seq_len)
    if spec.kind in ("image", "grid"):  # float inputs follow the weights' dtype; token ids stay integers
        x = x.to(_torch_dtype(dtype))
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    return Training(spec, dtype, model, optimizer, x, y, sync)


def fresh_like(tr: Training, cfg: FaultToleranceConfig, device) -> Training:
    """What a restarted process builds before it restores: a new model and optimizer, nothing trained."""
    return build_training(cfg, tr.spec.name, tr.dtype_name, device)


def capture(tr: Training, tier: str) -> dict:
    """The tier's state of ``tr`` now (references to the live tensors)."""
    from hpcbench.fault.state import capture_full, capture_light

    loader = {"batches_seen": tr.step}
    if tier == "full":
        return capture_full(tr.model, tr.optimizer, loader_state=loader, epoch=0, step=tr.step)
    return capture_light(tr.model, tr.optimizer, loader_state=loader, epoch=0, step=tr.step)


def same_state(a: Any, b: Any) -> bool:
    """Tensors equal in dtype, shape and every value (NaN equal to NaN); containers and plain values equal."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        return (a.dtype == b.dtype and a.shape == b.shape
                and bool(torch.equal(a.detach().cpu(), b.detach().cpu()) or
                         (a.is_floating_point() and torch.equal(a.detach().cpu().isnan(), b.detach().cpu().isnan())
                          and torch.equal(a.detach().cpu().nan_to_num(), b.detach().cpu().nan_to_num()))))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_state(x, y) for x, y in zip(a, b))
    return a == b


def restored_equals(tr: Training, saved: dict) -> bool:
    """The model and optimizer of ``tr`` hold exactly the saved state (weights, moments, step counts, lr)."""
    from hpcbench.fault.state import unwrap_model

    return (same_state(unwrap_model(tr.model).state_dict(), saved["model"])
            and same_state(tr.optimizer.state_dict(), saved["optimizer"]))


def filesystem_at(path: Path) -> str:
    """``<type> at <mount>`` of the file system holding ``path`` (the C11 rule reads it)."""
    from hpcbench.system.facts import filesystem_of

    fstype, mount = filesystem_of(path)
    return f"{fstype} at {mount}"


def _policy(cfg: FaultToleranceConfig, **steps: int):
    from hpcbench.fault.checkpoint import CheckpointPolicy

    # Saves are called explicitly (or by step in the failure simulation): no wall-clock tier.
    return CheckpointPolicy(full_every_s=0, light_every_s=0, keep_full=2, keep_light=2, zstd_level=cfg.zstd_level,
                            **steps)


# -- 1. compression by level ------------------------------------------------------------------

def measure_compression(cfg: FaultToleranceConfig, tr: Training, writer: RecordWriter, progress) -> None:
    """zstd at every level over the serialized weights."""
    from hpcbench.fault.checkpoint import compress_bytes, serialize_state

    buf, size = serialize_state(tr.model.state_dict())
    raw = memoryview(buf)[:size]
    line = []
    for level in cfg.zstd_levels:
        labels = {"phase": "compression", "model": tr.spec.name, "dtype": tr.dtype_name, "part": "weights",
                  "level": level}
        written = 0
        for r in range(cfg.repeats):
            t0 = time.perf_counter()
            out = compress_bytes(raw, level)
            seconds = time.perf_counter() - t0
            written = len(out)
            writer.add("compression_ratio", len(raw) / written, "x", step=r, labels=labels)
            writer.add("compress_seconds", seconds, "s", step=r, labels=labels)
            del out
        writer.add("bytes_raw", len(raw), "B", labels=labels)
        writer.add("bytes_written", written, "B", labels=labels)
        line.append(f"L{level} {len(raw) / written:.3f}x")
    progress(f"{tr.spec.name} {tr.dtype_name} weights ({len(raw) / 1e6:.1f} MB): " + ", ".join(line))
    raw.release()
    del buf


# -- 2. tiered saves ---------------------------------------------------------------------------

def measure_saves(cfg: FaultToleranceConfig, tr: Training, roots: dict[str, Path], writer: RecordWriter,
                  progress) -> dict[str, dict]:
    """``repeats`` synchronous saves per tier, alternating; returns a CPU copy of each tier's last saved state."""
    from hpcbench.fault.async_save import snapshot_to_cpu
    from hpcbench.fault.checkpoint import CheckpointManager

    managers = {tier: CheckpointManager(roots[tier], _policy(cfg)) for tier in roots}
    interval = {"full": cfg.full_interval_s, "light": cfg.light_interval_s}
    last: dict[str, dict] = {}
    for r in range(cfg.repeats):
        for tier in (("light", "full") if r % 2 == 0 else ("full", "light")):  # drift favours no tier
            tr.train(1)
            t0 = time.perf_counter()
            state = capture(tr, tier)
            saved = managers[tier].save(tier, tr.step, state)
            seconds = time.perf_counter() - t0
            last[tier] = snapshot_to_cpu(state)
            labels = {"phase": "save", "model": tr.spec.name, "dtype": tr.dtype_name, "tier": tier,
                      "level": cfg.zstd_level, "interval_s": interval[tier]}
            writer.add("save_seconds", seconds, "s", step=r, labels=labels)
            writer.add("serialize_seconds", saved.seconds_serialize, "s", step=r, labels=labels)
            writer.add("compress_seconds", saved.seconds_compress, "s", step=r, labels=labels)
            writer.add("write_seconds", saved.seconds_write, "s", step=r, labels=labels,
                       text="write + sha256 + fsyncs + renames, beyond the compression they overlap")
            writer.add("bytes_raw", saved.bytes_raw, "B", step=r, labels=labels)
            writer.add("bytes_written", saved.bytes_written, "B", step=r, labels=labels)
            writer.add("compression_ratio", saved.bytes_raw / saved.bytes_written, "x", step=r, labels=labels)
            writer.add("overhead_share", 100.0 * seconds / (interval[tier] + seconds), "%", step=r, labels=labels)
            del state
    progress(f"{tr.spec.name} {tr.dtype_name} saves: " + ", ".join(
        f"{tier} {saved_mb(roots[tier]):.1f} MB on disk" for tier in roots))
    return last


def saved_mb(root: Path) -> float:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 1e6


# -- 3. synchronous against asynchronous -----------------------------------------------------------

def measure_stall(cfg: FaultToleranceConfig, tr: Training, root: Path, step_s: float, writer: RecordWriter,
                  progress) -> dict[str, list[float]]:
    """The light save's stall, synchronous and asynchronous, alternating; the slowdown of overlapped steps.

    Returns:
        ``{"sync": stalls, "async": stalls, "slowdown": extra seconds of the steps that overlapped each
        asynchronous write}``.
    """
    from hpcbench.fault.async_save import AsyncCheckpointer
    from hpcbench.fault.checkpoint import CheckpointManager

    manager = CheckpointManager(root, _policy(cfg))
    background = AsyncCheckpointer(manager)
    stalls: dict[str, list[float]] = {"sync": [], "async": [], "slowdown": []}
    for r in range(cfg.repeats):
        for mode in (("sync", "async") if r % 2 == 0 else ("async", "sync")):
            labels = {"phase": "stall", "model": tr.spec.name, "dtype": tr.dtype_name, "tier": "light", "mode": mode}
            state = capture(tr, "light")
            if mode == "sync":
                t0 = time.perf_counter()
                manager.save("light", tr.step, state)
                stall = time.perf_counter() - t0
                tr.train(cfg.steps_between_saves)
            else:
                background.save("light", tr.step, state)
                stall = background.stall_seconds
                times = tr.train(cfg.steps_between_saves)
                while background.busy:  # the write overlaps as many steps as it takes
                    times += tr.train(1)
                t0 = time.perf_counter()
                background.wait()
                stall += time.perf_counter() - t0  # a write still running when the next save comes: a stall
                slowdown = sum(times) - len(times) * step_s
                stalls["slowdown"].append(slowdown)
                writer.add("overlap_slowdown_seconds", slowdown, "s", step=r, labels=labels,
                           text=f"{len(times)} steps during the write, against {len(times)} x the median step")
            del state
            stalls[mode].append(stall)
            writer.add("stall_seconds", stall, "s", step=r, labels=labels)
    sync, asyn = (sorted(v)[len(v) // 2] for v in (stalls["sync"], stalls["async"]))
    progress(f"{tr.spec.name} {tr.dtype_name} light save stall p50: sync {sync * 1e3:.1f} ms, async "
             f"{asyn * 1e3:.2f} ms ({asyn / sync:.1%})")
    return stalls


# -- 4. recovery ---------------------------------------------------------------------------------

def recover(tr: Training, cfg: FaultToleranceConfig, root: Path, device) -> tuple[Training, Any, float]:
    """A restart: a fresh model and optimizer, then newest valid checkpoint -> load -> restore (timed).

    Returns:
        (the restored training, the checkpoint found or None, the seconds from search to restored).
    """
    import torch

    from hpcbench.fault.checkpoint import CheckpointManager
    from hpcbench.fault.state import restore

    # The kill is simulated in this process: it can land where torch has switched autograd off for a
    # moment (inside optimizer.step, after its no_grad and before the restore in its `finally`), and
    # would leave it off. A restarted process starts with it on; so does this restart.
    torch.set_grad_enabled(True)
    fresh = fresh_like(tr, cfg, device)
    manager = CheckpointManager(root, _policy(cfg), warn=lambda line: None)
    t0 = time.perf_counter()
    info = manager.latest_valid()
    if info is not None:
        resumed = restore(manager.load(info), fresh.model, fresh.optimizer)
        fresh.step = int(resumed["step"])
    fresh.sync()
    return fresh, info, time.perf_counter() - t0


def name_problem(name: str) -> str | None:
    """Why a checkpoint's name does not carry this host and this job id, or None."""
    from hpcbench.fault.checkpoint import checkpoint_name

    host = socket.gethostname() or "unknown"
    job = os.environ.get("SLURM_JOB_ID") or "local"
    expected = checkpoint_name("light", 0, host, job).split("-step")[0].split("-", 1)[1]
    return None if expected in name else f"{name} does not hold '{expected}' (host-job)"


def measure_recovery(cfg: FaultToleranceConfig, tr: Training, roots: dict[str, Path], saved: dict[str, dict],
                     device, writer: RecordWriter, progress) -> None:
    """Recover each tier ``repeats`` times; compare the restored state with the saved one; check the names."""
    line = []
    for tier, root in roots.items():
        labels = {"phase": "recovery", "model": tr.spec.name, "dtype": tr.dtype_name, "tier": tier}
        times = []
        for r in range(cfg.repeats):
            restored, info, seconds = recover(tr, cfg, root, device)
            equal = info is not None and restored_equals(restored, saved[tier])
            times.append(seconds)
            writer.add("recovery_seconds", seconds, "s", step=r, labels=labels)
            writer.add("restore_equal", 1.0 if equal else 0.0, "bool", step=r, labels=labels,
                       text=None if equal else f"restored from {info.name if info else 'nothing'}: differs")
            del restored
        problem = name_problem(info.name) if info is not None else "no checkpoint found"
        writer.add("checkpoint_named", 0.0 if problem else 1.0, "bool", labels=labels, text=problem or info.name)
        line.append(f"{tier} {sorted(times)[len(times) // 2] * 1e3:.0f} ms")
    progress(f"{tr.spec.name} {tr.dtype_name} recovery p50: " + ", ".join(line))


# -- 5. failures in wall time -----------------------------------------------------------------------

class InjectedFailure(Exception):
    """The failure simulation's kill, raised in the training loop by SIGALRM at the drawn moment."""

    def __init__(self, at: float):
        super().__init__(f"injected failure at {at:.6f}")
        self.at = at


class _Alarm:
    """SIGALRM at a drawn moment raises :class:`InjectedFailure` wherever the main thread is."""

    def __init__(self) -> None:
        self.armed = False
        self.fired_at: float | None = None

    def handler(self, signum, frame) -> None:
        if self.armed:
            self.armed = False
            self.fired_at = time.perf_counter()
            raise InjectedFailure(self.fired_at)

    def arm(self, seconds: float) -> None:
        self.fired_at = None
        self.armed = True
        signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-6))

    def disarm(self) -> None:
        self.armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)

    def check(self) -> None:
        """An InjectedFailure swallowed on the way (in a ``__del__``) still ends the loop at the next step."""
        if self.fired_at is not None:
            raise InjectedFailure(self.fired_at)


@contextlib.contextmanager
def _uninterrupted():
    """SIGALRM held back for the block: the simulation's own bookkeeping is never half done."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def measure_failures(cfg: FaultToleranceConfig, tr: Training, root: Path, device, writer: RecordWriter,
                     progress, launch_key: tuple[int, ...]) -> None:
    """Failures at drawn wall-clock moments against light saves every ``failure_light_every_s``; a torn checkpoint.

    Training runs step after step and saves a light checkpoint (synchronously) at the first
    step boundary at least ``failure_light_every_s`` after the previous save ended. A failure
    strikes after an exponential wall time (mean ``failure_mtbf_s``, drawn from the launch's
    seed without looking at the cadence): SIGALRM raises wherever the loop is, in a step or in
    a save. Everything in memory is dropped; a fresh model and optimizer are restored from the
    newest valid checkpoint and training continues until it has again completed the steps it
    had completed at the kill. Work lost = the wall time from the kill to that moment (restore
    included) + the wall time between the last completed step and the kill (the interrupted
    step's or save's work). It is recorded as a share of the cadence and, scaled, at
    ``light_interval_s``. Each recovery is also checked to have restored the newest checkpoint
    whose save had returned (or a newer one) and to equal what was saved.
    """
    import numpy as np

    from hpcbench.fault.async_save import snapshot_to_cpu
    from hpcbench.fault.checkpoint import CheckpointManager
    from hpcbench.fault.inject.data import corrupt_shard

    labels = {"phase": "failure", "model": tr.spec.name, "dtype": tr.dtype_name,
              "cadence_s": cfg.failure_light_every_s}
    if threading.current_thread() is not threading.main_thread():
        writer.add("work_lost_seconds", None, "s", labels=labels,
                   text="not measured: the failure simulation's SIGALRM needs the main thread")
        return
    cadence = cfg.failure_light_every_s
    rng = np.random.default_rng([*launch_key, 11])
    # A restarted process builds its own manager: one per life of the simulated job.
    manager = [CheckpointManager(root, _policy(cfg))]
    saved: dict[int, dict] = {}   # step -> what the save at that step holds (CPU copy)
    complete: list[int] = []      # steps whose save returned
    stalls: list[float] = []

    def save_light() -> None:
        state = capture(tr, "light")
        with _uninterrupted():
            saved[tr.step] = snapshot_to_cpu(state)
            for old in sorted(saved)[:-4]:
                del saved[old]
        t0 = time.perf_counter()
        manager[0].save("light", tr.step, state)
        seconds = time.perf_counter() - t0
        with _uninterrupted():
            complete.append(tr.step)
            stalls.append(seconds)

    alarm = _Alarm()
    previous = signal.signal(signal.SIGALRM, alarm.handler)
    lost_shares: list[float] = []
    try:
        tr.step = 0  # the simulated job starts from a checkpoint at step 0, as a resumed job does
        save_light()
        # One untimed restore and step first: the process's first restore pays one-time costs (allocator,
        # thread pools) that a restarted process pays whatever the cadence, and the later ones here do not.
        warm, _, _ = recover(tr, cfg, root, device)
        warm.train(1)
        del warm
        last_save = time.perf_counter()
        for f in range(cfg.failures):
            wait = float(rng.exponential(cfg.failure_mtbf_s))
            reached, step_end = tr.step, time.perf_counter()
            try:
                alarm.arm(wait)
                while True:
                    alarm.check()
                    tr.train(1)
                    with _uninterrupted():
                        reached, step_end = tr.step, time.perf_counter()
                    if step_end - last_save >= cadence:
                        save_light()
                        last_save = time.perf_counter()
            except InjectedFailure as kill:
                killed_at = kill.at
            finally:
                alarm.disarm()
            partial = max(0.0, killed_at - step_end)
            newest = complete[-1]
            tr, info, restore_s = recover(tr, cfg, root, device)
            manager[0] = CheckpointManager(root, _policy(cfg))
            equal = info is not None and info.step in saved and restored_equals(tr, saved[info.step])
            last_save = time.perf_counter()  # the restored checkpoint: the cadence starts again
            while tr.step < reached:  # the redo: the work the failure cost
                tr.train(1)
                if time.perf_counter() - last_save >= cadence:
                    save_light()
                    last_save = time.perf_counter()
            lost = time.perf_counter() - killed_at + partial
            restored_step = info.step if info is not None else -1
            share = lost / cadence
            lost_shares.append(share)
            writer.add("work_lost_seconds", share * cfg.light_interval_s, "s", step=f, labels=labels,
                       text=f"wall time lost / the {cadence:g} s cadence x light_interval_s" if f == 0 else None)
            writer.add("work_lost_share", share, "ratio", step=f, labels=labels)
            writer.add("work_lost_wall_seconds", lost, "s", step=f, labels=labels)
            writer.add("time_to_failure_seconds", wait, "s", step=f, labels=labels)
            writer.add("steps_redone", reached - max(restored_step, 0), "steps", step=f, labels=labels)
            writer.add("recovery_seconds", restore_s, "s", step=f, labels=labels)
            writer.add("restored_newest", 1.0 if restored_step >= newest else 0.0, "bool", step=f, labels=labels,
                       text=None if restored_step >= newest else
                       f"restored step {restored_step}, the newest complete save was step {newest}")
            writer.add("restore_equal", 1.0 if equal else 0.0, "bool", step=f, labels=labels)
    finally:
        alarm.disarm()
        signal.signal(signal.SIGALRM, previous)
    for i, seconds in enumerate(stalls):
        writer.add("save_stall_seconds", seconds, "s", step=i, labels=labels)
    # A torn newest checkpoint: recovery must fall back to the one before it.
    tr.train(1)
    save_light()
    before = tr.step
    tr.train(1)
    save_light()
    newest = manager[0].latest_valid()
    data = next(p for p in newest.path.iterdir() if p.name.startswith("state.pt"))
    corrupt_shard(data, how="truncate", at=0.5)  # a save torn half-way
    found = CheckpointManager(root, _policy(cfg), warn=lambda line: None)
    info = found.latest_valid()
    skipped = info is not None and info.step == before and any(s.step == tr.step for s in found.skipped)
    writer.add("torn_checkpoint_skipped", 1.0 if skipped else 0.0, "bool", labels=labels,
               text=f"newest (step {tr.step}) cut to half its bytes; recovery chose "
                    f"{info.name if info else 'nothing'}")
    progress(f"{tr.spec.name} {tr.dtype_name}: {cfg.failures} failures, work lost mean "
             f"{sum(lost_shares) / len(lost_shares):.2f} x the {cadence:g} s cadence (max "
             f"{max(lost_shares):.2f}); torn checkpoint skipped: {skipped}")


# -- 6. the light save's stall on a model whose save is not free -------------------------------------

def measure_overhead(cfg: FaultToleranceConfig, root: Path, device, writer: RecordWriter, progress) -> None:
    """``overhead_saves`` synchronous light saves of ``overhead_model``, one step apart: the loop's stall each."""
    from hpcbench.fault.checkpoint import CheckpointManager

    dtype = cfg.dtypes[0]
    tr = build_training(cfg, cfg.overhead_model, dtype, device)
    tr.train(WARMUP_STEPS)
    manager = CheckpointManager(root, _policy(cfg))
    labels = {"phase": "overhead", "model": tr.spec.name, "dtype": dtype, "tier": "light",
              "interval_s": cfg.light_interval_s}
    stalls = []
    for r in range(cfg.overhead_saves):
        tr.train(1)
        t0 = time.perf_counter()  # the loop waits from here until the save returns
        saved = manager.save("light", tr.step, capture(tr, "light"))
        stall = time.perf_counter() - t0
        stalls.append(stall)
        writer.add("save_stall_seconds", stall, "s", step=r, labels=labels,
                   text="synchronous light save: serialize + zstd + write + fsyncs" if r == 0 else None)
        writer.add("overhead_share", 100.0 * stall / (cfg.light_interval_s + stall), "%", step=r, labels=labels)
        # What the stall is made of: the stall is the storage's as much as zstd's. A save into a new file takes
        # fresh blocks, which a thin-provisioned virtual disk (ext4 with `discard`, as on the VM this was
        # measured on) allocates at a fraction of the rate it rewrites blocks it already holds, so the same
        # save costs different shares of the interval on different storage; these rows let a reader tell.
        writer.add("bytes_written", saved.bytes_written, "B", step=r, labels=labels)
        writer.add("compress_seconds", saved.seconds_compress, "s", step=r, labels=labels)
        writer.add("write_seconds", saved.seconds_write, "s", step=r, labels=labels)
    p50 = sorted(stalls)[len(stalls) // 2]
    progress(f"{tr.spec.name} {dtype} light save stall p50 {p50:.2f} s: "
             f"{100 * p50 / (cfg.light_interval_s + p50):.2f} % of a {cfg.light_interval_s:g} s interval; "
             f"{saved.bytes_written / 1e6:.0f} MB written, {saved.bytes_written / 1e6 / p50:.0f} MB/s through the save")


# -- 7. the job wrapper against an independent injector ----------------------------------------------

def wrapper_script() -> Path:
    """``slurm/run_with_retries.sh`` of this checkout (``$HPCBENCH_SLURM_TEMPLATES`` overrides the folder)."""
    from hpcbench.core.paths import templates_dir

    return templates_dir() / "run_with_retries.sh"


#: One try of a survival job (standard library only: it starts in tens of milliseconds).
TRY_SCRIPT = Path(__file__).with_name("survival_try.py")
#: The survival jobs' data set: shards of random bytes, checked by every try and repaired by the wrapper.
SURVIVAL_SHARDS, SURVIVAL_SHARD_BYTES = 8, 64 * 1024
#: The arms: the guide's wrapper, and the same job run once.
ARMS = {"wrapper": GUIDE_C15_TRIES, "single": 1}

#: The wrapper's log stamps end at the millisecond.
STAMP_SLACK_S = 0.005

_ATTEMPT_LINE = re.compile(r"run_with_retries: attempt=(\d+)/(\d+) start=(\S+) end=(\S+) .*?rc=(\d+)")
_REPAIRED_LINE = re.compile(r"run_with_retries: repair: shard repaired: (.+)$")
_TRY_LINE = re.compile(r"attempt=(\d+) intact=([01])")


def make_survival_data(folder: Path, seed: int) -> tuple[Path, list[str]]:
    """A pristine copy and a working copy of a small sharded data set; the working copy's manifest names the
    pristine one as its ``source``, from which the wrapper's repair step copies a damaged shard back.

    Returns:
        (the working copy's folder, its shard file names).
    """
    import numpy as np

    from hpcbench.data.manifest import Manifest, shard_entry

    source, data = folder / "source", folder / "data"
    source.mkdir(parents=True)
    data.mkdir()
    rng = np.random.default_rng(seed)
    names = [f"shard-{i:05d}.bin" for i in range(SURVIVAL_SHARDS)]
    for name in names:
        payload = rng.integers(0, 256, SURVIVAL_SHARD_BYTES, dtype=np.uint8).tobytes()
        (source / name).write_bytes(payload)
        (data / name).write_bytes(payload)
    entries = [shard_entry(source, source / name, samples=1) for name in names]
    Manifest(format="bytes", shards=entries, command="fault_tolerance survival data").write(source)
    Manifest(format="bytes", shards=entries, source=str(source), command="fault_tolerance survival data").write(data)
    return data, names


@dataclass
class InjectedEvent:
    """One failure of the injector: when, what, and whether a try was there to strike."""

    at: float           #: time.time() before it looked for its target and acted
    kind: str           #: "kill" or "corrupt"
    job: tuple | None   #: the job it struck (index, arm), None when no try was running
    shard: str | None = None
    done: float | None = None  #: time.time() once a flip was written (a corruption's damage lies in [at, done])


class Injector:
    """Failures at exponential times, independent of the jobs and their tries (a thread of its own).

    It knows which job runs (its wrapper's pid and data folder), as a node's failure "knows"
    what runs on it, and nothing of the wrapper's tries: at each failure it finds the job's
    running try (a child of the wrapper in a process group of its own, running the try's script)
    and SIGKILLs that process group, or flips one byte of a data shard under it. A failure while
    no try runs (the wrapper asking SLURM for node states, repairing, between jobs) strikes nothing.
    """

    def __init__(self, mtbf_s: float, corrupt_share: float, seed: Sequence[int]):
        import numpy as np

        self.mtbf_s, self.corrupt_share = mtbf_s, corrupt_share
        self.rng = np.random.default_rng(list(seed))
        self.events: list[InjectedEvent] = []
        self._lock = threading.Lock()
        self._target: tuple[tuple, int, Path, list[str]] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hpcbench-fault-injector", daemon=True)

    def __enter__(self) -> "Injector":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def watch(self, job: tuple, wrapper_pid: int, data: Path, shards: list[str]) -> None:
        with self._lock:
            self._target = (job, wrapper_pid, data, shards)

    def unwatch(self) -> None:
        with self._lock:
            self._target = None

    def _run(self) -> None:
        from hpcbench.fault.inject.data import corrupt_shard
        from hpcbench.fault.inject.process import kill_process_groups, try_groups

        while not self._stop.wait(float(self.rng.exponential(self.mtbf_s))):
            # Every draw is made whatever the target, so the sequence of failures is the seed's alone.
            kind = "corrupt" if self.rng.random() < self.corrupt_share else "kill"
            pick, where = float(self.rng.random()), float(self.rng.random())
            with self._lock:
                # The failure's time is taken before it looks for a running try and acts: the try may end
                # meanwhile (reading /proc takes milliseconds on a loaded node), and a time taken after could
                # fall behind the try's end stamp in the wrapper's log. A flip then counted for the next try's
                # window, while the repair after this try had already fixed it: "not repaired" where it was.
                # A flip also stamps when it was written (`done`): repair_checks leaves a flip across a try's
                # end unjudged.
                # The try is found by its script's name, not by its process group alone: between two tries
                # on a SLURM node the wrapper runs `timeout 5 sinfo`, and timeout puts itself in a group of
                # its own. Found by group alone, it drew strikes while no try ran: a flip the repair after
                # try k fixed, counted in try k + 1's window, read "not repaired after try k + 1".
                now = time.time()
                target = self._target
                groups = try_groups(target[1], match=TRY_SCRIPT.name) if target else []
                if not groups:
                    self.events.append(InjectedEvent(now, kind, None))
                    continue
                job, _, data, shards = target
                if kind == "kill":
                    kill_process_groups(groups)
                    self.events.append(InjectedEvent(now, kind, job))
                else:
                    name = shards[min(int(pick * len(shards)), len(shards) - 1)]
                    with contextlib.suppress(OSError):
                        corrupt_shard(data / name, how="flip", at=where)
                        self.events.append(InjectedEvent(now, kind, job, name, time.time()))


def _utc(stamp: str) -> float:
    from datetime import datetime, timezone

    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()


@dataclass
class JobRun:
    """What one survival job did, read from the wrapper's log, the tries' log and the injector's record."""

    exit_status: int
    attempts: list[tuple[float, float, int]]     #: (start, end, rc) of each try, times as time.time()
    repaired_after: dict[int, set[str]]          #: attempt -> shard names the repair step listed as repaired
    intact_at_start: dict[int, int]              #: attempt -> 1 when every shard passed its sha256 at its start
    said_after: dict[int, list[str]] = field(default_factory=dict)
    """attempt -> the wrapper's other log lines after it (the repair step's report, its errors): a failed
    repair check quotes them, so that its cause can be read from the records."""

    def policy_followed(self, tries: int) -> bool:
        """Reran after each failed try, stopped at the first success, gave up after ``tries``, exit = last rc."""
        rcs = [rc for _, _, rc in self.attempts]
        return (1 <= len(rcs) <= tries and all(rc != 0 for rc in rcs[:-1])
                and (rcs[-1] == 0 or len(rcs) == tries) and self.exit_status == rcs[-1])


def run_survival_job(script: Path, tries: int, data: Path, try_s: float, log: Path, try_log: Path,
                     injector: Injector, job: tuple, shards: list[str]) -> JobRun:
    """One job through ``run_with_retries.sh --tries N --data DATA`` under the injector; its log parsed."""
    cmd = ["bash", str(script), "--tries", str(tries), "--delay", "0", "--data", str(data), "--log", str(log), "--",
           "setsid", "--wait", sys.executable, str(TRY_SCRIPT), str(data), f"{try_s:g}", str(try_log)]
    env = {**os.environ, "HPCBENCH_PYTHON": sys.executable}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    injector.watch(job, proc.pid, data, shards)
    try:
        status = proc.wait(timeout=60 + 10 * tries * try_s)
    except subprocess.TimeoutExpired:
        from hpcbench.fault.inject.process import kill_try_groups

        kill_try_groups(proc.pid)  # the hung try, then its wrapper
        proc.kill()
        proc.wait()
        raise RuntimeError(f"survival job {job} ({' '.join(cmd)}) did not end in time; see {log}") from None
    finally:
        injector.unwatch()
    attempts, repaired, said = [], {}, {}
    for line in log.read_text().splitlines() if log.exists() else []:
        if m := _ATTEMPT_LINE.match(line):
            attempts.append((_utc(m.group(3)), _utc(m.group(4)), int(m.group(5))))
        elif (m := _REPAIRED_LINE.match(line)) and attempts:
            repaired.setdefault(len(attempts), set()).add(Path(m.group(1).strip()).name)
        elif attempts and line.strip():
            said.setdefault(len(attempts), []).append(line.strip().removeprefix("run_with_retries: "))
    intact = {}
    for line in try_log.read_text().splitlines() if try_log.exists() else []:
        if m := _TRY_LINE.match(line):
            intact[int(m.group(1))] = int(m.group(2))
    return JobRun(status, attempts, repaired, intact, said)


def _quote(lines: list[str], keep: int = 4, width: int = 160) -> str:
    """The wrapper's last ``keep`` lines after a try, for a failed check's text."""
    return f" (the wrapper said: {' | '.join(line[:width] for line in lines[-keep:])})" if lines else ""


def _timeline(run: JobRun, events: list[InjectedEvent]) -> str:
    """The job's tries, the shards its repair steps listed and the injector's strikes, in seconds from its
    first try's start: what a failed check's text needs for its cause to be read from the records."""
    t0 = run.attempts[0][0] if run.attempts else 0.0
    parts = [f"try {k} {start - t0:.3f}-{end - t0:.3f} rc {rc}"
             + (f", repaired {sorted(run.repaired_after[k])}" if run.repaired_after.get(k) else "")
             for k, (start, end, rc) in enumerate(run.attempts, start=1)]
    parts += [f"{e.kind} {e.shard or ''} at {e.at - t0:.3f}".replace("  ", " ")
              + (f"-{e.done - t0:.3f}" if e.done is not None else "") for e in events]
    return f" [timeline: {'; '.join(parts)}]"


def repair_checks(run: JobRun, events: list[InjectedEvent]) -> list[tuple[bool | None, str]]:
    """After each failed try that has a next one: was every shard the injector had damaged repaired first?

    A shard counts as repaired when the wrapper's repair step listed it after that try and the
    next try found every shard intact (sha256) at its start; that start check is not asked of
    a next try the injector damaged a shard under (it may have struck before the check).

    A flip is known to lie between the injector's two stamps (``at``, taken before it looked for a
    running try, and ``done``, once written). When a shard found wanting after try ``k`` was flipped
    across try ``k``'s end, the flip may have landed after the repair step had checked that shard
    (the injector's thread can be held up between its stamps on a loaded node): the check cannot be
    judged either way and is returned as ``None`` with the reason, never counted as repaired or not.

    Returns:
        (repaired, why not) per failed try that left damaged shards behind; ``None``: not judged.
    """
    corruptions = sorted((e.at, e.shard, e.at if e.done is None else e.done) for e in events if e.kind == "corrupt")
    pending: set[str] = set()
    seen = 0
    checks: list[tuple[bool | None, str]] = []
    for k, (_, end, rc) in enumerate(run.attempts[:-1], start=1):
        # the log's stamps are cut to the millisecond: a flip in the try's last millisecond is its own
        while seen < len(corruptions) and corruptions[seen][0] <= end + STAMP_SLACK_S:
            pending.add(corruptions[seen][1])
            seen += 1
        repaired = run.repaired_after.get(k, set())
        if rc != 0 and pending:
            next_end = run.attempts[k][1]
            again = any(end + STAMP_SLACK_S < at <= next_end + STAMP_SLACK_S for at, _, _ in corruptions)
            listed = pending <= repaired
            intact = run.intact_at_start.get(k + 1, 1) == 1 or again
            across = sorted({shard for at, shard, done in corruptions
                             if at <= end + STAMP_SLACK_S < done and shard in pending})
            if not (listed and intact) and across:
                checks.append((None, f"after try {k}: not judged: {across} flipped across the try's end "
                                     f"(the flip may have landed after the repair checked it)"))
            else:
                why = "" if listed and intact else (
                    f"after try {k}: " + ", ".join(
                        ([f"{sorted(pending - repaired)} not repaired"] if not listed else [])
                        + ([f"try {k + 1} found a bad shard at its start"] if not intact else []))
                    + _quote(run.said_after.get(k, [])) + _timeline(run, events))
                checks.append((listed and intact, why))
        pending -= repaired
    return checks


def measure_survival_jobs(cfg: FaultToleranceConfig, work: Path, writer: RecordWriter, progress,
                          launch_key: tuple[int, ...]) -> None:
    """``survival_jobs`` jobs per arm (3 tries, 1 try), alternating, under one independent injector."""
    from hpcbench.fault.retry import repair

    script = wrapper_script()
    if not script.is_file():
        writer.add("job_failed", None, "bool", labels={"phase": "survival"},
                   text=f"not measured: {script} does not exist")
        return
    work.mkdir(parents=True, exist_ok=True)
    data, shards = make_survival_data(work / "dataset", seed=cfg.seed)
    how = (f"a job = slurm/run_with_retries.sh --tries N --data DATA around one try (survival_try.py: "
           f"{cfg.survival_try_s:g} s of steps, each checking {len(shards)} shards' sha256); an independent "
           f"injector fails at exponential times (mean {cfg.survival_mtbf_s:g} s): SIGKILL of the running try's "
           f"process group, or ({cfg.survival_corrupt_share:.0%}) a flipped byte in a shard")
    tally = {arm: [0, 0] for arm in ARMS}  # failed jobs, jobs
    tries_seen = [0, 0]                    # failed tries, tries
    repairs = [0, 0]                       # repaired, checks
    policy_ok = 0
    seq = 0
    with Injector(cfg.survival_mtbf_s, cfg.survival_corrupt_share, [*launch_key, 15]) as injector:
        for j in range(cfg.survival_jobs):
            for arm in (("wrapper", "single") if j % 2 == 0 else ("single", "wrapper")):  # drift favours no arm
                tries = ARMS[arm]
                labels = {"phase": "survival", "mode": arm, "tries": tries}
                job = (j, arm)
                log, try_log = work / f"job{j:06d}-{arm}.log", work / f"job{j:06d}-{arm}.tries"
                run = run_survival_job(script, tries, data, cfg.survival_try_s, log, try_log, injector, job, shards)
                events = [e for e in injector.events if e.job == job]
                log.unlink(missing_ok=True)
                try_log.unlink(missing_ok=True)
                repair([data])  # the next job starts on sound data (what an operator's check would do)
                failed = run.exit_status != 0
                followed = run.policy_followed(tries)
                tally[arm][0] += failed
                tally[arm][1] += 1
                policy_ok += followed
                writer.add("job_failed", 1.0 if failed else 0.0, "bool", step=j, labels=labels,
                           text=how if j == 0 else None)
                writer.add("job_tries", len(run.attempts), "count", step=j, labels=labels)
                writer.add("wrapper_policy_followed", 1.0 if followed else 0.0, "bool", step=j, labels=labels,
                           text=None if followed else f"tries' exit status {[rc for *_, rc in run.attempts]}, "
                                                      f"wrapper exit {run.exit_status}")
                writer.add("job_kills", sum(e.kind == "kill" for e in events), "count", step=j, labels=labels)
                writer.add("job_corruptions", sum(e.kind == "corrupt" for e in events), "count", step=j,
                           labels=labels)
                for k, (start, end, rc) in enumerate(run.attempts):
                    writer.add("try_failed", 1.0 if rc else 0.0, "bool", step=seq, labels=labels)
                    writer.add("try_exit_status", rc, "code", step=seq, labels=labels)
                    writer.add("try_seconds", end - start, "s", step=seq, labels=labels)
                    if tries > 1:
                        # context for the p_try^3 model, which takes every try as alike: does a retry (on
                        # repaired data, after a kill) fail as often as a first try? Recorded apart, so the
                        # pooled p_try the C15 rule reads is the same as before.
                        writer.add("attempt_failed", 1.0 if rc else 0.0, "bool", step=seq,
                                   labels={"phase": "attempts", "mode": arm, "tries": tries, "attempt": k + 1})
                    tries_seen[0] += rc != 0
                    tries_seen[1] += 1
                    seq += 1
                if tries > 1:
                    for ok, why in repair_checks(run, events):
                        if ok is None:  # recorded apart: a check that cannot be judged counts neither way
                            writer.add("repair_unjudged", 1.0, "count", step=repairs[1],
                                       labels={"phase": "repair", "tries": tries}, text=why)
                            continue
                        writer.add("shard_repaired", 1.0 if ok else 0.0, "bool", step=repairs[1],
                                   labels={"phase": "repair", "tries": tries}, text=why or None)
                        repairs[0] += ok
                        repairs[1] += 1
    missed = sum(e.job is None for e in injector.events)
    writer.add("injected_failures", len(injector.events), "count", labels={"phase": "injector"},
               text=f"{missed} struck while no try ran")
    p_try = tries_seen[0] / tries_seen[1] if tries_seen[1] else math.nan
    share = {arm: f / n if n else math.nan for arm, (f, n) in tally.items()}
    progress(f"survival: p_try {p_try:.3f} ({tries_seen[0]}/{tries_seen[1]} tries failed); jobs failed with the "
             f"wrapper {tally['wrapper'][0]}/{tally['wrapper'][1]} ({share['wrapper']:.3f}, p_try^3 "
             f"{p_try ** GUIDE_C15_TRIES:.3f}), without {tally['single'][0]}/{tally['single'][1]} "
             f"({share['single']:.3f}); policy followed {policy_ok}/{2 * cfg.survival_jobs}; shards repaired "
             f"{repairs[0]}/{repairs[1]}; {len(injector.events)} failures injected ({missed} struck nothing)")


# -- the run -------------------------------------------------------------------------------------

def launch_key(cfg: FaultToleranceConfig, writer: RecordWriter) -> tuple[int, ...]:
    """The injected faults' seed: ``seed``, the repetition and the launch's identity.

    Every launch of a suite must draw its own failure times and survival plans: launches are
    the verdict's unit of replication, and the same draw repeated five times is one sample.
    A launch rerun under the same run and task id draws the same faults again.
    """
    ctx = writer.context
    return cfg.seed, int(ctx.repetition), zlib.crc32(f"{ctx.run_id}/{ctx.task_id}".encode())


def simulation_model(models: list[str]) -> str:
    """The model the failure simulation trains: the smallest (it counts steps; every step is real work)."""
    from hpcbench.models.footprint import model_footprint

    def size(name: str) -> float:
        fp = model_footprint(name)
        return fp.parameters * fp.macs_per_item if fp else float("inf")

    return min(models, key=size)


def _device(cfg: FaultToleranceConfig):
    import torch

    if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("device='cuda' but torch sees no CUDA device")
        return torch.device("cuda")
    return torch.device("cpu")


def run(cfg: FaultToleranceConfig, writer: RecordWriter, out_dir: str | os.PathLike,
        progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the whole experiment (see the module docstring), writing every measurement to ``writer``.

    Returns:
        A small dict of what was done (for the notebook's printout).
    """
    import statistics

    device = _device(cfg)
    base = Path(cfg.checkpoint_dir) if cfg.checkpoint_dir else Path(out_dir)
    root = base / f"checkpoints-{socket.gethostname()}-{os.getpid()}-{int(time.time())}"
    root.mkdir(parents=True)
    writer.add("storage.filesystem", None, "", text=filesystem_at(root))
    writer.add("device", None, "", text=device.type)
    failure_model = simulation_model(cfg.models)
    key = launch_key(cfg, writer)
    writer.add("injection_seed", None, "", text=f"failures drawn from seed sequence {list(key)}")
    try:
        for model in cfg.models:
            for j, dtype in enumerate(cfg.dtypes):
                tr = build_training(cfg, model, dtype, device)
                tr.train(WARMUP_STEPS)
                steps = tr.train(TIMED_STEPS)
                for s, t in enumerate(steps):
                    writer.add("step_time", t, "s", step=s, labels={"phase": "train", "model": model, "dtype": dtype})
                here = root / f"{model}-{dtype}"
                tiers = {"light": here / "light", "full": here / "full"}
                measure_compression(cfg, tr, writer, progress)
                saved = measure_saves(cfg, tr, tiers, writer, progress)
                measure_stall(cfg, tr, here / "stall", statistics.median(steps), writer, progress)
                measure_recovery(cfg, tr, tiers, saved, device, writer, progress)
                del saved
                if model == failure_model and j == 0:
                    measure_failures(cfg, tr, here / "failures", device, writer, progress, key)
                del tr
                gc.collect()
                if not cfg.keep_checkpoints:
                    shutil.rmtree(here, ignore_errors=True)
        measure_overhead(cfg, root / "overhead", device, writer, progress)
        gc.collect()
        if not cfg.keep_checkpoints:
            shutil.rmtree(root / "overhead", ignore_errors=True)
        measure_survival_jobs(cfg, root / "survival", writer, progress, key)
    finally:
        if not cfg.keep_checkpoints:
            shutil.rmtree(root, ignore_errors=True)
    return {"device": device.type, "checkpoints": str(root) + ("" if cfg.keep_checkpoints else " (removed)"),
            "models": list(cfg.models), "dtypes": list(cfg.dtypes)}
