"""Experiment ``comm_modes``: flat DDP against two-level reductions, and the bucket sweep (C3, C17)."""

from hpcbench.experiments import Experiment, distributed_resources, register
from hpcbench.experiments.comm_modes.config import CommModesConfig
from hpcbench.experiments.comm_modes.present import present_comm_modes
from hpcbench.experiments.comm_modes.rules import RULES
from hpcbench.experiments.comm_modes.summary import summarize

SPEC = register(Experiment(
    name="comm_modes",
    notebook="02_comm_modes.ipynb",
    config=CommModesConfig,
    description="flat DDP vs hybrid DP+DDP vs hierarchical reduction: samples/s, step p50/p99, communication "
                "share, gradient bucket sweep",
    summarize=summarize,
    rules=RULES,
    present=present_comm_modes,
    resources=distributed_resources,
))
