"""The io_formats experiment run for real: notebook under papermill at a tiny size, config, presenter.

Its rules are tested from recorded records in tests/experiments/io_formats/test_io_formats_rules.py."""

from __future__ import annotations

import shutil

import nbformat
import pytest

from hpcbench.core.errors import ConfigError
from hpcbench.core.results import RecordContext, RecordWriter
from hpcbench.experiments.io_formats.config import IoFormatsConfig
from hpcbench.experiments.io_formats.summary import summarize, verify_records

# torchvision 0.29 deprecates its JPEG decoder (torchcodec is not in the tested set); it still works.
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")


TINY = dict(images=24, classes=3, mean_image_kb=20, shard_size=100_000, workers=[0, 2], prefetch_factors=[1],
            batch_size=4, compute_ms=5, image_size=32)


@pytest.fixture(scope="module")
def tiny_run(toy_runs):
    """The session's `hpcbench run io_formats --toy` (tests/toy_runs.py; test_defaults reads it too), at TINY."""
    run = toy_runs.get("io_formats")
    run.check_size(TINY)
    return run.records(), run.task_dir, run.notebook


def test_notebook_runs_tiny(tiny_run):
    df, out_dir, notebook = tiny_run
    assert set(df["experiment"]) == {"io_formats"}
    summary = summarize(df)
    sweep = summary[summary["phase"] == "sweep"]
    assert set(sweep["format"]) == {"files", "hdf5", "tfrecord", "tar"}
    assert len(sweep) == 4 * 2                                   # workers 0, and 2 x prefetch 1
    assert (sweep["exactly_once"] == 1).all()
    files_opens = sweep[sweep["format"] == "files"]["opens_per_epoch"]
    assert (files_opens == TINY["images"]).all()                 # one open per small file
    assert (sweep[sweep["format"] != "files"]["opens_per_epoch"] < TINY["images"] / 2).all()
    assert ((sweep["accel_idle"] >= 0) & (sweep["accel_idle"] <= 1)).all()
    lat = df[df["metric"] == "read_latency"]
    assert len(lat) >= 9 * TINY["images"]                        # raw samples kept (8 sweep + staged epoch)
    evicted = df[df["metric"] == "page_cache_resident"]
    assert evicted["text"].str.contains("evicted|residency unknown").all()
    # resilience: the corrupted staged shard was repaired and nothing was lost
    res = df[df["labels"].str.contains('"phase": "resilience"')]
    assert res[res["metric"] == "repairs"]["value"].sum() >= 1
    assert res[res["metric"] == "lost_samples"]["value"].sum() == 0
    assert (res[res["metric"] == "exactly_once"]["value"] == 1).all()
    assert "FAIL" not in verify_records(df)
    # the arms were interleaved: each round's order (recorded) holds every format x setting once
    orders = df[df["metric"] == "arm_order"]["text"].tolist()
    assert len(orders) >= 1 and all(sorted(o.split(", ")) == sorted(orders[0].split(", ")) for o in orders)
    assert len(orders[0].split(", ")) == 4 * 2
    assert not (out_dir / "data").exists()                       # generated data removed (keep_data off)
    nb = nbformat.read(notebook, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    assert "C4:" in text and "C5:" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)


def test_arm_order_is_drawn_per_launch_and_round(tmp_path):
    from hpcbench.experiments.io_formats.worker import arm_order

    arms = [(f, w, 1) for f in ("files", "hdf5", "tfrecord", "tar") for w in (0, 2)]
    orders = {}
    for rep in range(3):
        ctx = RecordContext(run_id="r", experiment="io_formats", task_id=f"io.r{rep}", repetition=rep)
        with RecordWriter(tmp_path / f"{rep}.parquet", ctx) as w:
            orders[rep] = [arm_order(arms, w, epoch) for epoch in range(2)]
            assert arm_order(arms, w, 0) == orders[rep][0]          # seeded: a rerun draws the same order
    assert all(sorted(o) == sorted(arms) for rounds in orders.values() for o in rounds)
    assert len({tuple(o) for rounds in orders.values() for o in rounds}) > 1  # not one fixed order


