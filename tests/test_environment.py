"""The inventory: parsed from recorded /proc and /sys trees, from recorded command
outputs served by stand-in executables on PATH, and from this very machine."""

from __future__ import annotations

import math
import os
import platform
import shutil
import sys
from pathlib import Path

import pytest

from hpcbench.affinity.topology import parse_cpulist
from hpcbench.experiments.environment.config import EnvironmentConfig
from hpcbench.system.inventory import (
    ABSENT,
    COLLECTORS,
    InventoryItem,
    collect_inventory,
    inventory_frame,
    parse_ib_rate,
    parse_mpi_version,
    parse_nvidia_smi_gpus,
    write_inventory,
)
from hpcbench.core.errors import ConfigError, RegistryError
from hpcbench.core.results import RecordContext, RecordWriter, read_records

FIXTURES = Path(__file__).parent / "fixtures" / "environment"
NODE = FIXTURES / "two_socket_hdr"
COMMANDS = FIXTURES / "commands"

# Collectors that read only files under sysfs_root (no torch, no commands): fast and
# fully determined by the fixture tree.
FILE_COLLECTORS = ["host", "cpu", "memory", "numa", "infiniband", "nvidia_driver"]


def by_metric(items: list[InventoryItem]) -> dict[str, InventoryItem]:
    out = {it.metric: it for it in items}
    assert len(out) == len(items), "metrics must be unique within one inventory"
    return out


