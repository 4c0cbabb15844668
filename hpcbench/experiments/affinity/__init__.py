"""Experiment ``affinity``: the binding plan for this node, and what each common binding mistake costs (T-affinity)."""

from hpcbench.core.units import approx_bytes
from hpcbench.experiments import RANK_BYTES, TASK_BASE_BYTES, TASK_STARTUP_S, ClaimSet, Estimate, Experiment, register
from hpcbench.experiments.affinity.config import AffinityConfig
from hpcbench.experiments.affinity.present import present_affinity
from hpcbench.experiments.affinity.rules import RULES
from hpcbench.experiments.affinity.summary import summarize
from hpcbench.models.footprint import CPU_SPEED, training_memory, training_step_seconds

#: float32 copies of the parameters alive per training pair: weights, gradients and DDP's buckets.
COPIES_PER_MODEL = 3
#: The DataLoader worker process (a fork of rank 0: torch imported, its own batches in flight).
LOADER_WORKER_BYTES = 256 << 20
#: The slowest setting runs about this many times the right way's step (oversubscription on 2 cores: ~2-5x).
SLOW_SETTING_FACTOR = 4.0
#: Seconds per random 8-byte read over a buffer far beyond the TLB's reach (a DRAM miss, half overlapped).
SECONDS_PER_READ = 50e-9
#: Bytes per second of the first touch of a buffer (page faults and zeroing), one core.
TOUCH_BPS = 1e9


def estimate(cfg: AffinityConfig) -> Estimate:
    """Rank 0 holds the most: one training model, the loader's worker, and both memory-bound pair's buffers
    with the read index and the gathered values. Time: every pair's interleaved steps (both settings)."""
    training = training_memory(cfg.model, samples=cfg.batch_size, image_size=cfg.image_size, seq_len=1,
                               state_copies=COPIES_PER_MODEL) or 0
    memory_bound = [m for m in cfg.mistakes if m in ("hugepages", "numa")]
    buffers = (2 * cfg.buffer_bytes + 2 * 8 * cfg.reads_per_step) if memory_bound else 0
    loader = LOADER_WORKER_BYTES if "loader" in cfg.mistakes else 0
    peak = RANK_BYTES + max(training + loader, buffers)
    rounds = cfg.warmup_steps + cfg.steps
    step = training_step_seconds(cfg.model, samples=cfg.batch_size, image_size=cfg.image_size, seq_len=1,
                                 ranks=cfg.ranks_per_node, speed=CPU_SPEED) or 0.0
    per_pair = {"oversubscription": rounds * step * (1 + SLOW_SETTING_FACTOR),
                "binding": rounds * step * 2,
                "loader": rounds * cfg.loader_batches * step * 2 * 2,
                "hugepages": rounds * 2 * cfg.reads_per_step * SECONDS_PER_READ + 2 * cfg.buffer_bytes / TOUCH_BPS,
                "numa": rounds * 2 * cfg.reads_per_step * SECONDS_PER_READ + 2 * cfg.buffer_bytes / TOUCH_BPS}
    seconds = TASK_STARTUP_S + sum(per_pair[m] for m in cfg.mistakes)
    basis = (f"{COPIES_PER_MODEL} float32 copies of {cfg.model}'s parameters + its layer outputs for a batch of "
             f"{cfg.batch_size} ({approx_bytes(training)}), the loader's worker ({approx_bytes(loader)}), or two "
             f"{approx_bytes(cfg.buffer_bytes)} buffers with the read index ({approx_bytes(buffers)}), whichever is "
             f"larger, + {approx_bytes(RANK_BYTES)} per rank process + {approx_bytes(TASK_BASE_BYTES)} per task")
    return Estimate(memory_per_rank=peak, ranks=cfg.nodes * cfg.ranks_per_node, seconds=seconds, basis=basis)


#: Toy size (``hpcbench run affinity --toy``): every mistake on two steps of a 16x16 batch of 2, a 16 MiB NUMA
#: buffer: each phase's mechanics in seconds.
TOY = dict(batch_size=2, image_size=16, warmup_steps=1, steps=2, loader_batches=1, sample_work=1, buffer_bytes=16 << 20,
           reads_per_step=1 << 14)


SPEC = register(Experiment(
    name="affinity", notebook="06_affinity.ipynb", config=AffinityConfig, claims=ClaimSet(RULES),
    summarize=summarize, present=present_affinity, raw_rows=True, estimate=estimate, toy=TOY,
    description="the binding plan for this node (cores, memory node, GPU, NIC per rank; srun/numactl/sbatch), and "
                "each common mistake timed against the right way: thread oversubscription, unbound ranks, "
                "DataLoader worker on the compute cores, huge pages ignored, remote NUMA memory",
))
