"""Where the repository's own folders are, for code at any layer that reads them.

The sbatch templates and the job wrapper in ``slurm/`` are read by the SLURM backend
(:mod:`hpcbench.run.backends.slurm`) and by experiments that run the wrapper themselves
(``fault_tolerance``), so the one place that finds them lives at the bottom.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The checkout's root (``hpcbench/`` lies in it).
REPO_ROOT = Path(__file__).resolve().parents[2]
#: Set to a copy of ``slurm/`` to use edited templates (slurm/README.md).
TEMPLATES_ENV = "HPCBENCH_SLURM_TEMPLATES"


def templates_dir() -> Path:
    """The folder of the sbatch templates and the job wrapper: ``$HPCBENCH_SLURM_TEMPLATES``, else ``slurm/``."""
    env = os.environ.get(TEMPLATES_ENV)
    return Path(env) if env else REPO_ROOT / "slurm"
