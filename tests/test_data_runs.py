"""Run reads (``order="runs"``): runs of consecutive samples shuffled as units, each read in one call
straight into the batch, framing included; every sample once per epoch with its source's bytes, records
checked where they lie, a damaged shard repaired mid-run."""

from __future__ import annotations

import random
import shutil

import pytest
from torch.utils.data import DataLoader

from data_fixtures import SHARD_FORMATS, SPEC, epoch_bytes, flip_unnoticed, image_sets, source_samples  # noqa: F401
from hpcbench.data.errors import DataError
from hpcbench.data.manifest import load_manifest, sha256_file
from hpcbench.data.plan import cut_runs
from hpcbench.data.readers import image_bytes, loader_options, open_dataset
from hpcbench.data.staging import stage_dataset

ALL_FORMATS = ("files",) + SHARD_FORMATS


def test_cut_runs_partitions_the_positions_and_moves_its_boundaries():
    assert cut_runs(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert cut_runs(0, 4) == [] and cut_runs(3, 8) == [(0, 3)]
    firsts = set()
    for seed in range(40):
        runs = cut_runs(50, 7, random.Random(seed))
        assert [a for a, _ in runs] == [0] + [b for _, b in runs[:-1]] and runs[-1][1] == 50
        assert all(1 <= b - a <= 7 for a, b in runs)
        assert all(b - a == 7 for a, b in runs[1:-1])  # only the first and the last are short
        firsts.add(runs[0][1])
    assert firsts == set(range(1, 8)), "the first run's length is drawn from 1..run"
    with pytest.raises(ValueError, match="run=0"):
        cut_runs(5, 0)


@pytest.mark.parametrize("fmt", ALL_FORMATS)
def test_runs_deliver_every_sample_once_with_the_sources_bytes(image_sets, fmt):
    # 2 ranks x 2 DataLoader workers, batches of 4 filled from runs of up to 3 samples.
    expected = source_samples(image_sets["files"])
    orders = []
    for epoch in (0, 1):
        got: dict[int, tuple[bytes, int]] = {}
        order = []
        for rank in (0, 1):
            ds = open_dataset(image_sets[fmt], rank=rank, world_size=2, seed=1, decode=False, verify="size",
                              batch_in_worker=4, order="runs", run_samples=3)
            ds.set_epoch(epoch)
            for batch in DataLoader(ds, num_workers=2, **loader_options(ds, 4)):
                spans = batch["image_spans"]
                assert spans.shape == (len(batch["index"]), 2) and int(spans.max()) <= batch["image"].numel()
                assert (spans[:, 1] - spans[:, 0]).tolist() == batch["nbytes"].tolist()
                for i, data, label in zip(batch["index"].tolist(), image_bytes(batch), batch["label"].tolist()):
                    assert i not in got, f"epoch {epoch}: sample {i} delivered twice"
                    got[i] = (data, label)
                    order.append(i)
        assert got == expected, f"epoch {epoch}: lost samples, wrong bytes or wrong labels"
        orders.append(order)
    assert orders[0] != orders[1], "the order should change between epochs"


@pytest.mark.parametrize("fmt", SHARD_FORMATS)
def test_a_run_is_one_read_and_runs_are_shuffled_as_units(image_sets, fmt):
    n = SPEC.count
    ordered = open_dataset(image_sets[fmt], decode=False, verify="size", shuffle=False, batch_in_worker=8,
                           order="runs", run_samples=4)
    batches = list(ordered)
    assert [i for b in batches for i in b["index"].tolist()] == list(range(n))  # no shuffle: file order
    # Runs of 4 cut at batch edges and at shard ends: far fewer reads than samples, at least n / 4.
    assert n // 4 <= ordered.reads < n // 2
    shuffled = open_dataset(image_sets[fmt], decode=False, verify="size", seed=3, batch_in_worker=8,
                            order="runs", run_samples=4, shuffle_buffer=64)
    order = [i for b in shuffled for i in b["index"].tolist()]
    assert sorted(order) == list(range(n)) and order != list(range(n))
    # Each maximal stretch of consecutive indices is whole runs; a shuffle that kept runs apart leaves many
    # stretches of at most a few runs, not the file order.
    breaks = sum(1 for x, y in zip(order, order[1:]) if y != x + 1)
    assert breaks >= n // 4 // 3


def test_runs_are_refused_where_they_cannot_apply(image_sets):
    folder = image_sets["tar"]
    with pytest.raises(DataError, match="order='sideways'"):
        open_dataset(folder, decode=False, batch_in_worker=4, order="sideways")
    with pytest.raises(DataError, match="decode=True"):
        open_dataset(folder, decode=True, batch_in_worker=4, order="runs")
    with pytest.raises(DataError, match="batch_in_worker=None"):
        open_dataset(folder, decode=False, order="runs")
    with pytest.raises(DataError, match="run_samples=0"):
        open_dataset(folder, decode=False, batch_in_worker=4, order="runs", run_samples=0)



def test_a_reader_states_the_order_it_reads_in(image_sets, tmp_path):
    """What every reader benchmark's rows print: per-sample, runs of K, or none."""
    from hpcbench.data.generators.weather import WeatherSpec, make_weather
    from hpcbench.data.readers import WeatherDataset

    folder = image_sets["tar"]
    assert open_dataset(folder).order_label == "per-sample"
    assert open_dataset(folder, decode=False, batch_in_worker=4).order_label == "per-sample"
    assert open_dataset(folder, decode=False, batch_in_worker=4, order="runs", run_samples=8).order_label == "runs of 8"
    assert open_dataset(folder, shuffle=False).order_label == "none"
    make_weather(tmp_path / "w", WeatherSpec(steps=5, channels=2, lat=5, lon=8, steps_per_shard=5))
    assert WeatherDataset(tmp_path / "w", block_size=3).order_label == "runs of 3"
    assert WeatherDataset(tmp_path / "w", block_size=1).order_label == "per-sample"
    assert WeatherDataset(tmp_path / "w", shuffle=False).order_label == "none"

@pytest.fixture
def staged(image_sets, tmp_path):
    return lambda fmt: stage_dataset(image_sets[fmt], tmp_path / f"staged-{fmt}", workers=2).path


@pytest.mark.parametrize("fmt", SHARD_FORMATS)
def test_a_shard_truncated_under_a_run_is_repaired_and_its_samples_read_again(staged, image_sets, fmt):
    folder = staged(fmt)
    manifest, _ = load_manifest(folder)
    victim = folder / manifest.shards[0].path
    ds = open_dataset(folder, decode=False, verify="none", shuffle=False, batch_in_worker=4, order="runs",
                      run_samples=3)
    batches = iter(ds)
    first = next(batches)                          # shard 0 is open, most of it unread
    assert first["index"].tolist() == [0, 1, 2, 3]
    with open(victim, "r+b") as fh:                # the very file the reader holds, cut short
        fh.truncate(victim.stat().st_size // 3)
    got = [first, *batches]
    assert [i for b in got for i in b["index"].tolist()] == list(range(SPEC.count))
    want = {i: data for i, (data, _) in source_samples(image_sets["files"]).items()}
    for batch in got:
        for i, data in zip(batch["index"].tolist(), image_bytes(batch)):
            assert data == want[i], f"sample {i}: bytes differ after the repair"
    assert len(ds.repairs()) == 1 and sha256_file(victim) == manifest.shards[0].sha256


def test_tfrecord_runs_check_each_record_where_it_lies(staged, image_sets):
    # A byte flipped inside one record after the index was built (same inode, size and mtime): only the
    # CRC-32C check of the record inside the run read can find it; the shard is repaired, the bytes right.
    folder = staged("tfrecord")
    manifest, _ = load_manifest(folder)
    ds = open_dataset(folder, decode=False, verify="none", batch_in_worker=6, seed=2, order="runs", run_samples=5)
    assert sorted(i for b in ds for i in b["index"].tolist()) == list(range(SPEC.count)) and not ds.repairs()
    victim = folder / manifest.shards[1].path
    flip_unnoticed(victim)
    ds.set_epoch(1)
    assert epoch_bytes(ds) == {i: b for i, (b, _) in source_samples(image_sets["files"]).items()}
    assert [r["shard"] for r in ds.repairs()] == [str(victim)] and "CRC" in ds.repairs()[0]["reason"]


@pytest.mark.parametrize("fmt", SHARD_FORMATS)
@pytest.mark.parametrize("workers", [0, 1])
def test_each_sample_lies_in_its_batch_as_in_its_file_within_a_cache_line(image_sets, fmt, workers):
    # The kernel copies fastest when source and destination lie alike within a cache line: every run is read
    # to an address congruent to its file offset modulo 64, so each of its samples' bytes is too (in the
    # reader's own buffers and in a DataLoader worker's ring).
    from hpcbench.data.readers.base import COPY_ALIGN

    manifest, folder = load_manifest(image_sets[fmt])
    shards = [(folder / s.path).read_bytes() for s in manifest.shards]
    ds = open_dataset(folder, decode=False, verify="size", seed=4, batch_in_worker=5, order="runs", run_samples=3,
                      batch_ring=4 if workers else 0)
    seen = 0
    for batch in DataLoader(ds, num_workers=workers, **loader_options(ds, 5)):
        address = batch["image"].data_ptr()
        for (start, _), data in zip(batch["image_spans"].tolist(), image_bytes(batch)):
            offsets = [shard.find(data) for shard in shards if data in shard]
            assert len(offsets) == 1, "a sample's bytes are in exactly one shard"
            assert (address + start) % COPY_ALIGN == offsets[0] % COPY_ALIGN
            seen += 1
    assert seen == SPEC.count


def test_tfrecord_runs_read_in_pieces_of_whole_records_each_checked(staged, image_sets, monkeypatch):
    # Pieces smaller than a record: every record is a piece of its own, read and checked by itself; the epoch
    # still holds every sample's bytes, and a byte flipped in a later piece of a run is still found.
    from hpcbench.data.readers import base

    monkeypatch.setattr(base, "CHECKED_PIECE", 1)
    folder = staged("tfrecord")
    manifest, _ = load_manifest(folder)
    want = {i: b for i, (b, _) in source_samples(image_sets["files"]).items()}
    ds = open_dataset(folder, decode=False, verify="none", batch_in_worker=6, seed=2, order="runs", run_samples=5)
    assert epoch_bytes(ds) == want and ds.reads == SPEC.count and not ds.repairs()
    monkeypatch.setattr(base, "CHECKED_PIECE", 1 << 30)  # one piece per run, as tar and HDF5 read
    whole = open_dataset(folder, decode=False, verify="none", batch_in_worker=6, seed=2, order="runs",
                         run_samples=5)
    assert epoch_bytes(whole) == want and SPEC.count // 5 <= whole.reads < SPEC.count // 2
    monkeypatch.setattr(base, "CHECKED_PIECE", 1)
    flip_unnoticed(folder / manifest.shards[1].path)
    ds.set_epoch(1)
    assert epoch_bytes(ds) == want
    assert [r["shard"] for r in ds.repairs()] == [str(folder / manifest.shards[1].path)]


def test_runs_from_shards_held_in_memory_after_a_sha256_check(image_sets, tmp_path):
    # verify="sha256" reads each shard whole to hash it; runs are then copied out of that memory.
    folder = tmp_path / "tar"
    shutil.copytree(image_sets["tar"], folder)
    ds = open_dataset(folder, decode=False, verify="sha256", seed=4, batch_in_worker=5, order="runs")
    assert epoch_bytes(ds) == {i: b for i, (b, _) in source_samples(image_sets["files"]).items()}
