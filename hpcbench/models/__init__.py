"""Models for the training experiments, and synthetic inputs for them.

Model code imports no parallelism: :mod:`hpcbench.parallel.modes` applies it. Each
:class:`ModelSpec` in :data:`MODELS` says how to build the model, how to make a
synthetic batch directly on the model's device (so that an experiment measures
computation and communication, not I/O), how to compute the loss, and what one
sample counts as in throughput (an image, ``seq_len`` tokens, or one forecast of a
whole grid).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from hpcbench.core.registry import Registry


@dataclass(frozen=True)
class ModelSpec:
    """One registered model."""

    name: str
    kind: str
    """``"image"`` (inputs: images + class labels), ``"text"`` (inputs: token ids) or ``"grid"``
    (inputs: gridded fields ``(B, channels, lat, lon)``; targets: the fields one time step later)."""
    build: Callable[[], Any]
    """Returns a randomly initialised ``nn.Module`` (on the CPU)."""
    description: str
    num_classes: int = 0
    """image models: classes of the head"""
    vocab_size: int = 0
    """text models: vocabulary of the tokens"""
    max_seq_len: int = 0
    """text models: the longest sequence the model accepts"""
    channels: int = 0
    """grid models: variables per grid point"""
    grid: tuple[int, int] = (0, 0)
    """grid models: (lat, lon) cells of the grid the model was built for"""

    @property
    def throughput_unit(self) -> str:
        return {"image": "images/s", "grid": "samples/s"}.get(self.kind, "tokens/s")

    def items_per_sample(self, *, seq_len: int) -> int:
        """What one sample adds to the throughput count: 1 image, ``seq_len`` tokens, or 1 forecast step."""
        return seq_len if self.kind == "text" else 1

    def synthetic_batch(self, batch_size: int, *, device: Any, seed: int, image_size: int = 224,
                        seq_len: int = 128) -> tuple[Any, Any]:
        """``(inputs, targets)`` made on ``device`` from ``seed``; nothing is read from storage.

        Images are standard-normal ``(B, 3, image_size, image_size)`` with uniform labels;
        text is uniform token ids ``(B, seq_len)`` whose targets are the ids shifted by one;
        grids are smooth travelling waves on the model's own grid (``image_size`` and
        ``seq_len`` do not apply) whose targets are the same waves one step later (see
        :func:`hpcbench.models.weather.synthetic_forecast_pair`).
        """
        import torch

        if self.kind == "grid":
            from hpcbench.models.weather import synthetic_forecast_pair

            lat, lon = self.grid
            x, y = synthetic_forecast_pair(batch_size, channels=self.channels, lat=lat, lon=lon, seed=seed)
            return x.to(device), y.to(device)
        gen = torch.Generator(device="cpu").manual_seed(seed)
        if self.kind == "image":
            x = torch.randn(batch_size, 3, image_size, image_size, generator=gen)
            y = torch.randint(0, self.num_classes, (batch_size,), generator=gen)
        else:
            if seq_len > self.max_seq_len:
                raise ValueError(f"seq_len={seq_len} exceeds {self.name}'s block size {self.max_seq_len}")
            ids = torch.randint(0, self.vocab_size, (batch_size, seq_len + 1), generator=gen)
            x, y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
        return x.to(device), y.to(device)

    def loss(self, output: Any, targets: Any) -> Any:
        """Cross-entropy of the model's output against the synthetic targets (grids: mean squared error)."""
        import torch.nn.functional as F

        if self.kind == "grid":
            return F.mse_loss(output, targets)
        if self.kind == "image":
            return F.cross_entropy(output, targets)
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), targets.reshape(-1))


MODELS: Registry[ModelSpec] = Registry("model")


def register(spec: ModelSpec) -> ModelSpec:
    return MODELS.register(spec.name, spec)


def _resnet(fn: str, classes: int) -> Callable[[], Any]:
    def build():
        from hpcbench.models import resnet

        return getattr(resnet, fn)(num_classes=classes)

    return build


def _gpt2(preset: str) -> Callable[[], Any]:
    def build():
        from hpcbench.models.gpt2 import gpt2

        return gpt2(preset)

    return build


def _gpt2_spec(preset: str, description: str) -> ModelSpec:
    from hpcbench.models.gpt2_presets import GPT2_PRESETS

    cfg = GPT2_PRESETS[preset]
    return ModelSpec(f"gpt2_{preset}", "text", _gpt2(preset), description, vocab_size=cfg.vocab_size,
                     max_seq_len=cfg.block_size)


def _weather(preset: str) -> Callable[[], Any]:
    def build():
        from hpcbench.models.weather import weather_model

        return weather_model(preset)

    return build


def _weather_spec(preset: str, grid_name: str, purpose: str) -> ModelSpec:
    # Shapes and the parameter count come from the torch-free presets, so the description cannot
    # drift from the model; one decimal of millions, two below 1 M (0.37 M, not 0.4 M).
    from hpcbench.models.weather_presets import WEATHER_PRESETS, parameter_count

    cfg = WEATHER_PRESETS[preset]
    millions = parameter_count(cfg) / 1e6
    description = (f"weather ViT, {cfg.channels} variables on {grid_name}{cfg.lat} x {cfg.lon} grid, "
                   f"{cfg.depth} blocks x {cfg.width} wide, {millions:.{2 if millions < 1 else 1}f} M parameters "
                   f"({purpose})")
    return ModelSpec(f"weather_{preset}", "grid", _weather(preset), description, channels=cfg.channels,
                     grid=(cfg.lat, cfg.lon))


register(ModelSpec("resnet50", "image", _resnet("resnet50", 1000),
                   "torchvision ResNet-50, 25.6 M parameters (the guide's C3 model)", num_classes=1000))
register(ModelSpec("resnet18", "image", _resnet("resnet18", 1000),
                   "torchvision ResNet-18, 11.7 M parameters", num_classes=1000))
register(ModelSpec("resnet_tiny", "image", _resnet("resnet_tiny", 10),
                   "torchvision ResNet, one BasicBlock per stage, 4.9 M parameters (CPU tests)", num_classes=10))
register(_gpt2_spec("tiny", "GPT-2, 2 layers x 64 wide, 0.13 M parameters (CPU tests)"))
register(_gpt2_spec("small", "GPT-2, 4 layers x 256 wide, 5.3 M parameters (CPU demos)"))
register(_gpt2_spec("124M", "GPT-2 small as published, 124 M parameters (the guide's C3 model)"))
register(_gpt2_spec("355M", "GPT-2 medium as published, 355 M parameters (a larger checkpoint state)"))
register(_weather_spec("tiny", "a ", "CPU tests"))
register(_weather_spec("small", "the 1.5 degree ", "CPU demos"))
register(_weather_spec("1deg", "the 1 degree ", "one GPU"))
register(_weather_spec("025deg", "the 0.25 degree ", "the guide's case"))

MODEL_NAMES = tuple(MODELS.names())

__all__ = ["MODELS", "MODEL_NAMES", "ModelSpec", "register"]
