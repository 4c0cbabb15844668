"""Derived metrics, each formula with its source. Hardware peaks come from tables.

Units: bandwidths in GB/s with GB = 1e9 bytes (as nccl-tests prints them), times in
seconds.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from hpcbench.registry import Registry

GB = 1e9

# nccl-tests' bus-bandwidth factors (doc/PERFORMANCE.md in NVIDIA/nccl-tests):
# busbw = algbw * factor(n), which makes busbw comparable to the hardware link
# bandwidth whatever the number of ranks n.
BUSBW_FACTORS: Registry[Callable[[int], float]] = Registry("collective")
BUSBW_FACTORS.register("all_reduce", lambda n: 2.0 * (n - 1) / n)
BUSBW_FACTORS.register("all_gather", lambda n: (n - 1) / n)
BUSBW_FACTORS.register("reduce_scatter", lambda n: (n - 1) / n)
BUSBW_FACTORS.register("broadcast", lambda n: 1.0)


def algbw(size_bytes: float, seconds: float) -> float:
    """Algorithm bandwidth S / t in GB/s (nccl-tests).

    ``size_bytes`` is the per-rank buffer of the operation as nccl-tests counts it:
    the full vector for all_reduce and broadcast, the full *output* for all_gather
    and the full *input* for reduce_scatter.
    """
    if seconds <= 0:
        raise ValueError(f"time must be positive, got {seconds}")
    return size_bytes / seconds / GB


def busbw(op: str, size_bytes: float, seconds: float, nranks: int) -> float:
    """Bus bandwidth in GB/s: ``algbw * factor(op, nranks)`` (nccl-tests PERFORMANCE.md)."""
    return algbw(size_bytes, seconds) * busbw_factor(op, nranks)


def busbw_factor(op: str, nranks: int) -> float:
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    return BUSBW_FACTORS.get(op)(nranks)


def accelerator_utilisation(compute_s: float, wall_s: float) -> float:
    """Accelerator utilisation AU = compute time / wall time (DLIO's definition).

    DLIO (argonne-lcf/dlio_benchmark, docs "Metrics") emulates each training step's compute
    by sleeping and reports AU as the share of the run spent computing; 1 - AU is the share the
    accelerator waits for data (C4's "GPUs idle 65 % of the time").
    """
    if wall_s <= 0:
        raise ValueError(f"wall time must be positive, got {wall_s}")
    return min(1.0, compute_s / wall_s)


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation (numpy's default)."""
    if len(samples) == 0:
        return float("nan")
    return float(np.percentile(np.asarray(samples, dtype=float), q))


# Peak link rates for context in reports; vendor data sheets, in GB/s per direction.
LINK_PEAKS_GBPS = {
    "HDR InfiniBand (200 Gb/s)": 200e9 / 8 / GB,   # the guide's fabric (C16)
    "NDR InfiniBand (400 Gb/s)": 400e9 / 8 / GB,
    "NVLink 3 (A100, per GPU)": 300.0,             # 600 GB/s bidirectional
}
