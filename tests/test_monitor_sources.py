"""Monitoring sources: rates computed from recorded counter deltas, and absent reasons here.

Fixtures (tests/fixtures/monitor, see its README): NVML answers replayed through a fake
pynvml module, ``dcgmi dmon`` text, an mlx5 sysfs tree and /proc files at two moments.
Expected values are computed by hand from the fixture deltas (written next to each).
"""

from __future__ import annotations

import json
import pickle
import shutil
import socket
import threading
from pathlib import Path

import numpy as np
import pytest

from hpcbench.core.errors import RegistryError
from hpcbench.monitor.sources import METRICS, SOURCES, Sample, Source, create_sources
from hpcbench.monitor.sources.cpu import CpuSource
from hpcbench.monitor.sources.dcgm import DcgmSource, parse_dmon
from hpcbench.monitor.sources.infiniband import InfinibandSource
from hpcbench.monitor.sources.nvml import NvmlSource
from hpcbench.monitor.sources.perf_cache import PerfCacheSource, probe_reason
from hpcbench.monitor.sources.storage import ReadLatencyFeed, StorageSource, whole_disks
from hpcbench.monitor.sources.tcp import TcpSource

FIX = Path(__file__).parent / "fixtures" / "monitor"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def by_metric(samples: list[Sample], **labels: str) -> dict[str, float]:
    return {s.metric: s.value for s in samples if all(s.labels.get(k) == v for k, v in labels.items())}


# -- NVML ------------------------------------------------------------------------------------------
class FakeNvml:
    """Implements exactly the pynvml functions NvmlSource calls, replaying nvml_h100.json.

    The test sets ``poll`` before each ``sample()``; a GPM sample remembers the poll it was
    taken at, and nvmlGpmMetricsGet answers with the recorded metrics for that pair.
    """

    NVML_SUCCESS = 0
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_CLOCK_SM = 1
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_SM_OCCUPANCY = 3
    NVML_GPM_METRICS_GET_VERSION = 1

    class NVMLError(Exception):
        def __init__(self, value: int):
            super().__init__(f"NVML error {value}")
            self.value = value

    class _Obj:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    class c_nvmlGpmMetricsGet_t:
        def __init__(self) -> None:
            self.version = self.numMetrics = 0
            self.sample1 = self.sample2 = None
            self.metrics = [FakeNvml._Obj(metricId=0, nvmlReturn=0, value=0.0) for _ in range(8)]

    def __init__(self, record: dict, *, missing_library: bool = False, gpm: bool = True):
        self.record, self.missing_library, self.gpm = record, missing_library, gpm
        self.poll = 0
        self.calls: list[str] = []
        self.freed = 0
        self.shut_down = False

    def _gpu(self, handle) -> dict:
        return self.record["polls"][self.poll][handle.index]

    def nvmlInit(self):
        if self.missing_library:
            raise self.NVMLError(self.NVML_ERROR_LIBRARY_NOT_FOUND)

    def nvmlShutdown(self):
        self.shut_down = True

    def nvmlDeviceGetCount(self):
        return len(self.record["gpus"])

    def nvmlDeviceGetHandleByIndex(self, i):
        return self._Obj(index=i)

    def nvmlGpmQueryDeviceSupport(self, handle):
        return self._Obj(isSupportedDevice=int(self.gpm and self.record["gpus"][handle.index]["gpm_supported"]))

    def nvmlGpmSampleAlloc(self):
        return self._Obj(gpu=None, poll=None)

    def nvmlGpmSampleFree(self, sample):
        self.freed += 1

    def nvmlGpmSampleGet(self, handle, sample):
        sample.gpu, sample.poll = handle.index, self.poll
        return sample

    def nvmlGpmMetricsGet(self, request):
        s1, s2 = request.sample1, request.sample2
        assert s1.gpu == s2.gpu and s2.poll == s1.poll + 1, "GPM metrics must span two consecutive samples"
        recorded = self.record["polls"][s2.poll][s2.gpu]["gpm"]
        for k in range(request.numMetrics):
            m = request.metrics[k]
            m.value, m.nvmlReturn = recorded[str(m.metricId)], self.NVML_SUCCESS
        return request

    def nvmlDeviceGetUtilizationRates(self, handle):
        g = self._gpu(handle)
        return self._Obj(gpu=g["utilization_gpu"], memory=g["utilization_memory"])

    def nvmlDeviceGetMemoryInfo(self, handle):
        g = self._gpu(handle)
        return self._Obj(used=g["memory_used"], total=g["memory_total"], free=g["memory_total"] - g["memory_used"])

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._gpu(handle)["power_mw"]

    def nvmlDeviceGetClockInfo(self, handle, clock_type):
        assert clock_type == self.NVML_CLOCK_SM
        return self._gpu(handle)["sm_clock_mhz"]


