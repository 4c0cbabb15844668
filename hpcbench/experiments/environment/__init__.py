"""Experiment ``environment``: the toolchain and topology inventory (C16's context).

The probes live in :mod:`hpcbench.system.inventory` (reused by other experiments);
this package holds the experiment's config, its report section and its SPEC.
"""

from hpcbench.core.units import approx_bytes
from hpcbench.experiments import TASK_BASE_BYTES, TASK_STARTUP_S, ClaimSet, Estimate, Experiment, register
from hpcbench.experiments.environment.config import EnvironmentConfig
from hpcbench.experiments.environment.present import present_environment

#: What the probes hold: /proc and /sys files and command output, a few MB at most.
PROBES_BYTES = 16 << 20
#: Version commands found on PATH usually answer in well under a second each; a dozen at most.
COMMANDS_S = 10.0


def estimate(cfg: EnvironmentConfig) -> Estimate:
    """Small: the notebook's own process reading /proc, /sys and a few version commands."""
    return Estimate(PROBES_BYTES, 1, TASK_STARTUP_S + (COMMANDS_S if cfg.include_commands else 0.0),
                    basis=f"the notebook's process ({approx_bytes(TASK_BASE_BYTES)} with torch imported) reading "
                          f"files and command output: {approx_bytes(PROBES_BYTES)} at most")


SPEC = register(Experiment(
    name="environment", notebook="00_environment.ipynb", config=EnvironmentConfig, claims=ClaimSet(context=("C16",)),
    present=present_environment, raw_rows=True, estimate=estimate,
    description="toolchain and topology inventory: Python, torch, CUDA, NCCL, MPI, SLURM, CPU, NUMA, GPUs, IB",
))
