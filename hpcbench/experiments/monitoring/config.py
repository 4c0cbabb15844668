"""Parameters of the ``monitoring`` experiment (``notebooks/07_monitoring.ipynb``)."""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.core.config import param
from hpcbench.fault.phases import NO_FAULT, FaultPhasesConfig, phases_param, weather_model_param

#: The baseline phase (:data:`NO_FAULT`, no fault) and the injected faults, in run order.
FAULTS = (NO_FAULT, "slow_link", "lossy_link", "slow_storage", "cpu_contention")
#: The C6 metrics that stand for each fault's bottleneck, fixed from the claim's words: SM efficiency
#: falls whenever the GPU waits (on a link, the disk or the CPU); the retransmission rate is about
#: lost packets, which a slow but clean link does not produce; storage P99 is about reads; the cache
#: hit rate about CPU/memory pressure. TCP retransmissions stand in for IB's on Ethernet. A fault
#: counts as caught only by one of its own metrics, and is neither caught nor missed where all of
#: them were recorded absent (e.g. cache hits without perf counters).
FAULT_METRICS = {
    "slow_link": ("sm_activity",),
    "lossy_link": ("sm_activity", "ib_retransmission_rate", "tcp_retransmission_rate"),
    "slow_storage": ("sm_activity", "storage_read_p99"),
    "cpu_contention": ("sm_activity", "cpu_cache_hit_rate"),
}


@dataclass
class MonitoringConfig(FaultPhasesConfig):
    """Parameters of ``07_monitoring``; the notebook's parameters cell mirrors them."""

    baseline_role = "the baseline the alerts must stay quiet on"

    faults: list[str] = phases_param(FAULTS, baseline_role)
    model: str = weather_model_param("weather_small for a heavier step")
    batch_size: int = param(4, "forecasting pairs per step per rank: one block read of batch_size + 1 time steps "
                               "(~330 KB for weather_tiny)", min=1, max=256)
    phase_s: float = param(12.0, "seconds of training per fault phase (with interval_s = 1 s and sustain = 3, an "
                                 "alert needs >= 3 s of breach; 12 s leaves room for the fault's start and end)",
                           min=1.0, max=3600.0)
    min_steps: int = param(10, "timed steps per phase at least, however long they take (a verdict needs >= 5)",
                           min=1, max=100000)
    warmup_steps: int = param(2, "untimed steps per phase after the fault is on", min=0, max=1000)
    interval_s: float = param(1.0, "sampler interval (1 Hz: fine enough for step-scale faults at <= 1 % overhead)", min=0.05, max=60.0)
    sustain: int = param(3, "consecutive breaching samples that make an alert (hpcbench.monitor.thresholds)",
                         min=1, max=1000)
    slow_link_rate: str = param("50mbit", "tbf rate of the faulty node's link in slow_link and lossy_link (the "
                                          "cluster's links run at 1gbit)")
    lossy_queue_bytes: int = param(32000, "tbf queue of lossy_link, bytes: bursts beyond it are dropped, so TCP "
                                          "retransmits (~4 % of segments at 50mbit, measured)", min=1600, max=1 << 26)
    storage_read_bps: int = param(1_000_000, "blkio read throttle of slow_storage, bytes/s, on the faulty node's "
                                             "ranks: a 330 KB block read then takes ~0.3 s", min=4096)
    storage_read_iops: int = param(50, "blkio read requests/s of slow_storage", min=1)
    contention_per_cpu: int = param(2, "busy processes per CPU of the faulty node's ranks in cpu_contention (2 "
                                       "leave a rank a third of its CPU)", min=1, max=64)
    seed: int = param(0, "seed of the weights, the data set and its shuffle", min=0)
