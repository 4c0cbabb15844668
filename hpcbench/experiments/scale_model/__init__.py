"""Experiment ``scale_model``: the scale model validated on the emulated cluster at several link rates; C1 with it."""

from hpcbench.core.units import approx_bytes
from hpcbench.experiments import RANK_BYTES, TASK_BASE_BYTES, TASK_STARTUP_S, ClaimSet, Estimate, Experiment, register
from hpcbench.experiments.scale_model.claims import CLAIMS
from hpcbench.experiments.scale_model.config import RUN_MODES, ScaleModelConfig
from hpcbench.experiments.scale_model.present import present_scale_model
from hpcbench.experiments.scale_model.rules import RULES, predict_c1_at_guide_scale
from hpcbench.experiments.scale_model.summary import summarize
from hpcbench.models.footprint import CPU_SPEED, GPU_SPEED, model_footprint, training_memory, training_step_seconds

#: float32 copies of the parameters alive at once: the base model, then per mode the trained DDP copy, its
#: no-op twin and (modes with a Python hook) its twin with local collectives (weights, gradients, DDP's buckets
#: each: 3), and the 2-bit hook's residuals (1).
COPIES_PER_MODE = 10
#: Each phase is one launch: the launch's start-up (srun or torchrun, the rendezvous) and the ranks' imports (~5 s on 2 cores).
PHASE_STARTUP_S = 5.0


def _phase_rates_bytes_s(cfg: ScaleModelConfig, link_bytes_s: float) -> list[float]:
    """Bytes/s of each phase's node link (the shaped rate; the assumed CPU link when unshaped)."""
    from hpcbench.cluster.network import parse_rate

    return [min(link_bytes_s, parse_rate(r) / 8) for r in cfg.link_rates]


def estimate(cfg: ScaleModelConfig) -> Estimate:
    """phases x (collective sweep + step series x (warm-up + steps) x step) + startup.

    The sweep: every op, size and group kind, (warm-up + timed) iterations, each moving ~2x its
    size per node over the phase's link; a step: :func:`training_step_seconds` plus its buckets
    all-reduced over the phase's link. Memory: :data:`COPIES_PER_MODE` float32 copies per mode and
    a batch's layer outputs, plus the largest collective buffers (in + out).
    """
    gpu = cfg.backend == "nccl"
    speed = GPU_SPEED if gpu else CPU_SPEED
    ranks = cfg.nodes * cfg.ranks_per_node
    copies = 1 + COPIES_PER_MODE * len(cfg.modes)
    need = training_memory(cfg.model, samples=cfg.batch_size, image_size=32, seq_len=cfg.seq_len, state_copies=copies)
    step = training_step_seconds(cfg.model, samples=cfg.batch_size, image_size=32, seq_len=cfg.seq_len, ranks=ranks,
                                 speed=speed)
    buffers = 2 * cfg.max_bytes
    rates = _phase_rates_bytes_s(cfg, speed.link_bytes_s)
    footprint = model_footprint(cfg.model)
    grads = 4 * footprint.parameters if footprint else 0  # bytes of one float32 copy of the parameters
    seconds = TASK_STARTUP_S
    # each mode and its no-op twin; a Python hook's mode also its twin with local collectives
    runs = sum(3 if RUN_MODES.get(m).python_hook else 2 for m in cfg.modes)
    sweep_bytes = 2.0 * sum(cfg.sizes()) * len(cfg.ops) * 3 * (cfg.iters + cfg.warmup_iters)
    calls = len(cfg.sizes()) * len(cfg.ops) * 3 * (cfg.iters + cfg.warmup_iters)
    for rate in rates:
        per_step = (step or 0.0) + 2.0 * grads / rate
        seconds += PHASE_STARTUP_S + sweep_bytes / rate + calls * speed.latency_s
        seconds += runs * (cfg.warmup_steps + cfg.steps) * per_step
    basis = (f"{copies} float32 copies of {cfg.model}'s parameters + a batch of {cfg.batch_size} + collective "
             f"buffers of {approx_bytes(buffers)}: {approx_bytes((need or 0) + buffers)} per rank "
             f"{'on the GPU' if gpu else 'in host memory'}, + {approx_bytes(RANK_BYTES)} per rank process + "
             f"{approx_bytes(TASK_BASE_BYTES)} per task; {len(rates)} phase(s) of a collective sweep and "
             f"{runs} step series (modes, no-op and local-collective twins) x {cfg.warmup_steps + cfg.steps} "
             f"steps at the phase's link rate")
    if need is None or step is None:
        basis += f"; no footprint for {cfg.model}: its memory and steps not counted"
    device = (need or 0) + buffers
    return Estimate(memory_per_rank=RANK_BYTES + (0 if gpu else device), ranks=ranks,
                    seconds=None if step is None else seconds, device_memory_per_rank=device if gpu else 0,
                    basis=basis)


#: Toy size (``hpcbench run scale_model --toy``): one link rate, all-reduce up to 64 KiB, three training steps of
#: DDP and of the Python hook's 2-bit codec: the fits and the prediction's mechanics.
TOY = dict(link_rates=["1gbit"], ops=["all_reduce"], modes=["ddp", "quant2bit"], min_bytes=1024, max_bytes=65536,
           iters=2, steps=3, warmup_steps=1, codec_repeats=1)


SPEC = register(Experiment(
    name="scale_model", notebook="09_scale_model.ipynb", config=ScaleModelConfig,
    # The ledger's "predicted at the guide's scale" for C1: the model at the guide's platform, with this
    # experiment's measured link efficiency as an input where it has launches. The experiments that rule on
    # C2, C3, C7, C8 and C9 predict them, with this experiment's evidence (their SPECs' prediction_inputs).
    claims=ClaimSet(RULES, {"C1": predict_c1_at_guide_scale}, declared=CLAIMS),
    summarize=summarize, present=present_scale_model, estimate=estimate, toy=TOY,
    description="the scale model validated on the emulated cluster: per link rate, collectives fitted with "
                "alpha-beta, each mode's step predicted from them and the no-op compute, residuals against "
                "the measured median; C1 judged at the guide's platform with the measured link efficiency",
))
