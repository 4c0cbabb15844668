"""A training task with one injected fault per phase on its last node: what the experiments running it share.

``monitoring`` (C6: do the metrics catch what utilisation hides?) and ``practice`` (C12: does the gate
catch it?) run the same task and watch it differently: a weather model trained under DDP on
``nodes`` nodes, each batch read from the disk, through the phases of ``cfg.faults`` (the baseline
:data:`NO_FAULT`, then faults of :data:`hpcbench.fault.inject.FAULT_KINDS`, each applied to the last
node). Written once here, so the two cannot drift apart:

* :class:`FaultPhasesConfig` — the layout and the checks of such a config, :func:`phases_param` and
  :func:`weather_model_param` the fields its subclasses declare alike;
* :func:`launch_with_data` — the task's weather data set, made in the driver, then the ranks;
* :func:`start_training` — each rank's start: the faulty node and its ranks, the model, the batches;
* :func:`timed_steps` — a phase's timed loop, ended for every rank by rank 0's clock;
* :func:`phase_problems` — the sanity checks every phase of a summary shares.

Importing it imports no torch; the functions that need it import it themselves.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, TypeVar

from hpcbench.cluster.network import parse_rate
from hpcbench.core.config import DistributedConfig, param
from hpcbench.fault.inject.base import FaultSite
from hpcbench.models import MODEL_NAMES, MODELS

#: The baseline phase: no fault.
NO_FAULT = "none"
#: A summary's ``injection`` for a fault phase that has no ``fault_injected`` record at all.
NO_INJECTION_RECORD = "no record of the injection"

T = TypeVar("T")


def phases_param(faults: tuple[str, ...], baseline_role: str) -> Any:
    """The ``faults`` field of a :class:`FaultPhasesConfig`: every one of ``faults`` by default, in run order.

    Args:
        faults: the phases the experiment knows, :data:`NO_FAULT` first.
        baseline_role: what the baseline phase is for (the config's :attr:`FaultPhasesConfig.baseline_role`).
    """
    return param(list(faults), f"phases in run order, each a stretch of training with one fault on the last node; "
                               f"{NO_FAULT!r} is {baseline_role}",
                 choices=faults, allowed=f"no repeats, must include {NO_FAULT!r}")


def weather_model_param(why: str) -> Any:
    """The ``model`` field of a :class:`FaultPhasesConfig`: a weather model, weather_tiny by default (``why``)."""
    return param("weather_tiny", f"model trained, reading its forecasting pairs from a weather data set made for "
                                 f"the task ({why})",
                 choices=MODEL_NAMES, allowed="a weather (grid) model: the data set is gridded fields")


@dataclass
class FaultPhasesConfig(DistributedConfig):
    """The layout and the checks of a config whose task has one fault per phase on its last node.

    A subclass declares the fields these checks read, each documented for its experiment: ``faults``
    (:func:`phases_param`), ``model`` (:func:`weather_model_param`), ``batch_size``, ``phase_s``,
    ``min_steps``, ``seed`` and ``slow_link_rate`` (a tc rate).
    """

    #: What the baseline phase is for, in the error that names a missing one.
    baseline_role: ClassVar[str] = "the baseline"

    nodes: int = param(2, "nodes; the last one gets the faults. The link faults need the emulated cluster "
                          "(a shaped veth per node); elsewhere they are recorded as not injected, with why",
                       min=2, max=4096)
    ranks_per_node: int = param(1, "ranks per node (CPU processes here, GPUs where there are)", min=1, max=64)

    def validate(self) -> None:
        if len(set(self.faults)) != len(self.faults):
            raise self._error("faults", f"{self.faults} repeats a fault")
        if NO_FAULT not in self.faults:
            raise self._error("faults", f"{self.faults} lacks {NO_FAULT!r}, {self.baseline_role}")
        if MODELS.get(self.model).kind != "grid":
            raise self._error("model", f"{self.model!r} is not a weather (grid) model; the task reads gridded "
                                       f"fields")
        try:
            parse_rate(self.slow_link_rate)
        except ValueError as exc:
            raise self._error("slow_link_rate", str(exc)) from None

    def injected(self) -> list[str]:
        """The faults, without the baseline."""
        return [f for f in self.faults if f != NO_FAULT]


def launch_with_data(task: Any, run_worker: Callable[..., Any], experiment: str) -> Any:
    """Make the task's weather data set (``out_dir/data``) in the driver, then run ``run_worker`` on its ranks.

    The data set is made once, on the config's model's grid, and flushed to the disk so that the
    ranks' reads can drop its pages and reach the disk; ``experiment`` names it in its manifest.
    """
    from hpcbench.data.readers.cold_batches import prepare_weather_data

    cfg = task.config
    spec = MODELS.get(cfg.model)
    prepare_weather_data(task.out_dir, channels=spec.channels, grid=spec.grid, seed=cfg.seed,
                         command=f"hpcbench {experiment} (generated for the task)")
    return task.launch(run_worker)


@dataclass
class PhaseTraining:
    """One rank's training, set up by :func:`start_training`."""

    rank: Any
    """this rank's :class:`hpcbench.dist.worker.Rank` (device, sync, lead)"""
    site: FaultSite
    """the faulty node (the last one), its ranks' pids, the task's data set, the config"""
    spec: Any
    """the model's :class:`hpcbench.models.ModelSpec` (its ``loss``)"""
    model: Any
    """the model under DDP"""
    opt: Any
    batches: Any
    """this rank's :class:`hpcbench.data.readers.cold_batches.ColdWeatherBatches`"""


def start_training(cfg: Any, topo: Any, writer: Any) -> PhaseTraining:
    """A rank's start: find the faulty node, write the layout (rank 0), build the model under DDP and the batches.

    A collective call: every rank of the task makes it, with torch.distributed initialised.
    """
    import torch

    from hpcbench.data.readers.cold_batches import ColdWeatherBatches, data_folder_of
    from hpcbench.dist.topology import gather_node_pids
    from hpcbench.dist.worker import rank_setup
    from hpcbench.parallel.modes import parallelize

    rank = rank_setup(cfg, topo)
    ranks = gather_node_pids(topo)
    target = ranks[-1][0]                                   # the last node gets the faults
    site = FaultSite(target, [pid for n, pid in ranks if n == target], data_folder_of(writer.path), cfg)
    if rank.lead:
        writer.add("topology", None, "", text=topo.describe(),
                   labels={"nodes": topo.nodes, "ranks_per_node": topo.ranks_per_node, "emulated": topo.emulated})
        writer.add("faulty_node", None, "", text=target)
    spec = MODELS.get(cfg.model)
    torch.manual_seed(cfg.seed)
    model = parallelize(spec.build().to(rank.device), "ddp", topo, device=rank.device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    batches = ColdWeatherBatches(site.data, rank=topo.rank, world_size=topo.world_size, seed=cfg.seed,
                                 batch_size=cfg.batch_size)
    return PhaseTraining(rank, site, spec, model, opt, batches)


def timed_steps(step: Callable[[], T], cfg: Any, seconds: float | None = None) -> list[T]:
    """``step()`` again and again for ``cfg.phase_s`` seconds (or ``seconds``) and at least ``cfg.min_steps``
    times; what each returned.

    A collective call: rank 0's clock ends the phase for everyone, so every rank runs the same steps.
    """
    seconds = cfg.phase_s if seconds is None else seconds
    import torch
    import torch.distributed as dist

    steps, started = [], time.perf_counter()
    go = torch.ones(1)
    while True:
        steps.append(step())
        go[0] = float(time.perf_counter() - started < seconds or len(steps) < cfg.min_steps)
        dist.broadcast(go, src=0)
        if go[0] == 0:
            return steps


def phase_problems(summary: Any, cfg: Any, own: Callable[[Any], list[str]]) -> list[str]:
    """What a summary's phases lack: every configured phase has its rows and ``cfg.min_steps`` timed steps,
    the experiment's ``own`` checks of its row hold, and every fault was injected or its reason recorded.

    Args:
        summary: one row per phase (columns ``fault``, ``steps``, ``injection``).
        cfg: the task's config (``faults``, ``min_steps``).
        own: a phase's row -> the experiment's problems with it, each in words without the fault's name.
    Returns:
        The problems, each naming its phase; empty when all is well.
    """
    problems = []
    seen = {r.fault: r for r in summary.itertuples(index=False)}
    for fault in cfg.faults:
        r = seen.get(fault)
        if r is None:
            problems.append(f"{fault}: no records")
            continue
        if r.steps < cfg.min_steps:
            problems.append(f"{fault}: {r.steps} timed steps, expected >= {cfg.min_steps}")
        problems += [f"{fault}: {p}" for p in own(r)]
        if fault != NO_FAULT and r.injection == NO_INJECTION_RECORD:
            problems.append(f"{fault}: the injector left no record")
    return problems


__all__ = ["FaultPhasesConfig", "NO_FAULT", "NO_INJECTION_RECORD", "PhaseTraining", "launch_with_data",
           "phase_problems", "phases_param", "start_training", "timed_steps", "weather_model_param"]
