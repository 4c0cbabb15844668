"""Experiment ``weather_case``: the guide's tuning case as an ablation — original, communication-tuned, full (C7)."""

from hpcbench.cluster.link_phase import RESHAPE_TYPICAL_S
from hpcbench.core.units import approx_bytes
from hpcbench.diag.records import BREAKDOWN_STEPS, TRACE_STEPS
from hpcbench.experiments import RANK_BYTES, TASK_BASE_BYTES, TASK_STARTUP_S, ClaimSet, Estimate, Experiment, register
from hpcbench.experiments.weather_case.claims import APPLICABILITY, CLAIMS, GUIDE_REGIME
from hpcbench.experiments.weather_case.config import WeatherCaseConfig
from hpcbench.experiments.weather_case.prediction import PREDICTIONS
from hpcbench.experiments.weather_case.present import present_weather_case
from hpcbench.experiments.weather_case.rules import RULES
from hpcbench.experiments.weather_case.stages import STAGES
from hpcbench.experiments.weather_case.summary import summarize
from hpcbench.experiments.weather_case.worker import EVAL_SAMPLES  # torch is imported inside its functions only
from hpcbench.models import MODELS
from hpcbench.models.footprint import CPU_SPEED, GPU_SPEED, training_memory, training_step_seconds

#: Rough speed of writing the generated HDF5 set (numpy rendering + h5py), bytes per second.
_GENERATE_BYTES_S = 50e6


def estimate(cfg: WeatherCaseConfig) -> Estimate:
    """Every stage's model and no-op twin alive at once during the interleaved timing, plus the data.

    Alive at once (worker.run_worker): the base weights; per stage its DDP model and its no-op
    twin (weights, gradients, buckets: 3 copies each) and, with quant2bit, the error-feedback
    residuals (about 1 copy); the layer outputs of one micro-batch; and the rank's forecasting
    pairs (inputs and targets). Time: per stage, the loss check's micro-steps, then (warm-up +
    timed) optimizer steps of k micro-steps, twice (stage and twin), then the step breakdown's
    extra steps (and, with ``trace``, the first stage's profiled ones), plus the data generation.
    """
    gpu = cfg.backend == "nccl"
    speed = GPU_SPEED if gpu else CPU_SPEED
    ranks = cfg.nodes * cfg.ranks_per_node
    spec = MODELS.get(cfg.model)
    stages = [STAGES.get(s) for s in cfg.stages]
    copies = 1 + 6 * len(stages) + sum(1 for s in stages if s.compression != "none")
    model_bytes = training_memory(cfg.model, samples=cfg.micro_batch, image_size=0, seq_len=0, state_copies=copies)
    pairs = cfg.loss_samples + EVAL_SAMPLES
    data_bytes = pairs * 2 * spec.channels * spec.grid[0] * spec.grid[1] * 4
    micro = training_step_seconds(cfg.model, samples=cfg.micro_batch, image_size=0, seq_len=0, ranks=ranks,
                                  speed=speed)
    if model_bytes is None or micro is None:
        return Estimate(RANK_BYTES + data_bytes, ranks, None,
                        basis=f"no footprint for {cfg.model}: one bare process per rank and its data only")
    micro_steps = sum(cfg.loss_samples // cfg.micro_batch
                      + (2 * (cfg.warmup_steps + cfg.steps) + BREAKDOWN_STEPS) * s.micro_steps(cfg.micro_steps)
                      for s in stages)
    if cfg.trace:  # the first stage is profiled once
        micro_steps += TRACE_STEPS * stages[0].micro_steps(cfg.micro_steps)
    calibration_s = 0.0
    if cfg.regime == "guide":  # original + its twin at each rate, each rate's reshape, the final one and the restore
        rates = len(cfg.calibration_rates) + 1  # + the refinement at the solved rate
        micro_steps += rates * 2 * (1 + cfg.calibration_steps)
        calibration_s = (rates + 2) * RESHAPE_TYPICAL_S
    generated = ranks * data_bytes / 2 if cfg.data_source == "hdf5" and not cfg.data else 0
    seconds = TASK_STARTUP_S + micro_steps * micro + generated / _GENERATE_BYTES_S + calibration_s
    peak = model_bytes + (0 if gpu else data_bytes)
    return Estimate(
        memory_per_rank=RANK_BYTES + (0 if gpu else peak), ranks=ranks, seconds=seconds,
        device_memory_per_rank=model_bytes + data_bytes if gpu else 0,
        basis=f"{copies} float32 copies of {cfg.model}'s parameters (base + model and no-op twin per stage, "
              f"residuals per compressed stage) + 2x its layer outputs for a micro-batch of {cfg.micro_batch} "
              f"+ {pairs} forecasting pairs ({approx_bytes(data_bytes)}): {approx_bytes(peak)} per rank "
              f"{'on the GPU' if gpu else 'in host memory'}, + {approx_bytes(RANK_BYTES)} per rank process "
              f"+ {approx_bytes(TASK_BASE_BYTES)} per task; time: {micro_steps} micro-steps of ~{micro * 1e3:.0f} ms"
              + (f" (with the regime calibration's, + {calibration_s:.0f} s of link reshapes)"
                 if calibration_s else ""))


#: Toy size (``hpcbench run weather_case --toy``): the original and the full stage, two steps of micro-batches of
#: 2, no profiler traces.
TOY = dict(stages=["original", "full"], micro_batch=2, loss_samples=8, warmup_steps=0, steps=2, trace=False,
           calibration_steps=2)


SPEC = register(Experiment(
    name="weather_case", notebook="20_weather_case.ipynb", config=WeatherCaseConfig,
    # the predictions' measured inputs: the scale model's launches
    claims=ClaimSet(RULES, PREDICTIONS, prediction_inputs="scale_model", regimes={"C7": GUIDE_REGIME}, declared=CLAIMS,
                    applicability=APPLICABILITY),
    summarize=summarize, present=present_weather_case, estimate=estimate, toy=TOY,
    description="the guide's tuning case on a weather ViT: original -> hierarchical + tuned buckets -> + 2-bit "
                "compression + no_sync over 4 micro-steps, and each technique alone: time per micro-step, busy "
                "share, bytes across nodes, loss check",
))
