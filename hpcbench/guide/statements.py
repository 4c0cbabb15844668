"""What the guide states about its platform and its tuning case, read by several claims and by lower layers.

These are statements of setting, not a claim's judged figure: the platform every prediction at
the guide's scale is made for (section 1.1, which C16 restates), and the weather case's original
step (section 3), the baseline that C7's figures improve on, whose utilisation fixes C8's regime and
which C9's prediction starts from. A claim's own figures, bands and regime live in the ``claims.py``
of the experiment that declares it (``hpcbench/experiments/<name>/claims.py``); a technique's
recommended settings (the monitor's alert thresholds, the gate's limits, the micro-steps under
``no_sync()``, the 2-bit code's bucket) live with the technique that uses them as its defaults.
"""

from __future__ import annotations

#: Section 1.1: "fat nodes with 8 x A100"; every prediction at the guide's scale uses 8 GPUs per node.
GPUS_PER_NODE = 8
#: Section 1.1: nodes "connected by 200 Gbps HDR" InfiniBand; read literally, one HDR port per node.
FABRIC = "HDR InfiniBand (200 Gb/s)"
#: Section 1.1 read literally: one HDR port per node; a DGX A100 has 8 (the alternative every prediction shows).
LITERAL_NICS_PER_NODE = 1
#: Section 3, the weather case's table, first row: the original step, 420 ms at 61 % GPU utilisation.
WEATHER_ORIGINAL_STEP_MS = 420
WEATHER_ORIGINAL_UTIL = 0.61

__all__ = ["FABRIC", "GPUS_PER_NODE", "LITERAL_NICS_PER_NODE", "WEATHER_ORIGINAL_STEP_MS", "WEATHER_ORIGINAL_UTIL"]
