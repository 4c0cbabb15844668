"""Per-node monitoring for the guide's C6 ("wrong monitoring metrics", guide sec. 2.4).

GPU utilisation alone hides the real bottleneck; this package samples what the guide says
to watch instead (SM activity, InfiniBand or TCP retransmissions, storage read latency
P99, CPU cache hit rate) next to plain utilisation, and turns sustained breaches of the
thresholds into alert records.

* :mod:`~hpcbench.monitor.sources`: one module per kind of counter, registered in ``SOURCES``.
* :mod:`~hpcbench.monitor.sampler`: the background process (``Sampler``) writing records.
* :mod:`~hpcbench.monitor.thresholds`: thresholds as data, ``evaluate`` and alert records.

Typical use::

    feed = ReadLatencyFeed(run_dir / "reads.feed")           # the loader calls feed.record_read(s)
    with Sampler(run_dir / "monitor.parquet", feed=feed, labels={"fault": "none"}):
        train()
    alerts = evaluate(read_records(run_dir / "monitor.parquet"), C6_THRESHOLDS)
"""

from __future__ import annotations

import importlib
from typing import Any

# Names load on first use: ``hpcbench sample`` imports this package
# first, and the sampler child must neither import itself twice nor load pandas before
# its signal handlers are in place.
_EXPORTS = {
    "Sampler": "hpcbench.monitor.sampler",
    "METRICS": "hpcbench.monitor.sources", "SOURCES": "hpcbench.monitor.sources",
    "Sample": "hpcbench.monitor.sources", "Source": "hpcbench.monitor.sources",
    "create_sources": "hpcbench.monitor.sources",
    "ReadLatencyFeed": "hpcbench.monitor.sources.storage",
    **{name: "hpcbench.monitor.thresholds" for name in
       ("Alert", "C6_THRESHOLDS", "Threshold", "alert_records", "evaluate", "load_thresholds")},
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'hpcbench.monitor' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