def test_config_rejects_bad_values():
    with pytest.raises(ConfigError, match="formats"):
        IoFormatsConfig.from_dict({"formats": ["files", "parquet"]})
    with pytest.raises(ConfigError, match="verify"):
        IoFormatsConfig.from_dict({"verify": "md5"})
    with pytest.raises(ConfigError, match="workers"):
        IoFormatsConfig.from_dict({"workers": []})
    with pytest.raises(ConfigError, match="read_order"):
        IoFormatsConfig.from_dict({"read_order": "sideways"})
    from hpcbench.data.readers.base import JPEG_DECODES as READER_DECODES, ORDERS
    from hpcbench.experiments.io_formats.config import JPEG_DECODES, READ_ORDERS
    assert READ_ORDERS == ORDERS  # the config names the readers' orders without importing torch
    assert JPEG_DECODES == READER_DECODES  # and their decodes
    with pytest.raises(ConfigError, match="jpeg_decode"):
        IoFormatsConfig.from_dict({"jpeg_decode": "fast"})
    with pytest.raises(ConfigError, match="read_order.*decode = false"):
        IoFormatsConfig.from_dict({"read_order": "runs"})          # decode is on by default
    with pytest.raises(ConfigError, match="read_order.*worker_batching"):
        IoFormatsConfig.from_dict({"read_order": "runs", "decode": False, "worker_batching": False})
    with pytest.raises(ConfigError, match="reuse_batch_memory.*decode = false"):
        IoFormatsConfig.from_dict({"reuse_batch_memory": True})


def test_run_reads_through_the_dataloader_every_sample_once(tmp_path):
    # read_order = 'runs' and the ring of batch buffers through the experiment's own DataLoader path (2 workers,
    # the device prefetcher), storage only: measure_epoch fails the run if a step's batch was overwritten
    from hpcbench.core.results import read_records
    from hpcbench.experiments.io_formats.worker import run

    cfg = IoFormatsConfig.from_dict({**TINY, "workers": [2], "decode": False, "read_order": "runs", "stage": False,
                                     "corrupt_shards": 0, "verify": "size", "reuse_batch_memory": True})
    with RecordWriter(tmp_path / "r.parquet", RecordContext(experiment="io_formats")) as w:
        run(cfg, w, tmp_path / "out", progress=lambda *_: None)
    df = read_records(tmp_path / "r.parquet")
    sweep = summarize(df)
    sweep = sweep[sweep["phase"] == "sweep"]
    assert set(sweep["format"]) == {"files", "hdf5", "tfrecord", "tar"} and (sweep["exactly_once"] == 1).all()
    timed = df[df["metric"] == "samples_per_s"]
    assert len(timed) and timed["labels"].str.contains('"read_order": "runs"').all()
    assert timed["labels"].str.contains('"reuse_batch_memory": true').all()


def test_missing_dataset_path_is_a_clear_error(tmp_path):
    from hpcbench.data.errors import DatasetNotFoundError
    from hpcbench.experiments.io_formats.worker import run

    # A mistyped path is refused with the parameters, before any notebook starts...
    with pytest.raises(ConfigError, match="dataset.*nope"):
        IoFormatsConfig.from_dict({"dataset": str(tmp_path / "nope")})
    # ...and one that vanishes after that is still a clear error in the worker.
    gone = tmp_path / "gone"
    gone.mkdir()
    (gone / "manifest.json").write_text("{}")
    cfg = IoFormatsConfig.from_dict({"dataset": str(gone)})
    shutil.rmtree(gone)
    with RecordWriter(tmp_path / "r.parquet", RecordContext(experiment="io_formats")) as w:
        with pytest.raises(DatasetNotFoundError, match="gone"):
            run(cfg, w, tmp_path / "out")


def test_presenter_renders_the_tiny_run(tiny_run):
    from hpcbench.core.results import expand_labels
    from hpcbench.experiments import EXPERIMENTS
    from hpcbench.present.kit import ExperimentData
    from hpcbench.report.aggregate import series_stats

    df = tiny_run[0].assign(source="run")
    stats = expand_labels(series_stats(df[df["value"].notna()]))
    text = expand_labels(df[df["value"].isna() & df["text"].notna()])
    sections = EXPERIMENTS.get("io_formats").present(ExperimentData("io_formats", ["run"], stats, text, None))
    table = sections[0].tables[0]
    assert "samples/s" in " ".join(table.columns) and len(table.rows) >= 8
    assert sections[0].figures and sections[0].figures[0].data
