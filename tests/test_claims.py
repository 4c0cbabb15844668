"""The claims ledger: all 17 claims, honest verdicts, C16 from real-schema records."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import pandas as pd
import pytest

from hpcbench import claims, units
from hpcbench.claims import (CLAIMS, NO_VALUE, VERDICT_RULES, VERDICTS, ClaimError,
                             evaluate_claim, evaluate_claims, get_claim)
from hpcbench.errors import HpcbenchError
from hpcbench.metrics import LINK_PEAKS_GBPS
from hpcbench.results import RecordContext, RecordWriter, empty_frame, read_records


def write_records(path: Path, experiment: str, rows: list[tuple], *, params: dict | None = None,
                  variant: str = "default") -> pd.DataFrame:
    """Write ``(metric, value, unit, step, labels, text)`` rows with the real writer, read back."""
    ctx = RecordContext(run_id="r1", experiment=experiment, variant=variant, task_id=f"{experiment}-0",
                        params=params or {}, node="n0", world_size=4)
    with RecordWriter(path, ctx) as writer:
        for metric, value, unit, step, labels, text in rows:
            writer.add(metric, value, unit, step=step, labels=labels, text=text)
    return read_records(path)


def busbw_rows(samples: list[float], *, group: str, size: int = 4 << 20, op: str = "all_reduce",
               group_index: int = 0, ranks: int = 2) -> list[tuple]:
    labels = {"op": op, "size_bytes": size, "group": group, "group_index": group_index,
              "group_ranks": ranks, "dtype": "float32"}
    return [("busbw", v, "GB/s", i, labels, None) for i, v in enumerate(samples)]


def by_id(rows):
    return {row.claim_id: row for row in rows}


def test_all_17_claims_in_order_once():
    assert [c.id for c in CLAIMS] == [f"C{i}" for i in range(1, 18)]


def test_every_rule_registered_and_fields_filled():
    for claim in CLAIMS:
        assert claim.rule in VERDICT_RULES, claim.id
        assert claim.wording and claim.section and claim.figures, claim.id
        assert all(isinstance(what, str) and isinstance(fig, str) for what, fig in claim.figures)
        assert (claim.experiment is None) == (claim.metric is None), claim.id


def test_get_claim_and_unknown_id_lists_valid_ones():
    assert get_claim("C16").rule == "hardware_context"
    with pytest.raises(ClaimError) as info:
        get_claim("C99")
    assert isinstance(info.value, HpcbenchError)
    assert "C1" in str(info.value) and "C17" in str(info.value)


@pytest.mark.parametrize("records", [empty_frame(), pd.DataFrame()], ids=["schema", "bare"])
def test_empty_records_nothing_fabricated(records):
    rows = evaluate_claims(records)
    assert [r.claim_id for r in rows] == [c.id for c in CLAIMS]
    for row in rows:
        assert row.verdict == "not measured yet", row
        assert row.measured == NO_VALUE
        assert row.verdict in VERDICTS
        assert row.detail


def test_not_measured_detail_names_experiment():
    rows = by_id(evaluate_claims(empty_frame()))
    assert "comm_modes" in rows["C3"].detail
    assert "No hpcbench experiment" in rows["C1"].detail


def test_c16_context_with_hand_computed_median(tmp_path):
    inter = [1.0, 3.0, 2.0, 10.0, 2.5]         # median 2.5 (the 10.0 outlier must not win)
    smaller = [0.5, 0.7, 0.6]                  # another size: median 0.6
    world = [40.0, 41.0, 39.0]                 # faster, but world is used only without inter_node
    rows = (busbw_rows(inter, group="inter_node") + busbw_rows(smaller, group="inter_node", size=1024)
            + busbw_rows(world, group="world", ranks=4)
            + [("time", 0.01, "s", 0, {"op": "all_reduce", "group": "inter_node"}, None)])
    coll = write_records(tmp_path / "c.parquet", "collectives", rows, params={"backend": "gloo"})
    env = write_records(tmp_path / "e.parquet", "environment", [
        ("gpu.count", 8, "count", 0, {}, None),
        ("infiniband.mlx5_0.port1.rate", None, "", 0, {}, "200 Gb/sec (4X HDR)"),
        ("python.version", None, "", 0, {}, "3.11"),
    ])
    records = pd.concat([coll, env], ignore_index=True)
    row = by_id(evaluate_claims(records))["C16"]
    assert row.verdict == "context"
    expected = statistics.median(inter)
    assert f"{expected:.2f} GB/s" in row.measured
    assert "inter_node" in row.measured and "4 MiB" in row.measured
    assert "200 Gb/sec (4X HDR)" in row.measured and "gpu.count = 8 count" in row.measured
    assert "python.version" not in row.measured
    hdr = next(v for k, v in LINK_PEAKS_GBPS.items() if "HDR" in k)
    assert f"{hdr:.2f} GB/s" in row.predicted


def test_c16_falls_back_to_world_and_says_so(tmp_path):
    coll = write_records(tmp_path / "c.parquet", "collectives", busbw_rows([1.5, 1.0, 2.0], group="world"))
    row = evaluate_claim(get_claim("C16"), coll)
    assert row.verdict == "context"
    assert "1.50 GB/s" in row.measured and "world" in row.measured and "no inter_node" in row.measured


def test_c16_skips_series_with_failed_check(tmp_path):
    labels = {"op": "all_reduce", "size_bytes": 4 << 20, "group": "inter_node", "group_index": 0,
              "group_ranks": 2}
    rows = (busbw_rows([9.0, 9.0], group="inter_node") + busbw_rows([1.0, 1.0], group="inter_node", size=1024)
            + [("correct", 0.0, "bool", 0, labels, None)])
    coll = write_records(tmp_path / "c.parquet", "collectives", rows)
    row = evaluate_claim(get_claim("C16"), coll)
    assert "1.00 GB/s" in row.measured and "9.00" not in row.measured


def test_only_absent_values_is_not_measured(tmp_path):
    coll = write_records(tmp_path / "c.parquet", "collectives", [
        ("busbw", None, "GB/s", 0, {"op": "all_reduce", "group": "inter_node"},
         "not applicable: inter_node groups have 1 rank")])
    row = evaluate_claim(get_claim("C16"), coll)
    assert row.verdict == "not measured yet" and row.measured == NO_VALUE
    assert "not applicable" in row.detail


def test_c10_gloo_only_is_not_measured(tmp_path):
    coll = write_records(tmp_path / "c.parquet", "collectives", busbw_rows([1.0, 2.0], group="world"),
                         params={"backend": "gloo"})
    row = by_id(evaluate_claims(coll))["C10"]
    assert row.verdict == "not measured yet" and row.measured == NO_VALUE
    assert "gloo" in row.detail and "NCCL" in row.detail


def test_c10_compares_tuned_with_default(tmp_path):
    tuned = write_records(tmp_path / "t.parquet", "collectives", busbw_rows([20.0, 22.0, 21.0], group="inter_node"),
                          params={"backend": "nccl", "nccl_env": dict(claims.C10_NCCL_SETTINGS)}, variant="tuned")
    default = write_records(tmp_path / "d.parquet", "collectives", busbw_rows([10.0, 10.0, 10.0], group="inter_node"),
                            params={"backend": "nccl"})
    row = evaluate_claim(get_claim("C10"), pd.concat([tuned, default], ignore_index=True))
    assert row.verdict == "reproduced"
    assert "21.00 GB/s" in row.measured and "10.00 GB/s" in row.measured


def test_raising_rule_is_inconclusive(tmp_path, monkeypatch):
    def broken(claim, records):
        raise ValueError("boom")

    monkeypatch.setitem(VERDICT_RULES._items, "hardware_context", broken)
    coll = write_records(tmp_path / "c.parquet", "collectives", busbw_rows([1.0], group="world"))
    rows = by_id(evaluate_claims(coll))
    assert rows["C16"].verdict == "inconclusive"
    assert "boom" in rows["C16"].detail and "ValueError" in rows["C16"].detail
    assert len(rows) == len(CLAIMS)


def test_pending_rule_never_gives_a_verdict(tmp_path):
    rows = write_records(tmp_path / "m.parquet", "comm_modes", [("throughput", 100.0, "images/s", 0, {}, None)])
    pending = dataclasses.replace(get_claim("C3"), rule="pending")  # C3 has its own rule now
    row = evaluate_claim(pending, rows)
    assert row.verdict == "not measured yet"
    assert "pending" in row.detail


def test_c3_predicted_matches_arithmetic():
    predicted = get_claim("C3").predicted
    for base, new, stated in (claims.C3_RESNET, claims.C3_GPT2):
        gain = (new / base - 1) * 100
        assert round(gain, 1) == stated  # the guide's own rounding is right
        assert f"+{gain:.1f} %" in predicted
    assert "+49.6 %" in predicted and "+40.2 %" in predicted
    assert predicted.count("matches the guide") == 2


def test_c7_predicted_speedup():
    predicted = get_claim("C7").predicted
    assert f"420/132 = {420 / 132:.2f}x" in predicted  # 3.18x
    assert "3.2x" in predicted


def test_guide_figures_quoted_exactly():
    figures = {c.id: dict(c.figures) for c in CLAIMS}
    assert figures["C12"]["step-time standard deviation"] == "< 5 %"
    assert figures["C12"]["communication share"] == "< 30 %"
    assert figures["C12"]["storage read latency P99"] == "< 100 ms"
    assert figures["C10"]["NCCL_BUFFSIZE"] == "4194304"
    assert figures["C6"]["storage latency P99 (Lustre monitoring)"] == "< 50 ms"
    assert figures["C2"]["per-GPU throughput"] == "+220 %"


def test_claims_module_does_not_import_torch():
    source = Path(claims.__file__).read_text()
    assert "import torch" not in source


def test_format_gbps_readable():
    assert units.format_gbps(1.234) == "1.23 GB/s"
    assert units.format_gbps(0.01234) == "0.0123 GB/s"
    assert units.format_gbps(123.4) == "123 GB/s"
    assert units.format_bytes(4 << 20) == "4 MiB"
