"""What a checkpoint holds: the full and the light training state, captured and restored.

The field guide's first level of fault tolerance (guide sec. 2.5) is a checkpoint holding
epoch, model and optimizer state; its best practice (C11) writes the *full* state every hour
and a *light* one every ten minutes. This module decides what each tier holds, as plain
nested dicts of tensors, ints, floats, strings and lists, so that every checkpoint loads with
``torch.load(weights_only=True)`` (no pickled objects: a checkpoint is data, never code).

**Full** (everything needed to continue as if nothing happened, bit-identical on CPU):
model, optimizer, LR scheduler ``state_dict``, grad scaler, the data-loader position, epoch
and step, the RNG states of *every rank* (torch CPU, CUDA when initialised, numpy, python
``random``), the world size, and ``extra`` (run config, best metric, early-stopping
counters: whatever the caller's loop keeps). Gathering every rank's RNG makes
:func:`capture_full` a collective when a process group is up: every rank calls it, all of
them get the same dict, rank 0 writes it. One gather of a few KiB per rank was chosen over
one file per rank because a checkpoint then stays one file with one sha256 in one manifest,
and a resume needs no per-rank file bookkeeping.

**Light** (resume within one light interval, no collective): model, optimizer (moments, step
counts and the current learning rate are all in its ``state_dict``), the scheduler's position
(``last_epoch``, one int), epoch, step and the data-loader position. It leaves out the RNG
states, the scheduler's other fields, the grad scaler and ``extra``. Because it needs no
collective it can be written by rank 0 alone, at any step, asynchronously.

Why a light checkpoint still resumes within one light interval: the work that defines
progress (weights, optimizer moments, learning rate, which samples come next) is all in it,
so a restart continues the *same* training from the last light checkpoint and loses at most
the steps since it. What is not exact: every random draw after the resume (dropout masks,
random augmentations, noise) comes from RNG streams reseeded by :func:`reseed_for_step`
rather than the streams the interrupted run had, so the loss sequence after a light resume
differs from an uninterrupted run's in the way two dropout seeds differ; the grad scaler
(GPU fp16) restarts at its initial scale and skips a few overflowing steps; stateful
schedulers (``ReduceLROnPlateau``, ``SequentialLR``) lose their counters. A model without
randomness in its steps resumes bit-identically from a light checkpoint too.
"""

from __future__ import annotations

import hashlib
import logging
import random
from typing import Any

import numpy as np
import torch

from hpcbench.core.errors import CheckpointError

__all__ = ["FORMAT", "capture_full", "capture_light", "restore", "reseed_for_step", "unwrap_model",
           "rng_state", "set_rng_state", "params_sha256"]

log = logging.getLogger(__name__)

#: Written into every captured state; :func:`restore` refuses others (a foreign ``state.pt``).
FORMAT = "hpcbench.fault.state/1"
TIERS = ("full", "light")


