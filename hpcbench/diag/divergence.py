"""Divergence checks for multi-node training (the guide's section 5.2, T-diag).

The guide names three causes of a run that diverges across nodes, and this module has one
check or remedy for each:

* **different starting weights**: every rank must seed the same (``torch.manual_seed(42)``,
  ``torch.cuda.manual_seed_all``). :func:`check_same_start` compares a hash of every rank's
  parameters (:func:`parameter_checksum`) with rank 0's and raises :class:`DivergenceError`
  naming the ranks that differ. DDP broadcasts rank 0's weights when it wraps a model, which
  hides the mistake for the weights but not for anything else drawn from the generator
  (dropout masks, data order), so the check runs on the model *before* wrapping;
* **float inconsistency**: TF32 matmuls on some nodes and not on others.
  :func:`tf32_state` records the settings (``NVIDIA_TF32_OVERRIDE`` and torch's flags),
  :func:`disable_tf32` turns TF32 off;
* **exploding gradients**: :func:`clip_gradients` is ``clip_grad_norm_(..., 1.0)`` that also
  counts the steps whose norm was not finite (:class:`ClipStats`).

:func:`ranks_agree` (bit-identical parameters on every rank after a synchronisation) is the
invariant gradient accumulation relies on (:mod:`hpcbench.parallel.overlap`).

References: PyTorch reproducibility notes (https://pytorch.org/docs/stable/notes/randomness.html);
TF32 (https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices);
``NVIDIA_TF32_OVERRIDE`` (CUDA libraries read it when they initialise, cuBLAS/cuDNN docs).
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field
from typing import Any

from hpcbench.core.errors import ConfigError, HpcbenchError

__all__ = ["ClipStats", "DivergenceError", "TF32_ENV", "check_same_start", "clip_gradients", "disable_tf32",
           "parameter_checksum", "ranks_agree", "tf32_state"]

#: Environment variable that makes cuBLAS/cuDNN ignore TF32 requests when set to 0 (read when
#: the CUDA libraries initialise, so it must be set before the process touches the GPU).
TF32_ENV = "NVIDIA_TF32_OVERRIDE"


class DivergenceError(HpcbenchError):
    """Ranks that should hold the same state do not; ``ranks`` lists the (global) ranks that differ."""

    def __init__(self, message: str, *, ranks: list[int]):
        self.ranks = list(ranks)
        super().__init__(message)


# -- parameters across ranks ------------------------------------------------------------------

def parameter_checksum(model: Any) -> str:
    """SHA-256 of the model's parameter names, shapes, dtypes and bytes (a DDP wrapper is looked through).

    Two ranks with equal checksums hold bit-identical parameters.

    Args:
        model: an ``nn.Module`` or a wrapper with ``.module`` (DDP, DataParallel).
    Returns:
        64 hex digits.
    """
    import torch

    module = getattr(model, "module", model)
    digest = hashlib.sha256()
    for name, p in module.named_parameters():
        t = p.detach().to("cpu").contiguous().reshape(-1)
        digest.update(f"{name}:{tuple(p.shape)}:{p.dtype};".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _gather_checksums(model: Any, group: Any) -> tuple[str, list[str]]:
    import torch.distributed as dist

    mine = parameter_checksum(model)
    everyone: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, mine, group=group)
    return mine, everyone


def ranks_agree(model: Any, group: Any = None) -> bool:
    """True when every rank of ``group`` holds bit-identical parameters (collective: call it on every rank)."""
    mine, everyone = _gather_checksums(model, group)
    return all(c == mine for c in everyone)


def check_same_start(model: Any, group: Any = None) -> str:
    """Check that every rank of ``group`` starts from rank 0's parameters (collective: call it on every rank).

    Call it after building the model and before wrapping it in DDP (whose constructor
    broadcasts rank 0's weights and so would hide a rank seeded differently).

    Args:
        model: the freshly built model (a DDP wrapper is looked through).
        group: a process group (None: the world).
    Returns:
        The common checksum (:func:`parameter_checksum`), to record.
    Raises:
        DivergenceError: on every rank alike, naming the global ranks whose parameters differ
            from those of the group's first rank.
    """
    import torch.distributed as dist

    _, everyone = _gather_checksums(model, group)
    differ = [i for i, c in enumerate(everyone) if c != everyone[0]]
    if differ:
        ranks = [dist.get_global_rank(group, i) for i in differ] if group is not None else differ
        first = dist.get_global_rank(group, 0) if group is not None else 0
        raise DivergenceError(
            f"initial parameters differ from rank {first}'s on rank{'s' if len(ranks) > 1 else ''} "
            f"{', '.join(map(str, ranks))} (checksums {everyone[0][:12]} vs "
            f"{', '.join(everyone[i][:12] for i in differ)}): seed every rank the same "
            f"(torch.manual_seed and torch.cuda.manual_seed_all) before building the model", ranks=ranks)
    return everyone[0]


# -- float consistency --------------------------------------------------------------------------

def tf32_state() -> dict[str, Any]:
    """The settings that decide whether float32 matmuls and convolutions may run in TF32.

    Returns:
        ``NVIDIA_TF32_OVERRIDE`` (the variable's value, or ``"unset"``),
        ``cuda.matmul.allow_tf32`` and ``cudnn.allow_tf32`` (bools),
        ``float32_matmul_precision`` (``"highest"`` means no TF32), and, where this torch
        has the newer per-backend API, ``cuda.matmul.fp32_precision`` and
        ``cudnn.fp32_precision``. Readable on any machine: without a GPU the flags say what
        would apply.
    """
    import torch

    state: dict[str, Any] = {
        TF32_ENV: os.environ.get(TF32_ENV, "unset"),
        "cuda.matmul.allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    for key, backend in (("cuda.matmul.fp32_precision", torch.backends.cuda.matmul),
                         ("cudnn.fp32_precision", torch.backends.cudnn)):
        value = getattr(backend, "fp32_precision", None)
        if value is not None:
            state[key] = str(value)
    return state


def disable_tf32() -> dict[str, Any]:
    """Turn TF32 off for this process's matmuls and convolutions (the guide's ``NVIDIA_TF32_OVERRIDE=0``).

    Sets torch's flags, the float32 matmul precision to ``"highest"``, and
    ``NVIDIA_TF32_OVERRIDE=0`` in ``os.environ``. The variable only reaches CUDA libraries
    that initialise afterwards (and child processes): to cover a whole job, export it in
    the job script as well.

    Returns:
        :func:`tf32_state` as it was before.
    """
    import torch

    before = tf32_state()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    os.environ[TF32_ENV] = "0"
    return before


# -- gradient clipping --------------------------------------------------------------------------

@dataclass
class ClipStats:
    """What :func:`clip_gradients` saw over the calls it was given this object."""

    calls: int = 0
    clipped: int = 0
    """calls whose norm exceeded ``max_norm`` (the gradients were scaled down)"""
    nonfinite: int = 0
    """calls whose norm was inf or NaN: an overflow or a NaN upstream; the step should be skipped"""
    norms: list[float] = field(default_factory=list)
    """every total norm, before clipping"""


def clip_gradients(model: Any, max_norm: float, *, norm_type: float = 2.0, stats: ClipStats | None = None) -> float:
    """Clip the gradients' total norm to ``max_norm`` (``torch.nn.utils.clip_grad_norm_``).

    Args:
        model: an ``nn.Module`` (DDP-wrapped or not) or an iterable of parameters.
        max_norm: the norm the gradients are scaled down to when above it (the guide: 1.0).
        norm_type: the p of the p-norm (2: Euclidean).
        stats: where the call is counted, clipped and non-finite norms included.
    Returns:
        The total norm *before* clipping. When it is inf or NaN torch scales the gradients
        by a non-finite factor, so they are unusable: skip the optimizer step (as
        ``torch.amp.GradScaler`` does) and look upstream; ``stats.nonfinite`` counts these.
    """
    import torch

    if not max_norm > 0:
        raise ConfigError(f"{max_norm!r} is out of range; allowed: > 0", field="max_norm")
    params = model.parameters() if hasattr(model, "parameters") else model
    total = float(torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type))
    if stats is not None:
        stats.calls += 1
        stats.norms.append(total)
        if not math.isfinite(total):
            stats.nonfinite += 1
        elif total > max_norm:
            stats.clipped += 1
    return total
