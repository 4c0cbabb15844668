"""Parameters of the ``comm_modes`` experiment (``notebooks/02_comm_modes.ipynb``)."""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.core.config import DistributedConfig, param
from hpcbench.core.facts import DDP_DEFAULT_BUCKET_BYTES
# C3's regime and C17's sweep point are declared with the claims; the worker, summary and presenter read them here
from hpcbench.experiments.comm_modes.claims import CALIBRATED_FAMILY, GUIDE_REGIME, IB_MTU_BUCKET_MB
from hpcbench.models import MODEL_NAMES, MODELS
from hpcbench.parallel.modes import MODE_NAMES, modes_layout_problem
from hpcbench.scale.regime import (calibration_rates_param, calibration_rates_problem, calibration_steps_param,
                                   regime_param)

#: DDP's default bucket (MiB), at which C3 is compared and the regime calibrated.
DEFAULT_BUCKET_MB = DDP_DEFAULT_BUCKET_BYTES / (1 << 20)


@dataclass
class CommModesConfig(DistributedConfig):
    """Parameters of ``02_comm_modes``; the notebook's parameters cell mirrors them."""

    models: list[str] = param(["gpt2_tiny", "resnet_tiny"], "models to train (resnet50 and gpt2_124M are the "
                              "guide's; *_tiny keep CPU runs short)", choices=MODEL_NAMES,
                              allowed="non-empty")
    modes: list[str] = param(["ddp", "hybrid_dp_ddp", "hierarchical", "hierarchical_leader"],
                             "communication modes to compare", choices=MODE_NAMES,
                             allowed="non-empty; each supports the nodes x ranks_per_node layout")
    bucket_cap_mb: list[float] = param([25.0], "DDP gradient bucket sizes in MiB (25 is DDP's default; "
                                       "0.00390625 = one 4 KiB IB MTU, the C17 point)",
                                       allowed="a non-empty list, each > 0")
    batch_size: int = param(8, "samples per rank per step (images, or sequences of seq_len tokens)", min=1)
    image_size: int = param(32, "side of the synthetic images (224 for ImageNet-sized ResNet steps)",
                            min=32, max=1024)
    seq_len: int = param(64, "tokens per synthetic sequence (1024 for GPT-2 124M)", min=2, max=1024,
                         allowed="at most each text model's block size")
    warmup_steps: int = param(2, "untimed steps per run; the first ones rebuild DDP's buckets", min=0, max=1000)
    steps: int = param(8, "timed steps per run; each one is kept as a sample", min=1, max=100000)
    measure_noop: bool = param(True, "also time each step with a no-op comm hook, interleaved, for the "
                                     "communication share")
    check: bool = param(True, "compare one step's gradients with plain DDP's before timing")
    seed: int = param(0, "seed of the initial weights and the synthetic batches", min=0)
    trace: bool = param(True, "profile 4 extra untimed steps (1 wait, 1 warm-up, 2 recorded) of the first "
                              "combination that runs and write each rank's Chrome/Perfetto trace to "
                              "<task dir>/trace/<rank>.json, linked from the report; false: no trace")
    nodes: int = param(2, "nodes; on one machine more than 1 is an emulated split of the local ranks",
                       min=1, max=4096)
    regime: str = regime_param(
        measure="before the first resnet model's runs, measure its ddp step's busy share (against the no-op twin)",
        target="ddp is ~16 % busy, the guide's ResNet-50 regime, for that model's runs",
        counts="the C3 verdict counts only launches that reached it")
    calibration_rates: list[str] = calibration_rates_param(["1gbit", "200mbit", "50mbit"], "ddp")
    calibration_steps: int = calibration_steps_param("ddp")

    def validate(self) -> None:
        if not self.models:
            raise self._error("models", f"is empty; allowed: {list(MODEL_NAMES)}")
        if not self.modes:
            raise self._error("modes", f"is empty; allowed: {list(MODE_NAMES)}")
        if not self.bucket_cap_mb:
            raise self._error("bucket_cap_mb", "is empty; give at least one bucket size in MiB")
        for b in self.bucket_cap_mb:
            if not b > 0:
                raise self._error("bucket_cap_mb", f"{b} is out of range; allowed: > 0 (MiB)")
        problem = modes_layout_problem(self.modes, self.nodes, self.ranks_per_node)
        if problem:
            raise self._error(*problem)
        for name in self.models:
            spec = MODELS.get(name)
            if spec.kind == "text" and self.seq_len > spec.max_seq_len:
                raise self._error("seq_len", f"{self.seq_len} exceeds {name}'s block size {spec.max_seq_len}")
        if self.regime == "guide":
            self._check_regime()

    def calibrated_model(self) -> str | None:
        """The model whose runs are calibrated to the guide's regime: the first resnet, when ddp runs at DDP's
        default bucket; None with regime 'fixed' or when the launch has no such runs (then nothing is
        calibrated and the C3 rule finds no regime recorded: the GPT-2 regime is out of any cluster's reach)."""
        if self.regime != "guide" or "ddp" not in self.modes or DEFAULT_BUCKET_MB not in self.bucket_cap_mb:
            return None
        return next((m for m in self.models if m.startswith(CALIBRATED_FAMILY)), None)

    def _check_regime(self) -> None:
        problem = calibration_rates_problem(self.calibration_rates)
        if problem:
            raise self._error("calibration_rates", problem)
