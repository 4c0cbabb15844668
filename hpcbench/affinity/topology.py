"""A node's topology for binding: CPUs, cores, SMT siblings, NUMA nodes, GPUs and NICs.

Read from sysfs (the source that must work on every Linux node, and the one recorded
in the test fixtures); ``root`` lets a recorded subtree stand in for ``/``. Every file
a plan depends on is named in the error when it is missing or garbled.

References: https://docs.kernel.org/admin-guide/cputopology.html (cpu topology files),
https://www.kernel.org/doc/Documentation/ABI/testing/sysfs-devices-system-cpu (online),
https://docs.kernel.org/PCI/sysfs-pci.html (class, vendor, numa_node),
PCI SIG class codes (0x0300 VGA, 0x0302 3D controller, 0x0380 display, 0x0207 InfiniBand).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from hpcbench.core.errors import ConfigError

#: PCI vendor ids (pci.ids): whose display devices count as GPUs.
PCI_VENDOR_NVIDIA = 0x10DE
PCI_VENDOR_AMD = 0x1002
#: PCI class (base << 8 | subclass) of NVIDIA GPUs: VGA (workstations) and 3D controller (data centre).
NVIDIA_GPU_CLASSES = (0x0300, 0x0302)
#: PCI base class "display controller"; AMD Instinct parts use 0x0380.
PCI_BASE_DISPLAY = 0x03
#: /sys/class/net/*/type values (ARPHRD_* in include/uapi/linux/if_arp.h).
ARPHRD_ETHER = 1
ARPHRD_INFINIBAND = 32

_PCI_ADDRESS = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")


def parse_cpulist(text: str) -> list[int]:
    """Expand a kernel cpulist: ``"0-3,8,10-11"`` -> ``[0, 1, 2, 3, 8, 10, 11]``.

    Reference: https://docs.kernel.org/admin-guide/cputopology.html (list format).
    """
    cpus: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def format_cpulist(cpus) -> str:
    """The kernel's list format for CPU (or node) numbers: ``[0, 1, 2, 5]`` -> ``"0-2,5"``.

    The inverse of :func:`parse_cpulist`.
    """
    ordered = sorted(set(int(c) for c in cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


@dataclass(frozen=True)
class NumaNode:
    """One NUMA node: its online CPUs (empty for memory-only nodes) and memory."""

    id: int
    cpus: tuple[int, ...]
    memory_bytes: int | None  # MemTotal of the node's meminfo; None where sysfs has no meminfo


@dataclass(frozen=True)
class PciDevice:
    """A GPU or NIC and the NUMA node its PCI slot hangs off (None: the kernel does not know)."""

    kind: str  # "gpu" | "nic"
    name: str  # gpuN (N: index in PCI bus order), an RDMA device (mlx5_0) or a netdev (eth0)
    pci: str  # domain:bus:device.function, e.g. 0000:07:00.0
    numa_node: int | None
    model: str = ""  # vendor:device ids, e.g. 10de:20b0
    link: str = ""  # NICs: "infiniband" (an RDMA device) or "ethernet"; GPUs: ""


@dataclass(frozen=True)
class NodeTopology:
    """What a binding plan needs to know about one node."""

    cpus: tuple[int, ...]  # online logical CPUs
    packages: dict[int, int]  # cpu -> socket (physical_package_id)
    cores: dict[int, tuple[int, int]]  # cpu -> (socket, core_id)
    siblings: dict[int, tuple[int, ...]]  # cpu -> online SMT thread siblings (itself included)
    numa: tuple[NumaNode, ...]
    gpus: tuple[PciDevice, ...]
    nics: tuple[PciDevice, ...]
    source: str  # where it was read, e.g. "sysfs under /"

    def physical_cores(self) -> list[tuple[int, ...]]:
        """Each physical core's online CPUs, ordered by socket, then core id, then first CPU."""
        by_core: dict[tuple[int, int], list[int]] = {}
        for cpu in self.cpus:
            by_core.setdefault(self.cores[cpu], []).append(cpu)
        return [tuple(sorted(c)) for _, c in sorted(by_core.items(), key=lambda kv: (kv[0], min(kv[1])))]

    def numa_of_cpu(self, cpu: int) -> int | None:
        """The NUMA node holding ``cpu``; None if no node lists it."""
        for node in self.numa:
            if cpu in node.cpus:
                return node.id
        return None

    def smt(self) -> bool:
        """Whether any core runs more than one online hardware thread."""
        return any(len(s) > 1 for s in self.siblings.values())

    def cores_of_node(self, node_id: int) -> list[tuple[int, ...]]:
        """The physical cores whose first CPU sits on NUMA node ``node_id``, in core order."""
        return [core for core in self.physical_cores() if self.numa_of_cpu(core[0]) == node_id]

    def describe(self) -> str:
        """One line: sockets, cores, threads, NUMA nodes, GPUs, NICs."""
        return (f"{len(set(self.packages.values()))} socket(s), {len(self.physical_cores())} cores, "
                f"{len(self.cpus)} CPUs{' (SMT)' if self.smt() else ''}, {len(self.numa)} NUMA node(s), "
                f"{len(self.gpus)} GPU(s), {len(self.nics)} NIC(s) [{self.source}]")


