"""Experiment ``environment``: the toolchain and topology inventory (C16's context).

The probes live in :mod:`hpcbench.system.inventory` (reused by other experiments);
this package holds the experiment's config, its report section and its SPEC.
"""

from hpcbench.experiments import Experiment, register
from hpcbench.experiments.environment.config import EnvironmentConfig
from hpcbench.experiments.environment.present import present_environment

SPEC = register(Experiment(
    name="environment",
    notebook="00_environment.ipynb",
    config=EnvironmentConfig,
    description="toolchain and topology inventory: Python, torch, CUDA, NCCL, MPI, SLURM, CPU, NUMA, GPUs, IB",
    context_claims=("C16",),
    present=present_environment,
    raw_rows=True,
))
