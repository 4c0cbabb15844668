"""Experiment ``monitoring``: real faults on one node of the emulated cluster, utilisation against the C6 alerts (C6)."""

from hpcbench.experiments import RANK_BYTES, TASK_STARTUP_S, ClaimSet, Estimate, Experiment, register
from hpcbench.experiments.monitoring.claims import CLAIMS
from hpcbench.experiments.monitoring.config import MonitoringConfig
from hpcbench.experiments.monitoring.present import present_monitoring
from hpcbench.experiments.monitoring.rules import RULES
from hpcbench.experiments.monitoring.summary import summarize
from hpcbench.models.footprint import training_memory

#: Per phase besides its training: the samplers' start (a Python process importing pandas, ~2 s on 2
#: cores), the fault's apply and undo (< 1 s), the barriers and the alerts' evaluation.
PHASE_OVERHEAD_S = 4.0
#: The sampler process of a node (pandas and pyarrow imported, rows kept until the end), held by
#: local rank 0's share of the node: ~150 MiB measured.
SAMPLER_BYTES = 160 << 20


def estimate(cfg: MonitoringConfig) -> Estimate:
    """Each rank's model under DDP plus a batch, the sampler per node; phases x (phase_s + overhead)."""
    need = training_memory(cfg.model, samples=cfg.batch_size, image_size=32, seq_len=64, state_copies=3) or 0
    seconds = TASK_STARTUP_S + len(cfg.faults) * (cfg.phase_s + PHASE_OVERHEAD_S)
    return Estimate(memory_per_rank=RANK_BYTES + need + SAMPLER_BYTES // cfg.ranks_per_node,
                    ranks=cfg.nodes * cfg.ranks_per_node, seconds=seconds,
                    basis=f"weights, gradients and DDP's buckets of {cfg.model} + a batch of {cfg.batch_size} per rank, "
                          f"a sampler process per node; {len(cfg.faults)} phases of {cfg.phase_s:g} s + "
                          f"{PHASE_OVERHEAD_S:g} s each")


#: Toy size (``hpcbench run monitoring --toy``): the baseline and the two faults one machine can apply, 2 s each at
#: 2 Hz (an alert needs 3 samples: it may or may not fire; the mechanics run).
TOY = dict(faults=["none", "slow_storage", "cpu_contention"], phase_s=2.0, interval_s=0.5, min_steps=3,
           warmup_steps=1)


SPEC = register(Experiment(
    name="monitoring", notebook="07_monitoring.ipynb", config=MonitoringConfig,
    claims=ClaimSet(RULES, declared=CLAIMS),
    summarize=summarize, present=present_monitoring, estimate=estimate, toy=TOY,
    description="training on 2 nodes with a real fault per phase on the last node (slow or lossy link, throttled "
                "storage, CPU contention): plain utilisation against the C6 metrics and their alerts",
))
