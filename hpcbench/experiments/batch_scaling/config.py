"""Parameters of the ``batch_scaling`` experiment (``notebooks/01_batch_scaling.ipynb``)."""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.core.config import DistributedConfig, param
from hpcbench.experiments.batch_scaling.claims import TEST_REGIME
from hpcbench.models import MODEL_NAMES, MODELS
from hpcbench.models.step import LAYOUTS, PRECISIONS, StepRecipe
from hpcbench.parallel.modes import MODE_NAMES, MODES
from hpcbench.scale.regime import (calibration_rates_param, calibration_rates_problem,
                                   calibration_steps_param, regime_param)

REGIMES = ("larger_batch", "fixed_global_batch")


@dataclass
class BatchScalingConfig(DistributedConfig):
    """Parameters of ``01_batch_scaling``; the notebook's parameters cell mirrors them."""

    model: str = param("resnet_tiny", "model to train (resnet50 / gpt2_124M on GPUs)", choices=MODEL_NAMES)
    base_batch: int = param(4, "the 'cloud' batch per rank that the factors multiply", min=1)
    factors: list[int] = param([1, 2, 4, 8], "batch factors; the guide's claim is about > 4x", min=1, max=1024,
                               allowed="non-empty, no repeats; with fixed_global_batch each divides the largest")
    regimes: list[str] = param(list(REGIMES), "larger_batch: one step per micro-batch; fixed_global_batch: "
                                              "max(factors) x base_batch per step by gradient accumulation",
                               choices=REGIMES, allowed="non-empty")
    mode: str = param("ddp", "communication mode of the data parallelism", choices=MODE_NAMES,
                      allowed="a mode that supports the nodes x ranks_per_node layout")
    bucket_cap_mb: float = param(25.0, "DDP gradient bucket size in MiB", min=1e-6)
    image_size: int = param(32, "side of the synthetic images (224 for ImageNet-sized steps)", min=32, max=1024)
    seq_len: int = param(64, "tokens per synthetic sequence", min=2, max=1024,
                         allowed="at most a text model's block size")
    precision: str = param("auto", "the forward's precision (hpcbench.models.step): auto is bf16 autocast on GPUs, "
                                   "fp32 on CPU ranks", choices=PRECISIONS)
    channels_last: str = param("auto", "NHWC for the image models: auto is on GPUs only", choices=LAYOUTS)
    torch_compile: bool = param(False, "torch.compile each factor's model (its first step, the compilation, is "
                                       "a warm-up step and never timed)", allowed="needs warmup_steps >= 1")
    warmup_steps: int = param(1, "untimed optimizer steps per batch size", min=0, max=1000)
    steps: int = param(4, "timed optimizer steps per batch size; each one is kept as a sample", min=1, max=100000)
    seed: int = param(0, "seed of the initial weights and the synthetic batches", min=0)
    link_regime: str = regime_param(
        measure="before the sweep, measure the 1x step's busy share (against its no-op twin)",
        target="the 1x step is a quarter busy (a regime of ours with room for accumulation: the guide states none)",
        counts="the verdict reads each launch's band from the busy share it reached",
        fixed="the link as it is (context rows). Named link_regime: 'regimes' are the batch regimes")
    calibration_rates: list[str] = calibration_rates_param(
        ["3gbit", "1gbit", "300mbit"], "the 1x step",
        bracketing="the test regime (resnet_tiny's 20 MB of gradients at batch 4 on CPU ranks: ~1/12 busy near "
                   "300 Mbit/s, so a quarter busy near 1 Gbit/s)")
    calibration_steps: int = calibration_steps_param("the 1x step")

    def validate(self) -> None:
        if not self.factors:
            raise self._error("factors", "is empty; give batch factors such as [1, 2, 4, 8]")
        if len(set(self.factors)) != len(self.factors):
            raise self._error("factors", f"{self.factors} repeats a factor")
        if not self.regimes:
            raise self._error("regimes", f"is empty; allowed: {list(REGIMES)}")
        top = max(self.factors)
        if "fixed_global_batch" in self.regimes:
            for f in self.factors:
                if top % f:
                    raise self._error("factors", f"{f} does not divide the largest factor {top}, so "
                                                 "fixed_global_batch cannot accumulate to the same batch")
        problem = MODES.get(self.mode).layout_problem(self.nodes, self.ranks_per_node)
        if problem:
            raise self._error("mode", f"{self.mode!r} {problem}")
        if self.torch_compile and self.warmup_steps < 1:
            raise self._error("warmup_steps", "is 0, but torch_compile compiles in the first step, which must not "
                                              "be timed; give warmup_steps >= 1")
        spec = MODELS.get(self.model)
        if spec.kind == "text" and self.seq_len > spec.max_seq_len:
            raise self._error("seq_len", f"{self.seq_len} exceeds {self.model}'s block size {spec.max_seq_len}")
        self.check_link_regime()

    def check_link_regime(self) -> None:
        if self.link_regime != "guide":
            return
        if 1 not in self.factors or "larger_batch" not in self.regimes:
            raise self._error("link_regime", "'guide' calibrates the larger_batch 1x step, which the sweep lacks "
                                             f"(factors {self.factors}, regimes {self.regimes})")
        problem = calibration_rates_problem(self.calibration_rates)
        if problem:
            raise self._error("calibration_rates", problem)

    def step_recipe(self) -> StepRecipe:
        """The training step's recipe: plain SGD, as the sweep has always timed it, in the configured precision,
        layout and compilation."""
        return StepRecipe(optimizer="sgd", lr=1e-4, precision=self.precision, channels_last=self.channels_last,
                          compile=self.torch_compile)

    def plan(self, regime: str, factor: int) -> tuple[int, int]:
        """(micro-batch per rank, micro-steps per optimizer step) of one regime and factor."""
        micro = self.base_batch * factor
        if regime == "larger_batch":
            return micro, 1
        return micro, max(self.factors) // factor
