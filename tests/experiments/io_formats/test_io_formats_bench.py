"""The io_formats benchmark's baselines for the small-file folder, plain DataLoaders over PIL (torchvision's
``ImageFolder`` recipe): one must decode exactly what the readers' full decode gives, so that the two are the
same work; the plain recipe resizes with PIL. And its decoded mode side by side: scaled, full and PIL."""

from __future__ import annotations

import argparse

import pytest

from data_fixtures import SPEC, image_sets  # noqa: F401
from hpcbench.data.manifest import load_manifest
from hpcbench.data.readers import decode_jpeg
from hpcbench.experiments.io_formats import bench
from hpcbench.experiments.io_formats.bench import PilFolder

# torchvision 0.29 deprecates its JPEG decoder (torchcodec is not in the tested set); it still works.
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")


def test_the_pil_baseline_decodes_the_readers_pixels_with_the_manifests_labels(image_sets):
    ds = PilFolder(image_sets["files"], image_size=32)
    plain = PilFolder(image_sets["files"], image_size=32, resize="pil")
    manifest, _ = load_manifest(image_sets["files"])
    assert len(ds) == SPEC.count
    for i in (0, 1, SPEC.count - 1):
        item = ds[i]
        assert item["index"] == i and item["label"] == manifest.shards[i].label
        full = decode_jpeg(ds.paths[i].read_bytes(), 32, jpeg_decode="full")
        assert item["image"].equal(full)  # libjpeg-turbo both, same resize
        assert plain[i]["image"].shape == full.shape and not plain[i]["image"].equal(full)  # PIL's own filter


def test_the_pil_baseline_times_each_epoch_through_persistent_workers(image_sets):
    # A sanity check of the timing loop: the baseline's dataset crosses to a worker and every round is timed.
    loader = bench.pil_folder_loader(image_sets["files"], image_size=32, workers=1, batch_size=8)
    walls = [bench.pil_epoch(loader) for _ in range(2)]
    assert len(walls) == 2 and all(w > 0 for w in walls)


def test_a_runs_path_brings_its_per_sample_twin():
    assert bench.with_twins(["runs+ring"]) == ["batched+ring", "runs+ring"]
    assert bench.with_twins(["runs", "batched"]) == ["runs", "batched"]  # asked for: kept where it was asked
    assert bench.with_twins(["per-sample"]) == ["per-sample"]
    assert set(bench.PER_SAMPLE_TWIN.values()) <= set(bench.PATHS) - {"runs", "runs+ring"}


def _args(root, **over) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    bench.add_arguments(ap)
    args = ap.parse_args(["--images", "12", "--classes", "2", "--workers", "0", "--batch-size", "4",
                          "--shard-size", "100K", "--rounds", "1", "--cache", "warm", "--root", str(root)])
    vars(args).update(over)
    return args


@pytest.mark.slow
def test_the_decoded_mode_shows_scaled_full_and_pil_side_by_side(tmp_path):
    out = bench.run(_args(tmp_path, modes="decoded", paths="batched"))
    epochs = [r for r in out["rows"] if r["measure"] == "DataLoader epoch"]
    assert {(r["jpeg_decode"], r["format"]) for r in epochs} == {(d, f) for d in bench.DECODES for f in bench.FORMATS}
    assert {r["order"] for r in epochs} == {"per-sample"}
    pil = [r for r in out["rows"] if r["measure"].endswith("DataLoader (small files)")]
    assert len(pil) == len(bench.PIL_REFERENCES) and {r["order"] for r in pil} == {bench.PERMUTATION}
    names = {r["name"]: r for r in out["ratios"]}
    targeted = {name: r["target"] for name, r in names.items() if r["target"] is not None}
    assert len(targeted) == 2, targeted
    assert any("scaled decode" in n and "plain PIL" in n and t == bench.SCALED_DECODE_TARGET for n, t in targeted.items())
    assert any("full decode" in n and "the readers' resize" in n and t == 1.0 for n, t in targeted.items())
    assert sum("scaled / full decode" in n for n in names) == len(bench.FORMATS)


@pytest.mark.slow
def test_every_row_and_ratio_of_a_raw_mode_states_its_order_and_each_runs_path_has_its_twin(tmp_path):
    out = bench.run(_args(tmp_path, modes="storage", paths="runs"))
    epochs = [r for r in out["rows"] if "path" in r]
    assert {(r["path"], r["order"]) for r in epochs} == {("batched", "per-sample"), ("runs", "runs of 32")}
    twins = [r["name"] for r in out["ratios"] if "per-sample twin" in r["name"]]
    assert len(twins) == 2 * len(bench.FORMATS[1:])  # through the DataLoader and alone, each shard format
    assert all("(per-sample)" in r["name"] or "(runs of 32)" in r["name"]
               for r in out["ratios"] if " path " in r["name"])