@pytest.fixture
def nvml_record() -> dict:
    return json.loads((FIX / "nvml_h100.json").read_text())


def test_fake_nvml_matches_the_real_pynvml_api():
    pynvml = pytest.importorskip("pynvml")
    names = [n for n in vars(FakeNvml) if n.startswith(("nvml", "NVML", "c_nvml"))]
    missing = [n for n in names if not hasattr(pynvml, n)]
    assert not missing, f"the fake has names pynvml lacks: {missing}"
    for n in names:
        if n.startswith("NVML_"):
            assert getattr(pynvml, n) == getattr(FakeNvml, n), n


def test_nvml_replays_recorded_answers(nvml_record):
    fake = FakeNvml(nvml_record)
    src = NvmlSource(client=fake)
    assert src.available() is None and src.absent_metrics == {}
    first = src.sample()              # poll 0: gauges; GPM only primed
    g0 = by_metric(first, gpu="0")
    assert g0 == {"gpu_utilization": 1.0, "gpu_memory_used": 61203283968.0, "gpu_power": 612.345,
                  "gpu_sm_clock": 1980e6}
    fake.poll = 1
    g1 = by_metric(src.sample(), gpu="1")
    # GPU 1: NVML "utilization" 100 % while only 42 % of SMs are busy: the C6 case.
    assert g1["gpu_utilization"] == 1.0
    assert g1["sm_activity"] == pytest.approx(0.42) and g1["sm_occupancy"] == pytest.approx(0.185)
    assert g1["gpu_power"] == pytest.approx(398.760) and g1["gpu_sm_clock"] == 1965e6
    fake.poll = 2
    g0 = by_metric(src.sample(), gpu="0")
    assert g0["sm_activity"] == pytest.approx(0.85) and g0["sm_occupancy"] == pytest.approx(0.40)
    assert g0["gpu_utilization"] == pytest.approx(0.99) and g0["gpu_sm_clock"] == 1755e6
    src.close()
    assert fake.freed == 4 and fake.shut_down


def test_nvml_without_gpm_names_the_missing_metrics(nvml_record):
    src = NvmlSource(client=FakeNvml(nvml_record, gpm=False))
    assert src.available() is None
    assert "GPM not supported on GPU 0, 1" in src.absent_metrics["sm_activity"]
    assert {s.metric for s in src.sample()} == {"gpu_utilization", "gpu_memory_used", "gpu_power", "gpu_sm_clock"}


def test_nvml_absent_reasons(nvml_record):
    assert NvmlSource(client=FakeNvml(nvml_record, missing_library=True)).available() == \
        "no NVIDIA driver: libnvidia-ml.so.1 not found"
    if not Path("/proc/driver/nvidia").exists():   # this VM: no driver
        reason = NvmlSource().available()
        assert reason in ("no NVIDIA driver: libnvidia-ml.so.1 not found",
                          "nvidia-ml-py is not installed (pip install nvidia-ml-py)")


