"""Models for the training experiments, and synthetic inputs for them.

Model code imports no parallelism: :mod:`hpcbench.parallel.modes` applies it. Each
:class:`ModelSpec` in :data:`MODELS` says how to build the model, how to make a
synthetic batch directly on the model's device (so that an experiment measures
computation and communication, not I/O), how to compute the loss, and what one
sample counts as in throughput (an image, or ``seq_len`` tokens).
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
    """``"image"`` (inputs: images + class labels) or ``"text"`` (inputs: token ids)."""
    build: Callable[[], Any]
    """Returns a randomly initialised ``nn.Module`` (on the CPU)."""
    description: str
    num_classes: int = 0
    """image models: classes of the head"""
    vocab_size: int = 0
    """text models: vocabulary of the tokens"""
    max_seq_len: int = 0
    """text models: the longest sequence the model accepts"""

    @property
    def throughput_unit(self) -> str:
        return "images/s" if self.kind == "image" else "tokens/s"

    def items_per_sample(self, *, seq_len: int) -> int:
        """What one sample adds to the throughput count: 1 image, or ``seq_len`` tokens."""
        return 1 if self.kind == "image" else seq_len

    def synthetic_batch(self, batch_size: int, *, device: Any, seed: int, image_size: int = 224,
                        seq_len: int = 128) -> tuple[Any, Any]:
        """``(inputs, targets)`` made on ``device`` from ``seed``; nothing is read from storage.

        Images are standard-normal ``(B, 3, image_size, image_size)`` with uniform labels;
        text is uniform token ids ``(B, seq_len)`` whose targets are the ids shifted by one.
        """
        import torch

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
        """Cross-entropy of the model's output against the synthetic targets."""
        import torch.nn.functional as F

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

MODEL_NAMES = tuple(MODELS.names())

__all__ = ["MODELS", "MODEL_NAMES", "ModelSpec", "register"]
