"""Experiment ``collectives``: an nccl-tests-style sweep (T-comm measurement; C10, C16's context)."""

from hpcbench.core.metrics import busbw_factor
from hpcbench.core.units import approx_bytes
from hpcbench.experiments import RANK_BYTES, TASK_BASE_BYTES, TASK_STARTUP_S, ClaimSet, Estimate, Experiment, register
from hpcbench.experiments.collectives.claims import APPLICABILITY, CLAIMS
from hpcbench.experiments.collectives.config import DTYPES, CollectivesConfig
from hpcbench.experiments.collectives.present import present_collectives
from hpcbench.experiments.collectives.rules import RULES
from hpcbench.experiments.collectives.summary import summarize
from hpcbench.experiments.collectives.worker import size_sweep
from hpcbench.models.footprint import CPU_SPEED, GPU_SPEED


def _group_sizes(cfg: CollectivesConfig) -> list[int]:
    """Ranks per group of each measured group kind; kinds with 1 rank are skipped by the worker."""
    sizes = {"world": cfg.nodes * cfg.ranks_per_node, "intra_node": cfg.ranks_per_node, "inter_node": cfg.nodes}
    return [sizes[kind] for kind in cfg.groups if sizes[kind] >= 2]


def _peak_buffer_bytes(op: str, size: int, n: int, elem: int) -> int:
    """Bytes one rank holds while one op runs at ``size`` in a group of ``n`` (see worker.measure_op).

    In and out buffers (in-place ops: one), the check's boolean temporaries (one byte per
    output element) and, for the out-of-place ops, gloo's flat copy of the full vector.
    Measured with gloo, 2 ranks, 256 MiB: all_reduce and broadcast 1.15 S, all_gather and
    reduce_scatter 2.5 S; this gives 1.25 S and 2.6-2.75 S.
    """
    size = max(size, n * elem)
    inp, out = {"all_reduce": (size, size), "broadcast": (size, size),
                "all_gather": (size // n, size), "reduce_scatter": (size, size // n)}[op]
    in_place = op in ("all_reduce", "broadcast")
    buffers = inp if in_place else inp + out + size
    return buffers + out // elem


def estimate(cfg: CollectivesConfig) -> Estimate:
    """Send/receive buffers of the largest op at the largest size of the sweep, per rank."""
    elem = DTYPES[cfg.dtype]
    sizes = size_sweep(cfg.min_bytes, cfg.max_bytes, cfg.step_factor)
    groups = _group_sizes(cfg)
    peak = max((_peak_buffer_bytes(op, sizes[-1], n, elem) for op in cfg.ops for n in groups), default=0)
    gpu = cfg.backend == "nccl"
    speed = GPU_SPEED if gpu else CPU_SPEED
    runs = cfg.warmup_iters + cfg.iters + (1 if cfg.check else 0)
    seconds = TASK_STARTUP_S + sum(runs * (speed.latency_s + s * busbw_factor(op, n) / speed.link_bytes_s)
                                   for n in groups for op in cfg.ops for s in sizes)
    where = "on the GPU" if gpu else "in host memory"
    return Estimate(
        memory_per_rank=RANK_BYTES + (0 if gpu else peak), ranks=cfg.nodes * cfg.ranks_per_node,
        seconds=seconds, device_memory_per_rank=peak if gpu else 0,
        basis=f"buffers of the largest op at the sweep's top size {approx_bytes(sizes[-1])} in groups of "
              f"{', '.join(map(str, groups))} ranks: {approx_bytes(peak)} per rank {where}, "
              f"+ {approx_bytes(RANK_BYTES)} per rank process + {approx_bytes(TASK_BASE_BYTES)} per task")


#: Toy size (``hpcbench run collectives --toy``): two ops up to 64 KiB, three timed iterations: every group and the
#: fit, not a bandwidth.
TOY = dict(ops=["all_reduce", "all_gather"], max_bytes=65536, warmup_iters=1, iters=3)


SPEC = register(Experiment(
    name="collectives", notebook="10_collectives.ipynb", config=CollectivesConfig,
    claims=ClaimSet(RULES, declared=CLAIMS, applicability=APPLICABILITY), reads=("environment",),
    summarize=summarize, present=present_collectives, estimate=estimate, toy=TOY,
    description="nccl-tests-style collective sweep (algbw, busbw, p50/p99) on world, intra-node and inter-node groups",
))
