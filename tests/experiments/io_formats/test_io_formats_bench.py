"""The io_formats benchmark's baseline for the small-file folder: a plain DataLoader over PIL (torchvision's
``ImageFolder`` recipe), which must decode exactly what the readers decode, so that the two are the same work."""

from __future__ import annotations

from data_fixtures import SPEC, image_sets  # noqa: F401
from hpcbench.data.manifest import load_manifest
from hpcbench.data.readers import decode_jpeg
from hpcbench.experiments.io_formats.bench import PilFolder, pil_folder_epochs


def test_the_pil_baseline_decodes_the_readers_pixels_with_the_manifests_labels(image_sets):
    ds = PilFolder(image_sets["files"], image_size=32)
    manifest, _ = load_manifest(image_sets["files"])
    assert len(ds) == SPEC.count
    for i in (0, 1, SPEC.count - 1):
        item = ds[i]
        assert item["index"] == i and item["label"] == manifest.shards[i].label
        assert item["image"].equal(decode_jpeg(ds.paths[i].read_bytes(), 32))  # libjpeg-turbo both, same resize


def test_the_pil_baseline_times_each_epoch_through_persistent_workers(image_sets):
    # A sanity check of the timing loop: the baseline's dataset crosses to a worker and every round is timed.
    walls = pil_folder_epochs(image_sets["files"], image_size=32, workers=1, batch_size=8, rounds=2)
    assert len(walls) == 2 and all(w > 0 for w in walls)
