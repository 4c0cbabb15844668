"""Experiment ``fault_tolerance``: tiered zstd checkpoints, async saves, recovery, the 3-try wrapper (C11, C15)."""

import math

from hpcbench.core.units import approx_bytes
from hpcbench.experiments import TASK_BASE_BYTES, TASK_STARTUP_S, ClaimSet, Estimate, Experiment, register
from hpcbench.experiments.fault_tolerance.config import FaultToleranceConfig
from hpcbench.experiments.fault_tolerance.claims import APPLICABILITY, CLAIMS, GUIDE_C15_TRIES
from hpcbench.experiments.fault_tolerance.present import present_fault_tolerance
from hpcbench.experiments.fault_tolerance.rules import RULES
from hpcbench.experiments.fault_tolerance.summary import summarize
from hpcbench.models.footprint import CPU_SPEED, GPU_SPEED, model_footprint, training_memory, training_step_seconds

#: Training state alive at once: weights, gradients and AdamW's two moments.
TRAIN_COPIES = 4
#: Copies of the saved state (weights + two moments) alive besides the live one, at the peak: the
#: serialized and the compressed bytes of a save, the saved states kept for the comparison (one per
#: tier), the asynchronous snapshot, and in a recovery the bytes read, decompressed and loaded and the
#: fresh model + optimizer restored into. Measured: resnet50 float32 (307 MB of state) peaked at
#: 3.9 GB resident, ~10 copies beyond Python and torch (torch 2.14, glibc malloc keeps freed blocks).
CHECKPOINT_COPIES = 10
#: Rough single-core rates for the time estimate (measured on this project's 2-core VM, torch
#: 2.14, zstandard 0.25; a GPT-2 124M float32 light save: 1.49 GB serialized in 3.1 s, zstd-3 in
#: 11.2 s, 1.38 GB written with fsyncs in 5.4 s): torch.save into memory, zstd levels 1-3, zstd at
#: 4-9 on bfloat16 (its slowest case), zstd above 9, the file write, a load with decompression.
SERIALIZE_BPS, ZSTD_FAST_BPS, ZSTD_MID_BPS, ZSTD_HIGH_BPS, WRITE_BPS, LOAD_BPS = 450e6, 130e6, 15e6, 3e6, 250e6, 300e6
#: What a survival try costs beyond its work (bash, setsid, a Python start), and the wrapper's repair step
#: (a Python start and a sha256 of every shard) after a failed try: measured on the 2-core VM.
SURVIVAL_TRY_OVERHEAD_S, SURVIVAL_REPAIR_S = 0.06, 0.1
#: Copies of the overhead model's state its synchronous save holds besides the live one: serialized, compressed.
SAVE_COPIES = 3


def _zstd_bps(level: int) -> float:
    if level == 0:
        return float("inf")
    return ZSTD_FAST_BPS if level <= 3 else ZSTD_MID_BPS if level <= 9 else ZSTD_HIGH_BPS


