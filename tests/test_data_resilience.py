"""Resilient reading (guide sec. 2.5), bad input, staging, page-cache eviction, prefetching."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from data_fixtures import SPEC, epoch_bytes, flip_unnoticed, image_sets, source_samples  # noqa: F401
from hpcbench.data.errors import DatasetNotFoundError, ManifestError, ShardError
from hpcbench.data.manifest import load_manifest, sha256_file, shard_paths
from hpcbench.data.page_cache import evict, residency
from hpcbench.data.prefetch import DevicePrefetcher, buffer_samples, prefetch_sweep
from hpcbench.data.readers import collate_samples, image_bytes, open_dataset
from hpcbench.data.staging import stage_dataset
from hpcbench.data.writers import convert
from hpcbench.core.errors import HpcbenchError, RegistryError

# torchvision 0.29 deprecates its JPEG decoder (torchcodec is not in the tested set); it still works.
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")



@pytest.fixture
def staged(image_sets, tmp_path):
    """A staged copy of each shard format (manifest 'source' = the original)."""
    return lambda fmt: stage_dataset(image_sets[fmt], tmp_path / f"staged-{fmt}", workers=2).path


def _flip_byte(path: Path, at: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0xFF
    path.write_bytes(bytes(data))


def _epoch_indices(ds, workers=2) -> list[int]:
    loader = DataLoader(ds, batch_size=4, num_workers=workers, collate_fn=collate_samples)
    return [i for batch in loader for i in batch["index"].tolist()]


@pytest.mark.parametrize("fmt", ["tfrecord", "tar", "hdf5"])
def test_corrupt_shard_is_repaired_and_epoch_is_exact(staged, image_sets, fmt):
    folder = staged(fmt)
    manifest, _ = load_manifest(folder)
    victim = folder / manifest.shards[1].path
    _flip_byte(victim)
    ds = open_dataset(folder, decode=False)
    seen = _epoch_indices(ds)
    assert sorted(seen) == list(range(SPEC.count)), "every sample exactly once despite the corrupt shard"
    repairs = ds.repairs()
    assert [r["shard"] for r in repairs] == [str(victim)]
    assert "sha256" in repairs[0]["reason"] and repairs[0]["source"] == str(image_sets[fmt].resolve() / victim.name)
    assert sha256_file(victim) == manifest.shards[1].sha256 and not ds.lost()


def test_truncated_shard_found_mid_read_is_repaired_without_repeats(staged):
    # verify="none": the fault shows up only when the record CRC/length check hits it, after
    # some samples of the piece were delivered; the retry resumes where it failed.
    folder = staged("tfrecord")
    manifest, _ = load_manifest(folder)
    victim = folder / manifest.shards[0].path
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size * 2 // 3])
    ds = open_dataset(folder, decode=False, verify="none", shuffle=False)
    seen = [item["index"] for item in ds]
    assert seen == list(range(SPEC.count))
    assert len(ds.repairs()) == 1 and "truncated" in ds.repairs()[0]["reason"]


@pytest.mark.parametrize("fmt", ["hdf5", "tar", "tfrecord"])
def test_zero_copy_batches_repair_a_shard_truncated_after_it_was_opened(staged, image_sets, fmt):
    # The batch path holds the shard open between batches and reads each sample with preadv:
    # a shard cut short under it gives a short read, which repairs the shard and reads the
    # sample from the repaired copy; every sample arrives once, with the source's bytes.
    folder = staged(fmt)
    manifest, _ = load_manifest(folder)
    victim = folder / manifest.shards[0].path
    ds = open_dataset(folder, decode=False, verify="none", shuffle=False, batch_in_worker=4)
    assert ds.zero_copy
    batches = iter(ds)
    first = next(batches)                         # shard 0 is open now, most of its samples unread
    assert first["index"].tolist() == [0, 1, 2, 3]
    with open(victim, "r+b") as fh:               # the same file (inode) the reader holds, cut short
        fh.truncate(victim.stat().st_size // 3)
    rest = list(batches)
    got = [first, *rest]
    assert [i for b in got for i in b["index"].tolist()] == list(range(SPEC.count))
    want = {i: data for i, (data, _) in source_samples(image_sets["files"]).items()}
    for batch in got:
        for i, data in zip(batch["index"].tolist(), image_bytes(batch)):
            assert data == want[i], f"sample {i}: bytes differ after the repair"
    repairs = ds.repairs()
    assert len(repairs) == 1 and ("bytes of sample" in repairs[0]["reason"] or "cut short" in repairs[0]["reason"])
    assert sha256_file(victim) == manifest.shards[0].sha256


def test_zero_copy_tfrecord_batches_check_every_record_and_repair_a_bad_one(staged, image_sets):
    # The index is built in the first epoch; a byte flipped inside a record's image afterwards
    # fails that record's data CRC in the next epoch (nothing is trusted because it was read
    # before), the shard is repaired, and the epoch still holds the source's bytes.
    folder = staged("tfrecord")
    manifest, _ = load_manifest(folder)
    ds = open_dataset(folder, decode=False, verify="none", batch_in_worker=6, seed=2)
    assert ds.zero_copy
    first = sorted(i for b in ds for i in b["index"].tolist())
    assert first == list(range(SPEC.count)) and not ds.repairs()
    victim = folder / manifest.shards[1].path
    # Same inode, size and mtime: the index kept from epoch 0 still applies, so only the CRC
    # check made on every read can find the flipped byte.
    flip_unnoticed(victim)
    ds.set_epoch(1)
    assert epoch_bytes(ds) == {i: b for i, (b, _) in source_samples(image_sets["files"]).items()}
    assert [r["shard"] for r in ds.repairs()] == [str(victim)]


def test_zero_copy_batches_fall_back_to_hdf5_reads_for_a_filtered_shard(image_sets, tmp_path):
    # A shard whose jpeg array is compressed is not one byte range of the file: its samples are
    # read through HDF5 (one copy each), the batches are the same as the per-sample path's.
    import h5py
    from hpcbench.data.readers.hdf5 import contiguous_start

    folder = tmp_path / "hdf5"
    shutil.copytree(image_sets["hdf5"], folder)
    manifest_path = folder / "manifest.json"
    doc = json.loads(manifest_path.read_text())
    shard = folder / doc["shards"][1]["path"]
    with h5py.File(shard, "r") as f:
        arrays = {k: f[k][()] for k in f}
        assert contiguous_start(f["jpeg"]) is not None     # as the writer stores it
    with h5py.File(shard, "w") as f:
        for k, v in arrays.items():
            f.create_dataset(k, data=v, **({"compression": "gzip", "chunks": (1 << 16,)} if k == "jpeg" else {}))
    with h5py.File(shard, "r") as f:
        assert contiguous_start(f["jpeg"]) is None
    doc["shards"][1].update(bytes=shard.stat().st_size, sha256=sha256_file(shard))
    manifest_path.write_text(json.dumps(doc))
    opts = dict(decode=False, seed=3, verify="size")
    batched = open_dataset(folder, batch_in_worker=5, **opts)
    per_sample = open_dataset(folder, **opts)
    assert batched.zero_copy
    a = list(batched)
    b = [collate_samples(chunk) for chunk in _chunks(list(per_sample), 5)]
    assert [x["index"].tolist() for x in a] == [y["index"].tolist() for y in b]
    assert [image_bytes(x) for x in a] == [y["image"] for y in b]


def _chunks(items: list, n: int) -> list[list]:
    return [items[k:k + n] for k in range(0, len(items), n)]


def test_wrong_size_shard_is_repaired_on_open(staged):
    folder = staged("tar")
    manifest, _ = load_manifest(folder)
    (folder / manifest.shards[2].path).write_bytes(b"short")
    ds = open_dataset(folder, decode=False)
    assert ds.repairs() and ds.repairs()[0]["stage"] == "open"
    assert sorted(item["index"] for item in ds) == list(range(SPEC.count))


def test_unrepairable_shard_is_a_clear_error(image_sets, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(image_sets["tfrecord"], folder)           # no source copy recorded
    manifest, _ = load_manifest(folder)
    victim = folder / manifest.shards[1].path
    _flip_byte(victim)
    ds = open_dataset(folder, decode=False)
    with pytest.raises(ShardError) as info:
        list(ds)
    assert isinstance(info.value, HpcbenchError)
    assert str(victim) in str(info.value) and "allow_skip" in str(info.value)
    assert info.value.samples == manifest.shards[1].samples
    assert ds.events.read("repair_failed")


def test_allow_skip_counts_lost_samples(image_sets, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(image_sets["hdf5"], folder)
    manifest, _ = load_manifest(folder)
    _flip_byte(folder / manifest.shards[0].path, at=0.9)
    ds = open_dataset(folder, decode=False, allow_skip=True)
    seen = _epoch_indices(ds)
    lost = ds.lost()
    assert sum(e["samples"] for e in lost) == manifest.shards[0].samples
    assert len(seen) + sum(e["samples"] for e in lost) == SPEC.count   # nothing lost silently
    assert len(set(seen)) == len(seen)


def test_source_copy_also_corrupt_is_unrepairable(staged, image_sets, tmp_path):
    folder = staged("tar")
    manifest, _ = load_manifest(folder)
    bad_source = tmp_path / "bad-source"
    shutil.copytree(image_sets["tar"], bad_source)
    _flip_byte(bad_source / manifest.shards[0].path)
    _flip_byte(folder / manifest.shards[0].path)
    ds = open_dataset(folder, decode=False, repair_from=bad_source)
    with pytest.raises(ShardError, match="could not be repaired"):
        list(ds)
    assert "does not match the manifest either" in ds.events.read("repair_failed")[0]["why"]


# -- bad input ----------------------------------------------------------------------

def test_path_that_does_not_exist(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=str(tmp_path / "nope")):
        open_dataset(tmp_path / "nope")


def test_missing_manifest_names_folder_and_fix(image_sets, tmp_path):
    folder = tmp_path / "nomanifest"
    shutil.copytree(image_sets["tar"], folder)
    (folder / "manifest.json").unlink()
    with pytest.raises(ManifestError, match="no manifest.json") as info:
        open_dataset(folder)
    assert str(folder) in str(info.value) and "data_prep" in str(info.value)


@pytest.mark.parametrize("edit,field", [
    (lambda d: d.pop("format"), "'format' is missing"),
    (lambda d: d.update(samples=d["samples"] + 1), "field 'samples'"),
    (lambda d: d["shards"][0].update(sha256=7), "shards[0]"),
    (lambda d: d["shards"][0].update(path="../../etc/passwd"), "inside the data set folder"),
])
def test_malformed_manifest_names_the_field(image_sets, tmp_path, edit, field):
    folder = tmp_path / "m"
    shutil.copytree(image_sets["tar"], folder)
    data = json.loads((folder / "manifest.json").read_text())
    edit(data)
    (folder / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match=field.replace("[", r"\[").replace("]", r"\]")):
        open_dataset(folder)


def test_manifest_that_does_not_match_the_files(image_sets, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(image_sets["tfrecord"], folder)
    manifest, _ = load_manifest(folder)
    (folder / manifest.shards[-1].path).unlink()
    with pytest.raises(ManifestError, match="does not match the files") as info:
        open_dataset(folder)
    assert manifest.shards[-1].path in str(info.value)
    (folder / "manifest.json").write_text("{not json")
    with pytest.raises(ManifestError, match="not readable JSON"):
        open_dataset(folder)


def test_unknown_format_lists_known_ones(image_sets, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(image_sets["tar"], folder)
    data = json.loads((folder / "manifest.json").read_text())
    data["format"] = "parquet"
    (folder / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(RegistryError, match="parquet.*files, hdf5, tar, tfrecord"):
        open_dataset(folder)
    with pytest.raises(RegistryError, match="zarr"):
        convert(image_sets["files"], tmp_path / "z", "zarr")
    with pytest.raises(ManifestError, match="converters read an image folder"):
        convert(image_sets["tar"], tmp_path / "t", "hdf5")


# -- staging, page cache, prefetching ------------------------------------------------

def test_staging_copies_and_verifies(image_sets, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_TMPDIR", str(tmp_path / "slurm_tmp"))
    result = stage_dataset(image_sets["hdf5"], workers=3)
    assert result.path.parent == tmp_path / "slurm_tmp"
    manifest, folder = load_manifest(result.path)
    assert manifest.source == str(image_sets["hdf5"].resolve())
    assert result.files == len(manifest.shards) and result.bytes == manifest.bytes and result.same_device
    assert [sha256_file(p) for p in shard_paths(manifest, folder)] == [s.sha256 for s in manifest.shards]


def test_eviction_empties_the_page_cache_for_these_files(image_sets):
    manifest, folder = load_manifest(image_sets["tfrecord"])
    paths = shard_paths(manifest, folder)
    for p in paths:
        p.read_bytes()
    assert residency(paths)[0] > 0.9
    result = evict(paths)
    assert result.resident_before > 0.9
    if not result.worked:
        pytest.skip(f"this file system ignores posix_fadvise: {result.describe()}")
    assert result.resident_after <= 0.05 and "evicted" in result.describe()


def test_sequential_read_reads_every_byte_into_page_aligned_buffers(tmp_path):
    # The benchmarks' reference read: every byte of every file, in chunks into buffers that lie as a file's
    # pages do (page-aligned), whatever the chunk size and the number of buffers.
    import mmap
    import os

    import numpy as np

    from hpcbench.data.page_cache import _read_buffers, sequential_read

    sizes = [0, 1, 3 * 4096 + 5, (1 << 20) + 17]
    paths = []
    for k, n in enumerate(sizes):
        paths.append(tmp_path / f"f{k}")
        paths[-1].write_bytes(os.urandom(n))
    for chunk, buffers in [(8 << 20, 1), (4096 + 3, 4), (1 << 16, 2)]:
        assert sequential_read(paths, chunk, buffers=buffers) == sum(sizes)
        for buf in _read_buffers(chunk, buffers):
            assert len(buf) == chunk and np.frombuffer(buf, np.uint8).ctypes.data % mmap.PAGESIZE == 0
    # the last buffer holds the end of the last file: the bytes really went through them
    last = _read_buffers(1 << 16, 2)
    tail = paths[-1].read_bytes()[-(sizes[-1] % (1 << 16)):]
    assert any(bytes(b[:len(tail)]) == tail for b in last)


def test_cat_read_times_gnu_cat_and_names_what_is_missing(tmp_path, monkeypatch):
    # The benchmarks' third reference: the system's `cat` on the same files. A missing file or a missing
    # `cat` is named before anything runs; otherwise the seconds cat took, its start-up subtracted.
    import os

    from hpcbench.data.page_cache import cat_read

    present = tmp_path / "present"
    present.write_bytes(os.urandom(3 << 20))
    seconds = cat_read([present, present])
    assert isinstance(seconds, float) and seconds >= 0.0
    with pytest.raises(FileNotFoundError, match="absent"):
        cat_read([present, tmp_path / "absent"])
    monkeypatch.setenv("PATH", str(tmp_path))  # a folder without `cat`
    with pytest.raises(FileNotFoundError, match="no `cat` on PATH"):
        cat_read([present])


def test_cpu_prefetcher_keeps_order_and_raises_errors():
    batches = [{"x": torch.full((2,), i)} for i in range(7)]
    out = list(DevicePrefetcher(batches, "cpu", depth=2))
    assert [int(b["x"][0]) for b in out] == list(range(7))

    def failing():
        yield {"x": torch.zeros(1)}
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        list(DevicePrefetcher(failing(), "cpu"))


def test_buffer_rule():
    assert buffer_samples(4, 32, 1) == 4 * 32          # C5: num_workers x batch_size
    assert prefetch_sweep() == [1, 2, 4]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU only: the CUDA side-stream prefetcher")
def test_cuda_prefetcher_moves_batches():
    batches = [{"x": torch.full((4,), i).pin_memory()} for i in range(3)]
    out = list(DevicePrefetcher(batches, "cuda"))
    assert [b["x"].device.type for b in out] == ["cuda"] * 3
    assert [int(b["x"][0]) for b in out] == [0, 1, 2]


def test_an_event_log_without_a_path_removes_its_own_folder_but_not_from_a_forked_child():
    import gc
    import os

    from hpcbench.data.resilience import EventLog

    log = EventLog()
    folder = log.path.parent
    log.add("open", shard=1)
    pid = os.fork()
    if pid == 0:  # a forked worker whose copy of the log is collected: its finalizer runs, the folder stays
        del log
        gc.collect()
        os._exit(0)
    os.waitpid(pid, 0)
    assert folder.is_dir() and log.read("open")[0]["shard"] == 1
    del log
    gc.collect()
    assert not folder.exists()
