"""The experiment registry: what can be run, from which notebook, with which config.

Each :class:`Experiment` names its notebook (under ``notebooks/``), its config
dataclass (whose fields are the notebook's parameters), the claims of SOURCE.md it
tests, and what it needs to run (nodes, ranks per node, GPU), derived from a config.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from hpcbench.batch_scaling import BatchScalingConfig
from hpcbench.collectives import CollectivesConfig
from hpcbench.comm_modes import CommModesConfig
from hpcbench.config import Config
from hpcbench.environment import EnvironmentConfig
from hpcbench.errors import HpcbenchError
from hpcbench.io_formats import IoFormatsConfig
from hpcbench.registry import Registry

NOTEBOOKS_ENV = "HPCBENCH_NOTEBOOKS"


@dataclass(frozen=True)
class Resources:
    """What one task of an experiment needs."""

    nodes: int = 1
    ranks_per_node: int = 1
    gpu: bool = False

    def describe(self) -> str:
        gpu = ", GPU" if self.gpu else ""
        return f"{self.nodes} node(s) x {self.ranks_per_node} rank(s){gpu}"


@dataclass(frozen=True)
class Experiment:
    name: str
    notebook: str
    config: type[Config]
    claims: tuple[str, ...]
    description: str
    resources: Callable[[Any], Resources] = lambda cfg: Resources()

    def notebook_path(self) -> Path:
        path = notebooks_dir() / self.notebook
        if not path.is_file():
            raise HpcbenchError(f"experiment {self.name!r}: notebook {path} does not exist "
                                f"(set {NOTEBOOKS_ENV} to the folder holding hpcbench's notebooks)")
        return path


def notebooks_dir() -> Path:
    """``$HPCBENCH_NOTEBOOKS`` or the ``notebooks/`` folder of this checkout."""
    env = os.environ.get(NOTEBOOKS_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / "notebooks"


def distributed_resources(cfg: Any) -> Resources:
    """What a distributed experiment needs, from its ``nodes``, ``ranks_per_node`` and ``backend`` fields."""
    return Resources(nodes=cfg.nodes, ranks_per_node=cfg.ranks_per_node, gpu=cfg.backend == "nccl")


EXPERIMENTS: Registry[Experiment] = Registry("experiment")


def register(exp: Experiment) -> Experiment:
    return EXPERIMENTS.register(exp.name, exp)


register(Experiment(
    name="environment",
    notebook="00_environment.ipynb",
    config=EnvironmentConfig,
    claims=("C16",),
    description="toolchain and topology inventory: Python, torch, CUDA, NCCL, MPI, SLURM, CPU, NUMA, GPUs, IB",
))
register(Experiment(
    name="collectives",
    notebook="10_collectives.ipynb",
    config=CollectivesConfig,
    claims=("C16", "C10"),
    description="nccl-tests-style collective sweep (algbw, busbw, p50/p99) on world, intra-node and inter-node groups",
    resources=distributed_resources,
))
register(Experiment(
    name="comm_modes",
    notebook="02_comm_modes.ipynb",
    config=CommModesConfig,
    claims=("C3", "C17"),
    description="flat DDP vs hybrid DP+DDP vs hierarchical reduction: samples/s, step p50/p99, communication "
                "share, gradient bucket sweep",
    resources=distributed_resources,
))
register(Experiment(
    name="io_formats",
    notebook="03_io_formats.ipynb",
    config=IoFormatsConfig,
    claims=("C4", "C5"),
    description="small files vs HDF5 / TFRecord / tar shards, cold cache: samples/s, MB/s, read p50/p99, file "
                "opens, accelerator idle share, prefetch depth, node-local staging, shard repair",
))
register(Experiment(
    name="batch_scaling",
    notebook="01_batch_scaling.ipynb",
    config=BatchScalingConfig,
    claims=("C2",),
    description="per-rank throughput and memory for 1x..8x a base batch, with and without gradient accumulation",
    resources=distributed_resources,
))
