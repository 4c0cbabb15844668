"""Experiment ``overlap``: gradient accumulation under DDP's no_sync(), synchronising once per k micro-steps (C9)."""

from hpcbench.core.units import approx_bytes
from hpcbench.diag.records import BREAKDOWN_STEPS
from hpcbench.experiments import (RANK_BYTES, TASK_BASE_BYTES, TASK_STARTUP_S, Estimate, Experiment,
                                  distributed_resources, register)
from hpcbench.experiments.overlap.config import OverlapExperimentConfig
from hpcbench.experiments.overlap.present import present_overlap
from hpcbench.experiments.overlap.rules import RULES
from hpcbench.experiments.overlap.summary import summarize
from hpcbench.models.footprint import CPU_SPEED, GPU_SPEED, training_memory, training_step_seconds

#: float32 copies of the parameters per DDP model (weights, gradients, DDP's bucket); SGD without
#: momentum keeps no state.
COPIES_PER_DDP_MODEL = 3


def state_copies(cfg: OverlapExperimentConfig) -> int:
    """Parameter copies alive at once (worker.run_worker): the base model, and then every series' timed pair
    (the counting-hook run and the no-op run, timed in one interleaved loop), which outnumber the checks' two."""
    return 1 + COPIES_PER_DDP_MODEL * max(2, 2 * len(cfg.series()))


def estimate(cfg: OverlapExperimentConfig) -> Estimate:
    """The largest model's copies plus the layer outputs of its biggest batch, and the micro-steps it runs.

    The biggest batch is the gradient check's one step on k_max x b samples. Micro-steps per model:
    per series (warm-up + timed steps) x k for both timed runs and the step breakdown's extra
    steps x k, the check's k micro-steps and its big step (counted as k more), and the loss run's
    loss_samples / b.
    """
    gpu = cfg.backend == "nccl"
    speed = GPU_SPEED if gpu else CPU_SPEED
    ranks = cfg.nodes * cfg.ranks_per_node
    kmax = max(cfg.micro_steps)
    copies = state_copies(cfg)
    micro_steps = 0
    for k, _ in cfg.series():
        micro_steps += (2 * (cfg.warmup_steps + cfg.steps) + BREAKDOWN_STEPS) * k
        if cfg.check:
            micro_steps += 2 * k * (k > 1) + cfg.loss_samples // cfg.batch_size
    peak, seconds, unknown = 0, TASK_STARTUP_S, []
    for name in cfg.models:
        need = training_memory(name, samples=kmax * cfg.batch_size, image_size=32, seq_len=cfg.seq_len,
                               state_copies=copies)
        step = training_step_seconds(name, samples=cfg.batch_size, image_size=32, seq_len=cfg.seq_len, ranks=ranks,
                                     speed=speed)
        if need is None or step is None:
            unknown.append(name)
            continue
        peak = max(peak, need)
        seconds += micro_steps * step
    basis = (f"{copies} float32 copies of the largest model's parameters + 2x its layer outputs for a batch "
             f"of {kmax} x {cfg.batch_size}: {approx_bytes(peak)} per rank {'on the GPU' if gpu else 'in host memory'}"
             f", + {approx_bytes(RANK_BYTES)} per rank process + {approx_bytes(TASK_BASE_BYTES)} per task; "
             f"{micro_steps} micro-steps per model")
    if unknown:
        basis += f"; no footprint for {', '.join(unknown)}: not counted"
    return Estimate(memory_per_rank=RANK_BYTES + (0 if gpu else peak), ranks=ranks,
                    seconds=None if unknown else seconds,
                    device_memory_per_rank=peak if gpu else 0, basis=basis)


#: Toy size (``hpcbench run overlap --toy``): two steps of each micro-step count, a 2-sample loss check.
TOY = dict(batch_size=2, warmup_steps=1, steps=2, layout_repeats=2, loss_samples=8)


SPEC = register(Experiment(
    name="overlap",
    notebook="05_overlap.ipynb",
    config=OverlapExperimentConfig,
    description="gradient accumulation under no_sync() for k micro-steps: counted synchronisations per sample, "
                "samples/s, exposed vs total communication and the overlapped share",
    summarize=summarize,
    rules=RULES,
    present=present_overlap,
    resources=distributed_resources,
    estimate=estimate,
    toy=TOY,
))
