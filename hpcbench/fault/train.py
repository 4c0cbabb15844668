"""A small resumable training driver: checkpoints while it trains, resumes from the newest valid one.

Run alone or under torchrun (gloo, DDP; rank 0 writes the checkpoints, every rank restores)::

    hpcbench train --checkpoint-dir D --steps N [--light-every-steps k]
        [--full-every-steps m] [--zstd-level L] [--log LOSS.jsonl] [--seed S] [--model tiny]
        [--step-sleep S] [--log-params] [--async-light]
    torchrun --nproc-per-node 2 -m hpcbench train -- --checkpoint-dir D --steps N ...

It is the subject of the resume-exactness checks: on CPU, N steps straight and N/2 steps,
SIGKILL, resume from a full checkpoint give the same loss sequence and bit-identical
parameters, because everything the step depends on is either in the full checkpoint (weights,
AdamW moments, LR scheduler, every rank's RNG, the data position) or a pure function of the
seed (data, data order), and every kernel is deterministic (one intra-op thread,
``torch.use_deterministic_algorithms``; gloo's sum of two ranks is commutative, so exact).

On a GPU the same recipe is bit-identical only under stricter conditions: cuBLAS needs
``CUBLAS_WORKSPACE_CONFIG=:4096:8`` and cuDNN ``benchmark=False`` (else the algorithm, and the
summation order, is picked by timing); atomics-based kernels (``index_add``, scatter, some
backward passes) have no deterministic variant or a slow one; TF32 changes results with the
hardware; NCCL's all-reduce order depends on its algorithm (ring/tree), channel count and
topology, so a resume on other nodes, another GPU count or another NCCL version sums in
another order and differs in the last bits. CUDA RNG states (Philox seed + offset per
device) are saved and restored, but only onto the same number of devices per process.

Output: one JSON line per step on rank 0 in ``--log`` (``{"step", "loss"}``, plus
``"params_sha256"`` with ``--log-params``), one ``{"event": "start"|"resume", ...}`` line per
launch, and ``D/final.json`` with the sha256 of the final parameters.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import os
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from hpcbench.core.atomic import atomic_write
from hpcbench.core.config import Config, param
from hpcbench.core.errors import CheckpointError, HpcbenchError
from hpcbench.core.registry import Registry
from hpcbench.fault.checkpoint import CheckpointManager, CheckpointPolicy
from hpcbench.fault.state import capture_full, capture_light, params_sha256, reseed_for_step, restore

__all__ = ["TrainConfig", "ResumableBatches", "SyntheticTask", "MODELS", "train", "main"]

log = logging.getLogger(__name__)

#: Models the driver can train, by name: ``build(inputs, classes, dropout) -> nn.Module``.
MODELS: Registry[Callable[[int, int, float], torch.nn.Module]] = Registry("model")


def _tiny(inputs: int, classes: int, dropout: float) -> torch.nn.Module:
    # Dropout on purpose: it is the RNG consumer that tells a full resume (RNG restored,
    # exact) from a light one (RNG reseeded, same data and weights, other masks).
    return torch.nn.Sequential(torch.nn.Linear(inputs, 64), torch.nn.GELU(), torch.nn.Dropout(dropout),
                               torch.nn.Linear(64, classes))


MODELS.register("tiny", _tiny)


@dataclass
class TrainConfig(Config):
    """The driver's knobs (the checkpoint ones go to :class:`CheckpointPolicy`)."""

    steps: int = param(12, "optimizer steps to reach (a resumed run continues up to this)", min=0)
    seed: int = param(0, "seed of the model init, the data and the data order", min=0)
    model: str = param("tiny", "model name in MODELS", allowed="a registered model")
    batch_size: int = param(8, "samples per rank per step", min=1)
    dataset_size: int = param(96, "synthetic samples; with 2 ranks x 8, 6 steps per epoch, so 12 steps "
                              "cross an epoch boundary", min=1)
    inputs: int = param(16, "input features", min=1)
    classes: int = param(4, "classes of the synthetic labels", min=2)
    dropout: float = param(0.1, "dropout probability of the tiny model", min=0.0, max=0.9)
    lr: float = param(1e-2, "AdamW peak learning rate", min=0.0)
    step_sleep: float = param(0.0, "seconds to sleep after each step, so that tests can kill a run mid-way",
                              min=0.0)
    log_params: bool = param(False, "add the parameter sha256 to every step's log line")

    config_name = "TrainConfig"

    def validate(self) -> None:
        if self.model not in MODELS:
            raise self._error("model", f"unknown model {self.model!r}; registered: {MODELS.names()}")


