"""The training step near the hardware's limit: one recipe for the experiments' steps and ``make gpu-check``.

A tuned single-GPU step (nanoGPT's ``train.py``, torchtitan's defaults) differs from an eager fp32 step in
five settings and one choice:

* **bf16 autocast**: matmuls and convolutions run on the tensor cores; weights and optimizer state stay fp32;
* **NHWC** (``channels_last``) for the CNNs: the layout cuDNN's tensor-core convolutions run in, where NCHW
  input costs a layout change around every convolution;
* **SDPA attention**: :mod:`hpcbench.models.gpt2` calls ``F.scaled_dot_product_attention``, flash attention
  on Ampere and Hopper (nothing to switch here);
* **a fused AdamW** (``fused=True``): one kernel for every parameter, where the per-tensor loop launches
  several per tensor; on CPU the ``foreach`` form (the fused one is a GPU path before torch 2.4);
* **``torch.compile``**, a switch (off by default): fuses the elementwise work between the matmuls. Its
  first step compiles, tens of seconds, so that time is reported apart (:func:`timed_first_step`) and never
  counted in a timed step;
* **the micro-batch**, as large as the device's memory allows (:func:`largest_micro_batch`).

CPU ranks keep working as before: ``precision="auto"`` means fp32 there and ``channels_last="auto"`` only
applies on CUDA. Which settings a device gets is a pure function (:func:`step_settings`), and so is the
batch search. An experiment's own loop calls two thin torch adapters, :func:`prepare_model` (which puts the
layout and the precision inside the model's forward, so the loop itself changes nothing) and
:func:`make_optimizer`.
"""

from __future__ import annotations

import contextlib
import functools
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable

from hpcbench.core.errors import ConfigError

PRECISIONS = ("auto", "bf16", "fp32")
LAYOUTS = ("auto", "on", "off")
OPTIMIZERS = ("adamw", "sgd")


@dataclass(frozen=True)
class StepRecipe:
    """What an experiment asks of its training step (its config's fields map to these)."""

    optimizer: str = "adamw"
    lr: float = 1e-4
    precision: str = "auto"
    """``auto``: bf16 autocast on CUDA, fp32 on CPU; ``bf16`` or ``fp32`` everywhere"""
    channels_last: str = "auto"
    """``auto``: NHWC for image models on CUDA only; ``on`` / ``off`` everywhere"""
    compile: bool = False

    def __post_init__(self) -> None:
        for field, value, allowed in (("optimizer", self.optimizer, OPTIMIZERS),
                                      ("precision", self.precision, PRECISIONS),
                                      ("channels_last", self.channels_last, LAYOUTS)):
            if value not in allowed:
                raise ConfigError(f"{value!r} is not one of {list(allowed)}", field=field)
        if not self.lr > 0:
            raise ConfigError(f"must be > 0, got {self.lr}", field="lr")


@dataclass(frozen=True)
class StepSettings:
    """What a recipe becomes on one device for one kind of model; recorded with the step's figures."""

    device_type: str
    dtype: str
    """``bfloat16`` (autocast) or ``float32`` (no autocast)"""
    channels_last: bool
    optimizer: str
    optimizer_options: tuple[tuple[str, Any], ...]
    lr: float
    compile: bool

    def labels(self) -> dict[str, Any]:
        """The settings as record labels (flat, printable)."""
        out = asdict(self)
        out["optimizer_options"] = ",".join(f"{k}={v}" for k, v in self.optimizer_options) or "default"
        return out


def optimizer_options(name: str, device_type: str) -> dict[str, Any]:
    """The optimizer's implementation for a device: AdamW fused on CUDA (one kernel for all parameters),
    ``foreach`` (one call per parameter group, not per tensor) everywhere else."""
    if name == "adamw" and device_type == "cuda":
        return {"fused": True}
    return {"foreach": True}


def step_settings(recipe: StepRecipe, device_type: str, model_kind: str) -> StepSettings:
    """The settings ``recipe`` gets on a ``device_type`` (``cuda``, ``cpu``) for a ``model_kind`` model."""
    cuda = device_type == "cuda"
    dtype = "bfloat16" if recipe.precision == "bf16" or (recipe.precision == "auto" and cuda) else "float32"
    nhwc = model_kind == "image" and (recipe.channels_last == "on" or (recipe.channels_last == "auto" and cuda))
    return StepSettings(device_type, dtype, nhwc, recipe.optimizer,
                        tuple(sorted(optimizer_options(recipe.optimizer, device_type).items())), recipe.lr,
                        recipe.compile)


# -- the micro-batch from memory (pure: the caller says what a batch costs) -----------------------------------


@dataclass(frozen=True)
class BatchChoice:
    """The micro-batch :func:`largest_micro_batch` chose, and every size it tried with its peak bytes
    (``None``: out of memory)."""

    batch: int
    tried: tuple[tuple[int, int | None], ...]
    budget_bytes: int

    def describe(self) -> str:
        seen = ", ".join(f"{b}: {'OOM' if p is None else f'{p / 2**30:.1f} GiB'}" for b, p in self.tried)
        return f"micro-batch {self.batch}, the largest within {self.budget_bytes / 2**30:.1f} GiB ({seen})"


