"""Parameters of the ``weather_case`` experiment (``notebooks/20_weather_case.ipynb``)."""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.core.config import DistributedConfig, param
# C7's regime is declared with the claim; the worker reads it here
from hpcbench.experiments.weather_case.claims import GUIDE_REGIME
from hpcbench.experiments.weather_case.stages import BASELINE, STAGE_NAMES, STAGES
from hpcbench.models import MODELS
from hpcbench.parallel.modes import MODES
from hpcbench.scale.regime import (calibration_rates_param, calibration_rates_problem, calibration_steps_param,
                                   regime_param)

#: The grid models (weather ViTs) the experiment can train.
GRID_MODELS = tuple(name for name in MODELS.names() if MODELS.get(name).kind == "grid")
#: The recorded loss check: a stage's final loss within this share of ``original``'s
#: (compression and accumulation must not change what is learned).
LOSS_TOLERANCE = 0.05
#: Where the data come from: the weather HDF5 set read with WeatherDataset, or synthetic waves made on each rank.
DATA_SOURCES = ("hdf5", "synthetic")


@dataclass
class WeatherCaseConfig(DistributedConfig):
    """Parameters of ``20_weather_case``; the notebook's parameters cell mirrors them."""

    nodes: int = param(2, "nodes; on one machine more than 1 is an emulated split of the local ranks",
                       min=1, max=4096)
    model: str = param("weather_tiny", "the weather model (weather_tiny: CPU tests; weather_small: the reproduce "
                                       "run; weather_1deg / weather_025deg: GPUs)", choices=GRID_MODELS)
    stages: list[str] = param(list(STAGE_NAMES), "stages of the ablation, run in this order on the same model, "
                              "data and ranks (original, comm_tuned and full are the guide's three rows)",
                              choices=STAGE_NAMES, allowed="non-empty, no repeats; each supports the layout "
                              "(the hierarchical ones need >= 2 nodes x >= 2 ranks per node)")
    micro_batch: int = param(4, "samples per rank per micro-step (every stage sees the same micro-batches)",
                             min=1, max=4096)
    micro_steps: int = param(4, "micro-steps accumulated under no_sync() per optimizer step in the no_sync "
                                "stages (the guide's 4); the others synchronise every micro-step", min=1, max=64)
    tuned_bucket_mb: float = param(4.0, "DDP bucket size (MiB) of comm_tuned's 'tuned buckets'; 4 = the bucket "
                                        "size the guide names for its compression (the guide gives no other)",
                                   min=0.0009765625, max=1024.0)
    skip_compression: list[str] = param(["layer_norm"], "parameter-name fragments whose gradients quant2bit "
                                        "sends uncompressed (the guide's skip_compression=['layer_norm'])",
                                        allowed="non-empty texts")
    lr: float = param(0.01, "SGD learning rate per micro-batch; a stage with k micro-steps per optimizer step "
                            "uses k x lr (linear scaling, Goyal et al. 2017), so every stage moves the same "
                            "per sample. 0.01 keeps weather_tiny's loss falling over the loss check's samples",
                      min=1e-8, max=10.0)
    loss_samples: int = param(256, "samples per rank each stage trains on, from the same initial weights and "
                                   "in the same order, before its loss is evaluated (the loss check). 256 gives "
                                   "full 16 optimizer steps at micro_batch 4: the 2-bit code's error feedback "
                                   "delays part of each gradient by a step, which on weather_tiny cost full +8.6 % "
                                   "of loss after 8 steps, +1.8 % after 16 and -0.7 % after 32",
                              min=1, max=1_000_000, allowed="a multiple of micro_batch x micro_steps")
    warmup_steps: int = param(2, "untimed optimizer steps per stage (DDP rebuilds its buckets after the first)",
                              min=0, max=1000)
    steps: int = param(10, "timed optimizer steps per stage, each kept as a sample (a verdict needs >= 5)",
                       min=1, max=100000)
    data_source: str = param("hdf5", "hdf5: the weather HDF5 set read with WeatherDataset (blocks read before "
                                     "timing, so the steps time compute and communication, not I/O); synthetic: "
                                     "the same kind of waves made on each rank", choices=DATA_SOURCES)
    data: str = param("", "the weather data set folder (data_prep/make_weather.py), on the model's grid; empty: "
                          "a small one is generated into the task's folder", allowed="a folder holding "
                          "manifest.json, or empty")
    seed: int = param(0, "seed of the initial weights, the data order and the generated data set", min=0)
    trace: bool = param(True, "profile 4 extra untimed optimizer steps (1 wait, 1 warm-up, 2 recorded) of the "
                              "first stage, the loader in the loop, and write each rank's Chrome/Perfetto trace "
                              "to <task dir>/trace/<rank>.json, linked from the report; false: no trace")
    regime: str = regime_param(
        measure="before the timed steps, measure original's busy share",
        target="original is 61 % busy, the guide's regime", counts="the verdict counts only launches that reached it",
        fixed="time on the link as it is (context rows: 'what this looks like on my link')")
    calibration_rates: list[str] = calibration_rates_param(
        ["1gbit", "300mbit", "100mbit"], "original",
        bracketing="the guide's regime (weather_tiny on 2 CPU cores: ~85 % busy at 1 Gbit/s, ~40 % at 100 Mbit/s)")
    calibration_steps: int = calibration_steps_param(
        "original", cost="; each rate, and the one refinement at the solved rate, adds ~(1 + calibration_steps) x 2 "
                         "original steps and one reshape (~1.5 s)")

    def validate(self) -> None:
        if not self.stages:
            raise self._error("stages", f"is empty; allowed: {list(STAGE_NAMES)}")
        repeated = sorted({s for s in self.stages if self.stages.count(s) > 1})
        if repeated:
            raise self._error("stages", f"{repeated} given more than once")
        if self.nodes * self.ranks_per_node < 2:
            raise self._error("ranks_per_node", "data parallelism needs at least 2 ranks in all "
                                                "(nodes x ranks_per_node)")
        for name in self.stages:
            problem = MODES.get(STAGES.get(name).mode).layout_problem(self.nodes, self.ranks_per_node)
            if problem:
                raise self._error("stages", f"{name!r} uses the {STAGES.get(name).mode} reduction, which {problem}")
        per_step = self.micro_batch * self.micro_steps
        if self.loss_samples % per_step:
            raise self._error("loss_samples", f"{self.loss_samples} is not a multiple of micro_batch x micro_steps "
                                              f"= {per_step}, so the no_sync stages could not train on exactly "
                                              f"the same samples")
        if not self.skip_compression or not all(s.strip() for s in self.skip_compression):
            raise self._error("skip_compression", f"{self.skip_compression!r}: give one or more non-empty "
                                                  f"name fragments")
        if self.regime == "guide":
            if BASELINE not in self.stages:
                raise self._error("regime", f"'guide' calibrates {BASELINE}'s busy share, which is not in stages "
                                            f"{self.stages}")
            problem = calibration_rates_problem(self.calibration_rates)
            if problem:
                raise self._error("calibration_rates", problem)
        if self.data and self.data_source == "synthetic":
            raise self._error("data", "is set while data_source is 'synthetic'; give one or the other")
