"""Compute/communication overlap through ``no_sync()`` accumulation (T-case, claim C9).

The guide's third tuning step for its weather model: accumulate gradients locally over
k micro-steps (k = 4) under DDP's ``no_sync()``, then synchronise once. Two effects are
measured separately:

* the number of synchronisations per optimizer step drops from k to 1
  (:func:`syncs_per_step`, checked at run time with :func:`counting_allreduce_hook`);
* of the communication that remains, the part DDP hides behind backward (it all-reduces
  a bucket as soon as its gradients are ready) is the **overlapped share**:

  - *exposed communication* = step time with the mode's communication minus step time of
    the same step with :func:`~hpcbench.parallel.hooks.noop_hook` (no communication at all);
  - *total communication* = the same all-reduces done alone, blocking, outside backward:
    DDP's bucket layout (learned by :class:`~hpcbench.parallel.hooks.BucketLog`) all-reduced
    bucket after bucket, times the synchronisations per step;
  - overlapped share = 1 - exposed / total.

Pure functions (:func:`exposed_communication`, :func:`overlapped_share`,
:func:`summarize_overlap`) do the arithmetic on numbers; the torch adapter
(:func:`accumulation_step`, :func:`time_bucket_allreduces`, :func:`interleaved_step_times`,
:func:`measure_overlap`) produces the numbers. :func:`parameter_checksum` and
:func:`ranks_agree` (from :mod:`hpcbench.diag.divergence`) check the invariant that makes accumulation safe: after every
synchronisation all ranks hold bit-identical parameters.

Reference: PyTorch DDP ``no_sync`` (``torch/nn/parallel/distributed.py``): gradients
accumulate in ``param.grad`` inside the context and are reduced by the first backward
outside it.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from hpcbench.core.errors import ConfigError
# The invariants across ranks live with the other divergence checks; re-exported here.
from hpcbench.diag.divergence import parameter_checksum, ranks_agree

__all__ = ["GUIDE_MICRO_STEPS", "OverlapConfig", "OverlapMeasurement", "OverlapSummary", "SyncCounter", "accumulation_step",
           "counting_allreduce_hook", "exposed_communication", "interleaved_step_times", "measure_overlap",
           "overlapped_share", "parameter_checksum", "ranks_agree", "summarize_overlap", "syncs_per_step",
           "time_bucket_allreduces"]


# -- configuration ----------------------------------------------------------------------------

#: The technique's default, as the guide recommends it (T-case, claim C9: "accumulating gradients locally under
#: no_sync() for 4 micro-steps, then synchronising once"): micro-steps per synchronisation.
GUIDE_MICRO_STEPS = 4

@dataclass(frozen=True)
class OverlapConfig:
    """How :func:`measure_overlap` runs; every field is validated on creation."""

    micro_steps: int = GUIDE_MICRO_STEPS
    """micro-batches accumulated per optimizer step (the guide's 4, :data:`GUIDE_MICRO_STEPS`)"""
    no_sync: bool = True
    """accumulate the first micro_steps - 1 under ``no_sync()`` (False: synchronise every micro-step,
    the baseline the technique improves on)"""
    steps: int = 10
    """timed optimizer steps (each with and without communication)"""
    warmup_steps: int = 2
    """untimed steps first (DDP rebuilds its buckets after the first iteration)"""
    layout_repeats: int = 10
    """timed repetitions of the all-reduces done alone"""

    def __post_init__(self) -> None:
        for name, low in (("micro_steps", 1), ("steps", 1), ("warmup_steps", 0), ("layout_repeats", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"{value!r} is out of range; allowed: an integer >= {low}", field=name,
                                  config="OverlapConfig")
        if not isinstance(self.no_sync, bool):
            raise ConfigError(f"{self.no_sync!r} is not a bool", field="no_sync", config="OverlapConfig")


# -- pure arithmetic ----------------------------------------------------------------------------

def syncs_per_step(micro_steps: int, no_sync: bool) -> int:
    """Gradient synchronisations per optimizer step: 1 with ``no_sync()`` accumulation, else one per micro-step."""
    if micro_steps < 1:
        raise ConfigError(f"{micro_steps} is out of range; allowed: >= 1", field="micro_steps")
    return 1 if no_sync else micro_steps


def exposed_communication(step_s: float, noop_step_s: float) -> float:
    """Communication time the step does not hide: t(step with communication) - t(same step, no-op hook).

    Not clipped at 0: a negative value is measurement noise and stays visible as such.
    """
    return step_s - noop_step_s


def overlapped_share(exposed_s: float, total_s: float) -> float:
    """Share of the communication hidden behind computation: ``1 - exposed / total``.

    1 means fully hidden, 0 means none hidden (the step is longer by all of it); noise can
    push the value outside [0, 1], and it is returned as measured.

    Raises:
        ConfigError: ``total_s`` is not a positive time.
    """
    if not total_s > 0 or math.isinf(total_s):
        raise ConfigError(f"{total_s!r} is not a positive time; allowed: > 0", field="total_s")
    return 1.0 - exposed_s / total_s


@dataclass(frozen=True)
class OverlapSummary:
    """Medians of one overlap measurement and the figures derived from them (seconds)."""

    step_s: float
    """median optimizer step (k micro-steps) with the mode's communication"""
    noop_step_s: float
    """median of the same step with the no-op hook"""
    sync_alone_s: float
    """median time of one synchronisation's all-reduces done alone (the whole bucket layout)"""
    syncs_per_step: int
    exposed_s: float
    total_s: float
    """sync_alone_s x syncs_per_step"""
    overlapped_share: float


def summarize_overlap(step_times: Sequence[float], noop_step_times: Sequence[float],
                      sync_alone_times: Sequence[float], syncs: int) -> OverlapSummary:
    """Medians of the three samples, exposed and total communication, and the overlapped share.

    Args:
        step_times: per-step seconds with the mode's communication.
        noop_step_times: per-step seconds of the same steps with the no-op hook.
        sync_alone_times: seconds of one synchronisation's all-reduces done alone, per repeat.
        syncs: synchronisations per step (:func:`syncs_per_step`).
    """
    for name, xs in (("step_times", step_times), ("noop_step_times", noop_step_times),
                     ("sync_alone_times", sync_alone_times)):
        if not xs:
            raise ConfigError("is empty; allowed: one or more timings", field=name)
    step, noop, alone = (statistics.median(xs) for xs in (step_times, noop_step_times, sync_alone_times))
    exposed, total = exposed_communication(step, noop), alone * syncs
    return OverlapSummary(step, noop, alone, syncs, exposed, total, overlapped_share(exposed, total))


# -- synchronisation counting -----------------------------------------------------------------

@dataclass
class SyncCounter:
    """State of :func:`counting_allreduce_hook`: what DDP handed to the hook since the last reset."""

    world_size: int
    buckets_reduced: int = 0
    """hook calls: one per bucket per synchronisation"""
    bytes_reduced: int = 0
    """bytes of those buckets"""
    group: Any = field(default=None, repr=False)
    """process group of the all-reduce (None: the world)"""

    def reset(self) -> None:
        """Start counting from zero (e.g. after warm-up steps)."""
        self.buckets_reduced = self.bytes_reduced = 0


def counting_allreduce_hook(state: SyncCounter, bucket):
    """DDP comm hook: DDP's default averaging all-reduce, counting buckets and bytes in ``state``."""
    import torch.distributed as dist

    tensor = bucket.buffer()
    state.buckets_reduced += 1
    state.bytes_reduced += tensor.numel() * tensor.element_size()
    tensor.div_(state.world_size)
    work = dist.all_reduce(tensor, group=state.group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


# -- torch adapter ------------------------------------------------------------------------------

def accumulation_step(model: Any, micro_batches: Sequence[tuple[Any, Any]], loss_fn: Callable[[Any, Any], Any],
                      optimizer: Any = None, *, no_sync: bool = True) -> Any:
    """One optimizer step over ``k = len(micro_batches)`` micro-batches, synchronising once.

    The first k - 1 backward passes run under ``model.no_sync()`` (gradients accumulate in
    ``param.grad`` locally); the last one runs synchronised, so DDP all-reduces the sum
    while backward still runs. Each micro-loss is scaled by 1/k, so with a mean-reduced
    loss the gradients equal those of one step on the k micro-batches joined.

    Args:
        model: a DDP module (a plain module works too: it has nothing to synchronise).
        micro_batches: ``(inputs, targets)`` pairs.
        loss_fn: ``(model output, targets) -> scalar loss`` (mean over the batch).
        optimizer: stepped and zeroed after the last micro-step; None leaves the gradients
            in ``param.grad`` (to inspect them).
        no_sync: False synchronises after every micro-step (the baseline without the technique).

    Returns:
        The mean micro-loss, detached (a tensor: reading it would wait for the device).
    """
    k = len(micro_batches)
    if k < 1:
        raise ConfigError("is empty; allowed: one or more (inputs, targets) pairs", field="micro_batches")
    skip_sync = getattr(model, "no_sync", None) if no_sync else None
    total = None
    for i, (x, y) in enumerate(micro_batches):
        last = i == k - 1
        with (skip_sync() if skip_sync is not None and not last else contextlib.nullcontext()):
            loss = loss_fn(model(x), y) / k
            loss.backward()
        total = loss.detach() if total is None else total + loss.detach()
    if optimizer is not None:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return total


def _device_sync(device: Any) -> Callable[[], None]:
    """What to call before reading a clock: wait for the GPU's queued work; nothing on CPU."""
    import torch

    if getattr(torch.device(device), "type", "cpu") == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _slowest_rank(times: list[float], device: Any) -> list[float]:
    """Each entry's maximum over the ranks: a collective step lasts as long as its slowest rank."""
    import torch
    import torch.distributed as dist

    flat = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(flat, op=dist.ReduceOp.MAX)
    return flat.cpu().tolist()


def time_bucket_allreduces(layout_bytes: Sequence[int], *, device: Any, dtype: Any = None, repeats: int = 10,
                           warmup: int = 1, group: Any = None,
                           sync: Callable[[], None] | None = None) -> list[float]:
    """Seconds to all-reduce DDP's bucket layout alone, bucket after bucket, blocking; one value per repeat.

    Collective: call on every rank with the same layout. Each value is the slowest rank's.

    Args:
        layout_bytes: bucket sizes in bytes in reduction order (``BucketLog.layout()``).
        device: where the buffers live (the gradients' device).
        dtype: the gradients' dtype (default float32).
        repeats, warmup: timed and untimed repetitions.
        group: process group (default: the world).
        sync: waits for the device before reading a clock (default: ``torch.cuda.synchronize`` on a
            GPU, nothing on CPU).
    """
    import torch
    import torch.distributed as dist

    if not layout_bytes:
        raise ConfigError("is empty; the no-op hook saw no bucket (run a few steps first)", field="layout_bytes")
    dtype = dtype or torch.float32
    size = torch.empty((), dtype=dtype).element_size()
    buffers = [torch.zeros(-(-n // size), dtype=dtype, device=device) for n in layout_bytes]
    sync = sync or _device_sync(device)
    times = []
    for i in range(warmup + repeats):
        dist.barrier(group=group)
        sync()
        t0 = time.perf_counter()
        for buf in buffers:
            dist.all_reduce(buf, group=group)
        sync()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return _slowest_rank(times, device)


def interleaved_step_times(runs: dict[str, Callable[[], Any]], *, device: Any, steps: int, warmup: int = 0,
                           sync: Callable[[], None] | None = None) -> dict[str, list[float]]:
    """Time each run's step function in turn, step after step, so all runs see the same machine state.

    Collective (a barrier before each step). Returns per-run seconds, each the slowest rank's.
    ``sync`` waits for the device before reading a clock (default: ``torch.cuda.synchronize`` on a
    GPU, nothing on CPU).
    """
    import torch.distributed as dist

    sync = sync or _device_sync(device)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for i in range(warmup + steps):
        for name, step in runs.items():
            dist.barrier()
            sync()
            t0 = time.perf_counter()
            step()
            sync()
            if i >= warmup:
                times[name].append(time.perf_counter() - t0)
    flat = _slowest_rank([t for name in runs for t in times[name]], device)
    return {name: flat[j * steps:(j + 1) * steps] for j, name in enumerate(runs)}


@dataclass(frozen=True)
class OverlapMeasurement:
    """Raw per-step samples of :func:`measure_overlap` and their summary."""

    step_times: list[float]
    noop_step_times: list[float]
    sync_alone_times: list[float]
    layout_bytes: list[int]
    summary: OverlapSummary


def measure_overlap(model: Any, noop_model: Any, bucket_log: Any, micro_batches: Sequence[tuple[Any, Any]],
                    loss_fn: Callable[[Any, Any], Any], cfg: OverlapConfig, *, lr: float = 1e-4,
                    sync: Callable[[], None] | None = None) -> OverlapMeasurement:
    """Exposed and total communication of ``cfg.micro_steps``-micro-step accumulation, and the overlapped share.

    Args:
        model: the DDP module with the communication under test.
        noop_model: a copy wrapped the same way with :func:`~hpcbench.parallel.hooks.noop_hook`
            and ``bucket_log`` as its state (``parallelize(..., comm="noop", bucket_log=log)``).
        bucket_log: the :class:`~hpcbench.parallel.hooks.BucketLog` the no-op hook fills.
        micro_batches: ``cfg.micro_steps`` ``(inputs, targets)`` pairs.
        loss_fn: ``(output, targets) -> mean loss``.
        cfg: steps, warm-up and whether to use ``no_sync()``.
        lr: SGD learning rate of both copies (the values do not matter for timing).
        sync: waits for the device before reading a clock (default: chosen from the model's device).
    """
    import torch

    if len(micro_batches) != cfg.micro_steps:
        raise ConfigError(f"{len(micro_batches)} micro-batches given, cfg.micro_steps is {cfg.micro_steps}",
                          field="micro_batches")
    param = next(model.parameters())
    opts = {"mode": torch.optim.SGD(model.parameters(), lr=lr), "noop": torch.optim.SGD(noop_model.parameters(), lr=lr)}
    runs = {
        "mode": lambda: accumulation_step(model, micro_batches, loss_fn, opts["mode"], no_sync=cfg.no_sync),
        "noop": lambda: accumulation_step(noop_model, micro_batches, loss_fn, opts["noop"], no_sync=cfg.no_sync),
    }
    times = interleaved_step_times(runs, device=param.device, steps=cfg.steps, warmup=cfg.warmup_steps, sync=sync)
    layout = bucket_log.layout()
    alone = time_bucket_allreduces(layout, device=param.device, dtype=param.dtype, repeats=cfg.layout_repeats,
                                   sync=sync)
    summary = summarize_overlap(times["mode"], times["noop"], alone, syncs_per_step(cfg.micro_steps, cfg.no_sync))
    return OverlapMeasurement(times["mode"], times["noop"], alone, layout, summary)
