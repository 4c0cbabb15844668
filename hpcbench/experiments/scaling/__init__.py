"""Experiment ``scaling``: 1 -> 2 -> 4 nodes, the C12 gate checked before each step out (C13)."""

from hpcbench.experiments import RANK_BYTES, TASK_STARTUP_S, ClaimSet, Estimate, Experiment, Resources, register
from hpcbench.experiments.scaling.claims import APPLICABILITY, CLAIMS, GATE_REGIME
from hpcbench.experiments.scaling.config import ScalingConfig
from hpcbench.experiments.scaling.present import present_scaling
from hpcbench.experiments.scaling.rules import RULES
from hpcbench.experiments.scaling.summary import summarize
from hpcbench.models.footprint import CPU_SPEED, GPU_SPEED, training_memory, training_step_seconds

#: Start-up of one stage's launch besides its steps: torchrun or srun, the ranks' imports and rendezvous
#: (5-10 s on 2 cores), and the driver reading the stage's records for the gate.
STAGE_STARTUP_S = 10.0
#: float32 copies of the parameters per rank: two DDP models (the timed one and its no-op twin), each
#: with weights, gradients and DDP's buckets, and the base copy they were made from.
STATE_COPIES = 7


def resources(cfg: ScalingConfig) -> Resources:
    """The largest stage's nodes: the task holds them all and each stage launches on its first k."""
    return Resources(nodes=cfg.nodes, ranks_per_node=cfg.ranks_per_node, gpu=cfg.backend == "nccl")


def estimate(cfg: ScalingConfig) -> Estimate:
    """Each rank's two DDP copies of the model and a batch; per stage a launch and 2 x (warm-up + steps) steps, and
    before each stage but the last the healthy calibration's steps (C12's regime)."""
    gpu = cfg.backend == "nccl"
    ranks = cfg.nodes * cfg.ranks_per_node
    need = training_memory(cfg.model, samples=cfg.batch_size, image_size=32, seq_len=cfg.seq_len,
                           state_copies=STATE_COPIES) or 0
    seconds: float | None = TASK_STARTUP_S + len(cfg.stages) * STAGE_STARTUP_S
    for nodes in cfg.stages:
        step = training_step_seconds(cfg.model, samples=cfg.batch_size, image_size=32, seq_len=cfg.seq_len,
                                     ranks=nodes * cfg.ranks_per_node, speed=GPU_SPEED if gpu else CPU_SPEED)
        calibration = cfg.calibration_steps if nodes != cfg.stages[-1] else 0
        seconds = (None if step is None or seconds is None
                   else seconds + (2 * (cfg.warmup_steps + cfg.steps) + calibration) * step)
    return Estimate(memory_per_rank=RANK_BYTES + (0 if gpu else need), ranks=ranks, seconds=seconds,
                    device_memory_per_rank=need if gpu else 0,
                    basis=f"{STATE_COPIES} float32 copies of {cfg.model}'s parameters + a batch of {cfg.batch_size} "
                          f"per rank; {len(cfg.stages)} stage launch(es) of {STAGE_STARTUP_S:g} s + "
                          f"2 x {cfg.warmup_steps + cfg.steps} steps each, + {cfg.calibration_steps} calibration "
                          f"steps before each but the last")


#: Toy size (``hpcbench run scaling --toy``): stages of 1 and 2 nodes, the 10 steps a gate needs at least (and as
#: many calibration steps), of a batch of 2.
TOY = dict(stages=[1, 2], batch_size=2, warmup_steps=1, steps=10, calibration_steps=10)


SPEC = register(Experiment(
    name="scaling", notebook="11_scaling.ipynb", config=ScalingConfig,
    # C13 reads only the gates run in C12's regime
    claims=ClaimSet(RULES, regimes={"C13": GATE_REGIME}, declared=CLAIMS, applicability=APPLICABILITY),
    summarize=summarize, present=present_scaling, resources=resources, estimate=estimate, toy=TOY,
    description="progressive scaling 1 -> 2 -> 4 nodes under DDP: per-node efficiency at each stage, the C12 gate "
                "checked before each step out, stopping with the check that failed",
))
