"""Parameters of the ``fault_tolerance`` experiment (``notebooks/08_fault_tolerance.ipynb``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hpcbench.core.config import Config, param
from hpcbench.experiments.fault_tolerance.claims import (GUIDE_C11_FULL_EVERY_S, GUIDE_C11_LIGHT_EVERY_S,
                                                        GUIDE_C15_TRIES)
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
                            "(a verdict needs >= 5)", min=1, max=1000)
    batch_size: int = param(4, "samples per training step (the state is saved after real AdamW steps)",
                            min=1, max=4096)
    image_size: int = param(32, "side of the synthetic images of the image models", min=32, max=1024)
    seq_len: int = param(64, "tokens per synthetic sequence of the text models", min=2, max=1024,
                         allowed="at most every text model's block size")
    steps_between_saves: int = param(2, "training steps between two saves of the stall comparison: an "
                                        "asynchronous write overlaps them", min=1, max=10000)
    failures: int = param(10, "failures injected into the failure simulation, which trains the smallest model in the "
                              "first dtype with light checkpoints every failure_light_every_s (work lost samples; a "
                              "verdict needs >= 5 per launch)", min=1, max=10000)
    failure_light_every_s: float = param(1.0, "light checkpoint cadence of the failure simulation, in wall seconds: "
                                              "it stands for light_interval_s, scaled down so that a launch takes "
                                              "seconds; work lost is measured as a share of it", min=0.05, max=3600.0)
    failure_mtbf_s: float = param(1.0, "mean wall time from a resumed training to its next injected failure "
                                       "(exponential, seeded per launch; drawn without looking at the checkpoint "
                                       "cadence)", min=0.05, max=3600.0)
    full_interval_s: float = param(float(GUIDE_C11_FULL_EVERY_S), "full checkpoint interval the overhead share "
                                                                 "is computed at (the guide: every hour)",
                                   min=1.0)
    light_interval_s: float = param(float(GUIDE_C11_LIGHT_EVERY_S), "light checkpoint interval the overhead "
                                                                   "share and the work lost are computed at "
                                                                   "(the guide: every 10 minutes)", min=1.0)
    overhead_model: str = param("gpt2_tiny", "model whose synchronous light saves are timed as stalls of its "
                                             "training loop, for C11's overhead at light_interval_s (gpt2_124M in "
                                             "the reproduce suite: its saves are not free)", choices=MODEL_NAMES,
                                allowed="a text model's block size >= seq_len")
    overhead_saves: int = param(10, "light saves of overhead_model, one training step between them (a verdict "
                                    "needs >= 5)", min=1, max=10000)
    survival_jobs: int = param(40, "jobs of the survival check per arm: through slurm/run_with_retries.sh with "
                                   f"--tries {GUIDE_C15_TRIES} and with --tries 1, alternating", min=1, max=100000)
    survival_try_s: float = param(0.2, "wall seconds of work one try of a survival job does (10 steps, each "
                                       "checking every data shard's sha256)", min=0.05, max=600.0)
    survival_mtbf_s: float = param(0.4, "mean time between the independent injector's failures (exponential, "
                                        "seeded per launch); with survival_try_s 0.2 a try (~0.25 s with its start) "
                                        "fails about half the time (measured: p_try 0.47)", min=0.01, max=3600.0)
    survival_corrupt_share: float = param(0.5, "share of the injected failures that flip a byte of a data shard "
                                               "(the try fails its checksum; the wrapper's repair must fix it); the "
                                               "others SIGKILL the running try's process group", min=0.0, max=1.0)
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
        for model in [*self.models, self.overhead_model]:
            spec = MODELS.get(model)
            if spec.kind == "text" and self.seq_len > spec.max_seq_len:
                raise self._error("seq_len", f"{self.seq_len} exceeds {model}'s block size {spec.max_seq_len}")
        if self.checkpoint_dir and not Path(self.checkpoint_dir).is_dir():
            raise self._error("checkpoint_dir", f"{self.checkpoint_dir!r} is not an existing folder")
