"""Experiment ``practice``: the C12 gate before scaling out, on real faults injected one phase each (C12)."""

from hpcbench.experiments import RANK_BYTES, TASK_STARTUP_S, ClaimSet, Estimate, Experiment, register
from hpcbench.experiments.practice.claims import CLAIMS, GATE_REGIME
from hpcbench.experiments.practice.config import PracticeConfig
from hpcbench.experiments.practice.present import present_practice
from hpcbench.experiments.practice.rules import RULES
from hpcbench.experiments.practice.summary import summarize
from hpcbench.models.footprint import training_memory

#: Per phase besides its training: the barriers, the fault's apply and undo (a neighbour process importing
#: torch takes ~2 s on 2 loaded cores; tc and cgroup writes < 1 s), the warm-up steps and the records.
PHASE_OVERHEAD_S = 4.0
#: The thread-hungry neighbour of unbound_threads: a Python process with torch imported (~300 MiB private).
NEIGHBOUR_BYTES = 320 << 20


def estimate(cfg: PracticeConfig) -> Estimate:
    """Each rank's model under DDP, a batch and its share of a neighbour process; phases x (phase_s + overhead)."""
    need = training_memory(cfg.model, samples=cfg.batch_size, image_size=32, seq_len=64, state_copies=3) or 0
    neighbour = NEIGHBOUR_BYTES // cfg.ranks_per_node if "unbound_threads" in cfg.faults else 0
    seconds = TASK_STARTUP_S + cfg.calibration_s + len(cfg.faults) * (cfg.phase_s + PHASE_OVERHEAD_S)
    return Estimate(memory_per_rank=RANK_BYTES + need + neighbour, ranks=cfg.nodes * cfg.ranks_per_node,
                    seconds=seconds,
                    basis=f"weights, gradients and DDP's buckets of {cfg.model} + a batch of {cfg.batch_size} per rank"
                          f"{', a neighbour process on the faulty node' if neighbour else ''}; {len(cfg.faults)} "
                          f"phases of {cfg.phase_s:g} s + {PHASE_OVERHEAD_S:g} s each after a {cfg.calibration_s:g} s "
                          f"calibration")


#: Toy size (``hpcbench run practice --toy``): the baseline, two faults one machine can apply and a link fault it
#: must record as not injected, 1.5 s each: each gate's mechanics, not its verdict.
TOY = dict(faults=["none", "cpu_contention", "slow_node", "slow_link"], phase_s=1.5, min_steps=5, warmup_steps=1,
           batch_size=4, calibration_s=1.0)


SPEC = register(Experiment(
    name="practice", notebook="12_practice.ipynb", config=PracticeConfig,
    claims=ClaimSet(RULES, regimes={"C12": GATE_REGIME}, declared=CLAIMS),
    summarize=summarize, present=present_practice, estimate=estimate, toy=TOY,
    description="training on 2 nodes with one real fault per phase on the last node (slow, lossy or flapping link, "
                "slow storage, CPU contention, unbound threads, a slow node): the C12 gate after each phase, and the "
                "fraction of faults it catches",
))
