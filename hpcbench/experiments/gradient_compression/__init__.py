"""Experiment ``gradient_compression``: 2-bit gradients in 4 MB buckets against float32, fp16, bf16, PowerSGD (C8)."""

from hpcbench.cluster.link_phase import RESHAPE_TYPICAL_S
from hpcbench.experiments import ClaimSet, Estimate, Experiment, register
from hpcbench.experiments.gradient_compression.claims import APPLICABILITY, CLAIMS, GUIDE_REGIME
from hpcbench.experiments.gradient_compression.config import CompressionConfig
from hpcbench.experiments.gradient_compression.prediction import PREDICTIONS
from hpcbench.experiments.gradient_compression.present import present_compression
from hpcbench.experiments.gradient_compression.rules import RULES
from hpcbench.experiments.gradient_compression.summary import summarize
from hpcbench.experiments.training_estimate import Training, training_estimate

#: float32 copies of the parameters per series alive at once: weights, gradients, DDP's buckets,
#: and the hook's own (quant2bit's worker + server residuals, PowerSGD's error dict), + momentum.
SERIES_COPIES = 4
#: Besides the series: the base model, and in the gradient check a local copy with its gradients.
OTHER_COPIES = 3
#: Steps outside the timed loop per series: the held-out loss and the gradient check (its local copy too).
CHECK_STEPS = 3


def estimate(cfg: CompressionConfig) -> Estimate:
    """The largest model's parameters for every series of one mode alive at once, plus one batch.

    Alive at once (worker.run_worker): per (model, mode), the no-op run and every series, each
    with weights, gradients, DDP buckets and the hook's state (+ momentum); the base model and
    the gradient check's local copy. Time: every series' warm-up, timed and check steps.
    """
    series = len(cfg.series()) + 1
    # the regime calibration's none and no-op copies live beside the series while it runs
    calibrated = 2 if cfg.regime == "guide" else 0
    copies = OTHER_COPIES + (series + calibrated) * (SERIES_COPIES + (1 if cfg.momentum else 0))
    # each calibration rate and the refinement at the solved one: 1 untimed + calibration_steps steps of both
    calibration_steps = calibrated * (len(cfg.calibration_rates) + 1) * (1 + cfg.calibration_steps)
    steps_per_model = len(cfg.modes) * (series * (cfg.warmup_steps + cfg.steps + CHECK_STEPS) + calibration_steps)
    # per mode: each rate, the solved one, and putting the link back
    reshapes = len(cfg.modes) * (len(cfg.calibration_rates) + 2) * RESHAPE_TYPICAL_S if calibrated else 0.0
    return training_estimate(cfg, [Training(name, cfg.batch_size, copies, steps_per_model, cfg.image_size, cfg.seq_len,
                                            extra_seconds=reshapes) for name in cfg.models],
                             f"{copies} float32 copies of the largest model's parameters ({series} series incl. the "
                             f"no-op run) + 2x its layer outputs for a batch of {cfg.batch_size}")


#: Toy size (``hpcbench run gradient_compression --toy``): two compressions (none, quant2bit) on two steps: the
#: hooks and their error feedback, not a speed-up.
TOY = dict(compressions=["none", "quant2bit"], no_feedback_ablation=False, batch_size=2, steps=2, calibration_steps=2)


SPEC = register(Experiment(
    name="gradient_compression", notebook="04_gradient_compression.ipynb", config=CompressionConfig,
    # the predictions' measured inputs: the scale model's launches
    claims=ClaimSet(RULES, PREDICTIONS, prediction_inputs="scale_model", regimes={"C8": GUIDE_REGIME},
                    declared=CLAIMS, applicability=APPLICABILITY),
    summarize=summarize, present=present_compression, estimate=estimate, toy=TOY,
    description="gradient compression (none, fp16, bf16, PowerSGD, 2-bit with and without error feedback): bytes "
                "on the wire, communication time, samples/s, loss after the same samples, gradient error",
))
