"""Experiment ``advisor``: C14's priority of communication optimisations, validated in three regimes (C14)."""

from hpcbench.advise.recommend import OVERLAP_MICRO_STEPS
from hpcbench.cluster.network import parse_rate
from hpcbench.core.metrics import allreduce_bytes_sent
from hpcbench.experiments import ClaimSet, Estimate, Experiment, register
from hpcbench.experiments.advisor.claims import APPLICABILITY, CLAIMS
from hpcbench.experiments.advisor.config import AdvisorConfig
from hpcbench.experiments.advisor.present import present_advisor
from hpcbench.experiments.advisor.rules import RULES
from hpcbench.experiments.advisor.summary import summarize
from hpcbench.experiments.training_estimate import Training, training_estimate
from hpcbench.models.footprint import model_footprint

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
    ranks = cfg.nodes * cfg.ranks_per_node
    steps = cfg.warmup_steps + cfg.steps
    trainings = []
    for regime in cfg.regimes:
        s = cfg.settings(regime)
        fp = model_footprint(s.model)
        # one gradient all-reduce at the phase's link rate; a model without a footprint is left uncounted
        link_s = allreduce_bytes_sent(4 * fp.parameters, ranks) * 8 / parse_rate(s.link_rate) if fp else 0.0
        # one micro-batch's layer outputs live at a time: no_sync's backward frees each before the next
        trainings.append(Training(s.model, s.batch_size, STATE_COPIES, steps * MICRO_STEPS_PER_STEP,
                                  extra_seconds=steps * SYNCS_ON_THE_LINK * link_s + cfg.layout_repeats * link_s
                                  + 3 * cfg.probe_iters * len(cfg.probe_sizes) * link_s))
    return training_estimate(
        cfg, trainings, f"{STATE_COPIES} float32 copies of the largest phase's parameters + its layer outputs for "
                        f"one micro-batch",
        f"; per phase (warm-up + steps) x ({MICRO_STEPS_PER_STEP} micro-steps + {SYNCS_ON_THE_LINK:.2g} gradient "
        f"all-reduces at the phase's link rate), the layout and probe all-reduces")


#: Toy size (``hpcbench run advisor --toy``): the three regimes at small batches, two steps each, one layout repeat
#: and a three-size probe of one iteration whose largest size is beyond a token bucket's 128 KiB burst: the advice
#: in every regime in seconds.
TOY = dict(bandwidth_batch_size=1, latency_batch_size=1, compute_batch_size=4, warmup_steps=1, steps=2,
           layout_repeats=1, probe_sizes=[4096, 65536, 524288], probe_iters=1)


SPEC = register(Experiment(
    name="advisor", notebook="13_advisor.ipynb", config=AdvisorConfig, claims=ClaimSet(RULES, declared=CLAIMS, applicability=APPLICABILITY),
    summarize=summarize, present=present_advisor, estimate=estimate, toy=TOY,
    description="three link phases (slow link, tiny buckets, compute-heavy step): the advisor's pick from the "
                "baseline's records against the measured gain of compression, topology-aware reduction and "
                "no_sync accumulation",
))
