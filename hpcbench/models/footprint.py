"""What a model needs, from its name alone: parameters, layer outputs and work per input item.

Used for estimates before anything starts (the run limits and ``--dry-run``, see
:mod:`hpcbench.run.limits`): a training step's memory and rough time without building
the model or importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.models.weather_presets import WEATHER_PRESETS, WeatherConfig, parameter_count  # torch-free


@dataclass(frozen=True)
class ModelFootprint:
    """Sizes of one registered model, enough for a training estimate without building it.

    Units are per input *item*: one pixel position of an image (``image_size ** 2`` per image),
    one token (``seq_len`` per sequence) or one whole grid sample (a weather model's grid is
    fixed by its preset, so its sizes are per sample).
    """

    parameters: int
    activation_floats_per_item: float
    """float32 values of all layer outputs per item (what backward keeps, roughly)"""
    macs_per_item: float
    """forward multiply-accumulates per item; one training step is about 6 x that in FLOPs"""


#: ResNets, measured once on the built models (3 x 32 x 32 and 224 x 224 inputs): parameters,
#: layer-output floats per input pixel, forward MACs at 224 x 224 / 224**2.
_RESNET_FOOTPRINTS = {
    "resnet_tiny": ModelFootprint(4_910_922, 104.6, 0.8887e9 / 224 ** 2),
    "resnet18": ModelFootprint(11_689_512, 150.5, 1.814e9 / 224 ** 2),
    "resnet50": ModelFootprint(25_557_032, 641.5, 4.089e9 / 224 ** 2),
}


def model_footprint(name: str) -> ModelFootprint | None:
    """The footprint of a registered model; None for a model this table does not know.

    GPT-2s are computed from their preset: parameters V d + T d + L (12 d^2 + 13 d) + 2 d
    (tied head), layer outputs per token V + 3 d + 15 L d (logits, embeddings, final norm;
    per block: 2 norms, qkv, attention out, proj, MLP in, GELU, MLP out), MACs per token ~ the
    parameters (attention's T^2 term left out: rough). Weather models: see :func:`weather_footprint`.
    """
    if name in _RESNET_FOOTPRINTS:
        return _RESNET_FOOTPRINTS[name]
    if name.startswith("weather_"):
        weather = WEATHER_PRESETS.get(name[len("weather_"):])
        return weather_footprint(weather) if weather else None
    from hpcbench.models.gpt2_presets import GPT2_PRESETS  # torch-free

    preset = GPT2_PRESETS.get(name[len("gpt2_"):]) if name.startswith("gpt2_") else None
    if preset is None:
        return None
    d, layers, vocab = preset.n_embd, preset.n_layer, preset.vocab_size
    params = vocab * d + preset.block_size * d + layers * (12 * d * d + 13 * d) + 2 * d
    return ModelFootprint(params, vocab + 3 * d + 15 * layers * d, params)


def weather_footprint(cfg: WeatherConfig) -> ModelFootprint:
    """A weather ViT's footprint per grid sample (its only item), from its shape.

    With width d, n tokens after padding and patching, L blocks, MLP ratio r, C channels,
    patch p and out = C p^2 values per token:

    * parameters: :func:`~hpcbench.models.weather_presets.parameter_count` (exact);
    * layer outputs: n (3 d + L (7 + 2 r) d + out) + 2 C lat lon (patch embedding, position sum
      and final norm; per block the same 7 + 2 r widths as GPT-2's; the head; the padded input
      and the output field), within 1 % of what autograd saves for the tiny and small presets;
    * forward MACs: n (2 out d + L ((4 + 2 r) d^2 + 2 n d)) (patch embedding and head; per block
      qkv, proj and the MLP, then Q K^T and A V over all n tokens: full attention over the globe,
      which dominates at 0.25 degree). Both parts equal what
      ``torch.utils.flop_counter.FlopCounterMode`` counts (tests/test_weather_model.py).
    """
    d, n, layers, r = cfg.width, cfg.tokens, cfg.depth, cfg.mlp_ratio
    out = cfg.channels * cfg.patch ** 2
    activations = n * (3 * d + layers * (7 + 2 * r) * d + out) + 2 * cfg.channels * cfg.lat * cfg.lon
    macs = n * (2 * out * d + layers * ((4 + 2 * r) * d * d + 2 * n * d))
    return ModelFootprint(parameter_count(cfg), activations, macs)


@dataclass(frozen=True)
class AssumedSpeed:
    """Round effective speeds for the rough time estimates: not peaks, not measurements of this machine."""

    flops: float
    """training FLOP/s of one rank"""
    link_bytes_s: float
    """bytes/s one rank moves in a collective"""
    latency_s: float
    """seconds of one small collective"""


#: gloo on CPU cores (a few GFLOP/s per core, loopback or Ethernet); NCCL on a data-centre GPU.
CPU_SPEED = AssumedSpeed(flops=10e9, link_bytes_s=1e9, latency_s=100e-6)
GPU_SPEED = AssumedSpeed(flops=10e12, link_bytes_s=10e9, latency_s=30e-6)


def _items(name: str, image_size: int, seq_len: int) -> int:
    """Footprint items in one sample of model ``name``: pixels of one image, tokens of one sequence, or 1 grid."""
    from hpcbench.models import MODELS

    return {"image": image_size ** 2, "text": seq_len, "grid": 1}[MODELS.get(name).kind]


def training_memory(name: str, *, samples: int, image_size: int, seq_len: int, state_copies: int) -> int | None:
    """Bytes one rank holds training model ``name`` on ``samples`` per micro-batch; None: no footprint.

    ``state_copies`` float32 copies of the parameters (weights, gradients, DDP's buckets, ...)
    plus twice the layer outputs of the micro-batch (kept for backward, and their gradients).
    Against measured CPU training peaks (ResNet-18/50, GPT-2 small/124M, batches 2-16) this is
    1.0-1.7x the real figure; for the tiny models it is ~10 MiB short, allocator overhead that
    RANK_BYTES's margin over the measured 314 MiB covers.
    """
    fp = model_footprint(name)
    if fp is None:
        return None
    activations = 2 * 4 * fp.activation_floats_per_item * _items(name, image_size, seq_len) * samples
    return int(state_copies * 4 * fp.parameters + activations)


def training_step_seconds(name: str, *, samples: int, image_size: int, seq_len: int, ranks: int,
                          speed: AssumedSpeed) -> float | None:
    """Rough seconds of one optimizer step: 6 x MACs of ``samples`` at ``speed`` plus one gradient all_reduce."""
    from hpcbench.core.metrics import allreduce_bytes_sent

    fp = model_footprint(name)
    if fp is None:
        return None
    compute = 6 * fp.macs_per_item * _items(name, image_size, seq_len) * samples / speed.flops
    reduce = allreduce_bytes_sent(4 * fp.parameters, ranks) / speed.link_bytes_s
    return compute + reduce + speed.latency_s
