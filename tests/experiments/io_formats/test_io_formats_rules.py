"""io_formats from recorded records, without torch: summary -> rules (C4, C5), every outcome reachable."""

import pytest
from synthetic import launches, noisy

from hpcbench.experiments.io_formats.summary import summarize
from hpcbench.report.ledger import evaluate_claim

PARAMS = {"formats": ["files", "hdf5", "tfrecord"], "workers": [0, 2], "prefetch_factors": [1, 2],
          "batch_size": 16, "stage": True}
EXT4 = {"cluster": "one machine", "infiniband": "absent", "gpus": 0.0}


def io_rows(speed: dict[str, float], *, seed=0, idle=0.7, buffer=1.0, staged=1.5, same_device=False, exact=True):
    """One launch: per-batch samples/s per format at workers=2 (prefetch 1 and 2), staging, idle shares."""
    rows = []
    for i, (fmt, sps) in enumerate(speed.items()):
        for pf, factor in ((1, 1.0), (2, 1.0 / buffer)):
            labels = {"format": fmt, "workers": 2, "prefetch_factor": pf, "phase": "sweep", "buffer_samples": 32 * pf}
            rows.append(("step_samples_per_s", noisy(sps * factor, seed=seed * 17 + i * 3 + pf), "samples/s", labels))
            rows.append(("step_idle", noisy(idle if fmt == "files" else 0.2, seed=seed + i, spread=0.01), "ratio",
                         labels))
            rows.append(("exactly_once", 1.0 if exact else 0.0, "bool", labels))
    labels = {"format": "hdf5", "workers": 2, "prefetch_factor": 1, "phase": "staged", "buffer_samples": 32}
    rows.append(("step_samples_per_s", noisy(speed["hdf5"] * staged, seed=seed + 99), "samples/s", labels))
    rows.append(("exactly_once", 1.0, "bool", labels))
    text = "source and staging folder are on the same device" if same_device else None
    rows.append(("staging_saved_per_epoch", 0.1, "s", {"format": "hdf5", "phase": "staging"}, text))
    return rows


def records(tmp_path, speed, n=6, fs="lustre at /scratch", **kw):
    def rows(k):
        return io_rows(speed, seed=k, **kw) + [("storage.filesystem", None, "", {}, fs)]
    return launches(tmp_path, "io_formats", rows, n, params=PARAMS, facts=EXT4)


FAST = {"files": 100.0, "hdf5": 300.0, "tfrecord": 280.0}


def test_summary_carries_steps_idle_and_the_exactness_check(tmp_path):
    summary = summarize(records(tmp_path, FAST, n=1, exact=False))
    files = summary[(summary["format"] == "files") & (summary["prefetch_factor"] == 1)].iloc[0]
    assert len(files["samples"]) == 12 and len(files["idle_samples"]) == 12
    assert not files["ok"] and "lost or repeated" in files["problem"]


def test_c5_reproduced_when_every_part_holds(tmp_path):
    row = evaluate_claim("C5", records(tmp_path, FAST))
    assert row.verdict == "reproduced", row.measured
    assert {"hdf5 / small files", "tfrecord / small files"} <= set(row.labels)
    assert any("buffer" in label for label in row.labels) and any("staged" in label for label in row.labels)


def test_c5_not_reproduced_when_one_container_is_no_faster(tmp_path):
    row = evaluate_claim("C5", records(tmp_path, {"files": 100.0, "hdf5": 300.0, "tfrecord": 98.0}))
    assert row.verdict == "not reproduced"


def test_c5_buffer_part_can_fail(tmp_path):
    # A prefetch twice as deep is 40 % faster: the guide's buffer is not enough.
    row = evaluate_claim("C5", records(tmp_path, FAST, buffer=0.6))
    assert row.verdict == "not reproduced"
    buffer = [o for o, label in zip(row.outcomes, row.labels) if "buffer" in label][0]
    assert buffer.verdict == "not reproduced"


def test_c5_staging_on_the_same_device_is_not_applicable_and_not_counted(tmp_path):
    row = evaluate_claim("C5", records(tmp_path, FAST, staged=0.9, same_device=True))
    assert row.verdict == "reproduced"
    staged = [o for o, label in zip(row.outcomes, row.labels) if "staged" in label][0]
    assert staged.verdict == "inconclusive" and "own device" in staged.why


@pytest.mark.parametrize("speed", [FAST, {"files": 100.0, "hdf5": 98.0, "tfrecord": 99.0}])
def test_c5_off_lustre_is_not_applicable_whatever_the_value(tmp_path, speed):
    # C5's fixes are for C4's Lustre metadata bottleneck: on ext4 neither a gain nor its absence counts
    row = evaluate_claim("C5", records(tmp_path, speed, fs="ext4 at /"))
    assert row.verdict == "inconclusive", row.measured
    assert row.outcomes and all(o.verdict == "inconclusive" for o in row.outcomes)
    assert all(o.why.startswith("not applicable: the data was on ext4 at /") for o in row.outcomes)
    assert "Lustre" in row.measured


@pytest.mark.parametrize("speed, verdict", [(FAST, "reproduced"),
                                            ({"files": 100.0, "hdf5": 98.0, "tfrecord": 99.0}, "not reproduced")])
def test_c5_on_lustre_is_judged(tmp_path, speed, verdict):
    row = evaluate_claim("C5", records(tmp_path, speed, fs="lustre at /scratch"))
    assert row.verdict == verdict, row.measured
    assert "not applicable" not in row.measured


def test_c5_inconclusive_with_few_launches(tmp_path):
    row = evaluate_claim("C5", records(tmp_path, FAST, n=2))
    assert row.verdict == "inconclusive" and "n = 2 launches" in row.measured


def test_c5_launches_that_lost_samples_do_not_count(tmp_path):
    row = evaluate_claim("C5", records(tmp_path, FAST, exact=False))
    assert row.verdict == "inconclusive" and "lost or repeated" in row.detail


@pytest.mark.parametrize("idle, verdict", [(0.7, "reproduced"), (0.1, "not reproduced")])
def test_c4_on_lustre(tmp_path, idle, verdict):
    row = evaluate_claim("C4", records(tmp_path, FAST, idle=idle))
    assert row.verdict == verdict, row.measured


@pytest.mark.parametrize("idle", [0.1, 0.7])
def test_c4_off_lustre_is_inconclusive_whatever_the_value(tmp_path, idle):
    row = evaluate_claim("C4", records(tmp_path, FAST, idle=idle, fs="ext4 at /"))
    assert row.verdict == "inconclusive" and "Lustre" in row.measured
