"""A weather-forecast model: a vision transformer over latitude x longitude grids (T-case, section 3).

The guide's tuning case (C7-C9) trains a weather-forecast model; this is one in the
spirit of FourCastNet / ClimaX-style forecasters, written in plain PyTorch (no
parallelism imported, see :mod:`hpcbench.parallel`):

* input ``(batch, channels, lat, lon)``: one time step of several variables (by default
  the 8 of :mod:`hpcbench.data.generators.weather`: t2m, u10, v10, msl, z500, t850, q700, tp);
* output of the same shape: the fields one time step later, predicted as the input plus
  a learned increment (a persistence forecast is the natural starting point);
* patch embedding (``patch x patch`` cells -> one token), a learned position embedding,
  ``depth`` pre-LayerNorm transformer blocks with full (non-causal) attention, a final
  LayerNorm and a linear head back to ``patch x patch x channels`` values per token.

Grids that the patch size does not divide are padded, then the output is cropped back:
latitude by repeating the polar rows (split between north and south), longitude
circularly (the globe is periodic in longitude). The generator's default 1.5 degree grid,
121 x 240, becomes 128 x 240 with ``patch=8`` (3 rows added in the north, 4 in the south).

LayerNorm modules are named ``layer_norm_*`` so that the gradient-compression skip list
of the guide (``skip_compression=['layer_norm']``, and the broader ``norm``) finds them.

The shapes (:class:`WeatherConfig`, :data:`WEATHER_PRESETS`) and the parameter count
(:func:`parameter_count`) live in :mod:`hpcbench.models.weather_presets`, which imports no
torch, so that the model registry and the footprints can read them; they are re-exported here.
"""

from __future__ import annotations

from dataclasses import fields, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from hpcbench.core.errors import ConfigError
from hpcbench.models.weather_presets import WEATHER_PRESETS, WeatherConfig, parameter_count

__all__ = ["WEATHER_PRESETS", "WeatherConfig", "WeatherViT", "parameter_count", "synthetic_forecast_pair",
           "weather_model"]


class Attention(nn.Module):
    """Full self-attention over the tokens of the globe (no mask: every cell sees every other)."""

    def __init__(self, cfg: WeatherConfig):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.width, 3 * cfg.width)
        self.proj = nn.Linear(cfg.width, cfg.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (z.view(b, n, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(x).split(d, dim=2))
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    """Pre-LayerNorm transformer block."""

    def __init__(self, cfg: WeatherConfig):
        super().__init__()
        hidden = cfg.mlp_ratio * cfg.width
        self.layer_norm_attn = nn.LayerNorm(cfg.width)
        self.attn = Attention(cfg)
        self.layer_norm_mlp = nn.LayerNorm(cfg.width)
        self.mlp = nn.Sequential(nn.Linear(cfg.width, hidden), nn.GELU(), nn.Linear(hidden, cfg.width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.layer_norm_attn(x))
        return x + self.mlp(self.layer_norm_mlp(x))


class WeatherViT(nn.Module):
    """Fields ``(batch, channels, lat, lon)`` at step t in, the fields at step t + 1 out (same shape)."""

    def __init__(self, cfg: WeatherConfig):
        super().__init__()
        self.cfg = cfg
        out = cfg.channels * cfg.patch ** 2
        self.patch_embed = nn.Conv2d(cfg.channels, cfg.width, kernel_size=cfg.patch, stride=cfg.patch)
        self.position = nn.Parameter(torch.zeros(1, cfg.tokens, cfg.width))
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.layer_norm_out = nn.LayerNorm(cfg.width)
        self.head = nn.Linear(cfg.width, out)
        self.apply(self._init_weights)
        nn.init.normal_(self.position, std=0.02)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # ViT's init: small normal weights, zero biases; LayerNorm keeps (1, 0).
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    def _pad(self, x: torch.Tensor) -> torch.Tensor:
        north, south, west, east = self.cfg.padding
        if west or east:
            x = F.pad(x, (west, east, 0, 0), mode="circular")  # longitude wraps around the globe
        if north or south:
            x = F.pad(x, (0, 0, north, south), mode="replicate")  # latitude does not: repeat the polar rows
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        if x.dim() != 4 or tuple(x.shape[1:]) != (cfg.channels, cfg.lat, cfg.lon):
            raise ValueError(f"expected fields (batch, {cfg.channels}, {cfg.lat}, {cfg.lon}), got {tuple(x.shape)}")
        b = x.shape[0]
        rows, cols = cfg.token_grid
        p, c = cfg.patch, cfg.channels
        tokens = self.patch_embed(self._pad(x)).flatten(2).transpose(1, 2) + self.position
        for block in self.blocks:
            tokens = block(tokens)
        patches = self.head(self.layer_norm_out(tokens))  # (b, rows * cols, c * p * p)
        delta = patches.view(b, rows, cols, c, p, p).permute(0, 3, 1, 4, 2, 5).reshape(b, c, rows * p, cols * p)
        north, _, west, _ = cfg.padding
        return x + delta[:, :, north:north + cfg.lat, west:west + cfg.lon]


def weather_model(preset: str, **overrides: int) -> WeatherViT:
    """A randomly initialised :class:`WeatherViT` of one of :data:`WEATHER_PRESETS`.

    ``overrides`` replace fields of the preset (e.g. ``lat=33, lon=65`` for an odd grid).
    """
    try:
        cfg = WEATHER_PRESETS[preset]
    except KeyError:
        raise ConfigError(f"unknown weather preset {preset!r}; valid: {list(WEATHER_PRESETS)}",
                          field="preset") from None
    unknown = sorted(set(overrides) - {f.name for f in fields(WeatherConfig)})
    if unknown:
        raise ConfigError(f"unknown WeatherConfig field(s) {unknown}; valid: {[f.name for f in fields(WeatherConfig)]}",
                          field=unknown[0])
    return WeatherViT(replace(cfg, **overrides))


def synthetic_forecast_pair(batch_size: int, *, channels: int, lat: int, lon: int,
                            seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Smooth random fields at step t and the same fields at step t + 1, ``(B, channels, lat, lon)`` float32.

    Each sample draws its own travelling planetary waves with the generator's
    :func:`~hpcbench.data.generators.weather.draw_waves` (zonal wave numbers 1-6, amplitudes
    0.05-0.3, eastward speeds 0.02-0.2 rad per step) and is rendered by its
    :func:`~hpcbench.data.generators.weather.render_step` at a random time t and t + 1: the task
    is the data set's own dynamics (waves drift, plus 0.01 noise that nothing can predict).
    """
    import numpy as np

    from hpcbench.data.generators.weather import WeatherSpec, draw_waves, render_step

    spec = WeatherSpec(channels=channels, lat=lat, lon=lon, seed=seed)
    rng = np.random.default_rng(seed)
    now = np.empty((batch_size, channels, lat, lon), dtype=np.float32)
    nxt = np.empty_like(now)
    for i in range(batch_size):
        waves = draw_waves(rng, channels)
        t = int(rng.integers(0, 1000))
        now[i] = render_step(t, spec, waves, rng)
        nxt[i] = render_step(t + 1, spec, waves, rng)
    return torch.from_numpy(now), torch.from_numpy(nxt)
