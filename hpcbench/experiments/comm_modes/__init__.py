"""Experiment ``comm_modes``: flat DDP against two-level reductions, and the bucket sweep (C3, C17)."""

from hpcbench.cluster.link_phase import RESHAPE_TYPICAL_S
from hpcbench.diag.records import TRACE_STEPS
from hpcbench.experiments import ClaimSet, Estimate, Experiment, register
from hpcbench.experiments.comm_modes.claims import APPLICABILITY, CLAIMS, GUIDE_REGIME
from hpcbench.experiments.comm_modes.config import CommModesConfig
from hpcbench.experiments.comm_modes.prediction import PREDICTIONS
from hpcbench.experiments.comm_modes.present import present_comm_modes
from hpcbench.experiments.comm_modes.rules import RULES
from hpcbench.experiments.comm_modes.summary import summarize
from hpcbench.experiments.training_estimate import Training, training_estimate


def estimate(cfg: CommModesConfig) -> Estimate:
    """The largest model's parameters, gradients and DDP buckets for every run alive at once, plus its batch.

    Alive at once (worker.run_worker): the base model and the reference gradients, and per
    timed run (the mode's, and the no-op hook's with ``measure_noop``) weights, gradients
    and DDP buckets; SGD without momentum keeps no state.
    """
    runs = 2 if cfg.measure_noop else 1
    copies = 2 + 3 * runs
    steps_per_model = len(cfg.modes) * len(cfg.bucket_cap_mb) * ((cfg.warmup_steps + cfg.steps) * runs + cfg.check)
    trainings = []
    for name in cfg.models:
        steps, reshapes, alive = steps_per_model + cfg.check, 0.0, copies
        if cfg.trace and name == cfg.models[0]:  # the first combination that runs is profiled once
            steps += TRACE_STEPS
        if name == cfg.calibrated_model():
            # ddp and its twin at each calibration rate, the twin after the model's runs, each reshape and the
            # restore; the twin pair stays alive beside the runs (3 copies each)
            steps += (len(cfg.calibration_rates) + 1) * 2 * (1 + cfg.calibration_steps) + 1 + cfg.steps
            reshapes = (len(cfg.calibration_rates) + 3) * RESHAPE_TYPICAL_S
            alive = copies + 6
        trainings.append(Training(name, cfg.batch_size, alive, steps, cfg.image_size, cfg.seq_len,
                                  extra_seconds=reshapes))
    return training_estimate(cfg, trainings, f"{copies} float32 copies of the largest model's parameters + 2x its "
                                             f"layer outputs for a batch of {cfg.batch_size}")


#: Toy size (``hpcbench run comm_modes --toy``): one model, the flat and the two-level mode, two steps each, no
#: profiler traces.
TOY = dict(models=["gpt2_tiny"], modes=["ddp", "hierarchical"], batch_size=2, warmup_steps=1, steps=2, trace=False,
           calibration_steps=2)


SPEC = register(Experiment(
    name="comm_modes", notebook="02_comm_modes.ipynb", config=CommModesConfig,
    # the predictions' measured inputs: the scale model's launches
    claims=ClaimSet(RULES, PREDICTIONS, prediction_inputs="scale_model", regimes={"C3": GUIDE_REGIME}, declared=CLAIMS,
                    applicability=APPLICABILITY),
    summarize=summarize, present=present_comm_modes, estimate=estimate, toy=TOY,
    description="flat DDP vs hybrid DP+DDP vs hierarchical reduction: samples/s, step p50/p99, communication "
                "share, gradient bucket sweep",
))
