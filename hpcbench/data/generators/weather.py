"""A weather-like gridded data set: ``fields[time, channel, lat, lon]`` float32 in chunked HDF5.

Content: per channel, a few travelling planetary waves (zonal wave numbers 1-6 drifting
eastward at channel-specific speeds) on a latitude-dependent mean, plus small noise, so
that the fields are smooth like reanalysis data (they compress and interpolate like
it) and change from step to step. One chunk is one time step of one channel: the unit a
forecasting model's loader reads. Deterministic in the seed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hpcbench.data.manifest import Manifest, shard_entry

DEFAULT_CHANNELS = ("t2m", "u10", "v10", "msl", "z500", "t850", "q700", "tp")


@dataclass(frozen=True)
class WeatherSpec:
    steps: int = 64
    channels: int = 8
    lat: int = 121
    lon: int = 240
    steps_per_shard: int = 32
    seed: int = 0


#: Travelling waves per channel; each is (zonal wave number, amplitude, eastward speed, phase).
WAVES_PER_CHANNEL = 4


def draw_waves(rng: np.random.Generator, channels: int) -> np.ndarray:
    """Random planetary waves for :func:`render_step`, ``(channels, WAVES_PER_CHANNEL, 4)`` float64.

    Zonal wave numbers 1-6 (planetary scale, so the fields stay smooth), amplitudes 0.05-0.3
    (a fraction of the channel's mean, 1-2.4 at the equator), eastward phase speeds 0.02-0.2 rad
    per step (a field changes a little from one step to the next) and any phase. The draws are
    made in this order, channel by channel: :func:`make_weather`'s files for a seed depend on it,
    byte for byte. :func:`hpcbench.models.weather.synthetic_forecast_pair` draws its waves here too.
    """
    n = WAVES_PER_CHANNEL
    return np.stack([np.stack([rng.integers(1, 7, n), rng.uniform(0.05, 0.3, n), rng.uniform(0.02, 0.2, n),
                               rng.uniform(0, 2 * np.pi, n)], axis=1) for _ in range(channels)])


def render_step(t: int, spec: WeatherSpec, waves: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    lat = np.linspace(-np.pi / 2, np.pi / 2, spec.lat)[:, None]
    lon = np.linspace(0, 2 * np.pi, spec.lon, endpoint=False)[None, :]
    out = np.empty((spec.channels, spec.lat, spec.lon), dtype=np.float32)
    for c in range(spec.channels):
        field = np.cos(lat) * (1.0 + 0.2 * c)
        for k, amp, speed, phase in waves[c]:
            field = field + amp * np.cos(lat) ** 2 * np.cos(k * lon - speed * t + phase)
        out[c] = field + rng.normal(0, 0.01, size=field.shape)
    return out


def make_weather(out: str | os.PathLike, spec: WeatherSpec, *, command: str = "") -> Manifest:
    """Write ``ceil(steps / steps_per_shard)`` HDF5 shards of ``fields`` + a manifest."""
    import h5py

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(spec.seed)
    waves = draw_waves(rng, spec.channels)
    names = [DEFAULT_CHANNELS[c] if c < len(DEFAULT_CHANNELS) else f"ch{c}" for c in range(spec.channels)]
    shards = []
    for first in range(0, spec.steps, spec.steps_per_shard):
        n = min(spec.steps_per_shard, spec.steps - first)
        path = out / f"weather-{len(shards):05d}.h5"
        # Chunks placed at multiples of 64 bytes: a reader that reads them straight into its 64-byte aligned
        # buffers (WeatherDataset's preadv) then has source and destination alike within a cache line, which
        # the kernel's copy out of the page cache needs for its fast path (hpcbench.data.readers.base.COPY_ALIGN).
        with h5py.File(path, "w", alignment_threshold=4096, alignment_interval=64) as f:
            ds = f.create_dataset("fields", shape=(n, spec.channels, spec.lat, spec.lon), dtype="float32",
                                  chunks=(1, 1, spec.lat, spec.lon))
            for i in range(n):
                ds[i] = render_step(first + i, spec, waves, rng)
            f.create_dataset("time_step", data=np.arange(first, first + n, dtype=np.int64))
            f.create_dataset("lat", data=np.linspace(-90, 90, spec.lat, dtype=np.float32))
            f.create_dataset("lon", data=np.linspace(0, 360, spec.lon, endpoint=False, dtype=np.float32))
            ds.attrs["dims"] = "time,channel,lat,lon"
            ds.attrs["channels"] = names
        shards.append(shard_entry(out, path, n))
    manifest = Manifest(format="weather_hdf5", shards=shards, command=command,
                        params={"steps": spec.steps, "channels": spec.channels, "lat": spec.lat,
                                "lon": spec.lon, "steps_per_shard": spec.steps_per_shard, "seed": spec.seed},
                        extra={"dataset": "fields", "dims": ["time", "channel", "lat", "lon"],
                               "dtype": "float32", "channels": names,
                               "chunk": [1, 1, spec.lat, spec.lon]})
    manifest.write(out)
    return manifest
