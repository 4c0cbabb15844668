"""Parameters of the ``scaling`` experiment (``notebooks/11_scaling.ipynb``)."""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.core.config import Config, param
from hpcbench.core.errors import ConfigError
from hpcbench.models import MODEL_NAMES, MODELS
from hpcbench.practice.gates import GATE_THRESHOLDS, GateThreshold, gate_thresholds

#: The guide's progression (C13): one node, then 2-4 nodes; full scale is whatever the cluster has.
DEFAULT_STAGES = [1, 2, 4]
#: Model kinds whose synthetic batch needs no image size: the weather (grid) and GPT-2 (text) models.
KINDS = ("grid", "text")


@dataclass
class ScalingConfig(Config):
    """Parameters of ``11_scaling``; the notebook's parameters cell mirrors them."""

    stages: list[int] = param(list(DEFAULT_STAGES), "nodes of each stage, in run order: the guide's 1 node, then "
                                                     "2-4 nodes (C13). The task holds max(stages) nodes; each "
                                                     "stage is one launch on its first k", min=1, max=4096,
                              allowed="strictly increasing, starting at 1 (the stage every efficiency is relative to)")
    ranks_per_node: int = param(1, "ranks (GPUs, or CPU processes) per node in every stage; the guide tunes on one "
                                   "node of 8 GPUs", min=1, max=64)
    backend: str = param("auto", "auto: NCCL with a GPU per rank, else gloo", choices=("auto", "gloo", "nccl"))
    model: str = param("weather_tiny", "model trained under DDP (weather_tiny: ~0.37 M parameters, ~25 ms a step "
                                       "on one CPU core; gpt2_tiny for a lighter step)", choices=MODEL_NAMES,
                       allowed="a weather (grid) or GPT-2 (text) model")
    batch_size: int = param(4, "samples per step per rank: weak scaling, so the ideal per-node throughput is the "
                               "same at every stage", min=1, max=4096)
    seq_len: int = param(64, "tokens per synthetic sequence of the text models (weather models use their own grid)",
                         min=2, max=1024, allowed="at most the text model's block size")
    warmup_steps: int = param(2, "untimed steps per stage; DDP rebuilds its buckets after the first", min=0,
                              max=1000)
    steps: int = param(20, "timed steps per stage, each interleaved with the same step under a no-op hook (the "
                           "communication share); the gate needs >= 10 per stage", min=10, max=100000)
    calibration_steps: int = param(20, "healthy steps timed before the timed steps of every stage whose gate "
                                       "decides a step out, steps of their own: their spread is C12's regime fact "
                                       "(regime.healthy_step_cv), so the gate's own steps are not their yardstick",
                                   min=10, max=100000)
    gate_limits: dict = param({}, "overrides of the gate's limits by name (step_time_cv, comm_share, read_p99), "
                                  "e.g. {'comm_share': 0.5}; empty: the guide's C12 limits",
                              allowed="names of the gate's thresholds, finite numbers")
    continue_past_gate: bool = param(False, "run every stage even where the gate fails (recorded as 'would have "
                                            "stopped'): the counterfactual the C13 rule needs to see whether a "
                                            "stopped configuration would have scaled badly")
    seed: int = param(0, "seed of the initial weights and the synthetic batches", min=0)

    def validate(self) -> None:
        if not self.stages or self.stages[0] != 1:
            raise self._error("stages", f"{self.stages}: allowed: strictly increasing node counts starting at 1")
        if any(b <= a for a, b in zip(self.stages, self.stages[1:])):
            raise self._error("stages", f"{self.stages} is not strictly increasing")
        spec = MODELS.get(self.model)
        if spec.kind not in KINDS:
            raise self._error("model", f"{self.model!r} is of kind {spec.kind!r}; allowed kinds: {list(KINDS)}")
        if spec.kind == "text" and self.seq_len > spec.max_seq_len:
            raise self._error("seq_len", f"{self.seq_len} exceeds {self.model}'s block size {spec.max_seq_len}")
        try:
            gate_thresholds(self.gate_limits)
        except ConfigError as exc:
            raise self._error("gate_limits", str(exc).split(": ", 1)[-1]) from None

    @property
    def nodes(self) -> int:
        """The nodes the task holds: its largest stage's."""
        return max(self.stages)

    def thresholds(self) -> tuple[GateThreshold, ...]:
        """The gate's limits this task checks: :data:`GATE_THRESHOLDS` with ``gate_limits`` applied."""
        return gate_thresholds(self.gate_limits) if self.gate_limits else GATE_THRESHOLDS
