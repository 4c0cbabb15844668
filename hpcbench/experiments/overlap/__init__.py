"""Experiment ``overlap``: gradient accumulation under DDP's no_sync(), synchronising once per k micro-steps (C9)."""

from hpcbench.diag.records import BREAKDOWN_STEPS
from hpcbench.experiments import ClaimSet, Estimate, Experiment, register
from hpcbench.experiments.overlap.claims import APPLICABILITY, CLAIMS
from hpcbench.experiments.overlap.config import OverlapExperimentConfig
from hpcbench.experiments.overlap.prediction import PREDICTIONS
from hpcbench.experiments.overlap.present import present_overlap
from hpcbench.experiments.overlap.rules import RULES
from hpcbench.experiments.overlap.summary import summarize
from hpcbench.experiments.training_estimate import Training, training_estimate

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
    kmax = max(cfg.micro_steps)
    copies = state_copies(cfg)
    micro_steps = 0
    for k, _ in cfg.series():
        micro_steps += (2 * (cfg.warmup_steps + cfg.steps) + BREAKDOWN_STEPS) * k
        if cfg.check:
            micro_steps += 2 * k * (k > 1) + cfg.loss_samples // cfg.batch_size
    return training_estimate(cfg, [Training(name, cfg.batch_size, copies, micro_steps, seq_len=cfg.seq_len,
                                            peak_samples=kmax * cfg.batch_size) for name in cfg.models],
                             f"{copies} float32 copies of the largest model's parameters + 2x its layer outputs for a "
                             f"batch of {kmax} x {cfg.batch_size}", f"; {micro_steps} micro-steps per model")


#: Toy size (``hpcbench run overlap --toy``): two steps of each micro-step count, a 2-sample loss check.
TOY = dict(batch_size=2, warmup_steps=1, steps=2, layout_repeats=2, loss_samples=8)


SPEC = register(Experiment(
    name="overlap", notebook="05_overlap.ipynb", config=OverlapExperimentConfig,
    # the predictions' measured inputs: the scale model's launches
    claims=ClaimSet(RULES, PREDICTIONS, prediction_inputs="scale_model", declared=CLAIMS,
                    applicability=APPLICABILITY),
    summarize=summarize, present=present_overlap, estimate=estimate, toy=TOY,
    description="gradient accumulation under no_sync() for k micro-steps: counted synchronisations per sample, "
                "samples/s, exposed vs total communication and the overlapped share",
))
