"""Experiment ``batch_scaling``: per-rank throughput against the batch, with gradient accumulation (C2)."""

from hpcbench.experiments import Experiment, distributed_resources, register
from hpcbench.experiments.batch_scaling.config import BatchScalingConfig
from hpcbench.experiments.batch_scaling.present import present_batch_scaling
from hpcbench.experiments.batch_scaling.rules import RULES
from hpcbench.experiments.batch_scaling.summary import summarize

SPEC = register(Experiment(
    name="batch_scaling",
    notebook="01_batch_scaling.ipynb",
    config=BatchScalingConfig,
    description="per-rank throughput and memory for 1x..8x a base batch, with and without gradient accumulation",
    summarize=summarize,
    rules=RULES,
    present=present_batch_scaling,
    resources=distributed_resources,
))
