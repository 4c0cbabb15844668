"""Sharded checkpoints with ``torch.distributed.checkpoint`` (DCP), to compare with rank-0 ``torch.save`` + zstd.

DCP has every rank write its own part in parallel (for DDP's replicated tensors it spreads the
copies over the ranks and writes each once) plus one ``.metadata`` file from the coordinator,
and it loads into whatever sharding the loading job has (resharding). Rank-0 ``torch.save``
(:mod:`hpcbench.fault.checkpoint`) writes one file from one rank: simpler, compressible in one
stream, one sha256, but its write bandwidth is one rank's.

What DCP does not give, and why :mod:`hpcbench.fault.checkpoint` stays the default here:

* safety: DCP reads ``.metadata`` with ``pickle.load`` and non-tensor values (an int step, an
  optimizer's ``param_groups``) with ``torch.load(weights_only=False)``: loading a folder runs
  whatever code it holds. Load only DCP folders you wrote yourself;
* no compression and no per-file checksum (its files are raw tensor bytes);
* atomicity: DCP writes into its folder in place. :func:`save_sharded` writes into a hidden
  sibling and renames it on rank 0 once every rank has finished, so a folder under the final
  name is complete.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from hpcbench.core.atomic import fsync_dir
from hpcbench.core.errors import CheckpointError

__all__ = ["ShardedSave", "save_sharded", "load_sharded", "model_optimizer_state", "apply_model_optimizer_state"]


@dataclass(frozen=True)
class ShardedSave:
    """What one :func:`save_sharded` wrote (sizes summed over every rank's files)."""

    folder: Path
    bytes_written: int
    seconds: float
    files: int


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


@contextlib.contextmanager
def _quiet_single_process():
    """Silence DCP's "assuming the intent is to save in a single process": here it is the intent."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        yield


def save_sharded(state_dict: dict[str, Any], folder: str | os.PathLike) -> ShardedSave:
    """Save with ``torch.distributed.checkpoint``; a collective when a process group is up.

    Every rank calls it with its own ``state_dict`` and the same ``folder`` (on a file system
    every rank sees). Works in a single process too.

    Returns:
        The folder, bytes and files written by all ranks together, and the seconds it took.
    """
    import torch.distributed.checkpoint as dcp

    folder = Path(folder)
    # every rank must name the same temporary folder, so no random suffix
    tmp = folder.with_name(f".{folder.name}.dcp.tmp")
    lead = not _distributed() or dist.get_rank() == 0
    if lead:
        shutil.rmtree(tmp, ignore_errors=True)  # a leftover of a killed save
        tmp.mkdir(parents=True)
    if _distributed():
        dist.barrier()
    t0 = time.perf_counter()
    try:
        with _quiet_single_process():
            dcp.save(state_dict, checkpoint_id=tmp, no_dist=not _distributed())
    except OSError as exc:
        raise CheckpointError(f"torch.distributed.checkpoint save failed: {exc}", path=folder) from exc
    # dcp.save returns on every rank only after the coordinator wrote .metadata
    if lead:
        fsync_dir(tmp)
        if folder.exists():
            shutil.rmtree(folder)
        os.rename(tmp, folder)
        fsync_dir(folder.parent)
    if _distributed():
        dist.barrier()
    seconds = time.perf_counter() - t0
    files = [p for p in folder.iterdir() if p.is_file()]
    return ShardedSave(folder=folder, bytes_written=sum(p.stat().st_size for p in files), seconds=seconds,
                       files=len(files))


def load_sharded(state_dict: dict[str, Any], folder: str | os.PathLike) -> dict[str, Any]:
    """Load a :func:`save_sharded` folder into ``state_dict`` in place (its tensors give the sharding).

    Only for folders you trust: DCP unpickles metadata and non-tensor values without
    ``weights_only``.

    Returns:
        ``state_dict``, filled.
    """
    import torch.distributed.checkpoint as dcp

    folder = Path(folder)
    if not (folder / ".metadata").is_file():
        raise CheckpointError("not a complete torch.distributed.checkpoint folder (no .metadata)", path=folder)
    with _quiet_single_process():
        dcp.load(state_dict, checkpoint_id=folder, no_dist=not _distributed())
    return state_dict


def model_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``{"model", "optimizer"}`` keyed by parameter names (DCP's ``get_state_dict``), DDP or not.

    The optimizer's own ``state_dict`` keys parameters by position, which DCP cannot match
    across a different sharding; ``get_state_dict`` keys them by fully qualified name.
    """
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(model, optimizer)
    return {"model": msd, "optimizer": osd}


def apply_model_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                                state: dict[str, Any]) -> None:
    """Load what :func:`model_optimizer_state` produced (after :func:`load_sharded`) into model and optimizer."""
    from torch.distributed.checkpoint.state_dict import set_state_dict

    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
