"""The estimate of a task that trains models under DDP: what every such experiment's ``estimate()`` shares.

An experiment states, per model it trains, the batch, the parameter copies alive at once and how
many optimizer steps it spends on it (:class:`Training`); :func:`training_estimate` turns that into
an :class:`~hpcbench.experiments.Estimate` with the footprint model of
:mod:`hpcbench.models.footprint`: the largest model's bytes per rank (in host memory, or on the
GPU with NCCL), the task's start-up plus every model's steps, and a basis that says so. A model
without a footprint is named in the basis and leaves the time unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from hpcbench.core.config import DistributedConfig
from hpcbench.core.units import approx_bytes
from hpcbench.experiments import RANK_BYTES, TASK_BASE_BYTES, TASK_STARTUP_S, Estimate
from hpcbench.models.footprint import CPU_SPEED, GPU_SPEED, training_memory, training_step_seconds


@dataclass(frozen=True)
class Training:
    """One model trained in a task, as :func:`training_estimate` counts it."""

    model: str
    """a registered model name"""
    samples: int
    """samples per rank in one optimizer step"""
    state_copies: int
    """float32 copies of the parameters alive at once (weights, gradients, DDP's buckets, twins, ...)"""
    steps: float
    """optimizer steps of ``samples`` the task runs on this model, all series together"""
    image_size: int = 32
    seq_len: int = 64
    peak_samples: int | None = None
    """samples whose layer outputs are alive at once when more than one step's (an accumulated check step)"""
    extra_seconds: float = 0.0
    """time spent besides the steps (link reshapes, probes), counted only when the model has a footprint"""


def training_estimate(cfg: DistributedConfig, trainings: Iterable[Training], what: str, note: str = "") -> Estimate:
    """The memory and time of one task training ``trainings`` on ``cfg``'s layout.

    Args:
        cfg: the task's layout and backend (``nccl``: the models' bytes are on the GPU, GPU speed).
        trainings: every model the task trains; the largest one's bytes are the peak.
        what: the basis' opening, how the bytes were counted ("N float32 copies of ...").
        note: appended to the basis after the per-task bytes ("; 40 micro-steps per model").

    Returns:
        The :class:`~hpcbench.experiments.Estimate`; ``seconds`` None when a model has no footprint.
    """
    gpu = cfg.backend == "nccl"
    speed = GPU_SPEED if gpu else CPU_SPEED
    ranks = cfg.nodes * cfg.ranks_per_node
    peak, seconds, unknown = 0, TASK_STARTUP_S, []
    for t in trainings:
        need = training_memory(t.model, samples=t.peak_samples or t.samples, image_size=t.image_size,
                               seq_len=t.seq_len, state_copies=t.state_copies)
        step = training_step_seconds(t.model, samples=t.samples, image_size=t.image_size, seq_len=t.seq_len,
                                     ranks=ranks, speed=speed)
        if need is None or step is None:
            unknown.append(t.model)
            continue
        peak = max(peak, need)
        seconds += t.steps * step + t.extra_seconds
    basis = (f"{what}: {approx_bytes(peak)} per rank {'on the GPU' if gpu else 'in host memory'}, "
             f"+ {approx_bytes(RANK_BYTES)} per rank process + {approx_bytes(TASK_BASE_BYTES)} per task{note}")
    if unknown:
        basis += f"; no footprint for {', '.join(unknown)}: not counted"
    return Estimate(memory_per_rank=RANK_BYTES + (0 if gpu else peak), ranks=ranks,
                    seconds=None if unknown else seconds, device_memory_per_rank=peak if gpu else 0, basis=basis)
