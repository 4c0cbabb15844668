"""What every monitoring source is built from: :class:`Sample`, :class:`Source`, :data:`METRICS` and
:func:`run_command`. The source modules import this module, and the package imports them to register
them, so nothing imports back up.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable


@dataclass(frozen=True)
class Sample:
    """One value read from a source.

    Attributes:
        metric: a name from :data:`METRICS`.
        value: the value in ``unit``.
        unit: ``fraction`` (0..1), ``B``, ``B/s``, ``W``, ``Hz``, ``s``, ``1/s``.
        labels: what the value belongs to: ``{"gpu": "0"}``, ``{"device": "mlx5_0",
            "port": "1"}``, ``{"disk": "vda"}``.
    """

    metric: str
    value: float
    unit: str
    labels: dict[str, str] = field(default_factory=dict)


#: Every metric a source may emit: unit and meaning. Thresholds are checked against it.
METRICS: dict[str, tuple[str, str]] = {
    "gpu_utilization": ("fraction", "NVML: share of time a kernel ran (not how much of the GPU it used)"),
    "gpu_memory_used": ("B", "NVML: device memory in use"),
    "gpu_power": ("W", "NVML: board power draw"),
    "gpu_sm_clock": ("Hz", "NVML: current SM clock"),
    "sm_activity": ("fraction", "share of SMs busy (NVML GPM SM_UTIL / DCGM 1002 SM_ACTIVE); the guide's "
                                "'SM efficiency'"),
    "sm_occupancy": ("fraction", "active warps over the maximum (NVML GPM SM_OCCUPANCY / DCGM 1003)"),
    "gpu_gr_engine_active": ("fraction", "DCGM 1001 GR_ENGINE_ACTIVE"),
    "gpu_tensor_active": ("fraction", "DCGM 1004 PIPE_TENSOR_ACTIVE"),
    "gpu_dram_active": ("fraction", "DCGM 1005 DRAM_ACTIVE"),
    "ib_xmit_bytes_per_s": ("B/s", "InfiniBand port_xmit_data x 4 per second"),
    "ib_rcv_bytes_per_s": ("B/s", "InfiniBand port_rcv_data x 4 per second"),
    "ib_xmit_wait_share": ("fraction", "port_xmit_wait ticks over (wait ticks + data words sent)"),
    "ib_errors_per_s": ("1/s", "sum of the port error counters per second"),
    "ib_retransmission_rate": ("fraction", "requester retransmission events over packets sent "
                                           "(see hpcbench.monitor.sources.infiniband)"),
    "ib_peer_retransmission_rate": ("fraction", "responder-side evidence of the peer's retransmissions "
                                                "over packets received"),
    "tcp_retransmission_rate": ("fraction", "delta RetransSegs / delta OutSegs, /proc/net/snmp"),
    "tcp_out_segs_per_s": ("1/s", "TCP segments sent per second"),
    "storage_read_p99": ("s", "P99 of the data loader's per-read latencies in the interval"),
    "storage_read_count": ("1", "reads the data loader reported in the interval"),
    "disk_read_await": ("s", "mean time per completed read, /proc/diskstats"),
    "disk_reads_per_s": ("1/s", "reads completed per second, /proc/diskstats"),
    "lustre_read_mean_latency": ("s", "Lustre llite stats: mean read latency in the interval"),
    "cpu_cache_hit_rate": ("fraction", "1 - cache-misses / cache-references (perf, system-wide)"),
    "cpu_utilization": ("fraction", "non-idle share of CPU time, /proc/stat"),
    "cpu_steal": ("fraction", "share of CPU time stolen by the hypervisor, /proc/stat"),
}


class Source:
    """Base of every source. Subclasses set ``name`` and fill in :meth:`available` and :meth:`_read`.

    ``clock`` (default :func:`time.monotonic`) is injectable so fixture replays have known
    intervals.
    """

    name: str = ""
    #: Every metric this source can emit (names from :data:`METRICS`); an absent source
    #: gets a "not available" row for each.
    metrics: tuple[str, ...] = ()

    def __init__(self, *, clock: Callable[[], float] | None = None):
        self.clock = clock or time.monotonic
        #: metric -> reason, for metrics this usable source cannot give here.
        self.absent_metrics: dict[str, str] = {}
        self._previous: dict[tuple, tuple[float, dict[str, float]]] = {}

    def available(self) -> str | None:
        """``None`` when usable here, else the plain reason it is absent."""
        return None

    def sample(self) -> list[Sample]:
        """Read the counters now; rates cover the time since the previous call."""
        return list(self._read())

    def _read(self) -> Iterable[Sample]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what :meth:`available` or :meth:`sample` acquired (handles, child processes)."""

    # -- shared helpers ---------------------------------------------------------------------
    def _deltas(self, key: tuple, counters: dict[str, float], now: float) -> tuple[dict[str, float], float] | None:
        """Deltas of ``counters`` since the previous reading under ``key``, and the seconds between.

        ``None`` on the first reading, or when a counter went backwards (a reset or a
        wrap): one interval is lost rather than a negative rate reported.
        """
        previous = self._previous.get(key)
        self._previous[key] = (now, dict(counters))
        if previous is None:
            return None
        then, old = previous
        dt = now - then
        deltas = {k: v - old[k] for k, v in counters.items() if k in old}
        if dt <= 0 or any(d < 0 for d in deltas.values()):
            return None
        return deltas, dt


def run_command(argv: list[str], timeout_s: float = 10) -> tuple[int, str]:
    """``(exit status, stdout + stderr)`` of a probe command; a missing program or a hang is status 1 with why."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 1, str(exc)
    return done.returncode, done.stdout + done.stderr
