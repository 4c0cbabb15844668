"""Parameters of the ``fault_tolerance`` experiment (``notebooks/08_fault_tolerance.ipynb``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hpcbench.core.config import Config, param
from hpcbench.core.facts import GUIDE_C11_FULL_EVERY_S, GUIDE_C11_LIGHT_EVERY_S, GUIDE_C15_TRIES
from hpcbench.models import MODEL_NAMES, MODELS

DTYPES = ("float32", "bfloat16")
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class FaultToleranceConfig(Config):
    """Parameters of ``08_fault_tolerance``; the notebook's parameters cell mirrors them."""

    models: list[str] = param(["resnet_tiny", "gpt2_tiny"], "models whose training state is checkpointed "
                                                           "(resnet50, gpt2_124M, gpt2_355M for real sizes)",
                              choices=MODEL_NAMES, allowed="non-empty, no repeats")
    dtypes: list[str] = param(list(DTYPES), "dtype of the weights and so of the AdamW state saved with them",
                              choices=DTYPES, allowed="non-empty, no repeats")
    zstd_levels: list[int] = param([0, 1, 3, 9], "zstd levels of the compression sweep over the weights; 0 = "
                                                 "stored uncompressed (the baseline)", min=0, max=22,
                                   allowed="non-empty, no repeats")
    zstd_level: int = param(3, "zstd level of the tiered saves the claims are judged on (zstd's own default)",
                            min=1, max=22)
    repeats: int = param(3, "saves per model x dtype x tier, and compressions per level: the samples "
                            "(a verdict needs >= 10)", min=1, max=1000)
    batch_size: int = param(4, "samples per training step (the state is saved after real AdamW steps)",
                            min=1, max=4096)
    image_size: int = param(32, "side of the synthetic images of the image models", min=32, max=1024)
    seq_len: int = param(64, "tokens per synthetic sequence of the text models", min=2, max=1024,
                         allowed="at most every text model's block size")
    steps_between_saves: int = param(2, "training steps between two saves of the stall comparison: an "
                                        "asynchronous write overlaps them", min=1, max=10000)
    light_every_steps: int = param(4, "light checkpoint cadence of the failure simulation, in steps: it stands "
                                      "for light_interval_s (the failure's time within a step is continuous, so a "
                                      "short cadence loses no precision)", min=1, max=100000)
    failures: int = param(10, "failures injected at uniformly random times of the failure simulation, which "
                              "trains the smallest model in the first dtype (work lost and recovery samples; a "
                              "verdict needs >= 10)", min=1, max=10000)
    full_interval_s: float = param(float(GUIDE_C11_FULL_EVERY_S), "full checkpoint interval the overhead share "
                                                                 "is computed at (the guide: every hour)",
                                   min=1.0)
    light_interval_s: float = param(float(GUIDE_C11_LIGHT_EVERY_S), "light checkpoint interval the overhead "
                                                                   "share and the work lost are computed at "
                                                                   "(the guide: every 10 minutes)", min=1.0)
    failure_p: float = param(0.5, "probability with which each try of a survival job fails (injected, "
                                  "independent)", min=0.01, max=0.99)
    survival_jobs: int = param(200, "jobs of the survival check, each retried up to "
                                    f"{GUIDE_C15_TRIES} times", min=1, max=100000)
    device: str = param("auto", "where the model trains: auto = CUDA when available", choices=DEVICES)
    checkpoint_dir: str = param("", "folder the checkpoints are written under (e.g. on Lustre); empty: a folder "
                                    "in the task's output folder", allowed="empty, or an existing folder")
    keep_checkpoints: bool = param(False, "keep the written checkpoints after the run")
    seed: int = param(0, "seed of the weights and batches; the injected failures draw from it, the repetition and "
                            "the launch's run and task id (each launch its own faults)", min=0)

    def validate(self) -> None:
        for name in ("models", "dtypes", "zstd_levels"):
            values = getattr(self, name)
            if not values:
                raise self._error(name, "is empty")
            if len(set(values)) != len(values):
                raise self._error(name, f"{values} repeats a value")
        for model in self.models:
            spec = MODELS.get(model)
            if spec.kind == "text" and self.seq_len > spec.max_seq_len:
                raise self._error("seq_len", f"{self.seq_len} exceeds {model}'s block size {spec.max_seq_len}")
        if self.checkpoint_dir and not Path(self.checkpoint_dir).is_dir():
            raise self._error("checkpoint_dir", f"{self.checkpoint_dir!r} is not an existing folder")