# -- reading sysfs --------------------------------------------------------------------------

class _Sysfs:
    """Files under ``root``, read with errors that name the absolute sysfs path."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def name(self, absolute: str) -> str:
        return str(self.path(absolute))

    def read(self, absolute: str) -> str:
        try:
            return self.path(absolute).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read {self.name(absolute)}: {exc.strerror or exc}") from None

    def read_optional(self, absolute: str) -> str | None:
        try:
            return self.path(absolute).read_text()
        except OSError:
            return None

    def cpulist(self, absolute: str) -> tuple[int, ...]:
        text = self.read(absolute)
        try:
            return tuple(parse_cpulist(text))
        except ValueError:
            raise ConfigError(f"{self.name(absolute)}: not a CPU list: {text.strip()[:80]!r}") from None

    def integer(self, absolute: str, *, base: int = 10, text: str | None = None) -> int:
        text = self.read(absolute) if text is None else text
        try:
            return int(text.strip(), base)
        except ValueError:
            raise ConfigError(f"{self.name(absolute)}: not an integer: {text.strip()[:80]!r}") from None


def _read_cpus(fs: _Sysfs) -> tuple[tuple[int, ...], dict, dict, dict]:
    cpus = fs.cpulist("/sys/devices/system/cpu/online")
    if not cpus:
        raise ConfigError(f"{fs.name('/sys/devices/system/cpu/online')}: lists no online CPU")
    online = set(cpus)
    packages: dict[int, int] = {}
    cores: dict[int, tuple[int, int]] = {}
    siblings: dict[int, tuple[int, ...]] = {}
    for cpu in cpus:
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        package = fs.integer(f"{base}/physical_package_id")
        packages[cpu] = package
        cores[cpu] = (package, fs.integer(f"{base}/core_id"))
        threads = tuple(c for c in fs.cpulist(f"{base}/thread_siblings_list") if c in online)
        if cpu not in threads:
            raise ConfigError(f"{fs.name(base + '/thread_siblings_list')}: does not list cpu{cpu} itself")
        siblings[cpu] = threads
    return cpus, packages, cores, siblings


_MEMTOTAL = re.compile(r"^Node\s+\d+\s+MemTotal:\s+(\d+)\s*kB", re.M)


def _read_numa(fs: _Sysfs, cpus: tuple[int, ...]) -> tuple[tuple[NumaNode, ...], str]:
    base = fs.path("/sys/devices/system/node")
    if not base.is_dir():  # a kernel built without CONFIG_NUMA: the whole machine is one node
        return (NumaNode(0, cpus, None),), "no /sys/devices/system/node: one NUMA node assumed"
    online = set(cpus)
    nodes = []
    for entry in sorted(base.iterdir(), key=lambda p: p.name):
        m = re.fullmatch(r"node(\d+)", entry.name)
        if not m:
            continue
        node_id = int(m.group(1))
        rel = f"/sys/devices/system/node/{entry.name}"
        node_cpus = tuple(c for c in fs.cpulist(f"{rel}/cpulist") if c in online)
        meminfo = fs.read_optional(f"{rel}/meminfo")
        memory = None
        if meminfo is not None:
            found = _MEMTOTAL.search(meminfo)
            if not found:
                raise ConfigError(f"{fs.name(rel + '/meminfo')}: no 'Node N MemTotal: <n> kB' line")
            memory = int(found.group(1)) * 1024
        nodes.append(NumaNode(node_id, node_cpus, memory))
    if not nodes:
        raise ConfigError(f"{base}: no node<N> directory")
    return tuple(sorted(nodes, key=lambda n: n.id)), ""


def _pci_numa(fs: _Sysfs, address: str) -> int | None:
    rel = f"/sys/bus/pci/devices/{address}/numa_node"
    text = fs.read_optional(rel)
    if text is None:
        return None
    value = fs.integer(rel, text=text)
    return None if value < 0 else value  # -1: firmware gave no proximity (common on one-socket boards)


def _pci_of_link(fs: _Sysfs, absolute_link: str) -> str | None:
    """The PCI address nearest above the device a sysfs ``device`` link points to."""
    link = fs.path(absolute_link)
    if not os.path.lexists(link):
        return None
    resolved = Path(os.path.realpath(link))
    for part in reversed(resolved.parts):
        if _PCI_ADDRESS.fullmatch(part):
            return part.lower()
    return None  # a virtual or platform device


def _read_gpus(fs: _Sysfs) -> tuple[PciDevice, ...]:
    base = fs.path("/sys/bus/pci/devices")
    if not base.is_dir():
        return ()
    found = []
    for entry in sorted(base.iterdir(), key=lambda p: p.name):
        rel = f"/sys/bus/pci/devices/{entry.name}"
        pci_class = fs.integer(f"{rel}/class", base=16)
        vendor = fs.integer(f"{rel}/vendor", base=16)
        is_gpu = ((vendor == PCI_VENDOR_NVIDIA and (pci_class >> 8) in NVIDIA_GPU_CLASSES)
                  or (vendor == PCI_VENDOR_AMD and (pci_class >> 16) == PCI_BASE_DISPLAY))
        if not is_gpu:
            continue
        device = fs.read_optional(f"{rel}/device")
        model = f"{vendor:04x}:{device.strip()[2:]}" if device else f"{vendor:04x}"
        found.append((entry.name.lower(), model))
    # Index = PCI bus order: what nvidia-smi, SLURM's gres and CUDA_DEVICE_ORDER=PCI_BUS_ID use.
    return tuple(PciDevice("gpu", f"gpu{i}", pci, _pci_numa(fs, pci), model)
                 for i, (pci, model) in enumerate(sorted(found)))


def _read_nics(fs: _Sysfs) -> tuple[PciDevice, ...]:
    nics: list[PciDevice] = []
    seen_pci: set[str] = set()
    ib = fs.path("/sys/class/infiniband")
    for entry in sorted(ib.iterdir(), key=lambda p: p.name) if ib.is_dir() else []:
        pci = _pci_of_link(fs, f"/sys/class/infiniband/{entry.name}/device")
        if pci is None:
            continue  # soft RDMA devices (rxe, siw) sit on no PCI slot of their own
        seen_pci.add(pci)
        nics.append(PciDevice("nic", entry.name, pci, _pci_numa(fs, pci), link="infiniband"))
    net = fs.path("/sys/class/net")
    for entry in sorted(net.iterdir(), key=lambda p: p.name) if net.is_dir() else []:
        pci = _pci_of_link(fs, f"/sys/class/net/{entry.name}/device")
        if pci is None or pci in seen_pci:
            continue  # virtual (lo, bridges, ifb) or the IPoIB face of an HCA already listed
        type_text = fs.read_optional(f"/sys/class/net/{entry.name}/type")
        if type_text is not None and type_text.strip() == str(ARPHRD_INFINIBAND):
            continue  # IPoIB of an HCA whose RDMA device is not loaded: no NCCL IB transport
        seen_pci.add(pci)
        nics.append(PciDevice("nic", entry.name, pci, _pci_numa(fs, pci), link="ethernet"))
    return tuple(nics)


def read_topology(root: str | Path = "/") -> NodeTopology:
    """Read a node's topology from sysfs under ``root``.

    Args:
        root: ``/`` for this machine, or a folder holding a recorded ``sys/`` subtree.

    Returns:
        The node's :class:`NodeTopology`; ``source`` says where it came from.

    Raises:
        ConfigError: a file the plan needs is missing or garbled; the message names it.
    """
    fs = _Sysfs(root)
    cpus, packages, cores, siblings = _read_cpus(fs)
    numa, numa_note = _read_numa(fs, cpus)
    source = f"sysfs under {Path(root)}" + (f" ({numa_note})" if numa_note else "")
    return NodeTopology(cpus=cpus, packages=packages, cores=cores, siblings=siblings, numa=numa,
                        gpus=_read_gpus(fs), nics=_read_nics(fs), source=source)
