"""GPU check: every CUDA and NCCL path one GPU can exercise, in a few minutes, as a pass/fail table.

Run: ``hpcbench gpu-check [--out DIR] [--quick] [--compile]`` (``make gpu-check``).

The checks, in the order they run (each is independent: one that raises is recorded as
``fail`` with its error, printed at once, and the others still run):

* ``nccl_world1``: a fresh process joins a world of 1 with ``init_process_group("nccl")``
  (``MASTER_ADDR=127.0.0.1``, a free port) and checks all_reduce, all_gather and broadcast.
* ``nccl_launcher``: the project's launcher (``torchrun --standalone``, 1 rank, backend
  ``nccl``) runs the collectives experiment's :func:`measure_op` for every op at two sizes,
  with its value checks, and the rank's records are read back.
* ``hooks_world1``: the gradient compression hooks (2-bit core, messages through NCCL, every
  registered compression inside DDP) and ``no_sync`` accumulation on CUDA tensors, in a world
  of 1 (the exchange between ranks needs 2 GPUs; it is tested on CPU ranks).
* ``train_resnet50`` / ``train_gpt2_124M``: single-GPU training steps as the experiments' tuned step
  makes them (:mod:`hpcbench.models.step`: bf16 autocast, NHWC for ResNet-50, SDPA attention, fused
  AdamW; ``--compile`` adds ``torch.compile``, its compilation timed apart as the first step), the
  micro-batch chosen from the GPU's memory (the largest power-of-two multiple of the plan's that fits
  in 85 % of it, up to a cap); warm-up, then timed steps, each timed with CUDA events; throughput and
  MFU. They pass when the loss stays finite and the MFU lies in (0, 1) (MFU "n/a" when the GPU is not
  in :data:`~hpcbench.core.metrics.PEAK_DENSE_BF16_FLOPS`).
* ``prefetch_cuda``: :class:`~hpcbench.data.prefetch.DevicePrefetcher`'s side-stream path over
  a pinned DataLoader: every batch arrives on the GPU, in order, equal to the CPU batch.
* ``nvml_sampler``: the monitor's sampler process (:mod:`hpcbench.monitor`) with its NVML source
  while the GPU runs matmuls: utilisation above 0, and on Hopper the GPM SM activity and
  occupancy measured in (0, 1] (before Hopper, rows that say why they are not available).
* ``cuda_memory_records``: the peak CUDA memory of each training check and of the process (with
  a 64 MiB probe alive, so the check stands alone when training failed), with every other
  measured value (per-step times...), written as one records file of the results schema
  (``OUT/records/gpu-check.parquet``) and read back value for value.

The three NCCL checks run first, in child processes, before this process creates its own CUDA
context: on a GPU in exclusive-process compute mode they could not start afterwards.

Output: the table (check | result | key number | seconds) on stdout, the same as JSON with
per-step samples in ``OUT/gpu-check.json``, the records file, and the launcher's logs in
``OUT/nccl-launcher/logs``.

Exit codes: ``0`` every check passed or was skipped; ``1`` some check failed; ``0`` also when
no CUDA GPU is present: the script prints "no CUDA GPU present: nothing to check" and checks
nothing (running it on a login node is not an error; read the message).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from hpcbench.core.config import Config, param
from hpcbench.core.metrics import peak_dense_bf16_flops
from hpcbench.core.results import RecordContext, RecordWriter, read_records

NO_GPU_MESSAGE = "no CUDA GPU present: nothing to check"
NO_GPU_EXIT = 0
FAILED_EXIT = 1
RESULT_PREFIX = "[gpu-check result]"
RECORDS_NAME = "gpu-check.parquet"
TABLE_NAME = "gpu-check.json"
#: What tests/test_bench.py runs: without a GPU the message and exit 0; with one, the quick checks.
TOY_ARGS = ["--quick"]
#: A child process that has not finished by then is killed and its check fails; together with
#: the training checks this keeps the worst case under the 8 minutes the script is given.
NCCL_WORLD1_TIMEOUT_S = 120.0
NCCL_LAUNCHER_TIMEOUT_S = 180.0
#: A failed check's error is cut to this many characters in the table (the JSON has all of it).
ERROR_WIDTH = 100


# -- FLOPs and MFU (pure) -------------------------------------------------------------------------

#: ResNet-50 forward at 224 x 224: 4.09 G multiply-adds (torchvision's ResNet50_Weights lists
#: "GFLOPS 4.09", counted as multiply-adds as in He et al. 2016). One multiply-add is 2 FLOPs;
#: torch.utils.flop_counter counts 8.18e9 FLOPs for hpcbench's resnet50 (tests check it).
RESNET50_FORWARD_MACS_224 = 4.09e9


def resnet50_train_flops(batch_size: int, image_size: int = 224) -> float:
    """Model FLOPs of one ResNet-50 training step: 3 x forward (backward costs 2 x forward).

    Convolution cost scales with the spatial area, hence ``(image_size / 224) ** 2``.

    Args:
        batch_size: images per step.
        image_size: side of the square input images.

    Returns:
        FLOPs per step (2 per multiply-add).
    """
    return 3 * 2 * RESNET50_FORWARD_MACS_224 * batch_size * (image_size / 224) ** 2


def gpt2_flops_per_token(n_params: int, n_layer: int, n_head: int, head_dim: int, seq_len: int) -> float:
    """Training FLOPs per token of a decoder-only transformer: ``6 N + 12 L H Q T``.

    PaLM (Chowdhery et al. 2022, appendix B): N parameters (here all but the position
    embeddings; GPT-2's token embedding is also its output layer, as nanoGPT counts it),
    L layers, H heads, Q head dimension, T sequence length; the second term is attention.
    """
    return 6.0 * n_params + 12.0 * n_layer * n_head * head_dim * seq_len


def mfu(flops_per_step: float, step_s: float, peak_flops: float | None) -> float | None:
    """Model FLOPs utilisation: achieved model FLOP/s over the hardware's peak (PaLM appendix B).

    Returns ``None`` when the peak is unknown (a GPU missing from the peak table, or a CPU).
    """
    if step_s <= 0:
        raise ValueError(f"step time must be positive, got {step_s}")
    if not peak_flops:
        return None
    return flops_per_step / step_s / peak_flops


def gpt2_counted_params(model: Any) -> int:
    """N of :func:`gpt2_flops_per_token`: the parameters (tied weights once) minus ``wpe``."""
    return sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()


def _gpt2_step_flops(model: Any, plan: "TrainPlan") -> float:
    cfg = model.cfg
    per_token = gpt2_flops_per_token(gpt2_counted_params(model), cfg.n_layer, cfg.n_head,
                                     cfg.n_embd // cfg.n_head, plan.seq_len)
    return per_token * plan.batch_size * plan.seq_len


#: Models whose FLOPs per step are known: (model, plan) -> FLOPs. Others get MFU "n/a".
STEP_FLOPS: dict[str, Callable[[Any, "TrainPlan"], float]] = {
    "resnet50": lambda model, plan: resnet50_train_flops(plan.batch_size, plan.image_size),
    "gpt2_124M": _gpt2_step_flops,
    "gpt2_small": _gpt2_step_flops,
    "gpt2_tiny": _gpt2_step_flops,
}


# -- results table (pure) -------------------------------------------------------------------------

STATUSES = ("pass", "fail", "skip")


@dataclass
class CheckResult:
    """One row of the table; ``details`` (per-step samples...) goes to the JSON only."""

    check: str
    result: str
    key: str = ""
    seconds: float = 0.0
    error: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.result not in STATUSES:
            raise ValueError(f"CheckResult.result: {self.result!r}; allowed: {list(STATUSES)}")


class SkipCheck(Exception):
    """Raised by a check whose precondition is missing; the message says which."""


def format_table(results: list[CheckResult]) -> str:
    """The results as a fixed-width text table: check | result | key number | seconds.

    A failed check's error (first line) follows its key number, so the table alone says why.
    """
    header = ("check", "result", "key number", "seconds")
    rows = []
    for r in results:
        key = r.key
        if r.error:
            first = r.error.strip().splitlines()[0] if r.error.strip() else ""
            first = first if len(first) <= ERROR_WIDTH else first[:ERROR_WIDTH - 3] + "..."
            key = f"{key}; {first}" if key else first
        rows.append((r.check, r.result, key, f"{r.seconds:.1f}"))
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells):
        return " | ".join(c.rjust(w) if i == 3 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [line(header), "-+-".join("-" * w for w in widths)]
    out += [line(row) for row in rows]
    passed = sum(r.result == "pass" for r in results)
    failed = sum(r.result == "fail" for r in results)
    skipped = sum(r.result == "skip" for r in results)
    out.append(f"{passed} passed, {failed} failed, {skipped} skipped")
    return "\n".join(out)


def exit_code(results: list[CheckResult]) -> int:
    return FAILED_EXIT if any(r.result == "fail" for r in results) else 0


def write_table_json(results: list[CheckResult], path: Path, environment: dict[str, Any]) -> Path:
    """The table with its details and the system it ran on (``system``) as JSON (``NaN`` written as ``null``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"system": environment, "checks": [asdict(r) for r in results],
            "exit_code": exit_code(results)}
    path.write_text(json.dumps(_finite(data), indent=2, default=str) + "\n")
    return path


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


# -- records round trip (pure: CPU-testable) ------------------------------------------------------

@dataclass(frozen=True)
class Row:
    """One measured value waiting to be written: the arguments of :meth:`RecordWriter.add`."""

    metric: str
    value: float | None
    unit: str
    step: int = 0
    labels: dict[str, Any] = field(default_factory=dict)
    text: str | None = None


def write_and_read_back(rows: list[Row], path: Path, context: RecordContext) -> int:
    """Write ``rows`` as one records file, read it back and check every value; return the row count.

    Raises:
        AssertionError: naming the first row whose value, unit or text did not come back.
    """
    with RecordWriter(path, context) as writer:
        for r in rows:
            writer.add(r.metric, r.value, r.unit, step=r.step, labels=r.labels, text=r.text)
    frame = read_records(path)
    if len(frame) != len(rows):
        raise AssertionError(f"{path}: wrote {len(rows)} rows, read {len(frame)}")
    for r, got in zip(rows, frame.itertuples(index=False)):
        want = float("nan") if r.value is None else float(r.value)
        same_value = (math.isnan(want) and math.isnan(got.value)) or want == got.value
        if not (same_value and got.metric == r.metric and got.unit == r.unit and got.step == r.step
                and json.loads(got.labels) == json.loads(json.dumps(r.labels, default=str))
                and (got.text if isinstance(got.text, str) else None) == r.text
                and got.experiment == context.experiment):
            raise AssertionError(f"{path}: row {r.metric} {r.labels} step {r.step} came back as "
                                 f"{got.metric}={got.value} {got.unit} step {got.step} {got.labels}")
    return len(frame)


# -- the checks --------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainPlan:
    """One training-throughput measurement: which model, how big a batch, how many steps."""

    model: str
    """a name in :data:`hpcbench.models.MODELS`"""
    batch_size: int
    warmup: int = 3
    """untimed steps first: cuDNN autotuning, allocator growth, AdamW state"""
    steps: int = 20
    """timed steps, each kept as a sample"""
    image_size: int = 224
    seq_len: int = 1024
    max_batch_size: int | None = None
    """on a GPU, the micro-batch is chosen from its memory: the largest power-of-two multiple of
    ``batch_size`` up to this one whose step fits in :data:`MEMORY_BUDGET` of it; ``None``: ``batch_size``"""
    compile: bool = False
    """``torch.compile`` the model; its first step, the compilation, is timed apart"""

    def __post_init__(self) -> None:
        for name in ("batch_size", "steps", "image_size", "seq_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainPlan.{name}: {getattr(self, name)} is out of range; allowed: >= 1")
        if self.warmup < 0:
            raise ValueError(f"TrainPlan.warmup: {self.warmup} is out of range; allowed: >= 0")
        if self.compile and self.warmup < 1:
            raise ValueError("TrainPlan.warmup: 0 with compile; the first step compiles and must not be timed: "
                             "allowed: >= 1")
        if self.max_batch_size is not None and self.max_batch_size < self.batch_size:
            raise ValueError(f"TrainPlan.max_batch_size: {self.max_batch_size} is below batch_size "
                             f"{self.batch_size}; allowed: >= batch_size, or None")


@dataclass
class CheckContext:
    """What the checks share: where they run, where output goes, and what they measured."""

    device: Any
    """a ``torch.device``: ``cuda:0`` for the real check, ``cpu`` in the tests"""
    out_dir: Path
    quick: bool = False
    backend: str = "nccl"
    """the torch.distributed backend of the NCCL checks (``gloo`` in the CPU tests)"""
    plans: dict[str, TrainPlan] = field(default_factory=dict)
    """check name -> training plan, for the training checks"""
    rows: list[Row] = field(default_factory=list)
    """every value measured so far; ``cuda_memory_records`` writes them as records"""
    peak_memory: dict[str, tuple[int, int]] = field(default_factory=dict)
    """model -> (max allocated, max reserved) bytes during its training check"""

    @property
    def peak_flops(self) -> float | None:
        if self.device.type != "cuda":
            return None
        import torch

        return peak_dense_bf16_flops(torch.cuda.get_device_name(self.device))


#: The share of the GPU's memory a chosen micro-batch's step may peak at (the rest: the allocator's slack,
#: cuDNN's workspaces, the other checks' leftovers).
MEMORY_BUDGET = 0.85


def gpu_plans(quick: bool, compile: bool = False) -> dict[str, TrainPlan]:
    """The training checks on a real GPU; ``quick`` shrinks batches and steps (a smoke test) and keeps them
    fixed; otherwise each micro-batch is chosen from memory, from the batch a tuned run starts at up to a cap
    beyond which throughput no longer grows on one GPU (ResNet-50: 512 images, GPT-2 124M: 64 x 1024 tokens)."""
    if quick:
        return {"train_resnet50": TrainPlan("resnet50", batch_size=32, warmup=2, steps=5, compile=compile),
                "train_gpt2_124M": TrainPlan("gpt2_124M", batch_size=4, warmup=2, steps=5, seq_len=1024,
                                             compile=compile)}
    return {"train_resnet50": TrainPlan("resnet50", batch_size=128, warmup=3, steps=20, max_batch_size=512,
                                        compile=compile),
            "train_gpt2_124M": TrainPlan("gpt2_124M", batch_size=16, warmup=3, steps=20, seq_len=1024,
                                         max_batch_size=64, compile=compile)}


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _recipe(plan: TrainPlan) -> Any:
    """The tuned step's recipe (:mod:`hpcbench.models.step`), bf16 and NHWC on the CPU too, so that the CPU
    tests run the very path the GPU does."""
    from hpcbench.models.step import StepRecipe

    return StepRecipe(optimizer="adamw", lr=1e-4, precision="bf16", channels_last="on", compile=plan.compile)


def _train_steps(spec: Any, plan: TrainPlan, device: Any) -> dict[str, Any]:
    """Build, warm up and time ``plan.steps`` steps: per-step s, wall s, losses, FLOPs per step, the first
    step's s (a compiled model's compilation) and the step's settings.

    The model, optimizer and batch live only in this frame, so the caller can free their memory.
    """
    import torch

    from hpcbench.models.step import make_optimizer, prepare_model, step_settings, timed_first_step

    settings = step_settings(_recipe(plan), device.type, spec.kind)
    inner = spec.build().to(device)
    model = prepare_model(inner, settings)  # NHWC inputs and autocast inside its forward
    x, y = spec.synthetic_batch(plan.batch_size, device=device, seed=0, image_size=plan.image_size,
                                seq_len=plan.seq_len)
    model.train()
    opt = make_optimizer(model.parameters(), settings)

    def step():
        loss = spec.loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    losses, first_s = [], None
    if plan.warmup:
        first, first_s = timed_first_step(step, lambda: _sync(device))
        losses = [first] + [step() for _ in range(plan.warmup - 1)]
    _sync(device)
    step_s: list[float] = []
    t0 = time.perf_counter()
    if device.type == "cuda":
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(plan.steps)]
        for start, end in events:
            start.record()
            losses.append(step())
            end.record()
        _sync(device)
        step_s = [start.elapsed_time(end) / 1e3 for start, end in events]
    else:
        for _ in range(plan.steps):
            s0 = time.perf_counter()
            losses.append(step())
            step_s.append(time.perf_counter() - s0)
    wall = time.perf_counter() - t0
    flops_fn = STEP_FLOPS.get(plan.model)
    return {"step_s": step_s, "wall": wall, "losses": torch.stack(losses).float().cpu().tolist(),
            "flops": flops_fn(inner, plan) if flops_fn else None, "first_s": first_s, "settings": settings}


