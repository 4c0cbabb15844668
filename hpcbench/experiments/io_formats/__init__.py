"""Experiment ``io_formats``: small files against container formats, prefetching, staging (C4, C5)."""

from hpcbench.experiments import Experiment, register
from hpcbench.experiments.io_formats.config import IoFormatsConfig
from hpcbench.experiments.io_formats.present import present_io_formats
from hpcbench.experiments.io_formats.rules import RULES
from hpcbench.experiments.io_formats.summary import summarize

SPEC = register(Experiment(
    name="io_formats",
    notebook="03_io_formats.ipynb",
    config=IoFormatsConfig,
    description="small files vs HDF5 / TFRecord / tar shards, cold cache: samples/s, MB/s, read p50/p99, file "
                "opens, accelerator idle share, prefetch depth, node-local staging, shard repair",
    summarize=summarize,
    rules=RULES,
    present=present_io_formats,
))
