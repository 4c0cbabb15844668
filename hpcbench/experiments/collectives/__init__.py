"""Experiment ``collectives``: an nccl-tests-style sweep (T-comm measurement; C10, C16's context)."""

from hpcbench.experiments import Experiment, distributed_resources, register
from hpcbench.experiments.collectives.config import CollectivesConfig
from hpcbench.experiments.collectives.present import present_collectives
from hpcbench.experiments.collectives.rules import RULES
from hpcbench.experiments.collectives.summary import summarize

SPEC = register(Experiment(
    name="collectives",
    notebook="10_collectives.ipynb",
    config=CollectivesConfig,
    description="nccl-tests-style collective sweep (algbw, busbw, p50/p99) on world, intra-node and inter-node groups",
    summarize=summarize,
    rules=RULES,
    present=present_collectives,
    resources=distributed_resources,
    reads=("environment",),
))