def choose_batch(spec: Any, plan: TrainPlan, device: Any) -> Any:
    """The plan's micro-batch from the GPU's memory (:func:`hpcbench.models.step.largest_micro_batch`): each
    size tried is one whole eager step (model, AdamW state, activations) on a fresh model."""
    import torch

    from hpcbench.models.step import (cuda_peak_bytes, largest_micro_batch, make_optimizer, prepare_model,
                                      step_settings)

    settings = step_settings(_recipe(plan), device.type, spec.kind)
    eager = replace(settings, compile=False)  # compiling once per size tried would take minutes

    def one_step(b: int) -> None:
        model = prepare_model(spec.build().to(device), eager)
        opt = make_optimizer(model.parameters(), eager)
        x, y = spec.synthetic_batch(b, device=device, seed=0, image_size=plan.image_size, seq_len=plan.seq_len)
        spec.loss(model(x), y).backward()
        opt.step()

    total = torch.cuda.get_device_properties(device).total_memory
    return largest_micro_batch(cuda_peak_bytes(one_step, device), start=plan.batch_size,
                               limit=plan.max_batch_size, budget_bytes=int(MEMORY_BUDGET * total))


def measure_training(plan: TrainPlan, ctx: CheckContext) -> CheckResult:
    """Train ``plan.model`` on one synthetic batch under bf16 autocast; throughput, MFU, memory.

    Each timed step is bracketed by CUDA events (its GPU time is kept as a sample); throughput
    and MFU use the wall time of all timed steps, synchronised at both ends.
    """
    import torch

    from hpcbench.models import MODELS

    device = ctx.device
    spec = MODELS.get(plan.model)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True  # fixed shapes: let cuDNN pick its fastest kernels
        # The memory statistics need an initialised context on the device: before the first CUDA
        # call, reset_peak_memory_stats answers "Invalid device argument" (seen on torch 2.11).
        torch.cuda.set_device(device)
        torch.zeros(1, device=device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    choice = None
    if cuda and plan.max_batch_size is not None:
        choice = choose_batch(spec, plan, device)
        plan = replace(plan, batch_size=choice.batch)
        torch.cuda.reset_peak_memory_stats(device)
    try:
        run = _train_steps(spec, plan, device)
        step_s, wall, loss_values, flops = run["step_s"], run["wall"], run["losses"], run["flops"]
        if cuda:
            ctx.peak_memory[plan.model] = (torch.cuda.max_memory_allocated(device),
                                           torch.cuda.max_memory_reserved(device))
    finally:
        if cuda:
            torch.cuda.empty_cache()
    mean_step = wall / plan.steps
    throughput = plan.batch_size * spec.items_per_sample(seq_len=plan.seq_len) / mean_step
    util = mfu(flops, mean_step, ctx.peak_flops) if flops else None

    settings = run["settings"]
    labels = {"model": plan.model, "batch_size": plan.batch_size, "dtype": settings.dtype,
              "channels_last": settings.channels_last, "optimizer": settings.optimizer,
              "optimizer_options": settings.labels()["optimizer_options"], "compiled": settings.compile,
              **({"image_size": plan.image_size} if spec.kind == "image" else {"seq_len": plan.seq_len})}
    if choice is not None:
        ctx.rows.append(Row("micro_batch", choice.batch, "samples", labels=labels, text=choice.describe()))
    if run["first_s"] is not None:
        ctx.rows.append(Row("first_step_time", run["first_s"], "s", labels=labels,
                            text="the first warm-up step: torch.compile's compilation" if settings.compile
                            else "the first warm-up step: cuDNN autotuning, allocator growth, AdamW's state"))
    for i, t in enumerate(step_s):
        ctx.rows.append(Row("step_time", t, "s", step=i, labels=labels))
    ctx.rows.append(Row("throughput", throughput, spec.throughput_unit, labels=labels))
    ctx.rows.append(Row("mfu", util, "fraction", labels=labels,
                        text=None if util is not None else "not applicable: no FLOPs or no peak for this device"))
    finite = all(math.isfinite(v) for v in loss_values)
    plausible = util is None or 0.0 < util < 1.0
    unit = spec.throughput_unit
    key = (f"{throughput:,.0f} {unit}, MFU " + (f"{util:.1%}" if util is not None else "n/a")
           + f", batch {plan.batch_size}" + (f", compile {run['first_s']:.0f} s" if settings.compile else ""))
    problems = []
    if not finite:
        problems.append(f"loss is not finite: {loss_values}")
    if not plausible:
        problems.append(f"MFU {util:.3f} is outside (0, 1): FLOPs or the peak table are wrong")
    details = {"model": plan.model, "batch_size": plan.batch_size, "warmup": plan.warmup,
               "step_s": step_s, "wall_s": wall, "step_p50_s": statistics.median(step_s),
               "throughput": throughput, "unit": unit, "flops_per_step": flops, "peak_flops": ctx.peak_flops,
               "mfu": util, "losses": loss_values, "first_step_s": run["first_s"], "settings": settings.labels(),
               "batch_choice": choice.describe() if choice is not None else None}
    return CheckResult("", "pass" if not problems else "fail", key, error="; ".join(problems), details=details)


def check_prefetch(ctx: CheckContext) -> CheckResult:
    """DevicePrefetcher over a pinned DataLoader: batches on the device, in order, equal to the CPU ones.

    The GPU sums each batch as soon as it is yielded, on the current stream, while the next
    batch's copy runs on the side stream: a missing ``wait_stream`` would show as a wrong sum.
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from hpcbench.data.prefetch import DevicePrefetcher

    n, batch = (64, 8) if ctx.quick or ctx.device.type != "cuda" else (256, 16)
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(n, 3, 128, 128, generator=gen)
    labels = torch.arange(n)
    loader = DataLoader(TensorDataset(images, labels), batch_size=batch, shuffle=False,
                        pin_memory=ctx.device.type == "cuda", num_workers=0)
    expected = [(xb.clone(), yb.clone()) for xb, yb in loader]
    sums, got = [], []
    for xb, yb in DevicePrefetcher(loader, ctx.device):
        if xb.device.type != ctx.device.type or yb.device.type != ctx.device.type:
            raise AssertionError(f"batch {len(got)} arrived on {xb.device}/{yb.device}, not {ctx.device}")
        sums.append(xb.double().sum())
        got.append((xb, yb))
    _sync(ctx.device)
    if len(got) != len(expected):
        raise AssertionError(f"{len(got)} batches arrived, the loader has {len(expected)}")
    for i, ((xb, yb), (xe, ye), s) in enumerate(zip(got, expected, sums)):
        if not torch.equal(yb.cpu(), ye):
            raise AssertionError(f"batch {i} is out of order: labels {yb.cpu()[:4].tolist()}..., "
                                 f"expected {ye[:4].tolist()}...")
        if not torch.equal(xb.cpu(), xe):
            raise AssertionError(f"batch {i}'s images differ from the CPU batch")
        if not math.isclose(s.item(), xe.double().sum().item(), rel_tol=1e-9, abs_tol=1e-6):
            raise AssertionError(f"batch {i}: the device summed {s.item()} before the copy had finished "
                                 f"(CPU sum {xe.double().sum().item()})")
    mb = images.numel() * images.element_size() / 1e6
    return CheckResult("", "pass", f"{len(got)} batches ({mb:.0f} MB) in order",
                       details={"batches": len(got), "batch_size": batch, "megabytes": mb})


# NCCL at world size 1, in a fresh process ------------------------------------------------------

def _init_world1(backend: str) -> Any:
    """A process group of this process alone on ``backend`` (env:// rendezvous); the device its tensors use.

    On NCCL the group is bound to GPU 0 (``device_id``), so its communicator is made for that device.
    """
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    extra = {}
    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(0)
        device = torch.device("cuda", 0)
        extra["device_id"] = device
    dist.init_process_group(backend, init_method="env://", rank=0, world_size=1,
                            timeout=timedelta(seconds=60), **extra)
    return device


def nccl_world1_worker(backend: str) -> None:
    """Child process: a world of 1 on ``backend``; checks all_reduce, all_gather, broadcast values.

    Reads MASTER_ADDR/MASTER_PORT from the environment; prints one ``RESULT_PREFIX`` JSON line.
    """
    import torch
    import torch.distributed as dist

    device = _init_world1(backend)
    try:
        source = torch.arange(1 << 20, dtype=torch.float32, device=device)
        reduced = source.clone()
        dist.all_reduce(reduced)  # the sum over one rank is the tensor itself
        gathered = [torch.empty_like(source)]
        dist.all_gather(gathered, source)
        flat = torch.empty_like(source)
        dist.all_gather_into_tensor(flat, source)
        sent = torch.full((4096,), 7.0, device=device)
        dist.broadcast(sent, src=0)
        checks = {"all_reduce": torch.equal(reduced, source), "all_gather": torch.equal(gathered[0], source),
                  "all_gather_into_tensor": torch.equal(flat, source),
                  "broadcast": bool((sent == 7.0).all().item())}
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        version = ".".join(map(str, torch.cuda.nccl.version())) if backend == "nccl" else ""
        print(RESULT_PREFIX, json.dumps({"checks": checks, "nccl_version": version}), flush=True)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_child(code: str, env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess:
    """``python -c code`` in its own session, killed with its children after ``timeout_s``."""
    import signal

    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"timed out after {timeout_s:.0f} s; output:\n{out[-2000:]}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def _world1_child(worker: str, ctx: CheckContext) -> dict:
    """Run ``worker(backend)`` of this module in a fresh process joining a world of 1; its result line."""
    import torch.distributed as dist

    if ctx.backend == "nccl" and not dist.is_nccl_available():
        raise SkipCheck("this torch build has no NCCL")
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0", WORLD_SIZE="1",
               LOCAL_RANK="0")
    code = f"from hpcbench.bench.gpu_check import {worker}; {worker}({ctx.backend!r})"
    done = _run_child(code, env, NCCL_WORLD1_TIMEOUT_S)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
    if done.returncode != 0 or not lines:
        raise AssertionError(f"child exited with {done.returncode}; output:\n{done.stdout[-3000:]}")
    return json.loads(lines[-1][len(RESULT_PREFIX):])


def check_nccl_world1(ctx: CheckContext) -> CheckResult:
    result = _world1_child("nccl_world1_worker", ctx)
    wrong = [op for op, ok in result["checks"].items() if not ok]
    what = f"NCCL {result['nccl_version']}" if result["nccl_version"] else ctx.backend
    key = f"{what}, {len(result['checks']) - len(wrong)}/{len(result['checks'])} ops correct"
    return CheckResult("", "fail" if wrong else "pass", key,
                       error=f"wrong values from {wrong}" if wrong else "", details=result)


# The gradient hooks on the device -----------------------------------------------------------------

def hooks_world1_worker(backend: str) -> None:
    """Child process: the compression and overlap code on the device's tensors, in a world of 1.

    What one GPU can check: the 2-bit core (pack, quantise with error feedback, the message
    format) on CUDA tensors; the uint8 messages through NCCL's all_to_all_single and all_gather
    (at world 1 each is an identity, so the bytes must come back unchanged); each registered
    compression hook inside DDP for a few steps (finite, identical to no hook at world 1 for
    the exact ones); ``no_sync`` accumulation giving the gradients of the joined batch. The
    exchange between ranks needs 2 GPUs (NCCL refuses two ranks on one device): it is tested
    on CPU ranks with gloo (tests/test_compression.py). Prints one ``RESULT_PREFIX`` JSON line.
    """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from hpcbench.parallel import compression as c
    from hpcbench.parallel.hooks import all_gather_async
    from hpcbench.parallel.overlap import accumulation_step

    device = _init_world1(backend)
    try:
        checks: dict[str, bool] = {}
        gen = torch.Generator(device="cpu").manual_seed(0)
        codes = torch.randint(0, 4, (4099,), generator=gen, dtype=torch.uint8).to(device)
        checks["pack_unpack"] = torch.equal(c.unpack_2bit(c.pack_2bit(codes), 4099), codes)
        x = torch.randn(3, 5000, generator=gen).to(device)
        old = torch.randn(3, 5000, generator=gen).to(device) * 0.1
        q, scales, new = c.quantize_with_feedback(x, old, 1024)
        kept = (x + old) - c.dequantize_2bit(q, scales, 1024)
        checks["error_feedback"] = torch.equal(new, kept)
        msg = c.encode_message(q[:, :4096].contiguous(), scales[:, :4])
        checks["message"] = torch.equal(c.decode_message(msg, 4096, 1024),
                                        c.dequantize_2bit(q[:, :4096], scales[:, :4], 1024))
        flat = msg[:1].reshape(-1).contiguous()
        got = torch.empty_like(flat)
        dist.all_to_all_single(got, flat)
        gathered = torch.empty_like(flat)
        all_gather_async(gathered, flat, None).wait()
        checks["uint8_collectives"] = torch.equal(got, flat) and torch.equal(gathered, flat)

        def net() -> torch.nn.Module:
            torch.manual_seed(1)
            return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.LayerNorm(128), torch.nn.GELU(),
                                       torch.nn.Linear(128, 8)).to(device)

        batches = [(torch.randn(16, 64, generator=gen).to(device), torch.randn(16, 8, generator=gen).to(device))
                   for _ in range(4)]
        loss_fn = torch.nn.functional.mse_loss
        reference = None
        for name in c.COMPRESSIONS.names():
            ddp = DDP(net(), device_ids=[0] if device.type == "cuda" else None,
                      bucket_cap_mb=c.bucket_cap_mb_for(name))
            state = c.apply_compression(ddp, name)
            opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
            for xb, yb in batches:
                opt.zero_grad(set_to_none=True)
                loss_fn(ddp(xb), yb).backward()
                opt.step()
            params = torch.cat([p.detach().reshape(-1) for p in ddp.module.parameters()])
            if name == "none":
                reference = params
            ok = bool(torch.isfinite(params).all()) and state.stats.buckets > 0
            if name in ("none", "quant2bit"):  # world 1: nothing is quantised, the average is the gradient
                ok = ok and torch.equal(params, reference)
            checks[f"hook_{name}"] = ok
        ddp = DDP(net(), device_ids=[0] if device.type == "cuda" else None)
        accumulation_step(ddp, batches, loss_fn)
        accumulated = [p.grad.clone() for p in ddp.module.parameters()]
        joined = net()
        loss_fn(joined(torch.cat([b[0] for b in batches])), torch.cat([b[1] for b in batches])).backward()
        checks["no_sync_accumulation"] = all(torch.allclose(a, p.grad, rtol=1e-4, atol=1e-6)
                                             for a, p in zip(accumulated, joined.parameters()))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        print(RESULT_PREFIX, json.dumps({"checks": checks}), flush=True)
    finally:
        dist.destroy_process_group()


def check_hooks_world1(ctx: CheckContext) -> CheckResult:
    checks = _world1_child("hooks_world1_worker", ctx)["checks"]
    wrong = [name for name, ok in checks.items() if not ok]
    key = f"{ctx.backend}, {len(checks) - len(wrong)}/{len(checks)} hook checks correct"
    return CheckResult("", "fail" if wrong else "pass", key,
                       error=f"wrong: {wrong}" if wrong else "", details={"checks": checks})


# NCCL through the project's launcher ------------------------------------------------------------

@dataclass
class CollectivesSmokeConfig(Config):
    """The collectives experiment's ops at world size 1 (its own config requires 2+ ranks)."""

    ops: list[str] = param(["all_reduce", "all_gather", "reduce_scatter", "broadcast"],
                           "collectives to run (names in the collectives experiment's OPS)")
    sizes: list[int] = param([4096, 4 << 20], "message sizes in bytes: one latency-bound, one bandwidth-bound",
                             min=4)
    iters: int = param(5, "timed iterations per op and size", min=1, max=1000)


def collectives_smoke_entry(cfg: CollectivesSmokeConfig, topo: Any, writer: RecordWriter) -> None:
    """Launcher entry (every rank): the collectives experiment's ``measure_op`` with value checks."""
    import torch
    import torch.distributed as dist

    from hpcbench.experiments.collectives.worker import OPS, aligned_size, measure_op

    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    n = topo.world_size
    for op_name in cfg.ops:
        for size in cfg.sizes:
            s = aligned_size(size, n, 4)
            times, correct = measure_op(OPS.get(op_name), s, group=None, grank=topo.rank, n=n, root=0,
                                        dtype=torch.float32, device=device, warmup=2, iters=cfg.iters,
                                        check=True, sync=sync)
            labels = {"op": op_name, "size_bytes": s}
            for i, t in enumerate(times):
                writer.add("time", t, "s", step=i, labels=labels)
            writer.add("correct", 1.0 if correct else 0.0, "bool", labels=labels)


def check_nccl_launcher(ctx: CheckContext) -> CheckResult:
    import torch.distributed as dist

    from hpcbench.dist.launcher import launch

    if ctx.backend == "nccl" and not dist.is_nccl_available():
        raise SkipCheck("this torch build has no NCCL")
    cfg = CollectivesSmokeConfig()
    context = RecordContext(run_id="gpu-check", suite="gpu-check", experiment="gpu_check_collectives",
                            task_id="nccl_launcher", params=cfg.to_dict())
    done = launch(collectives_smoke_entry, cfg, nodes=1, ranks_per_node=1, context=context,
                  out_dir=ctx.out_dir / "nccl-launcher", tag="nccl-launcher", backend=ctx.backend,
                  timeout_s=NCCL_LAUNCHER_TIMEOUT_S, echo=None)
    frame = read_records(done.records[0])
    backend = frame[frame["metric"] == "backend"]["text"].tolist()
    correct = frame[frame["metric"] == "correct"]
    expected = len(cfg.ops) * len(cfg.sizes)
    wrong = [json.loads(lab) for lab, v in zip(correct["labels"], correct["value"]) if v != 1.0]
    problems = []
    if backend != [ctx.backend]:
        problems.append(f"the rank ran on backend {backend}, not {ctx.backend}")
    if len(correct) != expected:
        problems.append(f"{len(correct)} value checks recorded, expected {expected}")
    if wrong:
        problems.append(f"wrong values from {wrong}")
    times = frame[frame["metric"] == "time"]
    big = [v for lab, v in zip(times["labels"], times["value"])
           if json.loads(lab) == {"op": "all_reduce", "size_bytes": max(cfg.sizes)}]
    p50_us = statistics.median(big) * 1e6 if big else float("nan")
    key = (f"{len(correct) - len(wrong)}/{expected} op x size correct, all_reduce "
           f"{max(cfg.sizes) >> 20} MiB p50 {p50_us:.0f} us")
    return CheckResult("", "fail" if problems else "pass", key, error="; ".join(problems),
                       details={"wall_s": done.wall_s, "log": str(done.log_path),
                                "records": [str(p) for p in done.records]})


# CUDA memory as records ------------------------------------------------------------------------

def check_memory_records(ctx: CheckContext) -> CheckResult:
    """Peak CUDA memory (per training check, and of the process now) plus every value measured so
    far, written as one records file of the results schema and read back value for value."""
    import torch

    if ctx.device.type != "cuda":
        raise SkipCheck("CUDA memory statistics need a GPU")
    how = "torch.cuda.max_memory_allocated / max_memory_reserved"
    for model, (alloc, reserved) in ctx.peak_memory.items():
        ctx.rows.append(Row("cuda_max_memory_allocated", alloc, "B", labels={"model": model}, text=how))
        ctx.rows.append(Row("cuda_max_memory_reserved", reserved, "B", labels={"model": model}, text=how))
    # A probe of known size, so the statistics are checked even when the training checks failed.
    probe_bytes = 64 << 20
    probe = torch.empty(probe_bytes, dtype=torch.uint8, device=ctx.device)
    alloc = torch.cuda.max_memory_allocated(ctx.device)
    reserved = torch.cuda.max_memory_reserved(ctx.device)
    del probe
    scope = {"scope": "process, since the last training check began"}
    ctx.rows.append(Row("cuda_max_memory_allocated", alloc, "B", labels=scope, text=how))
    ctx.rows.append(Row("cuda_max_memory_reserved", reserved, "B", labels=scope, text=how))
    context = RecordContext(run_id="gpu-check", suite="gpu-check", experiment="gpu_check", task_id="gpu_check",
                            params={"quick": ctx.quick, "device": torch.cuda.get_device_name(ctx.device),
                                    "torch": torch.__version__})
    path = ctx.out_dir / "records" / RECORDS_NAME
    count = write_and_read_back(ctx.rows, path, context)
    problems = []
    if alloc < probe_bytes or reserved < alloc:
        problems.append(f"implausible peaks: allocated {alloc} B with a {probe_bytes} B probe alive, "
                        f"reserved {reserved} B")
    peaks = ", ".join(f"{m} {a / 2**30:.1f} GiB" for m, (a, _) in ctx.peak_memory.items())
    return CheckResult("", "fail" if problems else "pass",
                       f"{count} rows; peak alloc {peaks or 'n/a (no training check finished)'}",
                       error="; ".join(problems),
                       details={"records": str(path), "rows": count,
                                "peak_memory_bytes": {m: list(v) for m, v in ctx.peak_memory.items()},
                                "process_max_allocated": alloc, "process_max_reserved": reserved})


# -- the monitor's NVML / GPM source --------------------------------------------------------------

#: Compute capability from which NVML's GPM metrics (SM activity, occupancy) exist: Hopper.
GPM_MIN_CAPABILITY = (9, 0)
#: Seconds the sampler watches the GPU busy, at SAMPLER_INTERVAL_S: enough ticks for a rate.
SAMPLER_BUSY_S, SAMPLER_INTERVAL_S = 4.0, 0.5


def check_nvml_sampler(ctx: CheckContext) -> CheckResult:
    """The monitor's sampler process with the NVML source, while this process keeps the GPU busy with
    matmuls: GPU utilisation must read above 0, and on Hopper or later the GPM SM activity and
    occupancy must be measured (finite, in [0, 1]); before Hopper their rows must say why not."""
    import torch

    from hpcbench.core.results import read_records
    from hpcbench.monitor.sampler import Sampler

    if ctx.device.type != "cuda":
        raise SkipCheck("the NVML source needs an NVIDIA GPU")
    path = ctx.out_dir / "records" / "monitor-nvml.parquet"
    a = torch.randn(8192, 8192, device=ctx.device)
    with Sampler(path, interval_s=SAMPLER_INTERVAL_S, sources=["nvml"]):
        end = time.perf_counter() + SAMPLER_BUSY_S
        while time.perf_counter() < end:
            a = torch.tanh(a @ a)
            torch.cuda.synchronize(ctx.device)
    df = read_records(path)
    values = {m: df[df["metric"] == m]["value"].dropna() for m in ("gpu_utilization", "sm_activity", "sm_occupancy")}
    problems = []
    util = values["gpu_utilization"]
    if util.empty or util.max() <= 0:
        problems.append(f"gpu_utilization never above 0 while busy ({len(util)} samples)")
    hopper = torch.cuda.get_device_capability(ctx.device) >= GPM_MIN_CAPABILITY
    for metric in ("sm_activity", "sm_occupancy"):
        got = values[metric]
        if hopper and (got.empty or not got.between(0, 1).all() or got.max() <= 0):
            problems.append(f"{metric}: {len(got)} samples in (0, 1] expected from GPM on this Hopper GPU")
        if not hopper and not df[(df["metric"] == metric) & df["text"].fillna("").str.startswith(
                "not available")].shape[0]:
            problems.append(f"{metric}: no 'not available' row before Hopper")
    sm = values["sm_activity"]
    key = (f"util max {util.max():.0%}" if not util.empty else "no util") + (
        f", SM activity max {sm.max():.0%}" if not sm.empty else ", SM activity n/a")
    return CheckResult("", "fail" if problems else "pass", key, error="; ".join(problems),
                       details={"records": str(path), "samples": {m: v.tolist() for m, v in values.items()}})


# -- the run -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[CheckContext], CheckResult]


def _training(name: str) -> Check:
    return Check(name, lambda ctx: measure_training(ctx.plans[name], ctx))


#: In running order (see the module docstring for why NCCL comes first).
CHECKS: tuple[Check, ...] = (
    Check("nccl_world1", check_nccl_world1),
    Check("nccl_launcher", check_nccl_launcher),
    Check("hooks_world1", check_hooks_world1),
    _training("train_resnet50"),
    _training("train_gpt2_124M"),
    Check("prefetch_cuda", check_prefetch),
    Check("nvml_sampler", check_nvml_sampler),
    Check("cuda_memory_records", check_memory_records),
)


def run_check(check: Check, ctx: CheckContext, echo: Callable[[str], None] = print) -> CheckResult:
    """Run one check; an exception becomes a ``fail`` row with its error, printed at once."""
    echo(f"[gpu-check] {check.name} ...")
    t0 = time.perf_counter()
    try:
        result = check.run(ctx)
    except SkipCheck as exc:
        result = CheckResult(check.name, "skip", error=str(exc))
    except Exception as exc:  # noqa: BLE001 - one failing check must not stop the others
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        result = CheckResult(check.name, "fail", error=f"{type(exc).__name__}: {exc}")
    result.check = check.name
    result.seconds = time.perf_counter() - t0
    echo(f"[gpu-check] {check.name}: {result.result} {result.key} {result.error}".rstrip())
    return result


def run_checks(checks: tuple[Check, ...], ctx: CheckContext,
               echo: Callable[[str], None] = print) -> list[CheckResult]:
    return [run_check(c, ctx, echo) for c in checks]


def environment() -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                           "host": socket.gethostname()}
    try:
        env["device"] = torch.cuda.get_device_name(0)
        env["peak_dense_bf16_flops"] = peak_dense_bf16_flops(env["device"])
        env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as exc:  # noqa: BLE001 - the environment is informative, never fatal
        env["error"] = f"{type(exc).__name__}: {exc}"
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hpcbench gpu-check",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("results/gpu-check"),
                        help="folder for gpu-check.json, records/ and the launcher's logs")
    parser.add_argument("--quick", action="store_true", help="smaller batches and fewer steps (a smoke test)")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the training checks' models (the compilation is reported apart)")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print(NO_GPU_MESSAGE, flush=True)
        return NO_GPU_EXIT
    t0 = time.perf_counter()
    ctx = CheckContext(device=torch.device("cuda", 0), out_dir=args.out, quick=args.quick,
                       plans=gpu_plans(args.quick, compile=args.compile))
    print(f"[gpu-check] {len(CHECKS)} checks{' (quick)' if args.quick else ''}; output: {args.out}", flush=True)
    results = run_checks(CHECKS, ctx)
    env = environment()  # after the NCCL checks: it creates this process's CUDA context
    env["total_s"] = time.perf_counter() - t0
    path = write_table_json(results, args.out / TABLE_NAME, env)
    print()
    print(format_table(results))
    print(f"{env.get('device')}, torch {env['torch']}, CUDA {env['cuda']}, NCCL {env.get('nccl')}")
    print(f"table: {path}; total {env['total_s']:.0f} s")
    return exit_code(results)

