"""Block reads from HDF5 (one read per block of samples, not one per sample): the weather reader
and the image HDF5 reader's block path.

Real files made by the project's generators; reads are counted by wrapping h5py's own
``Dataset.__getitem__``/``read_direct`` and ``os.preadv`` (the real call still runs), not by
trusting the readers' counters. No timings are asserted (hpcbench.bench.hdf5_reads measures them).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from hpcbench.data.errors import DataError, ManifestError, ShardError
from hpcbench.data.generators.images import ImageSpec, make_images
from hpcbench.data.generators.weather import WeatherSpec, make_weather
from hpcbench.data.manifest import Manifest, load_manifest, shard_entry
from hpcbench.data.readers import weather as weather_reader
from hpcbench.data.readers.hdf5 import HDF5Dataset
from hpcbench.data.readers.weather import WeatherDataset, block_reads, chunk_table, epoch_blocks, shard_blocks
from hpcbench.data.staging import stage_dataset
from hpcbench.data.writers import convert

#: 23 steps in shards of 6, 6, 6, 5 -> 5 + 5 + 5 + 4 = 19 pairs; blocks of 2 -> 3 + 3 + 3 + 2 = 11 blocks.
SPEC = WeatherSpec(steps=23, channels=3, lat=7, lon=12, steps_per_shard=6, seed=3)
PAIRS, BLOCKS, BLOCK = 19, 11, 2


@pytest.fixture(scope="module")
def weather(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("weather") / "w"
    make_weather(folder, SPEC)
    return folder


@pytest.fixture(scope="module")
def stored(weather) -> dict[int, np.ndarray]:
    """{data set step: fields} as the generator stored them, read with plain h5py."""
    manifest, folder = load_manifest(weather)
    steps, t = {}, 0
    for shard in manifest.shards:
        with h5py.File(folder / shard.path) as f:
            for row in f["fields"][:]:
                steps[t] = row
                t += 1
    return steps


@pytest.fixture
def hdf5_calls(monkeypatch):
    """{dataset name: HDF5 data reads, "preadv": direct reads}, counted around the real calls."""
    calls: dict[str, int] = {}
    preadv = os.preadv

    def counted_preadv(*args):
        calls["preadv"] = calls.get("preadv", 0) + 1
        return preadv(*args)

    monkeypatch.setattr(os, "preadv", counted_preadv)
    for method in ("__getitem__", "read_direct"):
        original = getattr(h5py.Dataset, method)

        def counted(self, *args, _original=original, **kwargs):
            calls[self.name] = calls.get(self.name, 0) + 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(h5py.Dataset, method, counted)
    return calls


def _shard_last_steps() -> set[int]:
    ends, t = set(), 0
    for first in range(0, SPEC.steps, SPEC.steps_per_shard):
        t = min(first + SPEC.steps_per_shard, SPEC.steps)
        ends.add(t - 1)
    return ends


def test_chunks_and_read_buffers_lie_on_cache_lines(tmp_path):
    # The direct reads copy each chunk from the page cache into the block's buffer: the generator places chunks
    # at multiples of 64 bytes and the reader's buffers are page-aligned, so every copy is line to line.
    spec = WeatherSpec(steps=6, channels=2, lat=16, lon=64, steps_per_shard=3, seed=1)  # 4 KiB chunks
    make_weather(tmp_path / "w", spec)
    manifest, folder = load_manifest(tmp_path / "w")
    for shard in manifest.shards:
        with h5py.File(folder / shard.path) as f:
            offsets = chunk_table(f["fields"])
        assert offsets is not None and (offsets % 64 == 0).all(), offsets.ravel() % 64
    ds = WeatherDataset(folder, verify="size", block_size=2, readahead=0, seed=0)
    blocks = [item["x"] for item in ds]
    assert len(blocks) == len(ds) and all(x.data_ptr() % 64 == 0 for x in blocks)


@pytest.mark.parametrize("direct", [True, False])
def test_pairs_are_consecutive_steps_with_the_generators_values(weather, stored, direct):
    ds = WeatherDataset(weather, seed=4, block_size=BLOCK, direct=direct)
    items = list(ds)
    assert len(items) == len(ds) == ds.pairs == PAIRS
    assert sorted(i["index"] for i in items) == list(range(PAIRS))
    # Every step is an input except the last of each shard: pairs never cross a shard.
    assert sorted(i["step"] for i in items) == sorted(set(range(SPEC.steps)) - _shard_last_steps())
    for item in items:
        assert item["x"].dtype == torch.float32 and item["x"].shape == (3, 7, 12) == ds.sample_shape
        assert np.array_equal(item["x"].numpy(), stored[item["step"]])
        assert np.array_equal(item["y"].numpy(), stored[item["step"] + 1])
    assert not torch.equal(items[0]["x"], items[0]["y"])  # the fields move from step to step


@pytest.mark.parametrize("direct", [True, False])
def test_lead_channels_crop_and_stride(weather, stored, direct):
    ds = WeatherDataset(weather, seed=1, block_size=3, lead=2, channels=["v10", 0], lat=(1, 6, 2),
                        lon=slice(None, None, -3), direct=direct)
    items = list(ds)
    assert len(items) == 4 * 3 + 3 and ds.sample_shape == (2, 3, 4)
    for item in items:
        want_x = stored[item["step"]][[2, 0]][:, 1:6:2, ::-3]
        want_y = stored[item["step"] + 2][[2, 0]][:, 1:6:2, ::-3]
        assert np.array_equal(item["x"].numpy(), want_x) and np.array_equal(item["y"].numpy(), want_y)
        assert item["x"].is_contiguous()


def test_two_ranks_two_workers_cover_each_epoch_exactly_once(weather):
    orders = []
    loaders = {rank: WeatherDataset(weather, rank=rank, world_size=2, seed=7, block_size=BLOCK, verify="size")
               for rank in (0, 1)}
    runs = {rank: DataLoader(ds, batch_size=3, num_workers=2, persistent_workers=True)
            for rank, ds in loaders.items()}
    for epoch in (0, 1):
        seen, reads = [], []
        for rank, ds in loaders.items():
            ds.set_epoch(epoch)  # reaches the persistent workers
            rank_seen = []
            for batch in runs[rank]:
                assert batch["x"].shape[1:] == batch["y"].shape[1:] == (3, 7, 12)
                rank_seen += batch["index"].tolist()
                reads += block_reads(batch)
            assert len(rank_seen) == len(ds)
            seen += rank_seen
        assert sorted(seen) == list(range(PAIRS)), f"epoch {epoch}: lost or repeated pairs"
        # One recorded read per planned block (a block is split only where a worker's slice ends).
        planned = sum(len(loaders[r].plan(epoch, worker=w, workers=2)) for r in (0, 1) for w in (0, 1))
        assert len(reads) == planned and BLOCKS <= planned <= BLOCKS + 3
        assert all(b > 0 and s > 0 for b, s in reads)
        orders.append(seen)
    assert orders[0] != orders[1], "the order should change between epochs"


def test_the_block_permutation_is_the_same_on_every_rank(weather):
    one = WeatherDataset(weather, seed=11, block_size=BLOCK)
    ranks = [WeatherDataset(weather, rank=r, world_size=3, seed=11, block_size=BLOCK) for r in range(3)]
    for epoch in (0, 1):
        # The ranks' plans are consecutive cuts of one shared sequence: the single-rank one.
        joined = [(b.shard, p) for ds in ranks for b in ds.plan(epoch) for p in range(b.start, b.stop)]
        alone = [(b.shard, p) for b in one.plan(epoch) for p in range(b.start, b.stop)]
        assert joined == alone
    assert one.plan(0) != one.plan(1)
    assert WeatherDataset(weather, seed=12, block_size=BLOCK).plan(0) != one.plan(0)
    assert [i["index"] for i in one] == [i["index"] for i in WeatherDataset(weather, seed=11, block_size=BLOCK)]


def test_shuffle_mixes_shards_and_pairs_inside_blocks(weather):
    ds = WeatherDataset(weather, seed=2, block_size=5)
    order = [i["index"] for i in ds]
    shards = [b.shard for b in ds.plan(0)]
    assert shards != sorted(shards), "blocks should come from the shards in a shuffled order"
    runs = [order[k:k + 5] for k in range(0, 15, 5)]  # the first three blocks are whole (5 pairs)
    assert any(r != sorted(r) for r in runs), "pairs inside a block should be shuffled"
    assert all(max(r) - min(r) == 4 for r in runs), "a block is consecutive pairs of one shard"
    plain = WeatherDataset(weather, shuffle=False, block_size=5)
    assert [i["index"] for i in plain] == list(range(PAIRS))


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("block_size,reads", [(BLOCK, BLOCKS), (1, PAIRS), (100, 4)])
def test_one_read_per_block_not_per_pair(weather, hdf5_calls, block_size, reads, direct):
    ds = WeatherDataset(weather, seed=5, block_size=block_size, verify="size", direct=direct)
    items = list(ds)
    assert len(items) == PAIRS
    # direct: one preadv per block and no HDF5 data call at all; else one HDF5 call per block.
    calls = {"preadv": hdf5_calls.get("preadv", 0), "hdf5": hdf5_calls.get("/fields", 0)}
    assert calls == ({"preadv": reads, "hdf5": 0} if direct else {"preadv": 0, "hdf5": reads})
    assert reads == len(ds.plan(0)) == ds.reads
    recorded = [r for item in items for r in block_reads(item)]
    step_bytes = 3 * 7 * 12 * 4
    assert len(recorded) == reads
    # Bytes read: the block's steps, plus (direct) the HDF5 index nodes between its chunks.
    for (nbytes, _), want in zip(sorted(recorded), sorted((len(b) + 1) * step_bytes for b in ds.plan(0))):
        assert want <= nbytes <= want + (8192 if direct else 0)
    assert sum(item["opens"] for item in items) == 4  # each shard opened once (all stay open)


def test_direct_reads_split_at_gaps_and_keep_values(weather, stored, hdf5_calls, monkeypatch):
    # No gap may be read through: channels 2, 1 leave channel 0 of every step out, so each
    # step of a block is a run of its own (index nodes may split further).
    monkeypatch.setattr(weather_reader, "GAP_BYTES", 0)
    ds = WeatherDataset(weather, seed=5, block_size=BLOCK, channels=[2, 1], verify="size")
    items = list(ds)
    assert len(items) == PAIRS
    for item in items:
        assert np.array_equal(item["x"].numpy(), stored[item["step"]][[2, 1]])
        assert np.array_equal(item["y"].numpy(), stored[item["step"] + 1][[2, 1]])
    assert hdf5_calls.get("/fields", 0) == 0
    assert hdf5_calls["preadv"] == ds.reads >= sum(len(b) + 1 for b in ds.plan(0))


def _rewrite(weather: Path, out: Path, *, compression: str | None, channel_major: bool) -> Path:
    """A copy of the data set with ``fields`` compressed, or its chunks stored channel by channel."""
    manifest, folder = load_manifest(weather)
    out.mkdir()
    shards = []
    for entry in manifest.shards:
        with h5py.File(folder / entry.path) as src, h5py.File(out / entry.path, "w") as dst:
            data = src["fields"][:]
            fields = dst.create_dataset("fields", shape=data.shape, dtype=data.dtype, chunks=src["fields"].chunks,
                                        compression=compression)
            # HDF5 places a chunk when it is first written: channel by channel puts a step's
            # channels far apart in the file, so file order differs from array order.
            for c in range(data.shape[1]) if channel_major else []:
                fields[:, c] = data[:, c]
            if not channel_major:
                fields[...] = data
        shards.append(shard_entry(out, out / entry.path, entry.samples))
    Manifest(format=manifest.format, shards=shards, params=manifest.params, extra=manifest.extra).write(out)
    return out


def test_compressed_shards_fall_back_to_one_hdf5_call_per_block(weather, stored, hdf5_calls, tmp_path):
    folder = _rewrite(weather, tmp_path / "gz", compression="gzip", channel_major=False)
    with h5py.File(folder / "weather-00000.h5") as f:
        assert chunk_table(f["fields"]) is None  # compressed chunks cannot be read as plain bytes
    hdf5_calls.clear()  # the copying above read through h5py too
    ds = WeatherDataset(folder, seed=5, block_size=BLOCK, verify="size")
    items = list(ds)
    assert all(np.array_equal(i["x"].numpy(), stored[i["step"]]) for i in items) and len(items) == PAIRS
    assert hdf5_calls.get("preadv", 0) == 0 and hdf5_calls["/fields"] == BLOCKS


def test_direct_reads_place_chunks_stored_out_of_order(weather, stored, hdf5_calls, tmp_path):
    folder = _rewrite(weather, tmp_path / "cm", compression=None, channel_major=True)
    with h5py.File(folder / "weather-00000.h5") as f:
        table = chunk_table(f["fields"])
        assert (np.diff(table[:, 0]) > 0).all() and table[1, 0] < table[0, 1]  # steps of channel 0 first
    hdf5_calls.clear()
    ds = WeatherDataset(folder, seed=5, block_size=BLOCK, lead=2, verify="size")
    items = list(ds)
    assert len(items) == PAIRS - 4
    for i in items:
        assert np.array_equal(i["x"].numpy(), stored[i["step"]]) and np.array_equal(i["y"].numpy(), stored[i["step"] + 2])
    assert hdf5_calls.get("/fields", 0) == 0 and hdf5_calls["preadv"] == ds.reads


def test_epoch_blocks_partition_every_epoch():
    blocks = shard_blocks([5, 0, 7, 3], 3)
    assert [len(b) for b in blocks] == [3, 2, 3, 3, 1, 3]
    for consumers in (1, 4, 7, 20):
        for epoch in range(3):
            got = sorted((b.shard, p) for c in range(consumers)
                         for b in epoch_blocks(blocks, consumers=consumers, consumer=c, seed=0, epoch=epoch,
                                               shuffle=True)
                         for p in range(b.start, b.stop))
            assert got == sorted((b.shard, p) for b in blocks for p in range(b.start, b.stop))


# -- corrupt shards and bad input ---------------------------------------------------------

def _flip_byte(path: Path, at: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupt_shard_without_a_source_is_a_clear_error(weather, tmp_path):
    folder = tmp_path / "w"
    shutil.copytree(weather, folder)
    victim = folder / load_manifest(folder)[0].shards[2].path
    _flip_byte(victim)
    with pytest.raises(ShardError, match="could not be repaired") as info:
        list(WeatherDataset(folder, seed=0))
    assert str(victim) in str(info.value) and "sha256" in str(info.value)


def test_corrupt_shard_is_repaired_from_the_staged_source(weather, stored, tmp_path):
    folder = stage_dataset(weather, tmp_path / "staged", workers=2).path
    victim = folder / load_manifest(folder)[0].shards[1].path
    _flip_byte(victim)
    ds = WeatherDataset(folder, seed=0)
    items = list(ds)
    assert sorted(i["index"] for i in items) == list(range(PAIRS))
    assert all(np.array_equal(i["x"].numpy(), stored[i["step"]]) for i in items)
    assert [r["shard"] for r in ds.repairs()] == [str(victim)]


def test_shard_truncated_after_opening_is_named(weather, tmp_path):
    # verify="none": nothing checks the file before HDF5 reads it; the error still names it.
    folder = tmp_path / "w"
    shutil.copytree(weather, folder)
    ds = WeatherDataset(folder, verify="none", shuffle=False, block_size=BLOCK)
    victim = folder / load_manifest(folder)[0].shards[0].path
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    with pytest.raises(ShardError, match="could not be repaired") as info:
        list(ds)
    assert str(victim) in str(info.value) and info.value.samples == BLOCK
    with pytest.raises(ManifestError, match="does not match the files"):
        WeatherDataset(folder)  # opened afterwards, the size check sees it up front


def test_shard_damaged_while_read_ahead_is_repaired(weather, stored, tmp_path):
    # The shard is open and a read ahead of it is in flight when it loses its tail: the
    # background read fails, the consuming thread reads the block again, repairs, goes on.
    folder = stage_dataset(weather, tmp_path / "staged", workers=2).path
    ds = WeatherDataset(folder, verify="none", shuffle=False, block_size=BLOCK, readahead=1)
    items = iter(ds)
    got = [next(items)]                                   # block 0 taken, block 1 started
    victim = folder / load_manifest(folder)[0].shards[0].path
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size * 3 // 5])
    got += list(items)
    assert [i["index"] for i in got] == list(range(PAIRS))
    assert all(np.array_equal(i["x"].numpy(), stored[i["step"]]) for i in got)
    assert [r["shard"] for r in ds.repairs()] == [str(victim)]
    assert "ends early" in ds.repairs()[0]["reason"]


def test_reads_ahead_change_nothing_but_timing(weather):
    runs = [[(i["index"], i["read_bytes"], i["opens"]) for i in WeatherDataset(weather, seed=9, block_size=BLOCK,
                                                                            readahead=n)]
            for n in (0, 1, 3)]
    assert runs[0] == runs[1] == runs[2]
    with pytest.raises(DataError, match="readahead=-1"):
        WeatherDataset(weather, readahead=-1)


def test_allow_skip_counts_every_pair_of_the_lost_shard(weather, tmp_path):
    folder = tmp_path / "w"
    shutil.copytree(weather, folder)
    _flip_byte(folder / load_manifest(folder)[0].shards[3].path)
    ds = WeatherDataset(folder, seed=0, block_size=BLOCK, allow_skip=True)
    seen = [i["index"] for i in ds]
    lost = sum(e["samples"] for e in ds.lost())
    assert lost == 4 and len(seen) + lost == PAIRS and len(set(seen)) == len(seen)


def test_bad_arguments_name_the_field(weather, tmp_path):
    with pytest.raises(DataError, match="channel 'sst'.*t2m"):
        WeatherDataset(weather, channels=["sst"])
    with pytest.raises(DataError, match="lat=.*keeps no point"):
        WeatherDataset(weather, lat=(5, 5))
    with pytest.raises(DataError, match="block_size=0"):
        WeatherDataset(weather, block_size=0)
    with pytest.raises(DataError, match="rank 2"):
        WeatherDataset(weather, rank=2, world_size=2)
    make_images(tmp_path / "img", ImageSpec(count=2, classes=1, mean_bytes=4000), processes=1)
    with pytest.raises(ManifestError, match="'files', not 'weather_hdf5'"):
        WeatherDataset(tmp_path / "img")


# -- the image HDF5 reader's block path ----------------------------------------------------

@pytest.fixture(scope="module")
def images(tmp_path_factory) -> tuple[Path, Path]:
    """(JPEG folder, its HDF5 shards): 24 JPEGs of ~12 KB in shards of ~100 KB."""
    root = tmp_path_factory.mktemp("images")
    make_images(root / "files", ImageSpec(count=24, classes=2, mean_bytes=12_000, seed=3), processes=1)
    convert(root / "files", root / "hdf5", "hdf5", shard_bytes=100_000)
    return root / "files", root / "hdf5"


@pytest.mark.parametrize("block_bytes", [0, 30_000, HDF5Dataset.block_bytes])
def test_image_block_reads_deliver_the_same_bytes_with_fewer_calls(images, hdf5_calls, block_bytes):
    files, hdf5 = images
    manifest, folder = load_manifest(files)
    expected = {i: ((folder / s.path).read_bytes(), s.label) for i, s in enumerate(manifest.shards)}
    ds = HDF5Dataset(hdf5, decode=False, verify="size", seed=1)
    ds.block_bytes = block_bytes
    got = {item["index"]: (item["image"], item["label"]) for item in ds}
    assert got == expected
    shards = load_manifest(hdf5)[0].shards
    if block_bytes == 0:
        want = len(expected)                 # the former path: one call per sample
    elif block_bytes >= max(s.bytes for s in shards):
        want = len(shards)                   # a whole shard per call
    else:
        want = None
    assert hdf5_calls["/jpeg"] == ds.reads
    if want is not None:
        assert ds.reads == want
    else:
        # 30 KB blocks of ~12 KB images: several calls per shard, far fewer than samples.
        assert len(shards) < ds.reads < len(expected)
