"""collectives from recorded records, without torch: summary -> rules (C10, C16's context)."""

import pytest
from synthetic import GPU_IB, SHAPED, launch, noisy

import pandas as pd

from hpcbench.experiments.collectives.summary import summarize
from hpcbench.report.ledger import evaluate_claim

SWEEP = {"nodes": 2, "ranks_per_node": 2, "ops": ["all_reduce"], "min_bytes": 1024, "max_bytes": 1 << 20}
TUNED = {**SWEEP, "nccl_algo": "Tree", "nccl_buffsize": 4194304, "nccl_nsocks_perthread": 4,
         "nccl_socket_nthreads": 8}


def sweep_rows(busbw: float, seed: int, correct: float = 1.0):
    rows = []
    for group, scale in (("inter_node", 1.0), ("intra_node", 12.0)):
        for size in (1024, 1 << 20):
            labels = {"op": "all_reduce", "group": group, "size_bytes": size, "group_index": 0, "group_ranks": 2}
            rows.append(("busbw", noisy(busbw * scale * (size / (1 << 20)), seed=seed + size % 7), "GB/s", labels))
            rows.append(("time", noisy(1e-3, seed=seed), "s", labels))
            rows.append(("correct", correct, "bool", labels))
    return rows


def c10(tmp_path, ratio, n=6, facts=GPU_IB, backend="nccl", correct=1.0):
    frames = []
    for k in range(n):
        frames.append(launch(tmp_path, "collectives", sweep_rows(10.0, k), run_id="run1",
                             task_id=f"collectives.default.r{k}", repetition=k, params=SWEEP, facts=facts,
                             backend=backend, variant="default"))
        frames.append(launch(tmp_path, "collectives", sweep_rows(10.0 * ratio, 100 + k, correct), run_id="run1",
                             task_id=f"collectives.tuned.r{k}", repetition=k, params=TUNED, facts=facts,
                             backend=backend, variant="tuned"))
    return evaluate_claim("C10", pd.concat(frames, ignore_index=True))


def test_summary_has_the_iterations_and_the_check(tmp_path):
    summary = summarize(launch(tmp_path, "collectives", sweep_rows(10.0, 0, correct=0.0), params=SWEEP))
    assert set(summary["group"]) == {"inter_node", "intra_node"}
    assert all(len(s) == 12 for s in summary["samples"]) and not summary["ok"].any()


@pytest.mark.parametrize("ratio, verdict", [(1.3, "reproduced"), (0.7, "not reproduced"), (1.05, "inconclusive")])
def test_c10_matched_tuned_against_default(tmp_path, ratio, verdict):
    row = c10(tmp_path, ratio)
    assert row.verdict == verdict, row.measured
    assert "inter_node" in row.measured and str(1 << 20) in row.measured


def test_c10_on_gloo_is_inconclusive_whatever_the_value(tmp_path):
    row = c10(tmp_path, 1.3, facts=SHAPED, backend="gloo")
    assert row.verdict == "inconclusive" and "ignores NCCL_* settings" in row.measured


def test_c10_wrong_results_never_count(tmp_path):
    row = c10(tmp_path, 1.3, correct=0.0)
    assert row.verdict == "inconclusive" and "returned wrong values" in row.detail


def test_c16_is_context_with_the_bandwidth_ratio_and_the_link(tmp_path):
    records = launch(tmp_path, "collectives", sweep_rows(0.02, 0), params=SWEEP, facts=SHAPED, backend="gloo")
    row = evaluate_claim("C16", records)
    assert row.verdict == "context"
    assert "intra/inter-node busbw ratio 12.0:1" in row.measured and "200 Mbit/s" in row.measured
    # Set beside the guide's platform, with both of its link figures, and never judged.
    assert "NVLink 300 GB/s per GPU vs HDR 25 GB/s per NIC" in row.measured
    assert "25.00 GB/s per node NIC" in row.predicted and "no verdict" in row.detail