def estimate(cfg: FaultToleranceConfig) -> Estimate:
    """The largest model's training state plus the copies a save, a load and a comparison hold."""
    gpu = cfg.device == "cuda"
    speed = GPU_SPEED if gpu else CPU_SPEED
    peak, seconds, unknown = 0, TASK_STARTUP_S, []
    state_bytes = 0
    for i, model in enumerate(cfg.models):
        fp = model_footprint(model)
        train = training_memory(model, samples=cfg.batch_size, image_size=cfg.image_size, seq_len=cfg.seq_len,
                                state_copies=TRAIN_COPIES)
        step = training_step_seconds(model, samples=cfg.batch_size, image_size=cfg.image_size, seq_len=cfg.seq_len,
                                     ranks=1, speed=speed)
        if fp is None or train is None or step is None:
            unknown.append(model)
            continue
        state = 3 * 4 * fp.parameters  # weights + two moments, float32 (bfloat16 is half)
        state_bytes = max(state_bytes, state)
        peak = max(peak, (0 if gpu else train) + CHECKPOINT_COPIES * state)
        for dtype in cfg.dtypes:
            size = state / (2 if dtype == "bfloat16" else 1)
            save = size / SERIALIZE_BPS + size / _zstd_bps(cfg.zstd_level) + size / WRITE_BPS
            sweep = sum(size / 3 / SERIALIZE_BPS + size / 3 / _zstd_bps(level) for level in cfg.zstd_levels)
            saves = 2 * cfg.repeats * save                       # the two tiers
            stall = 2 * cfg.repeats * (save + cfg.steps_between_saves * step)
            recovery = 2 * cfg.repeats * size / LOAD_BPS
            seconds += cfg.repeats * sweep + saves + stall + recovery + 4 * step
            if i == 0 and dtype == cfg.dtypes[0]:                # the failure simulation (wall-time driven)
                wall = cfg.failures * (cfg.failure_mtbf_s + cfg.failure_light_every_s)
                seconds += wall + (wall / cfg.failure_light_every_s + cfg.failures) * save
    over = model_footprint(cfg.overhead_model)
    over_train = training_memory(cfg.overhead_model, samples=cfg.batch_size, image_size=cfg.image_size,
                                 seq_len=cfg.seq_len, state_copies=TRAIN_COPIES)
    over_step = training_step_seconds(cfg.overhead_model, samples=cfg.batch_size, image_size=cfg.image_size,
                                      seq_len=cfg.seq_len, ranks=1, speed=speed)
    if over is None or over_train is None or over_step is None:
        unknown.append(cfg.overhead_model)
    else:
        size = 3 * 4 * over.parameters / (2 if cfg.dtypes[0] == "bfloat16" else 1)
        state_bytes = max(state_bytes, 3 * 4 * over.parameters)
        save = size / SERIALIZE_BPS + size / _zstd_bps(cfg.zstd_level) + size / WRITE_BPS
        peak = max(peak, (0 if gpu else over_train) + SAVE_COPIES * size)
        seconds += cfg.overhead_saves * (save + over_step) + 3 * over_step
    # Survival: a try fails with p ~ 1 - exp(-try / mtbf); the wrapper's job makes (1 - p^3) / (1 - p) tries.
    p = 1 - math.exp(-(cfg.survival_try_s + SURVIVAL_TRY_OVERHEAD_S) / cfg.survival_mtbf_s)
    tries = (1 - p ** GUIDE_C15_TRIES) / (1 - p) + 1
    seconds += cfg.survival_jobs * (tries * (cfg.survival_try_s + SURVIVAL_TRY_OVERHEAD_S)
                                    + (tries - 2) * SURVIVAL_REPAIR_S)
    note = f"; no footprint for {unknown}: not counted" if unknown else ""
    return Estimate(
        memory_per_rank=int(peak), ranks=1, seconds=seconds,
        device_memory_per_rank=int(TRAIN_COPIES * state_bytes / 3) if gpu else 0,
        basis=f"{TRAIN_COPIES} float32 copies of the largest model's parameters + its layer outputs for a batch of "
              f"{cfg.batch_size}, + {CHECKPOINT_COPIES} copies of its saved state ({approx_bytes(state_bytes)}: "
              f"serialized, compressed, kept for comparison, snapshot, read, loaded, restored) in the notebook's "
              f"process, + {approx_bytes(TASK_BASE_BYTES)} per task{note}")


#: Toy size (``hpcbench run fault_tolerance --toy``): one small model, three failures a few tenths of a second
#: apart, eight survival jobs per arm: a try fails ~45 % of the time here, so that the toy's injector strikes at
#: least once is all but certain (4 jobs per arm left all 8 tries whole in one CI-sized run, ~0.56^8 = 1 %).
TOY = dict(models=["gpt2_tiny"], zstd_levels=[0, 3], repeats=2, steps_between_saves=1, failures=3,
           failure_light_every_s=0.3, failure_mtbf_s=0.3, overhead_saves=2, survival_jobs=8, survival_try_s=0.1,
           survival_mtbf_s=0.15, seq_len=16)


SPEC = register(Experiment(
    name="fault_tolerance", notebook="08_fault_tolerance.ipynb", config=FaultToleranceConfig,
    claims=ClaimSet(RULES, declared=CLAIMS, applicability=APPLICABILITY),
    summarize=summarize, present=present_fault_tolerance, estimate=estimate, toy=TOY,
    description="full and light checkpoints (size, time per phase, zstd by level, bf16 vs fp32), async vs sync "
                "stall, overhead at the guide's intervals, recovery, work lost per failure, 3-try wrapper survival",
))
