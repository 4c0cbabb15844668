"""How quantities are written for people: one place, so tables, ledger and notebooks agree.

Bandwidths are GB/s with GB = 1e9 bytes (nccl-tests' convention); message sizes are
binary (1 KiB = 1024 B), as nccl-tests gives them.
"""

from __future__ import annotations

import math


def format_bytes(value: object) -> str:
    """``4194304 -> "4 MiB"``; sizes that are not whole binary units are exact: ``"1,020 B"``.

    Sizes rounded down to a multiple of ranks x element size stay exact, so a table
    never shows two different sizes under one label.
    """
    try:
        n = int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n:,} B"


def format_gbps(value: float) -> str:
    """A bandwidth in GB/s with about three significant digits: ``"1.23 GB/s"``."""
    if not math.isfinite(value):
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f} GB/s"
    if abs(value) >= 1:
        return f"{value:.2f} GB/s"
    return f"{value:.3g} GB/s"


def approx_bytes(n: float) -> str:
    """``3.0e12 -> "2.7 TiB"``: a size rounded for estimates and limits (binary units, one decimal).

    :func:`format_bytes` is exact and for measured sizes; this one is
    for rough figures, where 11,534,336 B reads better as "11.0 MiB".
    """
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:.1f} {unit}" if value < 100 else f"{value:,.0f} {unit}"
    return f"{int(n)} B"
