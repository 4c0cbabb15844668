"""Experiment ``comm_modes``: flat DDP against two-level reductions, and the bucket sweep (C3, C17)."""

from hpcbench.cluster.link_phase import RESHAPE_TYPICAL_S
from hpcbench.core.units import approx_bytes
from hpcbench.diag.records import TRACE_STEPS
from hpcbench.experiments import (RANK_BYTES, TASK_BASE_BYTES, TASK_STARTUP_S, Estimate, Experiment,
                                  distributed_resources, register)
from hpcbench.experiments.comm_modes.config import GUIDE_REGIME, CommModesConfig
from hpcbench.experiments.comm_modes.present import present_comm_modes
from hpcbench.experiments.comm_modes.rules import RULES
from hpcbench.experiments.comm_modes.summary import summarize
from hpcbench.models.footprint import CPU_SPEED, GPU_SPEED, training_memory, training_step_seconds


def estimate(cfg: CommModesConfig) -> Estimate:
    """The largest model's parameters, gradients and DDP buckets for every run alive at once, plus its batch.

    Alive at once (worker.run_worker): the base model and the reference gradients, and per
    timed run (the mode's, and the no-op hook's with ``measure_noop``) weights, gradients
    and DDP buckets; SGD without momentum keeps no state.
    """
    gpu = cfg.backend == "nccl"
    speed = GPU_SPEED if gpu else CPU_SPEED
    ranks = cfg.nodes * cfg.ranks_per_node
    runs = 2 if cfg.measure_noop else 1
    copies = 2 + 3 * runs
    shape = {"samples": cfg.batch_size, "image_size": cfg.image_size, "seq_len": cfg.seq_len}
    steps_per_model = len(cfg.modes) * len(cfg.bucket_cap_mb) * ((cfg.warmup_steps + cfg.steps) * runs + cfg.check)
    peak, seconds, unknown = 0, TASK_STARTUP_S, []
    for name in cfg.models:
        need = training_memory(name, state_copies=copies, **shape)
        step = training_step_seconds(name, ranks=ranks, speed=speed, **shape)
        if need is None or step is None:
            unknown.append(name)
            continue
        peak = max(peak, need)
        seconds += (steps_per_model + cfg.check) * step
        if cfg.trace and name == cfg.models[0]:  # the first combination that runs is profiled once
            seconds += TRACE_STEPS * step
        if name == cfg.calibrated_model():
            # ddp and its twin at each calibration rate, the twin after the model's runs, each reshape and the
            # restore; the twin pair stays alive beside the runs (3 copies each)
            seconds += ((len(cfg.calibration_rates) + 1) * 2 * (1 + cfg.calibration_steps) + 1 + cfg.steps) * step
            seconds += (len(cfg.calibration_rates) + 3) * RESHAPE_TYPICAL_S
            need = training_memory(name, state_copies=copies + 6, **shape) or need
            peak = max(peak, need)
    basis = (f"{copies} float32 copies of the largest model's parameters + 2x its layer outputs for a batch of "
             f"{cfg.batch_size}: {approx_bytes(peak)} per rank {'on the GPU' if gpu else 'in host memory'}, "
             f"+ {approx_bytes(RANK_BYTES)} per rank process + {approx_bytes(TASK_BASE_BYTES)} per task")
    if unknown:
        basis += f"; no footprint for {', '.join(unknown)}: not counted"
    return Estimate(memory_per_rank=RANK_BYTES + (0 if gpu else peak), ranks=ranks,
                    seconds=None if unknown else seconds,
                    device_memory_per_rank=peak if gpu else 0, basis=basis)


#: Toy size (``hpcbench run comm_modes --toy``): one model, the flat and the two-level mode, two steps each, no
#: profiler traces.
TOY = dict(models=["gpt2_tiny"], modes=["ddp", "hierarchical"], batch_size=2, warmup_steps=1, steps=2, trace=False,
           calibration_steps=2)


SPEC = register(Experiment(
    name="comm_modes",
    notebook="02_comm_modes.ipynb",
    config=CommModesConfig,
    description="flat DDP vs hybrid DP+DDP vs hierarchical reduction: samples/s, step p50/p99, communication "
                "share, gradient bucket sweep",
    summarize=summarize,
    rules=RULES,
    regimes={"C3": GUIDE_REGIME},
    present=present_comm_modes,
    resources=distributed_resources,
    estimate=estimate,
    toy=TOY,
))