class SyntheticTask:
    """Fixed random inputs labelled by a fixed random linear teacher: learnable, a pure function of the seed."""

    def __init__(self, size: int, inputs: int, classes: int, seed: int):
        g = torch.Generator().manual_seed(seed + 1_000_003)
        self.x = torch.randn(size, inputs, generator=g)
        teacher = torch.randn(inputs, classes, generator=g)
        self.y = (self.x @ teacher).argmax(dim=1)

    def __len__(self) -> int:
        return len(self.x)


class ResumableBatches:
    """DistributedSampler's order (a seeded permutation per epoch, padded, strided over ranks), resumable.

    The position (epoch, batches taken in it) is the loader state; with the seed and the
    world size it fixes every later batch, on every rank, so it is saved once (rank 0's).
    """

    def __init__(self, size: int, batch_size: int, *, rank: int, world_size: int, seed: int):
        self.size, self.batch_size, self.rank, self.world_size, self.seed = size, batch_size, rank, world_size, seed
        self.per_rank = math.ceil(size / world_size)
        self.batches_per_epoch = self.per_rank // batch_size  # drop_last, as DDP training usually does
        if self.batches_per_epoch < 1:
            raise HpcbenchError(f"dataset of {size} samples gives no full batch of {batch_size} on each of "
                                f"{world_size} ranks")
        self.epoch, self.batch = 0, 0
        self._order: tuple[int, torch.Tensor] | None = None

    def _rank_order(self) -> torch.Tensor:
        if self._order is None or self._order[0] != self.epoch:
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.size, generator=g)
            total = self.per_rank * self.world_size
            order = torch.cat([order, order[: total - self.size]])  # pad by wrapping, as DistributedSampler
            self._order = (self.epoch, order[self.rank::self.world_size])
        return self._order[1]

    def next(self) -> torch.Tensor:
        """This rank's indices of the next batch."""
        if self.batch >= self.batches_per_epoch:
            self.epoch, self.batch = self.epoch + 1, 0
        mine = self._rank_order()
        idx = mine[self.batch * self.batch_size:(self.batch + 1) * self.batch_size]
        self.batch += 1
        return idx

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batch": self.batch, "seed": self.seed, "world_size": self.world_size,
                "size": self.size, "batch_size": self.batch_size}

    def load_state_dict(self, state: dict[str, int]) -> None:
        for key in ("seed", "world_size", "size", "batch_size"):
            if state.get(key) != getattr(self, key):
                # another order: resuming would silently repeat or skip samples
                raise CheckpointError(f"the checkpoint's data loader had {key}={state.get(key)}, this run has "
                                      f"{getattr(self, key)}; resume with the same settings")
        self.epoch, self.batch = int(state["epoch"]), int(state["batch"])
        self._order = None


def _lr_factor(step: int) -> float:
    # warm-up then decay: the LR changes every step, so a wrong scheduler position shows
    return min(1.0, (step + 1) / 4) * 0.97 ** step


def _append_line(path: Path | None, record: dict[str, Any]) -> None:
    if path is None:
        return
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()


