"""GPT-2 shapes, without torch: the model registry reads them without importing torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPT2Config:
    """Shape of one GPT-2; ``GPT2_PRESETS`` names the ones hpcbench uses."""

    n_layer: int = 12
    """transformer blocks"""
    n_head: int = 12
    """attention heads; must divide n_embd"""
    n_embd: int = 768
    """model width"""
    vocab_size: int = 50257
    """GPT-2's BPE vocabulary"""
    block_size: int = 1024
    """longest sequence (learned position embeddings)"""

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_head", "n_embd", "vocab_size", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"GPT2Config.{name}: {getattr(self, name)} is out of range; allowed: >= 1")
        if self.n_embd % self.n_head:
            raise ValueError(f"GPT2Config.n_head: {self.n_head} does not divide n_embd={self.n_embd}")


GPT2_PRESETS: dict[str, GPT2Config] = {
    # ~0.13 M parameters: a 4-rank gradient test on 2 CPU cores takes seconds.
    "tiny": GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=512, block_size=128),
    # ~7 M parameters: enough gradient bytes (~28 MB) for communication to show on CPU links.
    "small": GPT2Config(n_layer=4, n_head=4, n_embd=256, vocab_size=8192, block_size=256),
    # The published GPT-2 small: 124 M parameters (with the tied head).
    "124M": GPT2Config(),
    # The published GPT-2 medium: 355 M parameters; the larger state of the checkpoint sweep (C11).
    "355M": GPT2Config(n_layer=24, n_head=16, n_embd=1024),
}
