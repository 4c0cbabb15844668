"""GPU counters through NVML (``nvidia-ml-py``, module ``pynvml``).

Per GPU: ``gpu_utilization`` (NVML's "utilization.gpu": the share of the last sample
period in which *any* kernel ran, which is why it hides a starved GPU), memory used,
power and SM clock; and, on Hopper and newer, ``sm_activity`` and ``sm_occupancy`` from
GPU Performance Monitoring (GPM) metrics ``SM_UTIL`` and ``SM_OCCUPANCY``.

``sm_activity`` is what the guide calls "GPU SM efficiency" (C6, DCGM's SM_ACTIVE, field
1002): the share of SMs busy over the interval, which drops when kernels are small or
launches leave gaps, even while ``gpu_utilization`` stays at 100 %. GPM metrics are
computed between two GPM samples, so the first :meth:`NvmlSource.sample` only primes them.

Reference: NVML API, "GPM Functions" (nvmlGpmSampleGet, nvmlGpmMetricsGet).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from hpcbench.monitor.sources.base import Sample, Source

#: GPM metric id (pynvml name) -> our metric; NVML reports both in percent.
_GPM_METRICS = (("NVML_GPM_METRIC_SM_UTIL", "sm_activity"), ("NVML_GPM_METRIC_SM_OCCUPANCY", "sm_occupancy"))


class NvmlSource(Source):
    """NVML counters for every visible GPU.

    Args:
        client: a ``pynvml``-like module (default: ``import pynvml``); tests pass a fake
            that replays ``tests/fixtures/monitor/nvml_h100.json``.
        clock: see :class:`~hpcbench.monitor.sources.Source`.
    """

    name = "nvml"
    metrics = ("gpu_utilization", "gpu_memory_used", "gpu_power", "gpu_sm_clock", "sm_activity", "sm_occupancy")

    def __init__(self, *, client: Any = None, clock: Callable[[], float] | None = None):
        super().__init__(clock=clock)
        self._client = client
        self._handles: list[Any] = []
        self._gpm: dict[int, list[Any]] = {}   # gpu index -> [previous sample, current sample]
        self._gpm_primed: set[int] = set()
        self._reason: str | None = None
        self._initialised = False

    def available(self) -> str | None:
        if self._initialised:
            return self._reason
        self._initialised = True
        self._reason = self._init()
        return self._reason

    def _init(self) -> str | None:
        nv = self._client
        if nv is None:
            try:
                import pynvml as nv  # noqa: PLC0415 - optional dependency, only where GPUs are
            except ImportError:
                return "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
            self._client = nv
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) == nv.NVML_ERROR_LIBRARY_NOT_FOUND:
                return "no NVIDIA driver: libnvidia-ml.so.1 not found"
            return f"NVML could not start: {exc}"
        count = nv.nvmlDeviceGetCount()
        if count == 0:
            nv.nvmlShutdown()
            return "NVML started but sees no GPU"
        self._handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        unsupported = []
        for i, handle in enumerate(self._handles):
            try:
                supported = bool(nv.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
            except nv.NVMLError:
                supported = False
            if supported:
                self._gpm[i] = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
            else:
                unsupported.append(str(i))
        if unsupported:
            why = f"NVML GPM not supported on GPU {', '.join(unsupported)} (GPM needs Hopper or newer)"
            self.absent_metrics.update({"sm_activity": why, "sm_occupancy": why})
        return None

    def _read(self) -> Iterable[Sample]:
        nv = self._client
        for i, handle in enumerate(self._handles):
            labels = {"gpu": str(i)}
            yield from self._gpm_sample(i, handle, labels)
            readings: tuple[tuple[str, str, Callable[[], float]], ...] = (
                ("gpu_utilization", "fraction", lambda: nv.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0),
                ("gpu_memory_used", "B", lambda: float(nv.nvmlDeviceGetMemoryInfo(handle).used)),
                ("gpu_power", "W", lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1000.0),      # mW
                ("gpu_sm_clock", "Hz", lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM) * 1e6),  # MHz
            )
            for metric, unit, read in readings:
                try:
                    yield Sample(metric, read(), unit, labels)
                except nv.NVMLError:
                    continue  # e.g. power "Not Supported" on some boards: no row, never a 0

    def _gpm_sample(self, i: int, handle: Any, labels: dict[str, str]) -> Iterable[Sample]:
        nv = self._client
        if i not in self._gpm:
            return
        pair = self._gpm[i]
        pair[0], pair[1] = pair[1], pair[0]          # last poll's "current" becomes "previous"
        nv.nvmlGpmSampleGet(handle, pair[1])
        if i not in self._gpm_primed:
            self._gpm_primed.add(i)
            return
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(_GPM_METRICS)
        request.sample1, request.sample2 = pair[0], pair[1]
        for k, (nvml_id, _) in enumerate(_GPM_METRICS):
            request.metrics[k].metricId = getattr(nv, nvml_id)
        nv.nvmlGpmMetricsGet(request)
        for k, (_, metric) in enumerate(_GPM_METRICS):
            result = request.metrics[k]
            if result.nvmlReturn == nv.NVML_SUCCESS:
                yield Sample(metric, result.value / 100.0, "fraction", labels)

    def close(self) -> None:
        if not self._handles:
            return
        nv = self._client
        for pair in self._gpm.values():
            for sample in pair:
                nv.nvmlGpmSampleFree(sample)
        self._gpm.clear()
        self._handles = []
        nv.nvmlShutdown()


SOURCE = NvmlSource
