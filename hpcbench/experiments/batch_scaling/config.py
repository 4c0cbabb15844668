"""Parameters of the ``batch_scaling`` experiment (``notebooks/01_batch_scaling.ipynb``)."""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.core.config import DistributedConfig, param
from hpcbench.models import MODEL_NAMES, MODELS
from hpcbench.parallel.modes import MODE_NAMES, MODES

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
    warmup_steps: int = param(1, "untimed optimizer steps per batch size", min=0, max=1000)
    steps: int = param(4, "timed optimizer steps per batch size; each one is kept as a sample", min=1, max=100000)
    seed: int = param(0, "seed of the initial weights and the synthetic batches", min=0)

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
        spec = MODELS.get(self.model)
        if spec.kind == "text" and self.seq_len > spec.max_seq_len:
            raise self._error("seq_len", f"{self.seq_len} exceeds {self.model}'s block size {spec.max_seq_len}")

    def plan(self, regime: str, factor: int) -> tuple[int, int]:
        """(micro-batch per rank, micro-steps per optimizer step) of one regime and factor."""
        micro = self.base_batch * factor
        if regime == "larger_batch":
            return micro, 1
        return micro, max(self.factors) // factor