def fake_bin(tmp_path: Path, outputs: dict[str, str | Path], *, status: int = 0) -> str:
    """A PATH directory whose executables print recorded outputs (or sleep, for ``"sleep"``)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    cat, sleep = shutil.which("cat"), shutil.which("sleep")
    for name, what in outputs.items():
        body = f"exec {sleep} 5" if what == "sleep" else f"{cat} '{what}'; exit {status}"
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    return str(bin_dir)


# -- the recorded node --------------------------------------------------------------

@pytest.fixture(scope="module")
def node_items() -> dict[str, InventoryItem]:
    cfg = EnvironmentConfig(sysfs_root=str(NODE), include_commands=False)
    return by_metric(collect_inventory(cfg, env={}, collectors=FILE_COLLECTORS))


def test_fixture_cpu_sockets_cores_threads(node_items):
    assert node_items["cpu.model"].value == "Intel(R) Xeon(R) Gold 6128 CPU @ 3.40GHz"
    assert node_items["cpu.sockets"].numeric == 2.0
    assert node_items["cpu.cores"].numeric == 12.0
    assert node_items["cpu.threads"].numeric == 24.0
    assert node_items["cpu.threads"].unit == "count"
    assert node_items["cpu.threads"].source == "/proc/cpuinfo"


def test_fixture_memory_numa_host_driver(node_items):
    mem = node_items["memory.total"]
    assert (mem.numeric, mem.unit, mem.value) == (187.5, "GiB", "187.50")
    assert node_items["numa.nodes"].numeric == 2.0
    assert node_items["numa.nodes"].value == "2"
    assert node_items["numa.node0.cpus"].value == "0-5,12-17"
    assert node_items["numa.node0.cpus"].numeric == 12.0
    assert node_items["numa.node1.cpus"].value == "6-11,18-23"
    assert node_items["host.hostname"].value == "gpu-node017"
    assert node_items["host.kernel"].value == "5.15.0-91-generic"
    assert node_items["gpu.driver"].value == "535.129.03"
    assert node_items["gpu.driver"].source == "/proc/driver/nvidia/version"


def test_fixture_infiniband_ports(node_items):
    devices = node_items["infiniband.devices"]
    assert (devices.value, devices.numeric) == ("mlx5_0,mlx5_1", 2.0)
    assert node_items["infiniband.active_ports"].numeric == 2.0
    for dev, numa in (("mlx5_0", "0"), ("mlx5_1", "1")):
        rate = node_items[f"infiniband.{dev}.port1.rate"]
        assert (rate.numeric, rate.unit, rate.value) == (200.0, "Gb/s", "200 Gb/sec (4X HDR)")
        assert rate.source == f"/sys/class/infiniband/{dev}/ports/1/rate"
        assert node_items[f"infiniband.{dev}.port1.state"].value == "ACTIVE"
        assert node_items[f"infiniband.{dev}.port1.phys_state"].value == "LinkUp"
        assert node_items[f"infiniband.{dev}.port1.link_layer"].value == "InfiniBand"
        assert node_items[f"infiniband.{dev}.fw_ver"].value == "20.31.1014"
        assert node_items[f"infiniband.{dev}.numa_node"].value == numa


def test_empty_root_says_absent(tmp_path):
    cfg = EnvironmentConfig(sysfs_root=str(tmp_path), include_commands=False)
    items = by_metric(collect_inventory(cfg, env={}, collectors=FILE_COLLECTORS + ["slurm", "mpi"]))
    for metric in ("cpu.model", "cpu.sockets", "cpu.cores", "cpu.threads", "memory.total", "numa.nodes",
                   "infiniband.devices", "gpu.driver", "host.hostname", "host.kernel",
                   "slurm.job_id", "slurm.job_nodelist", "slurm.job_num_nodes"):
        assert items[metric].value == ABSENT, metric
        assert items[metric].numeric is None, metric
    # Commands that were not run say so rather than "absent".
    assert items["slurm.version"].value == "not collected (include_commands=false)"
    assert items["toolchain.mpirun"].numeric is None


def test_a_failing_collector_is_recorded_and_the_others_still_run(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text("MemTotal: plenty\n")
    (tmp_path / "proc" / "cpuinfo").mkdir()  # a directory where a file should be
    shutil.copytree(NODE / "sys", tmp_path / "sys")
    cfg = EnvironmentConfig(sysfs_root=str(tmp_path), include_commands=False)
    items = by_metric(collect_inventory(cfg, env={}, collectors=["memory", "cpu", "numa"]))
    assert items["memory.memory"].value.startswith("error: ") and "MemTotal" in items["memory.memory"].value
    assert items["memory.memory"].numeric is None
    assert items["cpu.cpu"].value.startswith("error: ")
    assert items["numa.nodes"].numeric == 2.0


def test_unknown_collector_lists_the_registered_ones():
    with pytest.raises(RegistryError, match="registered: .*infiniband"):
        collect_inventory(EnvironmentConfig(), collectors=["infiniband", "gpu_topology"])


def test_config_rejects_a_missing_root_and_short_timeouts(tmp_path):
    with pytest.raises(ConfigError, match="sysfs_root"):
        EnvironmentConfig(sysfs_root=str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="command_timeout_s"):
        EnvironmentConfig(command_timeout_s=0)
    assert EnvironmentConfig.from_dict({"include_commands": "false"}).include_commands is False


# -- recorded command outputs ----------------------------------------------------------

def test_commands_and_slurm_environment(tmp_path):
    path = fake_bin(tmp_path, {"sinfo": COMMANDS / "sinfo.txt", "mpirun": COMMANDS / "mpirun-openmpi.txt",
                               "ompi_info": COMMANDS / "ompi_info.txt", "nvidia-smi": COMMANDS / "nvidia-smi.txt"})
    env = {"PATH": path, "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu-node[017-018]",
           "SLURM_JOB_NUM_NODES": "2"}
    cfg = EnvironmentConfig(sysfs_root=str(tmp_path), include_commands=True)
    items = by_metric(collect_inventory(cfg, env=env, collectors=["slurm", "mpi", "nvidia_driver"]))
    assert items["slurm.version"].value == "23.02.7"
    assert items["slurm.job_id"].value == "4242"
    assert items["slurm.job_nodelist"].value == "gpu-node[017-018]"
    assert (items["slurm.job_num_nodes"].numeric, items["slurm.job_num_nodes"].unit) == (2.0, "count")
    assert items["toolchain.mpirun"].value == "Open MPI 4.1.5"
    assert items["toolchain.ompi_info"].value == "Open MPI 4.1.5"
    assert items["toolchain.mpichversion"].value == ABSENT
    # No /proc/driver/nvidia/version under this root: the driver comes from nvidia-smi.
    assert items["gpu.driver"].value == "535.129.03"
    assert items["gpu.driver"].source.startswith("nvidia-smi")


def test_gpus_from_nvidia_smi_when_torch_sees_no_cuda(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("torch sees CUDA here, so GPUs come from torch.cuda (checked on the real machine)")
    path = fake_bin(tmp_path, {"nvidia-smi": COMMANDS / "nvidia-smi.txt"})
    cfg = EnvironmentConfig(sysfs_root=str(tmp_path))
    items = by_metric(collect_inventory(cfg, env={"PATH": path}, collectors=["gpus"]))
    assert items["gpu.count"].numeric == 8.0
    assert items["gpu.7.name"].value == "NVIDIA A100-SXM4-80GB"
    assert (items["gpu.0.memory"].numeric, items["gpu.0.memory"].unit) == (80.0, "GiB")


def test_failing_and_hanging_commands_become_errors(tmp_path):
    path = fake_bin(tmp_path, {"sinfo": COMMANDS / "sinfo.txt"}, status=3)
    fake_bin(tmp_path, {"mpirun": "sleep"})
    cfg = EnvironmentConfig(sysfs_root=str(tmp_path), command_timeout_s=0.2)
    items = by_metric(collect_inventory(cfg, env={"PATH": path}, collectors=["slurm", "mpi"]))
    assert items["slurm.version"].value.startswith("error: `sinfo --version` exited with status 3")
    assert items["toolchain.mpirun"].value == "error: `mpirun --version` timed out after 0.2 s"
    assert items["toolchain.ompi_info"].value == ABSENT


def test_unconfigured_slurm_client_falls_back_to_slurmd(tmp_path):
    # Outside a configured cluster `sinfo --version` exits 1 ("Could not establish a
    # configuration source"); `slurmd -V` still knows the installed version.
    failing = tmp_path / "fail"
    failing.mkdir()
    sinfo_dir = fake_bin(failing, {"sinfo": COMMANDS / "sinfo.txt"}, status=1)
    slurmd_out = tmp_path / "slurmd.txt"
    slurmd_out.write_text("slurm-wlm 22.05.8\n")
    slurmd_dir = fake_bin(tmp_path, {"slurmd": slurmd_out})
    cfg = EnvironmentConfig(sysfs_root=str(tmp_path))
    items = by_metric(collect_inventory(cfg, env={"PATH": f"{sinfo_dir}:{slurmd_dir}"}, collectors=["slurm"]))
    assert items["slurm.version"].value == "22.05.8"
    assert items["slurm.version"].source == "slurmd -V"


@pytest.mark.parametrize("fixture, expected", [
    ("mpirun-openmpi.txt", "Open MPI 4.1.5"),
    ("ompi_info.txt", "Open MPI 4.1.5"),
    ("mpichversion.txt", "MPICH 4.1.2"),
    ("mpirun-mpich.txt", "MPICH (Hydra) 4.1.2"),
    ("intel-mpirun.txt", "Intel MPI 2021.9"),
])
def test_parse_mpi_version(fixture, expected):
    assert parse_mpi_version((COMMANDS / fixture).read_text()) == expected


def test_parsers():
    assert parse_cpulist("0-5,12-17\n") == [0, 1, 2, 3, 4, 5, 12, 13, 14, 15, 16, 17]
    assert parse_cpulist("3") == [3]
    assert parse_ib_rate("400 Gb/sec (4X NDR)\n") == 400.0
    assert parse_ib_rate("25 Gb/sec (1X EDR)") == 25.0
    with pytest.raises(ValueError, match="rate"):
        parse_ib_rate("unknown")
    gpus = parse_nvidia_smi_gpus("NVIDIA H100 80GB HBM3, 81559 MiB, 550.54.15\nTesla T4, [N/A], 550.54.15\n")
    assert gpus[0] == {"name": "NVIDIA H100 80GB HBM3", "memory_gib": 81559 / 1024, "driver": "550.54.15"}
    assert gpus[1]["memory_gib"] is None


# -- this machine -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_items() -> list[InventoryItem]:
    return collect_inventory(EnvironmentConfig(sysfs_root="/"))


def test_real_machine_inventory(real_items):
    items = by_metric(real_items)
    assert items["toolchain.python"].value == platform.python_version()
    assert items["cpu.threads"].numeric == float(os.cpu_count())
    cores = items["cpu.cores"].numeric
    assert cores is not None and 1 <= cores <= os.cpu_count()
    import torch

    assert items["toolchain.torch"].value == torch.__version__
    assert items["toolchain.cuda_available"].numeric == float(torch.cuda.is_available())
    if torch.cuda.is_available():
        assert items["gpu.count"].numeric == float(torch.cuda.device_count())
        assert items["toolchain.nccl"].value != ABSENT
    else:
        assert items["toolchain.nccl"].value == ABSENT
    # Every collector contributed, none failed on this machine.
    assert {it.category for it in real_items} >= {c for c in (COLLECTORS.get(n).category for n in COLLECTORS)}
    assert not [it for it in real_items if it.value.startswith("error:")]


def test_records_round_trip(real_items, tmp_path):
    path = tmp_path / "environment-driver.parquet"
    with RecordWriter(path, RecordContext(experiment="environment")) as writer:
        assert write_inventory(real_items, writer) == len(real_items)
    df = read_records(path)
    assert list(df["metric"]) == [it.metric for it in real_items]
    assert list(df["text"]) == [it.value for it in real_items]
    assert list(df["unit"]) == [it.unit for it in real_items]
    for value, item in zip(df["value"], real_items):
        assert math.isnan(value) if item.numeric is None else value == item.numeric
    python = df[df["metric"] == "toolchain.python"].iloc[0]
    assert python["text"] == platform.python_version()
    assert python["labels"] == '{"category": "toolchain", "source": "sys.version"}'
    frame = inventory_frame(real_items)
    assert list(frame.columns) == ["category", "name", "value", "numeric", "unit", "source"]
    assert len(frame) == len(real_items)


def test_module_import_does_not_import_torch_or_pandas():
    # The CLI imports this module to list experiments; torch costs seconds.
    import subprocess

    code = ("import sys, hpcbench.system.inventory; "
            "print(sorted(m for m in ('torch', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