def _broadcast(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if not dist.is_initialized():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def train(cfg: TrainConfig, policy: CheckpointPolicy, checkpoint_dir: Path, *, log_path: Path | None = None
          ) -> dict[str, Any]:
    """Train ``cfg.steps`` steps, resuming from the newest valid checkpoint, checkpointing per ``policy``.

    Needs the process group up when run with several ranks (``main`` does it).

    Returns:
        What ``final.json`` holds (on every rank).
    """
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    lead = rank == 0
    torch.manual_seed(cfg.seed)
    model = MODELS.get(cfg.model)(cfg.inputs, cfg.classes, cfg.dropout)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_factor)
    task = SyntheticTask(cfg.dataset_size, cfg.inputs, cfg.classes, cfg.seed)
    loader = ResumableBatches(len(task), cfg.batch_size, rank=rank, world_size=world, seed=cfg.seed)
    manager = CheckpointManager(checkpoint_dir, policy)

    start, resumed = 0, None
    chosen = manager.latest_valid() if lead else None
    found = _broadcast(None if chosen is None else str(chosen.path))
    if found is not None:
        info = restore(manager.load(found), model, optimizer, scheduler=scheduler, rank=rank)
        loader.load_state_dict(info["loader_state"])
        start = info["step"]
        if info["tier"] == "light":
            reseed_for_step(cfg.seed, start, rank)
        resumed = {"path": found, "tier": info["tier"], "step": start}
        if lead:
            _append_line(log_path, {"event": "resume", **resumed, "params_sha256": params_sha256(model),
                                    "skipped": [s.name for s in manager.skipped]})
    elif lead:
        _append_line(log_path, {"event": "start", "world_size": world})

    ddp = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    writer = None
    if policy.async_light and lead:
        from hpcbench.fault.async_save import AsyncCheckpointer

        writer = AsyncCheckpointer(manager)
    for step in range(start + 1, cfg.steps + 1):
        idx = loader.next()
        loss = torch.nn.functional.cross_entropy(ddp(task.x[idx]), task.y[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        mean_loss = loss.detach().clone()
        if world > 1:
            dist.all_reduce(mean_loss)
            mean_loss /= world
        # rank 0's clock decides, so that every rank joins the same (collective) full capture
        tier = _broadcast(manager.due(step) if lead else None)
        if tier == "full":
            state = capture_full(ddp, optimizer, scheduler=scheduler, loader_state=loader.state_dict(),
                                 epoch=loader.epoch, step=step, extra={"seed": cfg.seed})
            if lead:
                if writer is not None:
                    writer.wait()
                manager.save("full", step, state)
        elif tier == "light" and lead:
            state = capture_light(ddp, optimizer, loader_state=loader.state_dict(), epoch=loader.epoch,
                                  step=step, scheduler=scheduler)
            if writer is not None:
                writer.save("light", step, state)
            else:
                manager.save("light", step, state)
        if lead:
            # logged after the checkpoint: a logged step with a due checkpoint has it on disk
            record = {"step": step, "loss": float(mean_loss)}
            if cfg.log_params:
                record["params_sha256"] = params_sha256(model)
            _append_line(log_path, record)
        if cfg.step_sleep:
            time.sleep(cfg.step_sleep)
    if writer is not None:
        writer.wait()
    final = {"steps": cfg.steps, "params_sha256": params_sha256(model), "world_size": world,
             "resumed_from": resumed, "seed": cfg.seed}
    if lead:
        with atomic_write(checkpoint_dir / "final.json", "w") as fh:
            json.dump(final, fh, indent=1)
    return final


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hpcbench train", description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint-dir", type=Path, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--light-every-steps", type=int, default=0)
    p.add_argument("--full-every-steps", type=int, default=0)
    p.add_argument("--light-every-s", type=float, default=None, help="default: CheckpointPolicy's (600)")
    p.add_argument("--full-every-s", type=float, default=None, help="default: CheckpointPolicy's (3600)")
    p.add_argument("--keep-full", type=int, default=None)
    p.add_argument("--keep-light", type=int, default=None)
    p.add_argument("--zstd-level", type=int, default=None, help="default: CheckpointPolicy's (3); 0 = none")
    p.add_argument("--async-light", action="store_true", help="write light checkpoints in the background")
    p.add_argument("--log", type=Path, default=None, help="JSON lines: one per step (rank 0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="tiny")
    p.add_argument("--step-sleep", type=float, default=0.0)
    p.add_argument("--log-params", action="store_true")
    p.add_argument("--dropout", type=float, default=None)
    return p


def main(argv: list[str] | None = None) -> int:
    """Parse, set up the process group and determinism, train. Returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--"]:
        # "torchrun -m hpcbench train -- --log X": the "--" keeps torchrun from reading
        # --log as an abbreviation of its own --log-dir
        argv = argv[1:]
    args = _parser().parse_args(argv)
    given = lambda **kw: {k: v for k, v in kw.items() if v is not None}  # noqa: E731
    try:
        cfg = TrainConfig.from_dict(given(steps=args.steps, seed=args.seed, model=args.model,
                                          step_sleep=args.step_sleep, log_params=args.log_params,
                                          dropout=args.dropout))
        policy = CheckpointPolicy.from_dict(given(
            light_every_steps=args.light_every_steps, full_every_steps=args.full_every_steps,
            light_every_s=args.light_every_s, full_every_s=args.full_every_s, keep_full=args.keep_full,
            keep_light=args.keep_light, zstd_level=args.zstd_level, async_light=args.async_light or None))
    except HpcbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # One intra-op thread: results then do not depend on the core count of the machine
    # that resumes, and two ranks do not fight over two cores. Every op here is
    # deterministic on CPU then; the flag below is what makes a GPU run refuse the
    # non-deterministic kernels instead of silently using them.
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        # a short timeout: when a peer is killed the survivors fail soon instead of hanging
        dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    try:
        train(cfg, policy, args.checkpoint_dir, log_path=args.log)
    except HpcbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    # Exempt everything alive now from the interpreter's last garbage collection: over
    # torch's object graph it takes about a second per rank, and nothing here needs it.
    gc.freeze()
    return 0
