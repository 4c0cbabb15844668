"""Parameters of the ``gradient_compression`` experiment (``notebooks/04_gradient_compression.ipynb``)."""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.core.config import DistributedConfig, param
from hpcbench.core.errors import ConfigError
# the comparison's arms and C8's regime are declared with the claim; the worker and summary read them here
from hpcbench.experiments.gradient_compression.claims import BASELINE, GUIDE_REGIME, TECHNIQUE
from hpcbench.models import MODEL_NAMES, MODELS
from hpcbench.parallel.compression import COMPRESSIONS, DEFAULT_SKIP, GUIDE_BUCKET_BYTES, Quant2BitConfig
from hpcbench.parallel.modes import COMPRESSIBLE_MODES, modes_layout_problem
from hpcbench.scale.regime import (calibration_rates_param, calibration_rates_problem, calibration_steps_param,
                                   regime_param)

#: The guide's "4 MB buckets" in DDP's bucket_cap_mb unit (MiB).
GUIDE_BUCKET_MB = GUIDE_BUCKET_BYTES / (1 << 20)
#: The ablation series: quant2bit with error_feedback=False (what the residuals are worth).
NO_FEEDBACK = "quant2bit_noef"
#: PowerSGD starts compressing at this iteration: DDP rebuilds its buckets after the first, and
#: PyTorch refuses error feedback before the rebuild; warm-up covers the plain steps before it.
POWERSGD_START_ITER = 2
COMPRESSION_NAMES = tuple(COMPRESSIONS.names())
#: The record of each calibrated (model, mode)'s reached regime: the busy share of its judged steps, the estimator
#: of ``fact.regime.reached_busy`` (which holds the launch's worst pair), read by the C8 rule pair by pair.
REACHED_METRIC = "regime_reached_busy"


