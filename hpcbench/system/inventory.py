"""Toolchain and topology inventory: what this machine has, recorded beside every result.

The guide's reference setting (claim C16) is 8x A100 per node on 200 Gb/s HDR
InfiniBand; a number measured here only means something next to what *this*
cluster has. The inventory lists it as :class:`InventoryItem` rows, one fact each:
Python, torch, CUDA, NCCL, MPI and SLURM versions, the NVIDIA driver, CPU sockets /
cores / threads, memory, NUMA nodes, GPUs, InfiniBand ports, hostname and kernel, and the
Lustre client checks of the guide's section 5.3 where ``lfs`` exists.

Rules the collectors follow:

* Anything not found says ``"absent"`` (``numeric=None``); no number is ever made up.
* A collector that raises does not stop the others: its failure is recorded as an
  item whose value is ``"error: <message>"``.
* Files are read under ``EnvironmentConfig.sysfs_root`` (``/proc/...``, ``/sys/...``),
  so tests point it at a recorded tree. Facts about the running process (Python,
  torch, environment variables, commands on ``PATH``) come from the live process.

torch is imported lazily inside its collectors: the CLI imports this module to list
experiments, and importing torch costs seconds.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from hpcbench.affinity.topology import parse_cpulist
from hpcbench.core.errors import HpcbenchError
from hpcbench.core.registry import Registry

if TYPE_CHECKING:  # pandas and the results module are only needed when displaying or writing
    import pandas as pd

    from hpcbench.core.results import RecordWriter

__all__ = [
    "ABSENT", "InventoryItem", "Probe", "CommandError", "Collector",
    "COLLECTORS", "collector", "collect_inventory", "write_inventory", "inventory_frame",
    "parse_mpi_version", "parse_nvidia_smi_gpus", "parse_ib_rate", "nvidia_smi_gpus",
    "LUSTRE_DIRS_ENV", "parse_lfs_df", "parse_lfs_getstripe",
]

#: The value of every fact that was looked for and not found.
ABSENT = "absent"

#: Display order of the categories (collectors run in name order).
CATEGORY_ORDER = ("host", "toolchain", "slurm", "cpu", "memory", "numa", "gpu", "infiniband", "storage")

_GIB = 1 << 30


@dataclass(frozen=True)
class InventoryItem:
    """One fact about the machine.

    ``value`` is always text (a version, a model name, ``"absent"``, ``"error: ..."``);
    ``numeric`` carries the number when the fact is a quantity, in ``unit``.
    """

    category: str
    name: str
    value: str
    numeric: float | None = None
    unit: str = ""
    source: str = ""

    @property
    def metric(self) -> str:
        """The metric name under which the item is recorded: ``category.name``."""
        return f"{self.category}.{self.name}"


class CommandError(HpcbenchError):
    """An external command exited non-zero or timed out; the message names it."""


@dataclass
class Probe:
    """What collectors read from: a file-system root, an environment and a command runner.

    Args:
        root: directory under which ``/proc`` and ``/sys`` paths are read.
        env: environment variables (SLURM's, and ``PATH`` to find commands); also the
            environment external commands run with.
        include_commands: when false, :meth:`run` runs nothing.
        timeout_s: limit for each external command.
    """

    root: Path
    env: Mapping[str, str]
    include_commands: bool = True
    timeout_s: float = 10.0
    _outputs: dict[tuple[str, ...], str | None | CommandError] = field(default_factory=dict, repr=False)

    def path(self, absolute: str) -> Path:
        """``/proc/meminfo`` -> ``<root>/proc/meminfo``."""
        return self.root / absolute.lstrip("/")

    def read(self, absolute: str) -> str | None:
        """Text of a file under the root, or ``None`` when it does not exist.

        Other failures (permission, a directory where a file should be) raise, so
        that they are recorded as errors rather than passed off as absent.
        """
        try:
            return self.path(absolute).read_text(errors="replace")
        except (FileNotFoundError, NotADirectoryError):
            return None

    def unavailable(self) -> str:
        """What to record for a command that :meth:`run` returned ``None`` for."""
        return ABSENT if self.include_commands else "not collected (include_commands=false)"

    def run(self, *argv: str) -> str | None:
        """stdout of a command, or ``None`` when commands are off or ``argv[0]`` is not on PATH.

        Outputs are cached, so two collectors asking ``nvidia-smi`` cost one call.

        Raises:
            CommandError: on a non-zero exit status or a timeout, naming the command.
        """
        if not self.include_commands:
            return None
        if argv not in self._outputs:
            self._outputs[argv] = self._execute(argv)
        out = self._outputs[argv]
        if isinstance(out, CommandError):
            raise out
        return out

    def _execute(self, argv: tuple[str, ...]) -> str | None | CommandError:
        exe = shutil.which(argv[0], path=self.env.get("PATH", os.defpath))
        if exe is None:
            return None
        shown = " ".join(argv)
        try:
            proc = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, errors="replace",
                                  timeout=self.timeout_s, env=dict(self.env), stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return CommandError(f"`{shown}` timed out after {self.timeout_s:g} s")
        except OSError as exc:
            return CommandError(f"`{shown}` could not be started: {exc}")
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
            return CommandError(f"`{shown}` exited with status {proc.returncode}: {tail[0]}".rstrip(": "))
        return proc.stdout


@dataclass(frozen=True)
class Collector:
    """One area of the inventory: ``collect(probe)`` returns its items."""

    name: str
    category: str
    collect: Callable[[Probe], list[InventoryItem]]


#: Every collector, by name; :func:`collect_inventory` runs them all by default.
COLLECTORS: Registry[Collector] = Registry("inventory collector")
# Registration order of the collectors defined here: the order of the table
# (python before torch before MPI) reads better than alphabetical.
_DEFINED_ORDER: list[str] = []


def collector(name: str, category: str) -> Callable[[Callable[[Probe], list[InventoryItem]]],
                                                   Callable[[Probe], list[InventoryItem]]]:
    """Decorator registering ``fn(probe) -> list[InventoryItem]`` in :data:`COLLECTORS`.

    Args:
        name: the collector's name (used to select collectors and in error items).
        category: the category of its items (and of its error item if it raises).
    """
    def register(fn: Callable[[Probe], list[InventoryItem]]) -> Callable[[Probe], list[InventoryItem]]:
        COLLECTORS.register(name, Collector(name, category, fn))
        _DEFINED_ORDER.append(name)
        return fn
    return register


# -- parsers (pure: text in, values out) --------------------------------------

_MPI_PATTERNS = (
    (re.compile(r"\(Open MPI\)\s+(\S+)"), "Open MPI"),            # mpirun (Open MPI) 4.1.5
    (re.compile(r"^Open MPI v(\S+)", re.M), "Open MPI"),           # ompi_info --version
    (re.compile(r"^MPICH Version:\s*(\S+)", re.M), "MPICH"),       # mpichversion -version
    (re.compile(r"HYDRA build details:\s*\n\s*Version:\s*(\S+)"), "MPICH (Hydra)"),  # MPICH mpirun --version
    (re.compile(r"Intel\(R\) MPI Library.*?Version (\S+)"), "Intel MPI"),
)


def parse_mpi_version(text: str) -> str:
    """The implementation and version from an MPI tool's version output.

    Knows Open MPI (``mpirun``, ``ompi_info``), MPICH (``mpichversion``, Hydra's
    ``mpirun``) and Intel MPI; anything else gives its first non-empty line.

    Returns:
        e.g. ``"Open MPI 4.1.5"``, ``"MPICH 4.1.2"``.
    """
    for pattern, implementation in _MPI_PATTERNS:
        m = pattern.search(text)
        if m:
            return f"{implementation} {m.group(1).rstrip(',')}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError("empty version output")
    return lines[0]


def parse_nvidia_smi_gpus(text: str) -> list[dict[str, Any]]:
    """Rows of ``nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader``.

    Returns:
        one dict per GPU: ``name``, ``memory_gib`` (float, or ``None`` when nvidia-smi
        says ``[N/A]``) and ``driver``.
    """
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 3:
            raise ValueError(f"expected 3 comma-separated fields, got {line!r}")
        name, memory, driver = fields
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*MiB", memory)
        gpus.append({"name": name, "memory_gib": float(m.group(1)) / 1024 if m else None, "driver": driver})
    return gpus


def parse_ib_rate(text: str) -> float:
    """Gb/s from a sysfs port rate: ``"200 Gb/sec (4X HDR)"`` -> ``200.0``."""
    m = re.match(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec", text)
    if not m:
        raise ValueError(f"unreadable InfiniBand rate {text.strip()!r}")
    return float(m.group(1))


# "lustre-OST0001_UUID  14.5T  10.2T  4.3T  71% /lustre[OST:1]" (``lfs df -h``; ``-i`` has the same shape)
_LFS_DF_TARGET = re.compile(r"^(?P<fs>[^\s-]+)-(?P<kind>OST|MDT)\w*_UUID\s+\S+\s+\S+\s+\S+\s+(?P<use>\d+)%\s+"
                            r"(?P<mount>\S+?)\[(?:OST|MDT):\d+\]", re.M)


def parse_lfs_df(text: str) -> dict[str, dict[str, Any]]:
    """Per file system, its mount point and each OST's use (%) from ``lfs df -h``.

    An OST that is inactive or unreachable prints no usage line and is not counted.

    Returns:
        ``{fsname: {"mount": "/lustre", "ost_use_pct": [69, 71, ...]}}``.
    """
    out: dict[str, dict[str, Any]] = {}
    for m in _LFS_DF_TARGET.finditer(text):
        fs = out.setdefault(m.group("fs"), {"mount": m.group("mount"), "ost_use_pct": []})
        if m.group("kind") == "OST":
            fs["ost_use_pct"].append(int(m.group("use")))
    return out


def parse_lfs_getstripe(text: str) -> dict[str, int]:
    """``stripe_count`` and ``stripe_size`` (bytes) from ``lfs getstripe -d DIR`` (a directory's default layout).

    Both spellings are read: ``stripe_count:  1 stripe_size:   1048576`` (one line, older
    clients) and the YAML-like ``lcm_``/``lmm_`` keys (composite layouts: the first component).
    """
    values: dict[str, int] = {}
    for key, names in (("stripe_count", ("stripe_count", "lmm_stripe_count")),
                       ("stripe_size", ("stripe_size", "lmm_stripe_size"))):
        for name in names:
            m = re.search(rf"\b{name}:\s*(-?\d+)", text)
            if m:
                values[key] = int(m.group(1))
                break
    return values


def _parse_nvidia_driver(text: str) -> str:
    # Proprietary: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  ..."
    # Open modules: "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.129.03  ..."
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
    if not m:
        raise ValueError("no driver version in the NVRM line")
    return m.group(1)


def _parse_cpuinfo(text: str) -> list[dict[str, str]]:
    blocks = []
    for chunk in re.split(r"\n\s*\n", text):
        entry = {}
        for line in chunk.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                entry[key.strip()] = value.strip()
        if "processor" in entry:
            blocks.append(entry)
    return blocks


# -- small item builders --------------------------------------------------------

def _count(category: str, name: str, n: int, source: str) -> InventoryItem:
    return InventoryItem(category, name, str(n), float(n), "count", source)


def _text(category: str, name: str, value: str | None, source: str) -> InventoryItem:
    return InventoryItem(category, name, ABSENT if value is None else value.strip(), None, "", source)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _import_torch() -> Any:
    try:
        import torch  # lazy: seconds to import, and only these collectors need it
    except ImportError:
        return None
    return torch


def _cuda_available(torch: Any) -> bool:
    return bool(torch is not None and torch.cuda.is_available())


# -- collectors -------------------------------------------------------------------

@collector("host", "host")
def collect_host(probe: Probe) -> list[InventoryItem]:
    """Hostname and kernel release, from ``/proc/sys/kernel`` under the root."""
    return [
        _text("host", "hostname", probe.read("/proc/sys/kernel/hostname"), "/proc/sys/kernel/hostname"),
        _text("host", "kernel", probe.read("/proc/sys/kernel/osrelease"), "/proc/sys/kernel/osrelease"),
    ]


@collector("python", "toolchain")
def collect_python(probe: Probe) -> list[InventoryItem]:
    """The running interpreter's version and path."""
    return [
        InventoryItem("toolchain", "python", platform.python_version(), None, "", "sys.version"),
        InventoryItem("toolchain", "python_executable", sys.executable, None, "", "sys.executable"),
    ]


def _format_nccl_version(version: Any) -> str:
    if isinstance(version, (tuple, list)):
        return ".".join(str(v) for v in version)
    # Older torch returned NCCL's integer code: major*1000+minor*100+patch before
    # NCCL 2.9, major*10000+minor*100+patch since (nccl.h, NCCL_VERSION_CODE).
    code = int(version)
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


@collector("torch", "toolchain")
def collect_torch(probe: Probe) -> list[InventoryItem]:
    """torch, its CUDA build, whether CUDA is usable, and NCCL (when CUDA is)."""
    torch = _import_torch()
    if torch is None:
        return [_text("toolchain", n, None, "import torch") for n in ("torch", "cuda", "cuda_available", "nccl")]
    available = _cuda_available(torch)
    nccl = _format_nccl_version(torch.cuda.nccl.version()) if available else None
    return [
        _text("toolchain", "torch", torch.__version__, "torch.__version__"),
        _text("toolchain", "cuda", torch.version.cuda, "torch.version.cuda"),
        InventoryItem("toolchain", "cuda_available", str(available).lower(), float(available), "",
                      "torch.cuda.is_available()"),
        _text("toolchain", "nccl", nccl, "torch.cuda.nccl.version()"),
    ]


# mpichversion only knows "-version" before MPICH 3 (it exits 1 on "--version"); newer
# ones accept both.
_MPI_COMMANDS = (("mpirun", ("mpirun", "--version")), ("ompi_info", ("ompi_info", "--version")),
                 ("mpichversion", ("mpichversion", "-version")))


@collector("mpi", "toolchain")
def collect_mpi(probe: Probe) -> list[InventoryItem]:
    """MPI implementation and version as ``mpirun``, ``ompi_info`` and ``mpichversion`` report it."""
    items = []
    for name, argv in _MPI_COMMANDS:
        source = " ".join(argv)
        try:
            out = probe.run(*argv)
        except CommandError as exc:
            items.append(_text("toolchain", name, f"error: {exc}", source))
            continue
        items.append(_text("toolchain", name, probe.unavailable() if out is None else parse_mpi_version(out), source))
    return items


_SLURM_ENV = (("job_id", "SLURM_JOB_ID"), ("job_nodelist", "SLURM_JOB_NODELIST"),
              ("job_num_nodes", "SLURM_JOB_NUM_NODES"))


# Client commands need a reachable slurm.conf even for --version (outside a
# configured cluster they exit 1), while ``slurmd -V`` answers from the binary.
_SLURM_VERSION_COMMANDS = (("sinfo", "--version"), ("slurmd", "-V"), ("srun", "--version"))


@collector("slurm", "slurm")
def collect_slurm(probe: Probe) -> list[InventoryItem]:
    """SLURM's version (``sinfo --version``, else ``slurmd -V``) and, inside a job, its id and nodes."""
    version, source, first_error = None, "sinfo --version", None
    for argv in _SLURM_VERSION_COMMANDS:
        try:
            out = probe.run(*argv)
        except CommandError as exc:
            first_error = first_error or exc
            continue
        if out is not None:
            version, source = _first_line(out).removeprefix("slurm-wlm").removeprefix("slurm").strip(), " ".join(argv)
            break
    if version is None:
        version = f"error: {first_error}" if first_error else probe.unavailable()
    items = [_text("slurm", "version", version, source)]
    for name, var in _SLURM_ENV:
        value = probe.env.get(var)
        if name == "job_num_nodes" and value is not None and value.strip().isdigit():
            items.append(_count("slurm", name, int(value), f"${var}"))
        else:
            items.append(_text("slurm", name, value, f"${var}"))
    return items


_NVIDIA_SMI = ("nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader")
_NVIDIA_SMI_SOURCE = " ".join(_NVIDIA_SMI)


def nvidia_smi_gpus(probe: Probe) -> tuple[str | None, list[dict[str, Any]]]:
    """nvidia-smi's answer (None: not there) and the GPUs it lists. Raises CommandError when it fails."""
    out = probe.run(*_NVIDIA_SMI)
    return out, parse_nvidia_smi_gpus(out) if out else []


@collector("nvidia_driver", "gpu")
def collect_nvidia_driver(probe: Probe) -> list[InventoryItem]:
    """NVIDIA kernel driver version: ``/proc/driver/nvidia/version``, else nvidia-smi."""
    text = probe.read("/proc/driver/nvidia/version")
    if text is not None:
        return [_text("gpu", "driver", _parse_nvidia_driver(text), "/proc/driver/nvidia/version")]
    try:
        _, gpus = nvidia_smi_gpus(probe)
    except CommandError as exc:
        return [_text("gpu", "driver", f"error: {exc}", _NVIDIA_SMI_SOURCE)]
    # The /proc file is absent: say so unless nvidia-smi answers.
    return [_text("gpu", "driver", gpus[0]["driver"] if gpus else None,
                  _NVIDIA_SMI_SOURCE if gpus else "/proc/driver/nvidia/version")]


@collector("gpus", "gpu")
def collect_gpus(probe: Probe) -> list[InventoryItem]:
    """GPU count, names and memory: torch.cuda when CUDA is usable, else nvidia-smi."""
    torch = _import_torch()
    if _cuda_available(torch):
        n = torch.cuda.device_count()
        items = [_count("gpu", "count", n, "torch.cuda.device_count()")]
        for i in range(n):
            props = torch.cuda.get_device_properties(i)
            items.append(_text("gpu", f"{i}.name", props.name, "torch.cuda.get_device_properties"))
            gib = props.total_memory / _GIB
            items.append(InventoryItem("gpu", f"{i}.memory", f"{gib:.2f}", gib, "GiB",
                                       "torch.cuda.get_device_properties"))
        return items
    source = _NVIDIA_SMI_SOURCE
    try:
        out, gpus = nvidia_smi_gpus(probe)
    except CommandError as exc:
        return [_text("gpu", "count", f"error: {exc}", source)]
    if not gpus:
        reason = ABSENT if out is not None else probe.unavailable()
        return [_text("gpu", "count", reason, "torch.cuda, " + source)]
    items = [_count("gpu", "count", len(gpus), source)]
    for i, gpu in enumerate(gpus):
        items.append(_text("gpu", f"{i}.name", gpu["name"], source))
        gib = gpu["memory_gib"]
        items.append(InventoryItem("gpu", f"{i}.memory", ABSENT if gib is None else f"{gib:.2f}",
                                   gib, "GiB" if gib is not None else "", source))
    return items


def _cpu_topology_from_sysfs(probe: Probe) -> tuple[set[str], set[tuple[str, str]]]:
    # /proc/cpuinfo on arm64 has no "physical id"/"core id"; sysfs topology has both.
    sockets: set[str] = set()
    cores: set[tuple[str, str]] = set()
    base = probe.path("/sys/devices/system/cpu")
    for cpu in sorted(base.glob("cpu[0-9]*")):
        package = probe.read(f"/sys/devices/system/cpu/{cpu.name}/topology/physical_package_id")
        core = probe.read(f"/sys/devices/system/cpu/{cpu.name}/topology/core_id")
        if package is not None and core is not None:
            sockets.add(package.strip())
            cores.add((package.strip(), core.strip()))
    return sockets, cores


@collector("cpu", "cpu")
def collect_cpu(probe: Probe) -> list[InventoryItem]:
    """CPU model, sockets, physical cores and hardware threads (logical CPUs).

    ``threads`` counts the processors of ``/proc/cpuinfo`` (what ``os.cpu_count()``
    reports); ``cores`` counts distinct (socket, core id) pairs, so with SMT on it is
    ``threads / 2``.
    """
    source = "/proc/cpuinfo"
    text = probe.read(source)
    if text is None:
        return [_text("cpu", n, None, source) for n in ("model", "sockets", "cores", "threads")]
    procs = _parse_cpuinfo(text)
    if not procs:
        raise ValueError(f"{source} lists no processor")
    model = next((p["model name"] for p in procs if "model name" in p), None)
    if all("physical id" in p and "core id" in p for p in procs):
        sockets = {p["physical id"] for p in procs}
        cores = {(p["physical id"], p["core id"]) for p in procs}
        topo_source = source
    else:
        sockets, cores = _cpu_topology_from_sysfs(probe)
        topo_source = "/sys/devices/system/cpu/cpu*/topology"
    items = [_text("cpu", "model", model, source)]
    if sockets:
        items += [_count("cpu", "sockets", len(sockets), topo_source), _count("cpu", "cores", len(cores), topo_source)]
    else:
        items += [_text("cpu", "sockets", None, topo_source), _text("cpu", "cores", None, topo_source)]
    items.append(_count("cpu", "threads", len(procs), source))
    return items


@collector("memory", "memory")
def collect_memory(probe: Probe) -> list[InventoryItem]:
    """Total memory (``MemTotal`` of ``/proc/meminfo``) in GiB."""
    source = "/proc/meminfo"
    text = probe.read(source)
    if text is None:
        return [_text("memory", "total", None, source)]
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.M)
    if not m:
        raise ValueError(f"no 'MemTotal: <n> kB' line in {source}")
    gib = int(m.group(1)) * 1024 / _GIB
    return [InventoryItem("memory", "total", f"{gib:.2f}", gib, "GiB", source)]


@collector("numa", "numa")
def collect_numa(probe: Probe) -> list[InventoryItem]:
    """NUMA nodes and the CPUs of each (``/sys/devices/system/node/node*/cpulist``)."""
    source = "/sys/devices/system/node"
    base = probe.path(source)
    nodes = sorted((int(m.group(1)), p) for p in (base.glob("node*") if base.is_dir() else [])
                   if (m := re.fullmatch(r"node(\d+)", p.name)))
    if not nodes:
        return [_text("numa", "nodes", None, source)]
    items = [_count("numa", "nodes", len(nodes), source)]
    for index, path in nodes:
        cpulist_source = f"{source}/{path.name}/cpulist"
        cpulist = probe.read(cpulist_source)
        if cpulist is None:
            items.append(_text("numa", f"node{index}.cpus", None, cpulist_source))
        else:
            n = len(parse_cpulist(cpulist))
            items.append(InventoryItem("numa", f"node{index}.cpus", cpulist.strip(), float(n), "count",
                                       cpulist_source))
    return items


@collector("infiniband", "infiniband")
def collect_infiniband(probe: Probe) -> list[InventoryItem]:
    """InfiniBand / RoCE devices: firmware, NUMA node and each port's rate, state and link layer.

    Reads ``/sys/class/infiniband/<dev>/{fw_ver,device/numa_node}`` and
    ``ports/<n>/{rate,state,phys_state,link_layer}`` (kernel sysfs ABI,
    Documentation/ABI/stable/sysfs-class-infiniband).
    """
    source = "/sys/class/infiniband"
    base = probe.path(source)
    devices = sorted(p.name for p in base.iterdir()) if base.is_dir() else []
    if not devices:
        return [_text("infiniband", "devices", None, source)]
    items = [InventoryItem("infiniband", "devices", ",".join(devices), float(len(devices)), "count", source)]
    active = 0
    for dev in devices:
        d = f"{source}/{dev}"
        items.append(_text("infiniband", f"{dev}.fw_ver", probe.read(f"{d}/fw_ver"), f"{d}/fw_ver"))
        numa = probe.read(f"{d}/device/numa_node")
        # The kernel writes -1 when the platform reports no affinity: unknown, not a node.
        numa_value = None if numa is None else ("unknown (-1)" if numa.strip() == "-1" else numa.strip())
        items.append(_text("infiniband", f"{dev}.numa_node", numa_value, f"{d}/device/numa_node"))
        ports_dir = probe.path(f"{d}/ports")
        ports = sorted((p.name for p in ports_dir.iterdir()), key=int) if ports_dir.is_dir() else []
        for port in ports:
            p = f"{d}/ports/{port}"
            name = f"{dev}.port{port}"
            rate = probe.read(f"{p}/rate")
            if rate is None:
                items.append(_text("infiniband", f"{name}.rate", None, f"{p}/rate"))
            else:
                items.append(InventoryItem("infiniband", f"{name}.rate", rate.strip(), parse_ib_rate(rate),
                                           "Gb/s", f"{p}/rate"))
            for attr in ("state", "phys_state"):
                raw = probe.read(f"{p}/{attr}")
                # "4: ACTIVE" -> "ACTIVE"; the code adds nothing the name does not say.
                value = None if raw is None else raw.split(":", 1)[-1].strip()
                items.append(_text("infiniband", f"{name}.{attr}", value, f"{p}/{attr}"))
                if attr == "state" and value == "ACTIVE":
                    active += 1
            items.append(_text("infiniband", f"{name}.link_layer", probe.read(f"{p}/link_layer"),
                               f"{p}/link_layer"))
    items.append(_count("infiniband", "active_ports", active, f"{source}/*/ports/*/state"))
    return items


#: Folders whose striping the ``lustre`` collector records (``os.pathsep``-separated): the data
#: sets' folders; unset, the Lustre mount points of ``/proc/mounts``.
LUSTRE_DIRS_ENV = "HPCBENCH_LUSTRE_DIRS"
#: Client tunables the guide's storage checks look at (read-ahead and the client cache).
_LCTL_PARAMS = ("llite.*.max_read_ahead_mb", "llite.*.max_read_ahead_per_file_mb", "llite.*.max_cached_mb")


def _lustre_mounts(probe: Probe) -> list[str]:
    text = probe.read("/proc/mounts") or ""
    return [fields[1] for fields in (line.split() for line in text.splitlines())
            if len(fields) >= 3 and fields[2] == "lustre"]


def _checked(probe: Probe, name: str, argv: tuple[str, ...]) -> tuple[str | None, InventoryItem | None]:
    """(stdout, None), or (None, the item saying why there is none: absent, not collected, or the error)."""
    source = " ".join(argv)
    try:
        out = probe.run(*argv)
    except CommandError as exc:
        return None, _text("storage", name, f"error: {exc}", source)
    if out is None:
        return None, _text("storage", name, probe.unavailable(), source)
    return out, None


@collector("lustre", "storage")
def collect_lustre(probe: Probe) -> list[InventoryItem]:
    """The Lustre client checks of the guide's section 5.3, where ``lfs`` exists.

    * ``lfs df -h``: its output, and per file system the OST count and the spread of OST use
      (max - min, percentage points): an unbalanced file system writes new stripes to few OSTs;
    * ``lfs getstripe -d DIR`` for the folders in ``$HPCBENCH_LUSTRE_DIRS`` (else each Lustre
      mount point of ``/proc/mounts``): stripe count and size (the guide restripes with
      ``lfs setstripe -c 8 -S 4M``);
    * ``lctl get_param`` of the client's read-ahead and cache limits (``lctl`` is optional).

    ``lfs hsm_release`` (the guide's cache release) changes state and is never run here.
    Without ``lfs`` on PATH there is one item saying so, and no number.
    """
    if not probe.include_commands:
        return [_text("storage", "lustre", probe.unavailable(), "lfs")]
    if shutil.which("lfs", path=probe.env.get("PATH", os.defpath)) is None:
        return [InventoryItem("storage", "lustre", f"{ABSENT}: lfs not found on PATH", None, "", "lfs")]
    items: list[InventoryItem] = []
    df, problem = _checked(probe, "lustre.df", ("lfs", "df", "-h"))
    if problem is not None:
        items.append(problem)
    else:
        items.append(_text("storage", "lustre.df", df, "lfs df -h"))
        for fs, info in sorted(parse_lfs_df(df).items()):
            use = info["ost_use_pct"]
            items.append(_count("storage", f"lustre.{fs}.ost_count", len(use), "lfs df -h"))
            if use:
                items.append(InventoryItem("storage", f"lustre.{fs}.ost_use_spread",
                                           f"{max(use) - min(use)} points (OST use {min(use)} % to {max(use)} %, "
                                           f"mounted on {info['mount']})", float(max(use) - min(use)), "%",
                                           "lfs df -h"))
    folders = [d for d in probe.env.get(LUSTRE_DIRS_ENV, "").split(os.pathsep) if d] or _lustre_mounts(probe)
    if not folders:
        items.append(InventoryItem("storage", "lustre.getstripe", f"{ABSENT}: no Lustre mount in /proc/mounts and "
                                   f"${LUSTRE_DIRS_ENV} is unset", None, "", "/proc/mounts"))
    for folder in folders:
        out, problem = _checked(probe, f"lustre.getstripe[{folder}]", ("lfs", "getstripe", "-d", folder))
        if problem is not None:
            items.append(problem)
            continue
        source = f"lfs getstripe -d {folder}"
        items.append(_text("storage", f"lustre.getstripe[{folder}]", out, source))
        layout = parse_lfs_getstripe(out)
        if "stripe_count" in layout:
            items.append(_count("storage", f"lustre.stripe_count[{folder}]", layout["stripe_count"], source))
        if "stripe_size" in layout:
            items.append(InventoryItem("storage", f"lustre.stripe_size[{folder}]", str(layout["stripe_size"]),
                                       float(layout["stripe_size"]), "B", source))
    for param in _LCTL_PARAMS:
        name = "lustre." + param.split(".")[-1]
        out, problem = _checked(probe, name, ("lctl", "get_param", param))
        if problem is not None:
            items.append(problem)
            continue
        values = [line.partition("=")[2].strip() for line in out.splitlines() if "=" in line]
        same = len(set(values)) == 1 and values[0].isdigit()
        # One number when every mount agrees; otherwise the text lists each mount's value.
        items.append(InventoryItem("storage", name, out.strip() or ABSENT, float(values[0]) if same else None,
                                   "MiB" if same else "", f"lctl get_param {param}"))
    return items


# -- entry points --------------------------------------------------------------------

def collect_inventory(cfg: Any, *, env: Mapping[str, str] | None = None,
                      collectors: Sequence[str] | None = None, probe: Probe | None = None) -> list[InventoryItem]:
    """Run the collectors and return their items, grouped by category.

    Args:
        cfg: where to read files (``sysfs_root``), whether to run commands
            (``include_commands``) and their timeout (``command_timeout_s``): the
            ``environment`` experiment's config, or anything with those fields.
        env: environment variables to read (SLURM's, ``PATH``) and to run commands
            with; defaults to ``os.environ``.
        collectors: names from :data:`COLLECTORS` to run; all of them by default.
        probe: read through this :class:`Probe` instead of one made from ``cfg`` and ``env`` (whose
            command outputs the caller shares; ``cfg`` is then not read).

    Returns:
        the items; a collector that raised contributes one item
        ``(its category, its name, "error: <message>")`` and the others still run.

    Raises:
        RegistryError: a name in ``collectors`` is not registered (lists those that are).
    """
    if probe is None:
        probe = Probe(root=Path(cfg.sysfs_root), env=dict(os.environ if env is None else env),
                      include_commands=cfg.include_commands, timeout_s=cfg.command_timeout_s)
    items: list[InventoryItem] = []
    if collectors is None:
        collectors = _DEFINED_ORDER + [n for n in COLLECTORS.names() if n not in _DEFINED_ORDER]
    for name in collectors:
        entry = COLLECTORS.get(name)
        try:
            items.extend(entry.collect(probe))
        except Exception as exc:  # one broken area must not hide the others
            message = str(exc) or type(exc).__name__
            items.append(InventoryItem(entry.category, entry.name, f"error: {message}", None, "",
                                       f"collector {entry.name}"))
    rank = {c: i for i, c in enumerate(CATEGORY_ORDER)}
    return sorted(items, key=lambda it: rank.get(it.category, len(rank)))  # stable within a category


def write_inventory(items: Iterable[InventoryItem], writer: RecordWriter) -> int:
    """Write each item as one record: metric ``category.name``, text = the item's value.

    Args:
        items: from :func:`collect_inventory`.
        writer: an open :class:`~hpcbench.core.results.RecordWriter`.

    Returns:
        the number of records written. Items without a number get ``value`` NaN,
        with their text (``"absent"``, a version...) in ``text``.
    """
    n = 0
    for item in items:
        writer.add(metric=item.metric, value=item.numeric, unit=item.unit, text=item.value,
                   labels={"category": item.category, "source": item.source})
        n += 1
    return n


def inventory_frame(items: Iterable[InventoryItem]) -> pd.DataFrame:
    """The items as a table (category, name, value, numeric, unit, source) for display.

    Args:
        items: from :func:`collect_inventory`.

    Returns:
        one row per item, in the given order.
    """
    import pandas as pd  # lazy: the CLI imports this module and needs no pandas

    columns = ["category", "name", "value", "numeric", "unit", "source"]
    return pd.DataFrame([[getattr(it, c) for c in columns] for it in items], columns=columns)