# -- DCGM ------------------------------------------------------------------------------------------
def test_dcgm_parses_dmon_text():
    text = (FIX / "dcgmi_dmon.txt").read_text()
    samples = parse_dmon(text)
    assert by_metric(samples, gpu="0") == {"gpu_gr_engine_active": 0.999, "sm_activity": 0.874,
                                           "sm_occupancy": 0.412, "gpu_tensor_active": 0.563,
                                           "gpu_dram_active": 0.472}
    assert by_metric(samples, gpu="1")["sm_activity"] == 0.421
    assert all(s.labels["via"] == "dcgm" and s.unit == "fraction" for s in samples)
    na = parse_dmon("# Entity  SMACT  SMOCC\n      ID\n    GPU 3  N/A  0.250\n")
    assert [(s.metric, s.value) for s in na] == [("sm_occupancy", 0.25)]


def test_dcgm_source_runs_dmon_once_per_sample():
    seen = []

    def runner(argv):
        seen.append(argv)
        return 0, (FIX / "dcgmi_dmon.txt").read_text()

    src = DcgmSource(fields=(1002, 1003), runner=runner)
    assert src.available() is None
    assert len(src.sample()) == 10 and seen[-1] == ["dcgmi", "dmon", "-e", "1002,1003", "-c", "1"]
    failing = DcgmSource(runner=lambda argv: (255, "Error: unable to establish a connection to the host engine\n"))
    assert failing.available() == ("dcgmi dmon failed (rc 255): Error: unable to establish a connection to "
                                   "the host engine")
    assert DcgmSource(which=lambda name: None).available() == "dcgmi not found (DCGM is not installed)"
    with pytest.raises(ValueError, match="fields"):
        DcgmSource(fields=(1002, 9999))


# -- InfiniBand ------------------------------------------------------------------------------------
def test_infiniband_rates_from_two_moments(tmp_path):
    root, clock = tmp_path / "infiniband", Clock()
    shutil.copytree(FIX / "ib_sysfs" / "t0", root)
    src = InfinibandSource(root=root, clock=clock)
    assert src.available() is None and src.absent_metrics == {}
    assert src.sample() == []                        # first reading primes the rates
    shutil.copytree(FIX / "ib_sysfs" / "t1", root, dirs_exist_ok=True)
    clock.t = 2.0
    samples = src.sample()
    assert {tuple(sorted(s.labels.items())) for s in samples} == {(("device", "mlx5_0"), ("port", "1"))}  # mlx5_1 DOWN
    got = by_metric(samples)
    assert got["ib_xmit_bytes_per_s"] == pytest.approx(2.5e9 * 4 / 2)        # 4-byte words over 2 s
    assert got["ib_rcv_bytes_per_s"] == pytest.approx(2.0e9 * 4 / 2)
    assert got["ib_xmit_wait_share"] == pytest.approx(0.5e9 / (0.5e9 + 2.5e9))
    assert got["ib_errors_per_s"] == pytest.approx((3 + 1) / 2)               # symbol_error + port_rcv_errors
    # (1000 + 1500 + 200 + 50) requester retransmission events / 2.5e6 packets sent
    assert got["ib_retransmission_rate"] == pytest.approx(2750 / 2.5e6)
    assert got["ib_peer_retransmission_rate"] == pytest.approx((400 + 100) / 2.0e6)


def test_infiniband_without_hw_counters_and_absent_here(tmp_path):
    root = tmp_path / "infiniband"
    shutil.copytree(FIX / "ib_sysfs" / "t0", root)
    shutil.rmtree(root / "mlx5_0" / "ports" / "1" / "hw_counters")
    src = InfinibandSource(root=root)
    assert src.available() is None
    assert "no hw_counters" in src.absent_metrics["ib_retransmission_rate"]
    if not Path("/sys/class/infiniband").exists():
        assert InfinibandSource().available() == ("no InfiniBand: /sys/class/infiniband does not exist "
                                                  "(no HCA or no ib driver)")


# -- TCP -------------------------------------------------------------------------------------------
def _proc_root(tmp_path: Path, name: str, fixture: str) -> Path:
    target = tmp_path / "proc" / name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIX / fixture, target)
    return tmp_path / "proc"