@dataclass
class CompressionConfig(DistributedConfig):
    """Parameters of ``04_gradient_compression``; the notebook's parameters cell mirrors them."""

    models: list[str] = param(["weather_tiny"], "models to train (weather_tiny: the guide's kind of model at CPU "
                                                "size, layer norms named layer_norm_*; gpt2_* as a second family)",
                              choices=MODEL_NAMES, allowed="non-empty, no repeats")
    compressions: list[str] = param(["none", "fp16", "bf16", "powersgd", "quant2bit"],
                                    "how gradients travel: none (float32 all-reduce, the baseline), fp16 / bf16 / "
                                    "powersgd (PyTorch's hooks), quant2bit (the guide's 2-bit codes)",
                                    choices=COMPRESSION_NAMES, allowed=f"no repeats; must include {BASELINE!r}")
    no_feedback_ablation: bool = param(True, f"also run {TECHNIQUE} with error_feedback=False (series "
                                             f"{NO_FEEDBACK!r}): what the residuals are worth")
    modes: list[str] = param(["ddp"], "communication modes: ddp compresses over the world; hierarchical sums "
                                      "inside the node and compresses only the inter-node exchange (quant2bit "
                                      "only; the other hooks are recorded as not applicable)",
                             choices=COMPRESSIBLE_MODES, allowed="non-empty; hierarchical needs >= 2 nodes x 2 ranks")
    bucket_cap_mb: float = param(GUIDE_BUCKET_MB, "DDP gradient bucket size in MiB for every series, so that "
                                                  "only the coding differs (4 = the guide's 4 MB buckets)",
                                 min=1e-6, max=1024)
    chunk_size: int = param(1024, "quant2bit: elements per float32 scale (1024 costs 0.03 bit per element)",
                            min=16, max=1 << 24)
    skip: list[str] = param(list(DEFAULT_SKIP), "quant2bit: parameter-name or module-class fragments whose "
                                                "gradients travel uncompressed (the guide: layer_norm)",
                            allowed="non-empty strings")
    batch_size: int = param(4, "samples per rank per step (grids, images, or sequences of seq_len tokens)",
                            min=1, max=4096)
    image_size: int = param(32, "side of the synthetic images of image models", min=32, max=1024)
    seq_len: int = param(64, "tokens per synthetic sequence of text models (weather models use their own grid)",
                         min=2, max=1024, allowed="at most each text model's block size")
    warmup_steps: int = param(2, f"untimed training steps per series: DDP rebuilds its buckets after the first, "
                                 f"PowerSGD compresses from step {POWERSGD_START_ITER}", min=POWERSGD_START_ITER,
                              max=1000)
    steps: int = param(12, "timed training steps per series, all series interleaved step by step with a no-op "
                           "hook's step; each is kept as a sample (a verdict needs >= 5)", min=1, max=100000)
    lr: float = param(0.1, "learning rate of plain SGD (no momentum): error feedback's guarantee is for SGD "
                           "(Karimireddy et al. 2019); 0.1 lowers weather_tiny's loss ~25x in 40 steps",
                      min=1e-8, max=100.0)
    momentum: float = param(0.0, "SGD momentum; with momentum the residuals of error feedback arrive late and "
                                 "are amplified (weather_tiny, 40 steps at lr 0.03, 0.9: 2-bit loss ~2x none's)",
                            min=0.0, max=0.999)
    seed: int = param(0, "seed of the initial weights and the synthetic batches", min=0)
    nodes: int = param(2, "nodes; on one machine more than 1 is an emulated split of the local ranks (C8 needs a "
                          "real inter-node link: the emulated cluster or SLURM)", min=1, max=4096)
    regime: str = regime_param(
        measure="before each (model, mode)'s timed steps, measure the none series' busy share (on copies of none "
                "and its no-op twin, so the timed series train on the same samples)",
        target="none is 61 % busy, the case's regime", counts="C8's speed level counts only where none reached it",
        fixed="time on the link as it is")
    calibration_rates: list[str] = calibration_rates_param(["1gbit", "100mbit"], "none", bracketing="the regime")
    calibration_steps: int = calibration_steps_param("none", cost=", and at the solved rate once more")

    def validate(self) -> None:
        if not self.models or len(set(self.models)) != len(self.models):
            raise self._error("models", f"{self.models}: allowed: distinct names of {list(MODEL_NAMES)}")
        for name in self.models:
            spec = MODELS.get(name)
            if spec.kind == "text" and self.seq_len > spec.max_seq_len:
                raise self._error("seq_len", f"{self.seq_len} exceeds {name}'s block size {spec.max_seq_len}")
        if not self.compressions or len(set(self.compressions)) != len(self.compressions):
            raise self._error("compressions", f"{self.compressions}: allowed: distinct names of "
                                              f"{list(COMPRESSION_NAMES)}")
        if BASELINE not in self.compressions:
            raise self._error("compressions", f"{self.compressions} lacks {BASELINE!r}, the float32 baseline every "
                                              f"ratio, communication time and loss is compared with")
        if not self.modes or len(set(self.modes)) != len(self.modes):
            raise self._error("modes", f"{self.modes}: allowed: distinct names of {list(COMPRESSIBLE_MODES)}")
        problem = modes_layout_problem(self.modes, self.nodes, self.ranks_per_node)
        if problem:
            raise self._error(*problem)
        if not self.skip or not all(isinstance(s, str) and s.strip() for s in self.skip):
            raise self._error("skip", f"{self.skip!r}: allowed: a non-empty list of non-empty name fragments")
        if self.regime == "guide":
            problem = calibration_rates_problem(self.calibration_rates)
            if problem:
                raise self._error("calibration_rates", problem)
        try:  # the library's own checks, before any process starts
            Quant2BitConfig(**self.quant2bit_options(True))
        except ConfigError as exc:
            raise self._error(exc.field or "chunk_size", str(exc)) from None

    def series(self) -> list[str]:
        """The series each mode runs, in order: the compressions, then the ablation when asked."""
        out = list(self.compressions)
        if self.no_feedback_ablation and TECHNIQUE in out:
            out.append(NO_FEEDBACK)
        return out

    def quant2bit_options(self, error_feedback: bool) -> dict:
        """The :class:`~hpcbench.parallel.compression.Quant2BitConfig` fields of this launch."""
        return {"chunk_size": self.chunk_size, "skip": tuple(self.skip), "error_feedback": error_feedback,
                "bucket_cap_mb": self.bucket_cap_mb}

    def options_for(self, series: str) -> tuple[str, dict]:
        """(registered compression name, its options) of one series."""
        if series == NO_FEEDBACK:
            return TECHNIQUE, self.quant2bit_options(False)
        if series == TECHNIQUE:
            return TECHNIQUE, self.quant2bit_options(True)
        if series == "powersgd":
            return series, {"start_powerSGD_iter": POWERSGD_START_ITER}
        return series, {}
