"""Parameters of the ``overlap`` experiment (``notebooks/05_overlap.ipynb``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hpcbench.core.config import DistributedConfig, param
from hpcbench.models import MODEL_NAMES, MODELS
from hpcbench.parallel.overlap import GUIDE_MICRO_STEPS

#: The baseline every series is compared with: one synchronised micro-step per optimizer step.
BASELINE_MICRO_STEPS = 1
#: Model kinds whose gradient of a batch is the mean of its samples' gradients. A BatchNorm model
#: (the image kind: ResNets) normalises over the batch, so k micro-batches of b never give one
#: batch of k*b's gradients and the accumulation check could not pass.
KINDS = ("grid", "text")


@dataclass
class OverlapExperimentConfig(DistributedConfig):
    """Parameters of ``05_overlap``; the notebook's parameters cell mirrors them."""

    models: list[str] = param(["weather_tiny"], "models to train (weather_small for CPU demos, weather_025deg "
                                                "is the guide's case; gpt2_tiny / gpt2_small as a second family)",
                              choices=MODEL_NAMES,
                              allowed="non-empty, no repeats; weather (grid) or GPT-2 (text) models: a "
                                      "BatchNorm model's micro-batches cannot give one big batch's gradients")
    micro_steps: list[int] = param([1, GUIDE_MICRO_STEPS],
                                   "micro-steps k accumulated per optimizer step; 1 (synchronise every step) is "
                                   "the baseline, 4 the guide's", min=1, max=1024,
                                   allowed="no repeats, must include 1")
    batch_size: int = param(4, "samples per micro-step per rank (b): an optimizer step of k micro-steps takes "
                               "k x b samples per rank", min=1, max=4096)
    seq_len: int = param(64, "tokens per synthetic sequence of the text models (weather models use their own "
                             "grid)", min=2, max=1024, allowed="at most each text model's block size")
    warmup_steps: int = param(2, "untimed optimizer steps per series; DDP rebuilds its buckets after the first",
                              min=0, max=1000)
    steps: int = param(10, "timed optimizer steps per series, each interleaved with the same step under a no-op "
                           "hook; each is kept as a sample (a verdict needs >= 5)", min=1, max=100000)
    layout_repeats: int = param(10, "timed repetitions of one synchronisation's buckets all-reduced alone (the "
                                    "total communication)", min=1, max=10000)
    check: bool = param(True, "run the correctness checks: k micro-steps give one big batch's gradients, ranks "
                              "hold identical parameters after every synchronisation, the loss after "
                              "loss_samples matches k=1's")
    loss_samples: int = param(64, "samples per rank each series trains on for the loss check, in the same order "
                                  "for every k", min=1, max=1000000,
                              allowed="a multiple of batch_size x every k")
    lr: float = param(0.005, "SGD learning rate at k=1; k micro-steps step with k x lr (linear scaling: one step "
                             "on k x b samples stands for k steps on b). 0.005 lowers weather_tiny's loss by "
                             "~40 % over 64 samples, so a broken accumulation shows", min=1e-8, max=10.0)
    seed: int = param(0, "seed of the initial weights and the synthetic batches", min=0)
    nodes: int = param(2, "nodes; on one machine more than 1 is an emulated split of the local ranks (C9 needs "
                          "a real inter-node link: the emulated cluster or SLURM)", min=1, max=4096)
    ranks_per_node: int = param(1, "ranks (GPUs, or CPU processes) per node", min=1, max=64,
                                allowed="nodes x ranks_per_node >= 2")

    def validate(self) -> None:
        if not self.models:
            raise self._error("models", f"is empty; allowed: {list(MODEL_NAMES)}")
        if len(set(self.models)) != len(self.models):
            raise self._error("models", f"{self.models} repeats a model")
        for name in self.models:
            spec = MODELS.get(name)
            if spec.kind not in KINDS:
                raise self._error("models", f"{name!r} is of kind {spec.kind!r} (BatchNorm): k micro-batches "
                                            f"do not give one batch of k x b's gradients; allowed kinds: {list(KINDS)}")
            if spec.kind == "text" and self.seq_len > spec.max_seq_len:
                raise self._error("seq_len", f"{self.seq_len} exceeds {name}'s block size {spec.max_seq_len}")
        if not self.micro_steps or len(set(self.micro_steps)) != len(self.micro_steps):
            raise self._error("micro_steps", f"{self.micro_steps}: allowed: distinct integers >= 1")
        if BASELINE_MICRO_STEPS not in self.micro_steps:
            raise self._error("micro_steps", f"{self.micro_steps} lacks {BASELINE_MICRO_STEPS}, the baseline "
                                             f"(synchronise every step) every k is compared with")
        if self.nodes * self.ranks_per_node < 2:
            raise self._error("ranks_per_node", "data parallelism needs at least 2 ranks in all "
                                                "(nodes x ranks_per_node)")
        unit = self.batch_size * math.lcm(*self.micro_steps)
        if self.check and self.loss_samples % unit:
            raise self._error("loss_samples", f"{self.loss_samples} is not a multiple of batch_size x every k "
                                              f"({unit}): each k must train on the same samples")

    def series(self) -> list[tuple[int, bool]]:
        """(micro_steps, no_sync) in run order: k=1 first (the others' loss is checked against it), then
        every k > 1 with no_sync() and synchronising every micro-step (the baseline the technique improves)."""
        ks = sorted(self.micro_steps)
        return [(k, True) for k in ks] + [(k, False) for k in ks if k > 1]