def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The module under a DDP or DataParallel wrapper; any other model as it is.

    Saving the inner module's ``state_dict`` keeps the keys free of the ``module.`` prefix,
    so a checkpoint written under DDP loads into a plain model (and the reverse). Only
    these wrapper types are unwrapped: a model of its own with a child called ``module``
    must keep its whole state.
    """
    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    return model.module if isinstance(model, wrappers) else model


def _world() -> tuple[int, int]:
    """(rank, world size) of the default process group, (0, 1) without one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def rng_state() -> dict[str, Any]:
    """This process's RNG states, as tensors and plain lists (``weights_only``-loadable).

    CUDA states are taken only when CUDA is already initialised: asking earlier would
    create a CUDA context on every device for a CPU run, and an uninitialised CUDA
    generator still holds just the seed that a restarted process sets again.
    """
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": [version, list(internal), gauss],
        "numpy": {"name": str(name), "keys": [int(k) for k in keys], "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Put back what :func:`rng_state` captured (the inverse of its plain-list encoding)."""
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((int(version), tuple(int(x) for x in internal), gauss))
    npst = state["numpy"]
    np.random.set_state((npst["name"], np.asarray(npst["keys"], dtype=np.uint32), npst["pos"],
                         npst["has_gauss"], npst["cached_gaussian"]))
    if "cuda" in state and torch.cuda.is_available():
        cuda = state["cuda"]
        if len(cuda) != torch.cuda.device_count():
            # Another GPU count per process: the streams cannot be matched device by device.
            log.warning("checkpoint holds CUDA RNG states of %d devices, this process sees %d: "
                        "CUDA RNG not restored", len(cuda), torch.cuda.device_count())
        else:
            torch.cuda.set_rng_state_all(cuda)


def _common(model: torch.nn.Module, optimizer: torch.optim.Optimizer, tier: str, *, loader_state: dict | None,
            epoch: int, step: int) -> dict[str, Any]:
    if not isinstance(epoch, int) or not isinstance(step, int) or step < 0 or epoch < 0:
        raise CheckpointError(f"epoch and step must be ints >= 0, got epoch={epoch!r} step={step!r}")
    return {
        "format": FORMAT,
        "tier": tier,
        "epoch": epoch,
        "step": step,
        "model": unwrap_model(model).state_dict(),
        "optimizer": optimizer.state_dict(),
        "loader": dict(loader_state) if loader_state is not None else None,
        "torch_version": str(torch.__version__),  # TorchVersion is a class weights_only refuses
    }


def capture_full(model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, scheduler: Any = None,
                 scaler: Any = None, loader_state: dict | None = None, epoch: int, step: int,
                 extra: dict | None = None, group: Any = None) -> dict[str, Any]:
    """Everything needed to resume exactly; a collective when a process group is up.

    Every rank must call it (it gathers every rank's RNG state with ``all_gather_object``);
    every rank gets the same dict and rank 0 writes it. The tensors are references to the
    live ones, not copies: serialize before the next optimizer step, or snapshot with
    :class:`hpcbench.fault.async_save.AsyncCheckpointer`.

    Args:
        model: the model, DDP-wrapped or not (its inner module's ``state_dict`` is saved).
        optimizer: its optimizer.
        scheduler: an LR scheduler, saved by ``state_dict()``.
        scaler: a ``torch.amp.GradScaler``, saved by ``state_dict()``.
        loader_state: the data-loader position; must be the same on every rank (as a
            DistributedSampler's epoch + batch index is), since rank 0's is the one saved.
        epoch, step: training progress; ``step`` counts completed optimizer steps.
        extra: anything else the loop needs back (plain types and tensors only).
        group: the process group to gather RNG states over (default: the world).

    Returns:
        A dict that ``torch.save`` writes and ``torch.load(weights_only=True)`` reads.
    """
    state = _common(model, optimizer, "full", loader_state=loader_state, epoch=epoch, step=step)
    rank, world = _world()
    mine = rng_state()
    if world > 1:
        import torch.distributed as dist

        gathered: list[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(gathered, mine, group=group)
        # all_gather_object may hand tensors back on the collective's device (NCCL);
        # a checkpoint keeps them on the CPU so it loads anywhere.
        rngs = [_to_cpu(g) for g in gathered]
    else:
        rngs = [mine]
    state.update({
        "rng": rngs,
        "world_size": world,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "extra": dict(extra) if extra is not None else None,
    })
    return state


def capture_light(model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, loader_state: dict | None,
                  epoch: int, step: int, scheduler: Any = None) -> dict[str, Any]:
    """Model, optimizer, progress and data position: resumes within one light interval.

    No collective: rank 0 may call it alone. ``scheduler`` (optional) adds only its
    position (``last_epoch``); the learning rate itself travels in the optimizer's
    ``param_groups``. See the module docstring for what a light resume does not restore.

    Returns:
        A dict that ``torch.save`` writes and ``torch.load(weights_only=True)`` reads.
    """
    state = _common(model, optimizer, "light", loader_state=loader_state, epoch=epoch, step=step)
    state["scheduler_last_epoch"] = int(scheduler.last_epoch) if scheduler is not None else None
    return state


def restore(state: dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer, *,
            scheduler: Any = None, scaler: Any = None, rank: int | None = None) -> dict[str, Any]:
    """Load a captured state into the model and optimizer (and scheduler, scaler, RNG).

    A full state restores this rank's RNG (``rank`` defaults to the process-group rank);
    when the checkpoint was written by another world size the RNG is left alone and
    ``rng_restored`` is False (an elastic restart continues, not bit-identically). A light
    state sets the scheduler's ``last_epoch`` and its last LR from the restored optimizer
    (exact for schedulers whose state is that pair: LambdaLR, StepLR, CosineAnnealingLR,
    OneCycleLR...). Call :func:`reseed_for_step` after a light restore.

    Returns:
        ``{"tier", "epoch", "step", "loader_state", "extra", "rng_restored"}``.

    Raises:
        CheckpointError: the dict is not a state this module captured.
    """
    if not isinstance(state, dict) or state.get("format") != FORMAT or state.get("tier") not in TIERS:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"not a hpcbench checkpoint state (format {found!r}, expected {FORMAT!r})")
    tier = state["tier"]
    unwrap_model(model).load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    rng_restored = False
    if tier == "full":
        if scheduler is not None:
            if state.get("scheduler") is None:
                raise CheckpointError("a scheduler was passed but the checkpoint holds no scheduler state")
            scheduler.load_state_dict(state["scheduler"])
        if scaler is not None:
            if state.get("scaler") is None:
                raise CheckpointError("a grad scaler was passed but the checkpoint holds no scaler state")
            scaler.load_state_dict(state["scaler"])
        my_rank, world = _world()
        rank = my_rank if rank is None else rank
        rngs = state["rng"]
        if len(rngs) == world and 0 <= rank < len(rngs):
            set_rng_state(rngs[rank])
            rng_restored = True
        else:
            log.warning("checkpoint holds RNG states of %d ranks, this run has %d: RNG not restored, "
                        "the resume continues but is not bit-identical", len(rngs), world)
    elif scheduler is not None:
        last = state.get("scheduler_last_epoch")
        scheduler.last_epoch = state["step"] if last is None else int(last)
        # get_last_lr() would otherwise report the fresh scheduler's first LR
        scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
    return {"tier": tier, "epoch": state["epoch"], "step": state["step"], "loader_state": state.get("loader"),
            "extra": state.get("extra"), "rng_restored": rng_restored}


def reseed_for_step(seed: int, step: int, rank: int = 0) -> int:
    """Seed torch, numpy and ``random`` from (seed, step, rank) after a light resume.

    Without it a resumed process would replay the RNG streams its start-up left it with
    (those of step 0); seeding from the step gives fresh, reproducible streams that differ
    per rank as the original ones did.

    Returns:
        The 63-bit seed used.
    """
    digest = hashlib.sha256(f"hpcbench-resume:{seed}:{step}:{rank}".encode()).digest()
    derived = int.from_bytes(digest[:8], "little") >> 1
    torch.manual_seed(derived)
    np.random.seed(derived % 2**32)
    random.seed(derived)
    return derived


def params_sha256(model: torch.nn.Module) -> str:
    """sha256 of the model's parameter and buffer bytes in ``state_dict`` order.

    Bit-identical weights give the same digest; any difference in any bit changes it.
    """
    h = hashlib.sha256()
    for name, tensor in unwrap_model(model).state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj
