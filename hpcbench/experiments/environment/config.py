"""Parameters of the ``environment`` experiment (``notebooks/00_environment.ipynb``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hpcbench.core.config import Config, param


@dataclass
class EnvironmentConfig(Config):
    """Parameters of ``00_environment``; the notebook's parameters cell mirrors them."""

    sysfs_root: str = param("/", "root under which /proc and /sys are read; tests point it at a recorded tree",
                            allowed="an existing directory")
    include_commands: bool = param(True, "run version commands found on PATH (sinfo, mpirun, nvidia-smi...); "
                                         "false records them as not collected")
    command_timeout_s: float = param(10.0, "seconds each external command may take; nvidia-smi can stall "
                                           "for seconds on a node whose driver is not persistent", min=0.1, max=600)

    def validate(self) -> None:
        # A mistyped root would make every file fact read "absent", which looks like
        # a real (empty) machine; refuse it instead.
        if not Path(self.sysfs_root).is_dir():
            raise self._error("sysfs_root", f"{self.sysfs_root!r} is not a directory")
