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
**failure**: light checkpoints every ``light_every_steps`` steps (standing for the 600 s
interval), ``failures`` failures injected in time: after a uniformly random number of completed
steps (0 .. 2 x the cadence - 1), during the next step, at a uniformly random fraction of it.
The process state is dropped, recovery finds the newest valid checkpoint and training continues
from there. Work lost = completed steps since the restored checkpoint + the fraction of the
interrupted step; its share of the cadence times ``light_interval_s`` is the work lost at the
guide's interval (expected: half of it). After the failures, a torn newest checkpoint (its data
file cut in half after the write, as storage that lost bytes leaves it) must be skipped by
recovery.

Last, **survival**: ``survival_jobs`` jobs through the guide's wrapper made real,
``slurm/run_with_retries.sh --tries 3``; each try is a real process (``sh``) that exits 1 when
the seeded injection plan says that attempt fails (each attempt independently with
``failure_p``), read from ``HPCBENCH_ATTEMPT`` as the wrapper sets it. The attempts a job made
are counted from the wrapper's own log.

The failure times and the survival plans are drawn per launch (:func:`launch_key`): launches are
the verdicts' unit of replication.
"""

from __future__ import annotations

import gc
import os
import re
import shutil
import socket
import subprocess
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from hpcbench.core.facts import GUIDE_C15_TRIES
from hpcbench.core.results import RecordWriter
from hpcbench.experiments.fault_tolerance.config import FaultToleranceConfig

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
    import io

    import torch

    from hpcbench.fault.checkpoint import compress_bytes

    buf = io.BytesIO()
    torch.save(tr.model.state_dict(), buf)
    raw = buf.getbuffer()
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
    del raw
    buf.close()


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
                       text="write + sha256 + fsyncs + renames")
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
    from hpcbench.fault.checkpoint import CheckpointManager
    from hpcbench.fault.state import restore

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


# -- 5. failures in time -------------------------------------------------------------------------

def measure_failures(cfg: FaultToleranceConfig, tr: Training, root: Path, device, writer: RecordWriter,
                     progress, launch_key: tuple[int, ...]) -> None:
    """Injected failures against light checkpoints every ``light_every_steps`` steps; then a torn checkpoint."""
    import numpy as np

    from hpcbench.fault.async_save import snapshot_to_cpu
    from hpcbench.fault.checkpoint import CheckpointManager

    k = cfg.light_every_steps
    rng = np.random.default_rng([*launch_key, 11])
    labels = {"phase": "failure", "model": tr.spec.name, "dtype": tr.dtype_name, "light_every_steps": k}
    manager = CheckpointManager(root, _policy(cfg, light_every_steps=k))
    saved: dict[int, dict] = {}

    def save_light() -> None:
        state = capture(tr, "light")
        manager.save("light", tr.step, state)
        saved[tr.step] = snapshot_to_cpu(state)
        for old in [s for s in saved if s < tr.step - 2 * k]:  # retention keeps 2
            del saved[old]

    tr.step = 0  # the simulated job starts from a checkpoint at step 0, as a resumed job does
    save_light()
    lost_all = []
    for f in range(cfg.failures):
        completed = int(rng.integers(0, 2 * k))  # 2 cadences: the failure's place in the cadence is uniform
        fraction = float(rng.random())           # how far into the next step the failure strikes
        for _ in range(completed):
            tr.train(1)
            if manager.due(tr.step) == "light":
                save_light()
        failed_at = tr.step + fraction
        tr, info, seconds = recover(tr, cfg, root, device)
        equal = info is not None and restored_equals(tr, saved[info.step])
        lost_steps = failed_at - (info.step if info is not None else 0)
        writer.add("work_lost_steps", lost_steps, "steps", step=f, labels=labels)
        writer.add("work_lost_seconds", lost_steps / k * cfg.light_interval_s, "s", step=f, labels=labels,
                   text=f"share of the {k}-step light cadence x light_interval_s")
        writer.add("recovery_seconds", seconds, "s", step=f, labels=labels)
        writer.add("restore_equal", 1.0 if equal else 0.0, "bool", step=f, labels=labels)
        lost_all.append(lost_steps / k * cfg.light_interval_s)
    writer.add("work_lost_expected_seconds", cfg.light_interval_s / 2, "s", labels=labels,
               text="a failure at a uniformly random time loses half a light interval on average")
    # A torn newest checkpoint: recovery must fall back to the one before it.
    for _ in range(k):
        tr.train(1)
    save_light()
    previous = tr.step
    for _ in range(k):
        tr.train(1)
    save_light()
    newest = manager.latest_valid()
    data = next(p for p in newest.path.iterdir() if p.name.startswith("state.pt"))
    os.truncate(data, data.stat().st_size // 2)
    found = CheckpointManager(root, _policy(cfg), warn=lambda line: None)
    info = found.latest_valid()
    skipped = info is not None and info.step == previous and any(s.step == tr.step for s in found.skipped)
    writer.add("torn_checkpoint_skipped", 1.0 if skipped else 0.0, "bool", labels=labels,
               text=f"newest (step {tr.step}) cut to half its bytes; recovery chose "
                    f"{info.name if info else 'nothing'}")
    progress(f"{tr.spec.name} {tr.dtype_name}: {cfg.failures} failures, work lost mean "
             f"{sum(lost_all) / len(lost_all):.0f} s at the {cfg.light_interval_s:g} s interval "
             f"(expected {cfg.light_interval_s / 2:g} s); torn checkpoint skipped: {skipped}")


# -- 6. the job wrapper -------------------------------------------------------------------------

def wrapper_script() -> Path:
    """``slurm/run_with_retries.sh`` of this checkout (``$HPCBENCH_SLURM_TEMPLATES`` overrides the folder)."""
    from hpcbench.run.backends.slurm import templates_dir

    return templates_dir() / "run_with_retries.sh"


_ATTEMPT_LINE = re.compile(r"run_with_retries: attempt=(\d+)/(\d+) .* rc=(\d+)")


def measure_survival_jobs(cfg: FaultToleranceConfig, work: Path, writer: RecordWriter, progress,
                          launch_key: tuple[int, ...]) -> None:
    """``survival_jobs`` jobs through the wrapper, each try failing by the seeded plan with ``failure_p``."""
    import numpy as np

    from hpcbench.fault.retry import expected_attempts, measure_survival

    tries = GUIDE_C15_TRIES
    labels = {"phase": "survival", "p": cfg.failure_p, "tries": tries}
    script = wrapper_script()
    if not script.is_file():
        writer.add("job_failed", None, "bool", labels=labels, text=f"not measured: {script} does not exist")
        return
    work.mkdir(parents=True, exist_ok=True)
    plan = np.random.default_rng([*launch_key, 15]).random((cfg.survival_jobs, tries)) < cfg.failure_p
    outcomes: list[tuple[bool, int]] = []

    def run_one(j: int) -> tuple[bool, int]:
        fail = " ".join(str(a + 1) for a in range(tries) if plan[j, a])
        log = work / f"job{j:06d}.log"
        env = {**os.environ, "HPCBENCH_INJECT_FAIL": f" {fail} "}
        proc = subprocess.run(["bash", str(script), "--tries", str(tries), "--delay", "0", "--log", str(log), "--",
                               "sh", "-c", INJECTED_TRY], env=env, capture_output=True, text=True, timeout=120)
        attempts = _ATTEMPT_LINE.findall(log.read_text()) if log.exists() else []
        log.unlink(missing_ok=True)
        outcomes.append((proc.returncode == 0, len(attempts)))
        return outcomes[-1]

    result = measure_survival(cfg.failure_p, tries, cfg.survival_jobs, run_one)
    # What the plan says each job must do: fail when every try fails, else stop at the first success.
    planned = [(not plan[j].all(), tries if plan[j].all() else int(np.argmin(plan[j])) + 1)
               for j in range(cfg.survival_jobs)]
    as_planned = sum(got == want for got, want in zip(outcomes, planned))
    how = ("a job = slurm/run_with_retries.sh --tries 3 around `sh -c` exiting 1 on the attempts a seeded plan "
           "fails (each with probability p); attempts read from the wrapper's log")
    for j, (ok, made) in enumerate(outcomes):
        writer.add("job_failed", 0.0 if ok else 1.0, "bool", step=j, labels=labels, text=how if j == 0 else None)
        writer.add("job_tries", made, "count", step=j, labels=labels)
    writer.add("attempt_failed_share", result.attempt_failure_fraction, "ratio", labels=labels,
               text=f"failed attempts / attempts: the p the jobs saw (injected {cfg.failure_p:g})")
    writer.add("attempts_expected", expected_attempts(cfg.failure_p, tries), "count", labels=labels)
    writer.add("survival_predicted", result.predicted, "ratio", labels=labels, text="p^3")
    writer.add("jobs_as_planned", as_planned / cfg.survival_jobs, "ratio", labels=labels,
               text="jobs whose outcome and attempts were what the injection plan implies for a 3-try wrapper")
    progress(f"survival: {result.describe()}; {as_planned}/{cfg.survival_jobs} jobs as planned")


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
    writer.add("injection_seed", None, "", text=f"failures and survival plans drawn from seed sequence {list(key)}")
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
        measure_survival_jobs(cfg, root / "survival", writer, progress, key)
    finally:
        if not cfg.keep_checkpoints:
            shutil.rmtree(root, ignore_errors=True)
    return {"device": device.type, "checkpoints": str(root) + ("" if cfg.keep_checkpoints else " (removed)"),
            "models": list(cfg.models), "dtypes": list(cfg.dtypes)}