def test_tcp_retransmission_rate_from_snmp_deltas(tmp_path):
    clock = Clock()
    root = _proc_root(tmp_path, "net/snmp", "proc_net_snmp_t0")
    src = TcpSource(root=root, clock=clock)
    assert src.available() is None and src.sample() == []
    _proc_root(tmp_path, "net/snmp", "proc_net_snmp_t1")
    clock.t = 1.0
    got = by_metric(src.sample())
    assert got["tcp_retransmission_rate"] == pytest.approx(300 / 200_000)     # 0.15 %: breaks C6's 0.1 %
    assert got["tcp_out_segs_per_s"] == pytest.approx(200_000)


def test_tcp_source_is_real_here():
    src = TcpSource()
    assert src.available() is None
    src.sample()
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve():
        conn, _ = server.accept()
        while conn.recv(65536):
            pass
        conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    with socket.create_connection(("127.0.0.1", port)) as c:
        for _ in range(50):
            c.sendall(b"x" * 1000)
    t.join(5)
    server.close()
    got = by_metric(src.sample())
    assert got["tcp_out_segs_per_s"] > 0
    assert 0.0 <= got["tcp_retransmission_rate"] <= 1.0


# -- storage ---------------------------------------------------------------------------------------
def test_disk_read_await_from_diskstats(tmp_path):
    clock = Clock()
    root = _proc_root(tmp_path, "diskstats", "diskstats_t0")
    src = StorageSource(root=root, clock=clock, lustre_roots=())
    assert src.available() is None
    assert set(src.absent_metrics) == {"storage_read_p99", "lustre_read_mean_latency"}
    assert src.sample() == []
    _proc_root(tmp_path, "diskstats", "diskstats_t1")
    clock.t = 2.0
    samples = src.sample()
    assert {s.labels["disk"] for s in samples} == {"vda", "nvme0n1"}         # no loop, zram, partitions
    assert by_metric(samples, disk="vda") == {"disk_reads_per_s": pytest.approx(500 / 2),
                                              "disk_read_await": pytest.approx(2000 / 500 / 1e3)}  # 4 ms
    assert by_metric(samples, disk="nvme0n1")["disk_read_await"] == pytest.approx(150 / 1000 / 1e3)


def test_whole_disks():
    assert whole_disks(["loop0", "sda", "sda1", "sda12", "nvme0n1", "nvme0n1p2", "dm-0", "md127", "zram0"]) == \
        ["sda", "nvme0n1", "dm-0", "md127"]


def test_read_latency_feed_p99_between_writers(tmp_path):
    path = tmp_path / "reads.feed"
    writer_a, writer_b = ReadLatencyFeed(path), pickle.loads(pickle.dumps(ReadLatencyFeed(path)))
    latencies = [0.001 * (i % 50 + 1) for i in range(200)]
    for i, v in enumerate(latencies):
        (writer_a if i % 2 else writer_b).record_read(v)
    src = StorageSource(feed=path, root=tmp_path, lustre_roots=())
    assert src.available() is None
    got = by_metric(src.sample())
    assert got["storage_read_count"] == 200
    assert got["storage_read_p99"] == pytest.approx(np.percentile(latencies, 99))
    got = by_metric(src.sample())                   # no reads since: a count of 0 and no P99
    assert got == {"storage_read_count": 0.0}
    writer_a.record_read(0.2)
    assert by_metric(src.sample())["storage_read_p99"] == pytest.approx(0.2)
    writer_a.close()


def test_read_latency_feed_named_after_an_emulated_node_makes_its_folder(tmp_path):
    # An emulated node is "host/node0": a feed named after it lies in a folder nobody made yet,
    # which failed `hpcbench run monitoring` at its defaults on the local backend.
    node = "vm/node0"
    feed = ReadLatencyFeed(tmp_path / "task" / f"monitor-{node}.feed")
    reader = pickle.loads(pickle.dumps(feed))
    assert reader.read_new() == []                  # the sampler may look before the first read
    feed.record_read(0.01)
    feed.close()
    assert (tmp_path / "task" / "monitor-vm" / "node0.feed").is_file()
    assert reader.read_new() == [pytest.approx(0.01)]


