"""The io_formats experiment: notebook under papermill at a tiny size, config, verdict rules, presenter."""

from __future__ import annotations


import nbformat
import pytest

from conftest import execute_notebook
from hpcbench.claims import evaluate_claim, get_claim
from hpcbench.errors import ConfigError
from hpcbench.io_formats import IoFormatsConfig, summarize, verify_records
from hpcbench.results import RecordContext, RecordWriter, read_records

# torchvision 0.29 deprecates its JPEG decoder (torchcodec is not in the tested set); it still works.
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")


TINY = dict(images=24, classes=3, mean_image_kb=20, shard_size=100_000, workers=[0, 2], prefetch_factors=[1],
            batch_size=4, compute_ms=5, image_size=32)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("io_nb")
    df, out_dir = execute_notebook("io_formats", tmp, **TINY)
    return df, out_dir, tmp


def test_notebook_runs_tiny(tiny_run):
    df, out_dir, tmp = tiny_run
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
    assert not (out_dir / "data").exists()                       # generated data removed (keep_data off)
    nb = nbformat.read(tmp / "io_formats.ipynb", as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    assert "C4:" in text and "C5:" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)


def test_config_rejects_bad_values():
    with pytest.raises(ConfigError, match="formats"):
        IoFormatsConfig.from_dict({"formats": ["files", "parquet"]})
    with pytest.raises(ConfigError, match="verify"):
        IoFormatsConfig.from_dict({"verify": "md5"})
    with pytest.raises(ConfigError, match="workers"):
        IoFormatsConfig.from_dict({"workers": []})


def test_missing_dataset_path_is_a_clear_error(tmp_path):
    from hpcbench.data.errors import DatasetNotFoundError
    from hpcbench.io_formats import run

    cfg = IoFormatsConfig.from_dict({"dataset": str(tmp_path / "nope")})
    with RecordWriter(tmp_path / "r.parquet", RecordContext(experiment="io_formats")) as w:
        with pytest.raises(DatasetNotFoundError, match="nope"):
            run(cfg, w, tmp_path / "out")


# -- verdict rules on hand-made records ----------------------------------------------

def _records(tmp_path, rows, fs="lustre at /lustre"):
    ctx = RecordContext(run_id="r", experiment="io_formats", task_id="io", params={"compute_ms": 20})
    with RecordWriter(tmp_path / "io.parquet", ctx) as w:
        w.add("storage.filesystem", None, "", text=fs)
        for metric, value, labels in rows:
            w.add(metric, value, "x", labels={"phase": "sweep", "batch_size": 16, **labels})
    return read_records(tmp_path / "io.parquet")


def _sweep(fmt, workers, prefetch, sps, idle):
    labels = {"format": fmt, "workers": workers, "prefetch_factor": prefetch}
    return [("samples_per_s", sps, labels), ("accelerator_idle", idle, labels)]


def test_c4_reproduced_on_lustre_with_high_small_file_idle(tmp_path):
    df = _records(tmp_path, _sweep("files", 4, 1, 100, 0.66) + _sweep("tfrecord", 4, 1, 400, 0.05))
    row = evaluate_claim(get_claim("C4"), df)
    assert row.verdict == "reproduced", row
    assert "66 %" in row.measured and "lustre" in row.measured


def test_c4_on_a_local_disk_is_inconclusive_not_a_verdict(tmp_path):
    df = _records(tmp_path, _sweep("files", 2, 1, 100, 0.70) + _sweep("tar", 2, 1, 300, 0.10), fs="ext4 at /")
    row = evaluate_claim(get_claim("C4"), df)
    assert row.verdict == "inconclusive"
    assert "ext4" in row.detail and "Lustre" in row.detail


def test_c4_not_reproduced_when_small_files_keep_accelerator_busy(tmp_path):
    df = _records(tmp_path, _sweep("files", 4, 1, 500, 0.05) + _sweep("hdf5", 4, 1, 520, 0.04))
    assert evaluate_claim(get_claim("C4"), df).verdict == "not reproduced"


def test_c5_reproduced_when_shards_win_and_guide_buffer_suffices(tmp_path):
    rows = (_sweep("files", 2, 1, 100, 0.6) + _sweep("files", 2, 4, 110, 0.6)
            + _sweep("tfrecord", 2, 1, 300, 0.1) + _sweep("tfrecord", 2, 2, 305, 0.1)
            + _sweep("tfrecord", 2, 4, 298, 0.1))
    row = evaluate_claim(get_claim("C5"), _records(tmp_path, rows))
    assert row.verdict == "reproduced", row
    assert "tfrecord" in row.measured and "3.00x" in row.measured


def test_c5_not_reproduced_when_shards_are_no_faster(tmp_path):
    rows = _sweep("files", 2, 1, 300, 0.1) + _sweep("hdf5", 2, 1, 240, 0.2)
    assert evaluate_claim(get_claim("C5"), _records(tmp_path, rows)).verdict == "not reproduced"


def test_c5_inconclusive_when_the_guide_buffer_is_too_small(tmp_path):
    rows = (_sweep("files", 2, 1, 100, 0.6) + _sweep("tar", 2, 1, 200, 0.3) + _sweep("tar", 2, 4, 400, 0.05))
    row = evaluate_claim(get_claim("C5"), _records(tmp_path, rows))
    assert row.verdict == "inconclusive" and "prefetch_factor" in row.detail


def test_presenter_renders_the_tiny_run(tiny_run):
    from hpcbench.report.aggregate import expand_labels, series_stats
    from hpcbench.report.presenters import ExperimentData, presenter_for

    df = tiny_run[0].assign(source="run")
    stats = expand_labels(series_stats(df[df["value"].notna()]))
    text = expand_labels(df[df["value"].isna() & df["text"].notna()])
    sections = presenter_for("io_formats").present(ExperimentData("io_formats", ["run"], stats, text, None))
    table = sections[0].tables[0]
    assert "samples/s" in " ".join(table.columns) and len(table.rows) >= 8
    assert sections[0].figures and sections[0].figures[0].png_base64
