"""Weather batches read from the disk every time: the page cache is dropped before each batch.

What the fault experiments need from a data pipeline: each rank reads its forecasting pairs
(:class:`hpcbench.data.readers.weather.WeatherDataset`, no read-ahead) ``batch_size`` at a time,
and before every batch the data set's files are dropped from the page cache
(``posix_fadvise(DONTNEED)``), so the block read that follows reaches the disk and a throttle on
it (a blkio cgroup, a slow device) shows in each read's time. The data set is made once per
task, in the task's folder, and flushed so its pages can be dropped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterator

#: Time steps per shard of the generated data set; 2 shards hold 62 forecasting pairs (lead 1).
STEPS_PER_SHARD, SHARDS = 32, 2


def prepare_weather_data(out_dir: str | os.PathLike, *, channels: int, grid: tuple[int, int], seed: int,
                         command: str) -> str:
    """The task's weather data set (``out_dir/data``) on a model's grid, made once, flushed to the disk.

    Args:
        out_dir: the task's folder.
        channels, grid: the weather model's variables per grid point and (lat, lon) cells
            (:attr:`hpcbench.models.ModelSpec.channels`, :attr:`~hpcbench.models.ModelSpec.grid`).
        seed: the generator's seed.
        command: what made it, written into the manifest.

    Returns:
        The data set's folder.
    """
    from hpcbench.data.generators.weather import WeatherSpec, make_weather

    folder = Path(out_dir) / "data"
    if not (folder / "manifest.json").is_file():
        make_weather(folder, WeatherSpec(steps=SHARDS * STEPS_PER_SHARD, channels=channels, lat=grid[0],
                                         lon=grid[1], steps_per_shard=STEPS_PER_SHARD, seed=seed),
                     command=command)
    os.sync()  # dirty pages cannot be dropped: every later read must reach the disk
    return str(folder)


class ColdWeatherBatches:
    """This rank's forecasting pairs, ``batch_size`` at a time, every read from the disk.

    Each read's seconds and bytes go to ``on_read(seconds, nbytes)``.
    """

    def __init__(self, folder: str | os.PathLike, *, rank: int, world_size: int, seed: int, batch_size: int):
        from hpcbench.data.readers.weather import WeatherDataset

        folder = Path(folder)
        self.ds = WeatherDataset(folder, rank=rank, world_size=world_size, seed=seed, block_size=batch_size,
                                 readahead=0, verify="size")
        self.files = sorted(folder.glob("*.h5"))
        self.batch_size = batch_size
        self.epoch = 0
        self._it = self._pairs()

    def _pairs(self) -> Iterator[dict]:
        while True:
            self.ds.set_epoch(self.epoch)
            yield from self.ds
            self.epoch += 1

    def drop_cache(self) -> None:
        for path in self.files:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)

    def next(self, on_read: Callable[[float, int], Any]) -> tuple[Any, Any]:
        """The next batch ``(x, y)`` as tensors, read after the page cache was dropped."""
        import torch

        self.drop_cache()
        xs, ys = [], []
        for _ in range(self.batch_size):
            item = next(self._it)
            if item["read_bytes"] > 0:
                on_read(float(item["read_s"]), int(item["read_bytes"]))
            xs.append(torch.as_tensor(item["x"]))
            ys.append(torch.as_tensor(item["y"]))
        return torch.stack(xs), torch.stack(ys)




def data_folder_of(records_file: str | os.PathLike) -> Path:
    """``<task dir>/data``, from one of the task's records files (``<task dir>/records/<name>.parquet``).

    The ranks find the data set :func:`prepare_weather_data` made next to their records, so the
    config stays the task's own.
    """
    return Path(records_file).parent.parent / "data"


__all__ = ["ColdWeatherBatches", "SHARDS", "STEPS_PER_SHARD", "data_folder_of", "prepare_weather_data"]
