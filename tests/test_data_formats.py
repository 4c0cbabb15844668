"""Formats, converters and readers: round trips, the formats' own libraries, exact coverage."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from data_fixtures import SHARD_FORMATS, SPEC, image_sets, source_samples  # noqa: F401
from hpcbench.data import tfrecord_format as tfr
from hpcbench.data.generators.tokens import EOT, TokenSpec, make_tokens
from hpcbench.data.generators.weather import WeatherSpec, make_weather
from hpcbench.data.manifest import check_files, load_manifest, sha256_file
from hpcbench.data.plan import buffer_shuffle, epoch_pieces
from hpcbench.data.errors import DataError
from hpcbench.data.readers import READERS, collate_samples, decode_jpeg, image_bytes, loader_options, open_dataset

# torchvision 0.29 deprecates its JPEG decoder (torchcodec is not in the tested set); it still works.
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")


ALL_FORMATS = ("files",) + SHARD_FORMATS
REPO = Path(__file__).resolve().parents[1]


def test_registry_has_every_format():
    assert READERS.names() == sorted(ALL_FORMATS)


def test_generated_folder_is_imagenet_like(image_sets):
    manifest, folder = load_manifest(image_sets["files"])
    assert manifest.samples == SPEC.count and manifest.format == "files"
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["class_000", "class_001", "class_002"]
    sizes = np.array([s.bytes for s in manifest.shards])
    assert 0.6 * SPEC.mean_bytes < sizes.mean() < 1.4 * SPEC.mean_bytes   # log-normal around the mean
    assert sizes.std() > 0.15 * sizes.mean()                                # sizes vary like real files
    assert not check_files(manifest, folder, deep=True)
    assert decode_jpeg((folder / manifest.shards[0].path).read_bytes()).shape[0] == 3


def test_generation_is_deterministic(tmp_path, image_sets):
    from hpcbench.data.generators.images import ImageSpec, make_images

    again = make_images(tmp_path / "again", ImageSpec(count=5, classes=3, mean_bytes=12_000, seed=7), processes=1)
    first, _ = load_manifest(image_sets["files"])
    assert [s.sha256 for s in again.shards] == [s.sha256 for s in first.shards[:5]]


@pytest.mark.parametrize("fmt", ALL_FORMATS)
def test_round_trip_same_samples_labels_bytes(image_sets, fmt):
    expected = source_samples(image_sets["files"])
    manifest, _ = load_manifest(image_sets[fmt])
    assert manifest.samples == len(expected)
    if fmt != "files":
        assert len(manifest.shards) > 2
    got = {}
    for item in open_dataset(image_sets[fmt], decode=False, shuffle=True, seed=3):
        assert item["index"] not in got, "a sample was delivered twice"
        got[item["index"]] = (item["image"], item["label"])
    assert got == expected


def test_decoding_is_identical_across_formats(image_sets):
    images = {}
    for fmt in ALL_FORMATS:
        for item in open_dataset(image_sets[fmt], shuffle=False, image_size=32):
            if item["index"] == 5:
                images[fmt] = item["image"]
    assert all(torch.equal(images["files"], img) for img in images.values())
    assert images["files"].shape == (3, 32, 32) and images["files"].dtype == torch.uint8


def _psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = (a.float() - b.float()).pow(2).mean().item()
    return float("inf") if mse == 0 else 10 * np.log10(255 ** 2 / mse)


@pytest.fixture(scope="module")
def imagenet_like_jpegs() -> list[bytes]:
    """24 JPEGs of the benchmark's size (~110 KB, ImageNet's mean: most reach 1/2 at 224 px, if any scale) and 8
    of ~500 KB (~1,000 px a side: 1/2 and 1/4), spread over the generator's size range."""
    from hpcbench.data.generators.images import ImageSpec, render_jpeg

    imagenet, large = ImageSpec(count=2000, classes=10), ImageSpec(count=2000, classes=10, mean_bytes=500_000)
    return ([render_jpeg(i, imagenet) for i in range(0, 2000, 2000 // 24)]
            + [render_jpeg(i, large) for i in range(0, 2000, 2000 // 8)])


def test_scaled_decode_stays_within_its_tolerance_of_the_full_one(imagenet_like_jpegs):
    """At the benchmark's 224 px, every image decoded at a DCT scale lies within the stated bounds of the full
    decode + resize; an image without a reduction (a side under twice the target) is the full path's, exactly."""
    from PIL import Image

    from hpcbench.data.readers.base import (SCALED_DECODE_CHECKED_AT, SCALED_DECODE_MAX_MAD,
                                            SCALED_DECODE_MIN_PSNR_DB)

    size, scaled_ones = SCALED_DECODE_CHECKED_AT, 0
    for data in imagenet_like_jpegs:
        scaled, full = decode_jpeg(data, size), decode_jpeg(data, size, jpeg_decode="full")
        assert scaled.shape == full.shape == (3, size, size) and scaled.dtype == torch.uint8
        width, height = Image.open(io.BytesIO(data)).size
        if min(width, height) < 2 * size:
            assert torch.equal(scaled, full)
            continue
        scaled_ones += 1
        mad = (scaled.float() - full.float()).abs().mean().item()
        assert mad <= SCALED_DECODE_MAX_MAD and _psnr(scaled, full) >= SCALED_DECODE_MIN_PSNR_DB, (width, height)
        assert not torch.equal(scaled, full)  # it did decode at a reduced scale
    assert scaled_ones >= 14, "too few images large enough to be decoded at a reduced scale"


def test_the_tolerance_would_catch_a_wrong_decode(imagenet_like_jpegs):
    """The bounds fail a scaled path gone wrong: channels swapped, the grid shifted by a pixel, or a scale far
    too coarse to cover the target (1/8 of the largest ImageNet-sized image, then enlarged)."""
    from PIL import Image
    from torchvision.transforms.v2 import functional as F

    from hpcbench.data.readers.base import SCALED_DECODE_CHECKED_AT, SCALED_DECODE_MAX_MAD, SCALED_DECODE_MIN_PSNR_DB

    size = SCALED_DECODE_CHECKED_AT
    data = max(imagenet_like_jpegs[:24], key=len)
    full = decode_jpeg(data, size, jpeg_decode="full")
    image = Image.open(io.BytesIO(data))
    image.draft("RGB", (image.width // 8, image.height // 8))
    assert min(image.size) < size
    too_coarse = F.resize(F.pil_to_tensor(image.convert("RGB")), [size, size], antialias=True)
    for wrong in (full.flip(0), full.roll(1, dims=2), too_coarse):
        mad = (wrong.float() - full.float()).abs().mean().item()
        assert mad > SCALED_DECODE_MAX_MAD or _psnr(wrong, full) < SCALED_DECODE_MIN_PSNR_DB


def test_jpeg_decode_is_checked_and_reaches_the_reader(image_sets):
    with pytest.raises(DataError, match="jpeg_decode='fast'"):
        open_dataset(image_sets["files"], jpeg_decode="fast")
    with pytest.raises(DataError, match="jpeg_decode"):
        decode_jpeg(b"", 32, jpeg_decode="fast")
    data = source_samples(image_sets["files"])[0][0]
    for mode in ("scaled", "full"):
        item = next(iter(open_dataset(image_sets["files"], shuffle=False, image_size=32, jpeg_decode=mode)))
        assert torch.equal(item["image"], decode_jpeg(data, 32, jpeg_decode=mode))
    # the fixture's ~170 px images reach 1/4 at 32 px: the two ways differ
    assert not torch.equal(decode_jpeg(data, 32), decode_jpeg(data, 32, jpeg_decode="full"))


@pytest.mark.parametrize("jpeg_decode", ["scaled", "full"])
def test_a_damaged_jpeg_fails_the_same_way_either_way(image_sets, jpeg_decode):
    data = source_samples(image_sets["files"])[0][0]
    for garbage in (b"not a jpeg at all" * 100, data[:len(data) // 3]):  # not a JPEG; cut short
        with pytest.raises(RuntimeError):  # what the reader reports as a DataError naming the sample
            decode_jpeg(garbage, 32, jpeg_decode=jpeg_decode)


def test_tfrecord_package_reads_our_shards(image_sets):
    from tfrecord.reader import tfrecord_loader

    expected = source_samples(image_sets["files"])
    manifest, folder = load_manifest(image_sets["tfrecord"])
    seen = 0
    for shard in manifest.shards:
        for rec in tfrecord_loader(str(folder / shard.path), None, {"image": "byte", "label": "int", "key": "byte"}):
            index = int(bytes(rec["key"]))
            assert (bytes(rec["image"]), int(rec["label"][0])) == expected[index]
            seen += 1
    assert seen == len(expected)


def test_example_codec_matches_protobuf():
    from tfrecord import example_pb2

    ours = tfr.encode_example({"image": b"\x00\xffjpeg", "label": -3, "many": [1, 2, 300000]})
    ex = example_pb2.Example.FromString(ours)
    assert ex.features.feature["image"].bytes_list.value == [b"\x00\xffjpeg"]
    assert list(ex.features.feature["label"].int64_list.value) == [-3]
    assert list(ex.features.feature["many"].int64_list.value) == [1, 2, 300000]
    theirs = example_pb2.Example()
    theirs.features.feature["label"].int64_list.value.extend([7, -1])
    theirs.features.feature["image"].bytes_list.value.append(b"abc")
    assert tfr.decode_example(theirs.SerializeToString()) == {"label": [7, -1], "image": [b"abc"]}


def test_masked_crc32c_known_value():
    # CRC-32C("123456789") = 0xE3069283 (the check value of the Castagnoli polynomial).
    crc = 0xE3069283
    assert tfr.masked_crc32c(b"123456789") == ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def test_crc32c_agrees_with_an_independent_implementation_at_every_length_class():
    # The hardware CRC switches code paths with the input's length (byte tail, 8-byte crc32, folding over
    # 64-256-byte blocks): each class against the crc32c package (a separate SSE4.2 implementation, installed
    # with the tfrecord test dependency), from buffers as the readers pass them (memoryviews of numpy memory).
    import crc32c

    rng = np.random.default_rng(1)
    for n in [0, 1, 7, 8, 63, 64, 255, 256, 4097, 120_001, 1 << 20]:
        data = rng.integers(0, 256, n + 3, dtype=np.uint8)
        view = memoryview(data)[3:]  # unaligned
        assert tfr._crc32c(view) == crc32c.crc32c(view.tobytes()), n


def test_webdataset_package_reads_our_shards(image_sets):
    import webdataset as wds

    expected = source_samples(image_sets["files"])
    manifest, folder = load_manifest(image_sets["tar"])
    urls = [str(folder / s.path) for s in manifest.shards]
    got = {int(s["__key__"]): (s["jpg"], int(s["cls"])) for s in wds.WebDataset(urls, shardshuffle=False)}
    assert got == expected


@pytest.mark.parametrize("fmt", ["files", "tfrecord", "hdf5"])
def test_two_ranks_two_workers_cover_the_epoch_exactly_once(image_sets, fmt):
    n = SPEC.count
    orders = []
    for epoch in (0, 1):
        seen = []
        for rank in (0, 1):
            ds = open_dataset(image_sets[fmt], rank=rank, world_size=2, seed=1, decode=False)
            ds.set_epoch(epoch)
            loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=collate_samples, pin_memory=False)
            rank_seen = [i for batch in loader for i in batch["index"].tolist()]
            assert len(rank_seen) == len(ds)
            seen += rank_seen
        assert sorted(seen) == list(range(n)), f"epoch {epoch}: lost or repeated samples"
        orders.append(seen)
    assert orders[0] != orders[1], "the order should change between epochs"


@pytest.mark.parametrize("fmt", ALL_FORMATS)
def test_batched_path_covers_the_epoch_exactly_once_with_partial_batches(image_sets, fmt):
    # 60 samples over 2 ranks x 2 workers = 15 per worker: batches of 4, 4, 4 and a partial 3.
    expected = source_samples(image_sets["files"])
    for epoch in (0, 1):
        got: dict[int, tuple[bytes, int]] = {}
        sizes = []
        for rank in (0, 1):
            ds = open_dataset(image_sets[fmt], rank=rank, world_size=2, seed=1, decode=False, verify="size",
                              batch_in_worker=4)
            ds.set_epoch(epoch)
            loader = DataLoader(ds, num_workers=2, **loader_options(ds, 4))
            for batch in loader:
                indices = batch["index"].tolist()
                sizes.append(len(indices))
                assert batch["image"].dtype == torch.uint8 and batch["image"].dim() == 1
                assert batch["image_offsets"].tolist()[-1] == batch["image"].numel() == int(batch["nbytes"].sum())
                for i, data, label in zip(indices, image_bytes(batch), batch["label"].tolist()):
                    assert i not in got, f"epoch {epoch}: sample {i} delivered twice"
                    got[i] = (data, label)
        assert got == expected, f"epoch {epoch}: lost samples or wrong bytes"
        assert sorted(sizes) == [3] * 4 + [4] * 12, "each worker's last partial batch must be kept"


@pytest.mark.parametrize("decode,verify", [(False, "size"), (False, "sha256"), (False, "none"), (True, "size")])
@pytest.mark.parametrize("fmt", ALL_FORMATS)
def test_batched_and_per_sample_paths_yield_identical_batches(image_sets, fmt, decode, verify):
    # decode=False is the zero-copy path for files, hdf5 and tar (reads into the batch from the file,
    # or from the shard in memory after sha256); tfrecord copies each record's bytes once.
    opts = dict(seed=5, decode=decode, image_size=32 if decode else None, verify=verify)
    per_sample = open_dataset(image_sets[fmt], **opts)
    batched = open_dataset(image_sets[fmt], batch_in_worker=7, **opts)
    a = list(DataLoader(per_sample, num_workers=2, **loader_options(per_sample, 7)))
    b = list(DataLoader(batched, num_workers=2, **loader_options(batched, 7)))
    assert len(a) == len(b) == 10  # 30 samples per worker: 4 x 7 + a partial 2, twice
    for x, y in zip(a, b):
        for key in ("index", "label", "nbytes", "opens"):
            assert torch.equal(x[key], y[key]), key
        if decode:
            assert torch.equal(x["image"], y["image"]) and x["image"].shape[1:] == (3, 32, 32)
        else:
            assert isinstance(x["image"], list) and image_bytes(x) == image_bytes(y)


def test_batched_path_in_the_main_process_and_its_checks(image_sets):
    ds = open_dataset(image_sets["hdf5"], decode=False, shuffle=False, batch_in_worker=16)
    batches = list(ds)
    assert [len(b["index"]) for b in batches] == [16, 16, 16, 12]
    assert [i for b in batches for i in b["index"].tolist()] == list(range(SPEC.count))
    with pytest.raises(DataError, match="batch_size=8"):
        loader_options(ds, 8)
    with pytest.raises(DataError, match="batch_in_worker=0"):
        open_dataset(image_sets["hdf5"], batch_in_worker=0)


def test_zero_copy_batches_reuse_a_buffer_only_once_nothing_holds_it(image_sets):
    # In the reader's own process a batch buffer is filled again once the batch and every view of
    # it are gone (no page faults per batch); a batch still held, even as a view, keeps its bytes.
    ds = open_dataset(image_sets["hdf5"], decode=False, shuffle=False, batch_in_worker=8)
    assert ds.zero_copy
    batches = iter(ds)
    first = next(batches)
    kept = first["image"][5:50]                 # a view: the batch dict itself is let go below
    kept_bytes = bytes(kept.numpy())
    address = first["image"].data_ptr()
    del first
    second = next(batches)
    assert second["image"].data_ptr() != address and bytes(kept.numpy()) == kept_bytes
    second_address = second["image"].data_ptr()
    del kept, second
    third = next(batches)
    assert third["image"].data_ptr() in (address, second_address), "a free buffer was not reused"
    assert third["index"].tolist() == list(range(16, 24))


def test_opens_are_counted_per_format(image_sets):
    opens = {}
    for fmt in ALL_FORMATS:
        ds = open_dataset(image_sets[fmt], decode=False, verify="size")
        opens[fmt] = sum(item["opens"] for item in ds)
    assert opens["files"] == SPEC.count
    for fmt in SHARD_FORMATS:
        assert opens[fmt] == len(load_manifest(image_sets[fmt])[0].shards)


@pytest.mark.parametrize("total,consumers", [(60, 4), (7, 3), (5, 8), (1000, 6)])
def test_plan_partitions_every_epoch(total, consumers):
    shards = [total // 5 + (1 if i < total % 5 else 0) for i in range(5)]
    for epoch in range(3):
        positions = []
        for c in range(consumers):
            for p in epoch_pieces(shards, consumers=consumers, consumer=c, seed=0, epoch=epoch, shuffle=True):
                base = sum(shards[:p.shard])
                positions += range(base + p.start, base + p.stop)
        assert sorted(positions) == list(range(total))


def test_buffer_shuffle_keeps_every_item():
    import random

    out = list(buffer_shuffle(range(100), 16, random.Random(0)))
    assert sorted(out) == list(range(100)) and out != list(range(100))


def test_weather_dataset(tmp_path):
    import h5py

    spec = WeatherSpec(steps=5, channels=3, lat=13, lon=24, steps_per_shard=2)
    manifest = make_weather(tmp_path / "w", spec)
    assert manifest.samples == 5 and len(manifest.shards) == 3
    with h5py.File(tmp_path / "w" / manifest.shards[0].path) as f:
        fields = f["fields"]
        assert fields.shape == (2, 3, 13, 24) and fields.dtype == np.float32
        assert fields.chunks == (1, 1, 13, 24)
        step0, step1 = fields[0], fields[1]
    assert np.isfinite(step0).all() and not np.allclose(step0, step1)
    assert np.abs(np.diff(step0[0], axis=1)).mean() < 0.2 * np.abs(step0[0]).mean()  # smooth in lon
    assert not check_files(*load_manifest(tmp_path / "w"), deep=True)


def test_token_stream(tmp_path):
    manifest = make_tokens(tmp_path / "t", TokenSpec(tokens=20_000, val_fraction=0.1))
    train = np.fromfile(tmp_path / "t" / "train.bin", dtype=np.uint16)
    val = np.fromfile(tmp_path / "t" / "val.bin", dtype=np.uint16)
    assert len(train) == 18_000 and len(val) == 2_000 and manifest.samples == 20_000
    assert train.max() <= EOT and (train == EOT).any()
    counts = np.bincount(train)
    assert np.sort(counts)[-1] > 20 * np.median(counts[counts > 0])  # Zipf: a few ids dominate


def test_data_prep_commands_write_manifests(tmp_path):
    out = tmp_path / "imgs"
    run = lambda *args: subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120)
    r = run(str(REPO / "data_prep/make_images.py"), "--out", str(out), "--count", "6", "--classes", "2",
            "--mean-kb", "8", "--processes", "1")
    assert r.returncode == 0, r.stderr
    assert "6 images in 2 classes" in r.stdout
    r = run(str(REPO / "data_prep/convert_images.py"), "--src", str(out), "--out", str(tmp_path / "tfr"),
            "--format", "tfrecord", "--shard-size", "20K")
    assert r.returncode == 0, r.stderr
    data = json.loads((tmp_path / "tfr" / "manifest.json").read_text())
    assert data["samples"] == 6 and data["format"] == "tfrecord"
    assert all(sha256_file(tmp_path / "tfr" / s["path"]) == s["sha256"] for s in data["shards"])
    r = run(str(REPO / "data_prep/convert_images.py"), "--src", str(out), "--out", str(tmp_path / "x"),
            "--format", "parquet")
    assert r.returncode != 0 and "invalid choice" in r.stderr


def test_set_epoch_reaches_persistent_workers(image_sets):
    ds = open_dataset(image_sets["tar"], decode=False, seed=2)
    loader = DataLoader(ds, batch_size=8, num_workers=2, persistent_workers=True, collate_fn=collate_samples)
    orders = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        seen = [i for batch in loader for i in batch["index"].tolist()]
        assert sorted(seen) == list(range(SPEC.count))
        orders.append(seen)
    assert len({tuple(o) for o in orders}) == 3, "each epoch must use its own shard order"