def test_lustre_mean_read_latency(tmp_path):
    clock = Clock()
    lustre = tmp_path / "lustre"
    shutil.copytree(FIX / "lustre" / "t0", lustre)
    src = StorageSource(root=tmp_path / "noproc", lustre_roots=[lustre], clock=clock)
    src.available()
    assert "lustre_read_mean_latency" not in src.absent_metrics
    src.sample()
    shutil.copytree(FIX / "lustre" / "t1", lustre, dirs_exist_ok=True)
    clock.t = 2.0
    samples = src.sample()
    assert samples == [Sample("lustre_read_mean_latency", pytest.approx(2_500_000 / 500 / 1e6), "s",
                              {"fs": "scratch-ffff9a2b3c4d5000"})]                    # 5 ms


# -- CPU -------------------------------------------------------------------------------------------
def test_cpu_utilization_and_steal_formula(tmp_path):
    (tmp_path / "stat").write_text("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\n")
    src = CpuSource(root=tmp_path)
    src.sample()
    (tmp_path / "stat").write_text("cpu  160 0 70 880 60 0 0 30 20 0\ncpu0 1 2 3\n")
    got = by_metric(src.sample())
    # deltas: user 60 system 20 idle 80 iowait 10 steal 30 -> total 200 (guest is inside user)
    assert got == {"cpu_utilization": pytest.approx(1 - 90 / 200), "cpu_steal": pytest.approx(30 / 200)}


def test_cpu_source_is_real_here():
    src = CpuSource()
    assert src.available() is None
    src.sample()
    x = 0
    for i in range(300_000):
        x += i
    got = by_metric(src.sample())
    assert 0.0 <= got["cpu_utilization"] <= 1.0 and 0.0 <= got["cpu_steal"] <= 1.0


# -- perf cache ------------------------------------------------------------------------------------
def test_perf_interval_lines_give_a_hit_rate():
    src = PerfCacheSource(runner=lambda argv: (0, ""))
    for line in (FIX / "perf_stat_interval.txt").read_text().splitlines():
        src.feed_line(line)
    # two intervals complete (the third is still open): 1 - (60k + 200k) / (1.2M + 1.0M)
    assert by_metric(src.drain()) == {"cpu_cache_hit_rate": pytest.approx(1 - 260_000 / 2_200_000)}
    assert src.drain() == []
    src.feed_line("     1.000500000,100,,cpu_core/cache-references/,1,100.00,,")
    assert by_metric(src.drain())["cpu_cache_hit_rate"] == pytest.approx(0.9)  # closes the 0.75 s interval


def test_perf_cache_absent_reasons():
    # This VM's answer (recorded): hardware events are not passed through.
    vm_text = "<not supported>,,cache-references,0,100.00,,\n<not supported>,,cache-misses,0,100.00,,\n"
    assert probe_reason(vm_text, 0) == "perf: cache-references <not supported> on this CPU/VM"
    assert PerfCacheSource(which=lambda name: None).available().startswith("perf is not installed")
    reason = PerfCacheSource().available()
    assert reason is None or reason.startswith("perf")


# -- registry and base -----------------------------------------------------------------------------
def test_registry_names_and_unknown_source():
    assert SOURCES.names() == ["cpu", "dcgm", "infiniband", "nvml", "perf_cache", "storage", "tcp"]
    with pytest.raises(RegistryError, match="registered: cpu, dcgm, infiniband"):
        SOURCES.get("nvidia")
    assert [s.name for s in create_sources(["tcp", "cpu"])] == ["tcp", "cpu"]
    for name in SOURCES:
        assert set(SOURCES.get(name).metrics) <= set(METRICS)


def test_counter_going_backwards_loses_one_interval():
    src = Source(clock=Clock())
    assert src._deltas(("k",), {"a": 10.0}, 0.0) is None
    assert src._deltas(("k",), {"a": 5.0}, 1.0) is None        # reset: no negative rate
    assert src._deltas(("k",), {"a": 8.0}, 2.0) == ({"a": 3.0}, 1.0)
