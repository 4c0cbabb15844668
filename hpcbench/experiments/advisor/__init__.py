"""Experiment ``advisor``: C14's priority of communication optimisations, validated in three regimes (C14)."""

from hpcbench.advise.recommend import OVERLAP_MICRO_STEPS
from hpcbench.cluster.network import parse_rate
from hpcbench.core.metrics import busbw_factor
from hpcbench.core.units import approx_bytes
from hpcbench.experiments import (RANK_BYTES, TASK_BASE_BYTES, TASK_STARTUP_S, Estimate, Experiment,
                                  distributed_resources, register)
from hpcbench.experiments.advisor.config import AdvisorConfig
from hpcbench.experiments.advisor.present import present_advisor
from hpcbench.experiments.advisor.rules import RULES
from hpcbench.experiments.advisor.summary import summarize
from hpcbench.models.footprint import CPU_SPEED, GPU_SPEED, model_footprint, training_memory, training_step_seconds

#: float32 copies of the parameters alive per regime: the base model, then five DDP copies (baseline,
#: its no-op twin, three techniques) of weights, gradients and DDP's buckets each.
STATE_COPIES = 1 + 5 * 3
#: Micro-steps per interleaved step: baseline, no-op, quant2bit, hierarchical one each, no_sync k.
MICRO_STEPS_PER_STEP = 4 + OVERLAP_MICRO_STEPS
#: Full ring all-reduces of the gradients per interleaved step on the link: baseline, hierarchical (~2/3 of
#: the baseline's inter-node bytes with 2 ranks per node), no_sync (one per step), quant2bit (~1/10).
SYNCS_ON_THE_LINK = 1 + 2 / 3 + 1 + 0.1


def estimate(cfg: AdvisorConfig) -> Estimate:
    """The largest phase's copies and batches per rank; per phase its steps' compute and its link's transfers."""
    gpu = cfg.backend == "nccl"
    speed = GPU_SPEED if gpu else CPU_SPEED
    ranks = cfg.nodes * cfg.ranks_per_node
    peak, seconds, unknown = 0, TASK_STARTUP_S, []
    for regime in cfg.regimes:
        s = cfg.settings(regime)
        # one micro-batch's layer outputs live at a time: no_sync's backward frees each before the next
        need = training_memory(s.model, samples=s.batch_size, image_size=32, seq_len=64, state_copies=STATE_COPIES)
        step = training_step_seconds(s.model, samples=s.batch_size, image_size=32, seq_len=64, ranks=ranks,
                                     speed=speed)
        fp = model_footprint(s.model)
        if need is None or step is None or fp is None:
            unknown.append(s.model)
            continue
        peak = max(peak, need)
        link_s = 4 * fp.parameters * busbw_factor("all_reduce", ranks) * 8 / parse_rate(s.link_rate)
        steps = cfg.warmup_steps + cfg.steps
        seconds += (steps * (MICRO_STEPS_PER_STEP * step + SYNCS_ON_THE_LINK * link_s)
                    + cfg.layout_repeats * link_s + 3 * cfg.probe_iters * len(cfg.probe_sizes) * link_s)
    basis = (f"{STATE_COPIES} float32 copies of the largest phase's parameters + its layer outputs for one "
             f"micro-batch: {approx_bytes(peak)} per rank, + {approx_bytes(RANK_BYTES)} per "
             f"rank process + {approx_bytes(TASK_BASE_BYTES)} per task; per phase (warm-up + steps) x "
             f"({MICRO_STEPS_PER_STEP} micro-steps + {SYNCS_ON_THE_LINK:.2g} gradient all-reduces at the phase's "
             f"link rate), the layout and probe all-reduces")
    if unknown:
        basis += f"; no footprint for {', '.join(unknown)}: not counted"
    return Estimate(memory_per_rank=RANK_BYTES + (0 if gpu else peak), ranks=ranks,
                    seconds=None if unknown else seconds, device_memory_per_rank=peak if gpu else 0, basis=basis)


#: Toy size (``hpcbench run advisor --toy``): two regimes, two steps each and a three-size probe: the advice on two
#: phases in seconds.
TOY = dict(regimes=["bandwidth", "latency"], bandwidth_batch_size=1, latency_batch_size=1, warmup_steps=1, steps=2,
           layout_repeats=1, probe_sizes=[4096, 65536, 524288], probe_iters=1)


SPEC = register(Experiment(
    name="advisor",
    notebook="13_advisor.ipynb",
    config=AdvisorConfig,
    description="three link phases (slow link, tiny buckets, compute-heavy step): the advisor's pick from the "
                "baseline's records against the measured gain of compression, topology-aware reduction and "
                "no_sync accumulation",
    summarize=summarize,
    rules=RULES,
    present=present_advisor,
    resources=distributed_resources,
    estimate=estimate,
    toy=TOY,
))
