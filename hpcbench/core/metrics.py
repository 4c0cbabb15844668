"""Derived metrics, each formula with its source. Hardware peaks come from tables.

Units: bandwidths in GB/s with GB = 1e9 bytes (as nccl-tests prints them), times in
seconds.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from hpcbench.core.facts import GB
from hpcbench.core.registry import Registry

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


def size_sweep(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """Geometric message sizes from ``min_bytes`` up to and including ``max_bytes`` when reached.

    nccl-tests' ``-b min -e max -f factor``: each size ``factor`` times the one before.
    """
    sizes, s = [], int(min_bytes)
    while s <= max_bytes:
        sizes.append(s)
        s *= factor
    return sizes


def allreduce_bytes_sent(nbytes: float, ranks: int) -> float:
    """Bytes one rank sends in a bandwidth-optimal ring all-reduce of ``nbytes``: 2 (N-1)/N x S.

    Every edge of the ring carries as much, so it is also what crosses a node boundary that the
    ring passes once (Patarasuk & Yuan 2009). It is nccl-tests' all_reduce bus factor applied to
    S; one rank sends nothing.
    """
    return busbw_factor("all_reduce", ranks) * nbytes


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


# -- hardware peaks --------------------------------------------------------------------------
# Dense (no 2:4 sparsity) tensor-core peak for bf16/fp16, FLOP/s per GPU, as MFU's denominator.
# Data sheets print the sparse figure; dense is half of it. Rows are matched in order against
# torch.cuda.get_device_name(), so a more specific pattern comes before a looser one.
PEAK_DENSE_BF16_FLOPS: tuple[tuple[str, str, float], ...] = (
    # (regex on the device name, what it matches, FLOP/s)
    (r"\bA100\b", "A100 (SXM4 / PCIe)", 312e12),         # NVIDIA A100 datasheet: BF16 312 TFLOPS dense
    (r"\bH100\b.*\bPCIe\b", "H100 PCIe", 756e12),         # NVIDIA H100 datasheet: BF16 1,513 TFLOPS sparse
    (r"\bH100\b(?!.*\b(PCIe|NVL)\b)", "H100 SXM", 989.4e12),  # NVIDIA H100 datasheet: BF16 1,979 TFLOPS sparse
    (r"\bH200\b(?!.*\bNVL\b)", "H200 SXM", 989.4e12),     # NVIDIA H200 datasheet: BF16 1,979 TFLOPS sparse
)


def peak_dense_bf16_flops(device_name: str) -> float | None:
    """The GPU's dense bf16 peak FLOP/s from :data:`PEAK_DENSE_BF16_FLOPS`, or ``None`` if not listed.

    ``device_name`` is what ``torch.cuda.get_device_name()`` returns, e.g. ``"NVIDIA H200"`` or
    ``"NVIDIA H100 80GB HBM3"`` (the SXM part).
    """
    import re

    for pattern, _, flops in PEAK_DENSE_BF16_FLOPS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return flops
    return None