def largest_micro_batch(peak_bytes: Callable[[int], int | None], *, start: int, limit: int,
                        budget_bytes: int) -> BatchChoice:
    """The largest power-of-two multiple of ``start`` up to ``limit`` whose step peaks within ``budget_bytes``.

    ``peak_bytes(b)`` runs one step at micro-batch ``b`` and returns its peak memory, or ``None`` when it ran
    out. Doubling stops at the first size over budget: a step's memory grows with its batch, so no larger one
    fits. Raises :class:`ConfigError` when not even ``start`` fits.
    """
    if start < 1 or limit < start:
        raise ConfigError(f"needs 1 <= start <= limit, got start={start}, limit={limit}", field="micro_batch")
    tried: list[tuple[int, int | None]] = []
    best, b = None, start
    while b <= limit:
        peak = peak_bytes(b)
        tried.append((b, peak))
        if peak is None or peak > budget_bytes:
            break
        best, b = b, b * 2
    if best is None:
        raise ConfigError(f"not even micro-batch {start} fits in {budget_bytes / 2**30:.1f} GiB "
                          f"({'out of memory' if tried[-1][1] is None else f'{tried[-1][1] / 2**30:.1f} GiB'})",
                          field="micro_batch")
    return BatchChoice(best, tuple(tried), budget_bytes)


# -- torch adapters -------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _tuned_forward_class() -> type:
    """One class per process, made on first use (torch is imported lazily)."""
    import torch

    class TunedForward(torch.nn.Module):
        """The model's forward in the step's layout and precision, whoever calls it: the experiment's loop,
        :func:`hpcbench.parallel.overlap.accumulation_step`, a no-op twin. Inputs become NHWC when the settings
        say so; the forward runs under bf16 autocast; outputs come back as float32, as a loss computed under
        autocast would see them (autocast runs cross-entropy in float32)."""

        def __init__(self, model: Any, settings: StepSettings) -> None:
            super().__init__()
            self.model, self.settings = model, settings

        def forward(self, x: Any) -> Any:
            with autocast(self.settings):
                out = self.model(prepare_inputs(x, self.settings))
            return out.float() if out.is_floating_point() else out

    return TunedForward


def prepare_model(model: Any, settings: StepSettings, wrap: Callable[[Any], Any] | None = None) -> Any:
    """``model`` ready for the settings' step, in the order that works: parameters in NHWC, then the forward
    in the step's layout and precision (only when it is not the plain fp32 one, so a CPU rank's model is
    unchanged), then ``wrap`` (the data parallelism, e.g. DDP), then ``torch.compile`` around all of it (DDP
    wrapped first, so that the compiled graph breaks at its buckets). The compilation itself happens at the
    first step (:func:`timed_first_step`)."""
    import torch

    if settings.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if settings.dtype != "float32" or settings.channels_last:
        model = _tuned_forward_class()(model, settings)
    if wrap is not None:
        model = wrap(model)
    if settings.compile:
        model = torch.compile(model)
    return model


def prepare_inputs(x: Any, settings: StepSettings) -> Any:
    """A batch's inputs in the layout the model was prepared for (images only; token ids stay as they are)."""
    import torch

    if settings.channels_last and x.dim() == 4:
        return x.contiguous(memory_format=torch.channels_last)
    return x


def autocast(settings: StepSettings) -> contextlib.AbstractContextManager:
    """The forward pass's precision: bf16 autocast, or nothing at all for fp32."""
    import torch

    if settings.dtype == "bfloat16":
        return torch.autocast(device_type=settings.device_type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def make_optimizer(params: Iterable[Any], settings: StepSettings) -> Any:
    """The settings' optimizer over ``params`` (plain SGD without momentum, as the experiments time it)."""
    import torch

    kind = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[settings.optimizer]
    return kind(params, lr=settings.lr, **dict(settings.optimizer_options))


def timed_first_step(step: Callable[[], Any], sync: Callable[[], None]) -> tuple[Any, float]:
    """Run the first step alone and time it: a compiled model compiles here, so this time is the compile's
    (and one step's), reported apart from the timed steps."""
    sync()
    t0 = time.perf_counter()
    out = step()
    sync()
    return out, time.perf_counter() - t0


def cuda_peak_bytes(run_step: Callable[[int], Any], device: Any) -> Callable[[int], int | None]:
    """:func:`largest_micro_batch`'s ``peak_bytes`` on a CUDA device: ``run_step(b)`` (a whole step at
    micro-batch ``b``, its model and optimizer state included) and the allocator's peak, ``None`` when the
    step ran out of memory."""
    import gc

    import torch

    def peak(b: int) -> int | None:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        try:
            run_step(b)
            torch.cuda.synchronize(device)
            return int(torch.cuda.max_memory_allocated(device))
        except torch.cuda.OutOfMemoryError:
            return None
        finally:
            gc.collect()  # the failed step's frames hold its tensors
            torch.cuda.empty_cache()

    return peak
