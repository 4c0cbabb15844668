"""Experiment ``batch_scaling``: per-rank throughput against the batch, with gradient accumulation (C2)."""

from hpcbench.cluster.link_phase import RESHAPE_TYPICAL_S
from hpcbench.core.units import approx_bytes
from hpcbench.experiments import RANK_BYTES, TASK_BASE_BYTES, TASK_STARTUP_S, ClaimSet, Estimate, Experiment, register
from hpcbench.experiments.batch_scaling.claims import APPLICABILITY, CLAIMS, TEST_REGIME
from hpcbench.experiments.batch_scaling.config import BatchScalingConfig
from hpcbench.experiments.batch_scaling.prediction import PREDICTIONS
from hpcbench.experiments.batch_scaling.present import present_batch_scaling
from hpcbench.experiments.batch_scaling.rules import RULES
from hpcbench.experiments.batch_scaling.summary import summarize
from hpcbench.models.footprint import CPU_SPEED, GPU_SPEED, training_memory, training_step_seconds

#: Alive at once (worker.run_worker): the base model's weights, and the DDP copy's weights,
#: gradients and buckets; SGD without momentum keeps no state.
STATE_COPIES = 4


def estimate(cfg: BatchScalingConfig) -> Estimate:
    """The model's parameter copies plus the layer outputs of the largest micro-batch, per rank."""
    gpu = cfg.backend == "nccl"
    speed = GPU_SPEED if gpu else CPU_SPEED
    ranks = cfg.nodes * cfg.ranks_per_node
    largest = cfg.base_batch * max(cfg.factors)  # both regimes reach it: larger_batch at the top factor
    # with link_regime "guide" the 1x step's DDP model and its no-op twin stay alive (3 copies each)
    copies = STATE_COPIES + (6 if cfg.link_regime == "guide" else 0)
    peak = training_memory(cfg.model, samples=largest, image_size=cfg.image_size, seq_len=cfg.seq_len,
                           state_copies=copies)
    seconds: float | None = TASK_STARTUP_S
    for regime in cfg.regimes:
        for factor in cfg.factors:
            micro, accum = cfg.plan(regime, factor)
            step = training_step_seconds(cfg.model, samples=micro * accum, image_size=cfg.image_size,
                                         seq_len=cfg.seq_len, ranks=ranks, speed=speed)
            if step is None or seconds is None:
                seconds = None
                continue
            seconds += (cfg.warmup_steps + cfg.steps) * step
    if cfg.link_regime == "guide" and seconds is not None:
        # the 1x step and its twin at each rate (1 + calibration_steps each), the twin after the sweep, reshapes
        one = training_step_seconds(cfg.model, samples=cfg.base_batch, image_size=cfg.image_size,
                                    seq_len=cfg.seq_len, ranks=ranks, speed=speed) or 0.0
        seconds += ((len(cfg.calibration_rates) + 1) * 2 * (1 + cfg.calibration_steps) + 1 + cfg.steps) * one
        seconds += (len(cfg.calibration_rates) + 3) * RESHAPE_TYPICAL_S
    if peak is None:
        return Estimate(RANK_BYTES, ranks, None,
                        basis=f"no footprint for {cfg.model}: one bare process per rank, the model not counted")
    return Estimate(
        memory_per_rank=RANK_BYTES + (0 if gpu else peak), ranks=ranks, seconds=seconds,
        device_memory_per_rank=peak if gpu else 0,
        basis=f"{copies} float32 copies of {cfg.model}'s parameters + 2x its layer outputs for the largest "
              f"micro-batch of {largest}: {approx_bytes(peak)} per rank {'on the GPU' if gpu else 'in host memory'}, "
              f"+ {approx_bytes(RANK_BYTES)} per rank process + {approx_bytes(TASK_BASE_BYTES)} per task")


#: Toy size (``hpcbench run batch_scaling --toy``): a tiny GPT-2 on 32 tokens, a batch of 2, two batch factors, two
#: steps each: both regimes and the calibration path, not a curve.
TOY = dict(model="gpt2_tiny", base_batch=2, seq_len=32, factors=[1, 4], steps=2, calibration_steps=2)


SPEC = register(Experiment(
    name="batch_scaling", notebook="01_batch_scaling.ipynb", config=BatchScalingConfig,
    # the predictions' measured inputs: the scale model's launches
    claims=ClaimSet(RULES, PREDICTIONS, prediction_inputs="scale_model", regimes={"C2": TEST_REGIME}, declared=CLAIMS,
                    applicability=APPLICABILITY),
    summarize=summarize, present=present_batch_scaling, estimate=estimate, toy=TOY,
    description="per-rank throughput and memory for 1x..8x a base batch, with and without gradient accumulation",
))
