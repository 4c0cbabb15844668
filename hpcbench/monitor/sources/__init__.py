"""Monitoring sources: one module per kind of counter, one registry of them all.

A source reads one family of counters on this node (NVML, DCGM, InfiniBand sysfs,
``/proc/net/snmp``, ``/proc/diskstats``, ``/proc/stat``, perf) and turns them into
:class:`Sample` values. Cumulative counters become rates inside the source, which keeps
its previous reading: the first :meth:`Source.sample` of a rate metric only primes it.

A source that cannot work here says why in :meth:`Source.available` (``None`` means
usable), in plain words ("no NVIDIA driver: libnvidia-ml.so.1 not found"), so the report
can print "not available: <reason>" and never a made-up number. A usable source may
still lack some metrics (NVML without GPM, InfiniBand without ``hw_counters``); those are
listed in :attr:`Source.absent_metrics` with their reasons.

Every constructor takes an optional filesystem ``root`` or an injected client, so tests
replay recorded answers (``tests/fixtures/monitor``).
"""

from __future__ import annotations

from typing import Iterable

from hpcbench.core.registry import Registry
from hpcbench.monitor.sources import cpu, dcgm, infiniband, nvml, perf_cache, storage, tcp
from hpcbench.monitor.sources.base import METRICS, Sample, Source, run_command

#: Registered source classes by name; ``SOURCES.get("tcp")(root=...)`` builds one.
SOURCES: Registry[type[Source]] = Registry("monitor source")


def create_sources(names: Iterable[str] | None = None, **options: dict) -> list[Source]:
    """Build sources by name (all registered ones when ``names`` is None).

    Args:
        names: registered names; an unknown one raises ``RegistryError`` listing them.
        options: per-source constructor keywords, e.g. ``storage={"feed": feed}``.
    """
    chosen = list(SOURCES.names() if names is None else names)
    return [SOURCES.get(n)(**options.get(n, {})) for n in chosen]


for _module in (nvml, dcgm, infiniband, tcp, storage, cpu, perf_cache):
    assert set(_module.SOURCE.metrics) <= set(METRICS), f"{_module.SOURCE.name}: metrics missing from METRICS"
    SOURCES.register(_module.SOURCE.name, _module.SOURCE)

__all__ = ["METRICS", "SOURCES", "Sample", "Source", "create_sources", "run_command"]
