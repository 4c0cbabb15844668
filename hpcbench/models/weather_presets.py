"""Weather-model shapes, without torch: the model registry and the footprints read them without importing torch.

Parameter count (:func:`parameter_count`): with width d, MLP ratio r, C channels, patch p
and N tokens, ``(C p^2 d + d) + N d + depth ((4 + 2 r) d^2 + (9 + r) d) + 2 d + (d C p^2 + C p^2)``
(patch embedding, position embedding, blocks, final norm, head); the model is
:class:`hpcbench.models.weather.WeatherViT`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from hpcbench.core.errors import ConfigError

__all__ = ["WEATHER_PRESETS", "WeatherConfig", "parameter_count"]


@dataclass(frozen=True)
class WeatherConfig:
    """Shape of one weather model; :data:`WEATHER_PRESETS` names the ones hpcbench uses."""

    channels: int = 8
    """variables per grid point (the data generator's 8)"""
    lat: int = 121
    """latitude rows of the grid (121: the generator's 1.5 degree grid; 721 at 0.25 degree)"""
    lon: int = 240
    """longitude columns (240 at 1.5 degree; 1440 at 0.25 degree)"""
    patch: int = 8
    """grid cells per token side (FourCastNet uses 8 at 0.25 degree)"""
    width: int = 256
    """token width d"""
    depth: int = 4
    """transformer blocks"""
    heads: int = 4
    """attention heads; must divide width"""
    mlp_ratio: int = 4
    """MLP hidden width / d (4 as in ViT and GPT-2)"""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{value!r} is out of range; allowed: an integer >= 1", field=f.name,
                                  config="WeatherConfig")
        if self.width % self.heads:
            raise ConfigError(f"{self.heads} does not divide width={self.width}", field="heads",
                              config="WeatherConfig")

    @property
    def padding(self) -> tuple[int, int, int, int]:
        """Cells added ``(north, south, west, east)`` so that the patch size divides the grid."""
        dlat = -self.lat % self.patch
        dlon = -self.lon % self.patch
        return dlat // 2, dlat - dlat // 2, dlon // 2, dlon - dlon // 2

    @property
    def token_grid(self) -> tuple[int, int]:
        """Tokens along latitude and longitude after padding."""
        return -(-self.lat // self.patch), -(-self.lon // self.patch)

    @property
    def tokens(self) -> int:
        rows, cols = self.token_grid
        return rows * cols


WEATHER_PRESETS: dict[str, WeatherConfig] = {
    # 0.37 M parameters on a 32 x 64 grid: a 2-rank gloo test takes seconds on one core.
    "tiny": WeatherConfig(lat=32, lon=64, patch=4, width=96, depth=3, heads=3),
    # 3.5 M parameters on the generator's default 121 x 240 grid (1.5 degree): CPU demos.
    "small": WeatherConfig(),
    # 26 M parameters on a 1 degree grid (181 x 360): one GPU, a fast tuning loop.
    "1deg": WeatherConfig(lat=181, lon=360, width=512, depth=8, heads=8),
    # 320 M parameters on the 0.25 degree ERA5 grid (721 x 1440, 16,380 tokens): fills a data-centre
    # GPU at a few samples per step, as the guide's case does.
    "025deg": WeatherConfig(lat=721, lon=1440, width=1024, depth=24, heads=16),
}


def parameter_count(cfg: WeatherConfig) -> int:
    """Trainable parameters of ``WeatherViT(cfg)``, from the formula in the module docstring."""
    d, r, out = cfg.width, cfg.mlp_ratio, cfg.channels * cfg.patch ** 2
    embed = out * d + d
    position = cfg.tokens * d
    block = (4 + 2 * r) * d * d + (9 + r) * d
    head = d * out + out
    return embed + position + cfg.depth * block + 2 * d + head
