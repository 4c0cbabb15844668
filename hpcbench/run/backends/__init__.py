"""Backends by name: ``local`` (this machine) and ``slurm`` (sbatch array and multi-node jobs)."""

from __future__ import annotations

from hpcbench.core.registry import Registry
from hpcbench.run.backends.base import Backend
from hpcbench.run.backends.local import LocalBackend
from hpcbench.run.backends.slurm import SlurmBackend

BACKENDS: Registry[Backend] = Registry("backend")
BACKENDS.register("local", LocalBackend())
BACKENDS.register("slurm", SlurmBackend())
