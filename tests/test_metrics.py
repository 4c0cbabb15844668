"""Bus-bandwidth formulas against hand-computed values (nccl-tests PERFORMANCE.md)."""

import pytest

from hpcbench.core.errors import RegistryError
from hpcbench.core.facts import LINK_PEAKS_GBPS
from hpcbench.core.metrics import algbw, allreduce_bytes_sent, busbw, busbw_factor, percentile


def test_algbw_is_bytes_per_second_in_1e9():
    assert algbw(1_000_000_000, 1.0) == 1.0
    assert algbw(64 << 20, 0.01) == pytest.approx(6.7108864)


@pytest.mark.parametrize("op,n,factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75),
    ("all_gather", 4, 0.75), ("reduce_scatter", 8, 0.875), ("broadcast", 16, 1.0),
])
def test_busbw_factors(op, n, factor):
    assert busbw_factor(op, n) == pytest.approx(factor)


def test_busbw_by_hand():
    # 128 MiB all_reduce over 8 ranks in 10 ms: algbw = 13.4217728 GB/s, x 1.75
    assert busbw("all_reduce", 128 << 20, 0.010, 8) == pytest.approx(13.4217728 * 1.75)
    assert busbw("all_gather", 4e9, 2.0, 4) == pytest.approx(1.5)


def test_ring_allreduce_bytes_by_hand():
    # 2 (N-1)/N x S: 64 MB over 4 ranks sends 96 MB per rank; one rank sends nothing
    assert allreduce_bytes_sent(64e6, 4) == pytest.approx(96e6)
    assert allreduce_bytes_sent(64e6, 1) == 0.0
    with pytest.raises(ValueError, match="nranks"):
        allreduce_bytes_sent(64e6, 0)


def test_unknown_op_lists_known():
    with pytest.raises(RegistryError, match="all_reduce"):
        busbw_factor("alltoall", 4)


def test_percentile_and_peaks():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile(list(range(101)), 99) == 99
    assert LINK_PEAKS_GBPS["HDR InfiniBand (200 Gb/s)"] == 25.0
