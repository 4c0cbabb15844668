"""What this node and its SLURM cluster offer the suite, read before anything runs (``hpcbench doctor``).

One :func:`survey` reads, through an inventory :class:`~hpcbench.system.inventory.Probe` (files under a
root, commands on the probe's ``PATH``), and returns a JSON-able dict of six parts:

* ``slurm``: the version (the inventory's ``slurm`` collector), ``scontrol show config``'s cluster-wide
  settings (:func:`parse_scontrol_config`), and ``sinfo``'s nodes with their partition, state, CPUs,
  memory and GRES (:func:`parse_sinfo_nodes`), summed up per partition;
* ``gpus``: model and memory (``nvidia-smi --query-gpu``, else the driver's
  ``/proc/driver/nvidia/gpus/*/information``), the driver, each GPU's PCI slot and NUMA node (sysfs,
  :func:`hpcbench.affinity.topology.read_topology`) and the NVLink/PCIe matrix of ``nvidia-smi topo -m``
  (:func:`parse_nvidia_smi_topo`);
* ``nics``: every NIC of the PCI bus, its InfiniBand ports (rate, state, link layer: the inventory's
  ``infiniband`` collector) or Ethernet speed, its NUMA node and the GPUs it sits near (the topo matrix's
  PIX/PXB, else the same NUMA node);
* ``nccl``: the version torch's workers use (live only), the ``libnccl.so.X.Y.Z`` libraries under the root,
  and the ``NCCL_*`` variables set;
* ``filesystems``: the run dir's and the data's file system from ``/proc/mounts``
  (:func:`hpcbench.system.facts.mount_of`: the ``<type> at <mount>`` the workers record as
  ``storage.filesystem``), its kind (Lustre, GPFS, NFS, local NVMe...) and free space (``statvfs``);
* ``cpus``: sockets, cores, CPUs, NUMA nodes with their CPUs and memory (sysfs), the CPU model and memory
  (the inventory's collectors).

A part that cannot be read is the text ``"not available: <why>"`` (:func:`unavailable`), never a made-up
value. Tests point the root at a recorded node and ``PATH`` at stand-ins printing recorded outputs; what
only the live machine can answer (``statvfs``, torch's NCCL, the usable cores) is read only when the root
is ``/`` (:func:`is_live`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable

from hpcbench.affinity.topology import NodeTopology, format_cpulist, read_topology
from hpcbench.core.errors import HpcbenchError
from hpcbench.judge.applicability import IN_MEMORY_FILESYSTEMS
from hpcbench.system.facts import mem_available, mount_of, usable_cores
from hpcbench.system.inventory import (ABSENT, CommandError, InventoryItem, Probe, collect_inventory,
                                       nvidia_smi_gpus)

__all__ = ["survey", "unavailable", "is_available", "is_live", "parse_sinfo_nodes", "parse_scontrol_config",
           "parse_nvidia_smi_topo", "node_usable", "filesystem_kind", "SINFO_ARGV", "SCONTROL_ARGV", "TOPO_ARGV"]

NOT_AVAILABLE = "not available: "
#: ``sinfo``, one line per node and partition: name|partition|state|CPUs|memory (MiB)|GRES.
SINFO_ARGV = ("sinfo", "--noheader", "--Node", "--format=%N|%P|%T|%c|%m|%G")
SCONTROL_ARGV = ("scontrol", "show", "config")
TOPO_ARGV = ("nvidia-smi", "topo", "-m")
#: The settings of ``scontrol show config`` a reader of this suite's results needs (how GPUs and cores are
#: handed out, how ranks start).
SCONTROL_KEYS = ("ClusterName", "SLURM_VERSION", "GresTypes", "SelectType", "SelectTypeParameters",
                 "MpiDefault", "ProctrackType", "TaskPlugin", "TopologyPlugin")
#: Node states (``sinfo %T``, lower case) a job cannot be given: down, drained or draining, failed, in
#: maintenance, invalid, unknown, future. A trailing ``*`` (not responding) makes any state unusable.
UNUSABLE_STATES = ("down", "drain", "fail", "maint", "inval", "unk", "future")
#: ``nvidia-smi topo -m``'s connection types, nearest first (its legend): the device itself, NVLink, at most
#: one PCIe bridge, several bridges, a host bridge, host bridges within a NUMA node, across NUMA nodes.
LINK_ORDER = ("X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS")
#: A NIC sits near a GPU when they share a PCIe switch (GPUDirect RDMA's fast path).
NEAR_LINKS = ("PIX", "PXB")
#: Where NVIDIA's NCCL packages put ``libnccl.so.X.Y.Z`` (Debian/Ubuntu, RHEL, CUDA toolkit), besides $LD_LIBRARY_PATH.
NCCL_LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                     "/usr/local/lib", "/usr/local/cuda/lib64")
#: File system types by what they are to a training job.
_NETWORK_FS = {"lustre": "Lustre", "gpfs": "GPFS (Storage Scale)", "nfs": "NFS", "nfs4": "NFS",
               "beegfs": "BeeGFS", "wekafs": "WekaFS", "cephfs": "CephFS", "fuse.weka": "WekaFS"}


def unavailable(why: str) -> str:
    """What a part that cannot be read says: ``"not available: <why>"``."""
    return NOT_AVAILABLE + why


def is_available(value: Any) -> bool:
    """Whether ``value`` was read (not the text :func:`unavailable` gives)."""
    return not (isinstance(value, str) and value.startswith(NOT_AVAILABLE))


def is_live(probe: Probe) -> bool:
    """Whether the probe reads this machine (root ``/``), not a recorded node."""
    return probe.root.resolve() == Path("/")


def _command(probe: Probe, argv: tuple[str, ...]) -> tuple[str | None, str]:
    """(stdout, "") or (None, why not): not on PATH, commands off, or the command's failure."""
    try:
        out = probe.run(*argv)
    except CommandError as exc:
        return None, str(exc)
    if out is None:
        return None, (f"{argv[0]} not found on PATH" if probe.include_commands
                      else "commands are not run (include_commands=false)")
    return out, ""


def _item_value(item: InventoryItem | None) -> str:
    """An inventory item as the survey shows it: its value, or why there is none."""
    if item is None:
        return unavailable("not collected")
    if item.value == ABSENT:
        return unavailable(f"{item.source} not found")
    if item.value.startswith(ABSENT):
        return unavailable(item.value[len(ABSENT):].lstrip(": ") or f"{item.source} not found")
    if item.value.startswith("error: "):
        return unavailable(item.value[len("error: "):])
    if item.value.startswith("not collected"):
        return unavailable(item.value)
    return item.value


# -- parsers (pure: text in, values out) ----------------------------------------------------

def parse_sinfo_nodes(text: str) -> list[dict[str, Any]]:
    """Rows of ``sinfo --noheader --Node --format=%N|%P|%T|%c|%m|%G`` (:data:`SINFO_ARGV`).

    Returns:
        one dict per (node, partition) line: ``node``, ``partition`` (without the default's ``*``),
        ``default`` (bool), ``state``, ``cpus`` and ``memory_mib`` (int, or None when sinfo prints no
        number), ``gres`` (``""`` for ``(null)``; the socket binding ``(S:0-1)`` dropped).

    Raises:
        ValueError: a line without the six ``|``-separated fields, naming it.
    """
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.strip().split("|")
        if len(fields) != 6:
            raise ValueError(f"sinfo line {line.strip()!r}: expected 6 '|'-separated fields "
                             f"(node|partition|state|cpus|memory|gres), got {len(fields)}")
        node, partition, state, cpus, memory, gres = (f.strip() for f in fields)
        gres = ",".join(re.sub(r"\(S:[^)]*\)", "", g) for g in gres.split(",")) if gres != "(null)" else ""
        rows.append({"node": node, "partition": partition.rstrip("*"), "default": partition.endswith("*"),
                     "state": state, "cpus": int(cpus) if cpus.isdigit() else None,
                     "memory_mib": int(memory.rstrip("+")) if memory.rstrip("+").isdigit() else None,
                     "gres": gres})
    return rows


def node_usable(state: str) -> bool:
    """Whether a node in ``state`` (sinfo's ``%T``) can be given to a job now or later."""
    state = state.strip().lower()
    return bool(state) and not state.endswith("*") and not state.startswith(UNUSABLE_STATES)


def parse_scontrol_config(text: str) -> dict[str, str]:
    """``Key = Value`` pairs of ``scontrol show config``'s main section (the plugins' sections follow a blank line)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() and values:
            break
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            values[key.strip()] = value.strip()
    return values


def parse_nvidia_smi_topo(text: str) -> dict[str, Any]:
    """The matrix of ``nvidia-smi topo -m``.

    Returns:
        ``devices`` (the header's GPUn / NICn / mlx5_n columns), ``links`` (``{row: {column: "NV12",
        "PXB", "SYS", "X"...}}``), ``cpu_affinity`` and ``numa_affinity`` per GPU (as printed; ``""``
        where empty), and ``nic_names`` (``{"NIC0": "mlx5_0"}`` from the "NIC Legend"; a column named
        after the device itself, as older drivers print it, maps to itself).

    Raises:
        ValueError: no header row with GPU columns.
    """
    lines = text.splitlines()
    header_at = next((i for i, line in enumerate(lines) if "\t" in line and re.search(r"\bGPU0\b", line)
                      and not line.split("\t")[0].strip()), None)
    if header_at is None:
        raise ValueError("no header row (a tab, then GPU0 ...) in nvidia-smi topo -m output")
    header = [cell.strip() for cell in lines[header_at].split("\t")[1:]]
    extras = [h for h in header if h in ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")]
    devices = [h for h in header if h and h not in extras]
    links: dict[str, dict[str, str]] = {}
    cpu_affinity: dict[str, str] = {}
    numa_affinity: dict[str, str] = {}
    for line in lines[header_at + 1:]:
        if not line.strip():
            break
        cells = line.split("\t")
        name = cells[0].strip()
        if name not in devices:
            break
        values = [c.strip() for c in cells[1:]] + [""] * len(header)
        row = dict(zip(header, values))
        links[name] = {d: row[d] for d in devices}
        if name.startswith("GPU"):
            cpu_affinity[name] = row.get("CPU Affinity", "")
            numa_affinity[name] = row.get("NUMA Affinity", "")
    nic_names = {m.group(1): m.group(2) for m in re.finditer(r"^\s*(NIC\d+):\s*(\S+)\s*$", text, re.M)}
    for device in devices:
        if not device.startswith(("GPU", "NIC")):
            nic_names.setdefault(device, device)
    return {"devices": devices, "links": links, "cpu_affinity": cpu_affinity, "numa_affinity": numa_affinity,
            "nic_names": nic_names}


def _link_rank(link: str) -> int:
    kind = "NV" if link.startswith("NV") else link
    return LINK_ORDER.index(kind) if kind in LINK_ORDER else len(LINK_ORDER)


def filesystem_kind(fstype: str, device: str, slaves: Iterable[str] = ()) -> str:
    """What a file system is to a training job: ``Lustre``, ``GPFS (Storage Scale)``, ``NFS``, ``local NVMe``...

    Args:
        fstype: the type ``/proc/mounts`` gives.
        device: its source (``/dev/nvme0n1p1``, ``/dev/md1``, ``server:/export``).
        slaves: the block devices under a software RAID (``/sys/block/mdN/slaves``).
    """
    fstype = fstype.lower()
    if fstype in _NETWORK_FS:
        return _NETWORK_FS[fstype]
    if fstype in IN_MEMORY_FILESYSTEMS:
        return "memory (tmpfs)"
    if fstype == "overlay":
        return "overlay (a container's)"
    if device.startswith("/dev/nvme"):
        return "local NVMe"
    slaves = list(slaves)
    if device.startswith("/dev/md") and slaves and all(s.startswith("nvme") for s in slaves):
        return "local NVMe (software RAID)"
    if device.startswith("/dev/"):
        return "local disk"
    return fstype or "unknown"


# -- the parts ------------------------------------------------------------------------------

def _slurm(probe: Probe, items: dict[str, InventoryItem], partition: str | None) -> dict[str, Any]:
    version = items.get("slurm.version")
    out: dict[str, Any] = {"version": _item_value(version), "version_source": version.source if version else ""}
    job = {name: items[f"slurm.{name}"].value for name in ("job_id", "job_nodelist", "job_num_nodes")
           if f"slurm.{name}" in items and items[f"slurm.{name}"].value != ABSENT}
    out["job"] = job or unavailable("not inside a SLURM job")
    text, why = _command(probe, SCONTROL_ARGV)
    if text is None:
        out["config"] = unavailable(why)
    else:
        config = parse_scontrol_config(text)
        out["config"] = {k: config[k] for k in SCONTROL_KEYS if k in config} or unavailable(
            "scontrol show config printed no Key = Value line")
    text, why = _command(probe, SINFO_ARGV)
    if text is None:
        out["partitions"] = out["nodes"] = unavailable(why)
        out["reachable"] = False
        return out
    try:
        rows = parse_sinfo_nodes(text)
    except ValueError as exc:
        out["partitions"] = out["nodes"] = unavailable(str(exc))
        out["reachable"] = False
        return out
    out["reachable"] = bool(rows)
    partitions: dict[str, dict[str, Any]] = {}
    nodes: dict[str, dict[str, Any]] = {}
    for row in rows:
        p = partitions.setdefault(row["partition"], {"name": row["partition"], "default": row["default"],
                                                     "nodes": 0, "usable": 0, "states": {}, "gres": [],
                                                     "cpus_min": None, "memory_mib_min": None, "usable_nodes": []})
        p["nodes"] += 1
        p["states"][row["state"]] = p["states"].get(row["state"], 0) + 1
        if node_usable(row["state"]):
            p["usable"] += 1
            p["usable_nodes"].append(row["node"])
        if row["gres"] and row["gres"] not in p["gres"]:
            p["gres"].append(row["gres"])
        for key, field in (("cpus_min", "cpus"), ("memory_mib_min", "memory_mib")):
            if row[field] is not None:
                p[key] = row[field] if p[key] is None else min(p[key], row[field])
        node = nodes.setdefault(row["node"], {**{k: row[k] for k in ("node", "state", "cpus", "memory_mib", "gres")},
                                              "partitions": []})
        node["partitions"].append(row["partition"])
    out["partitions"] = list(partitions.values())
    out["nodes"] = list(nodes.values())
    chosen = partition or next((p["name"] for p in partitions.values() if p["default"]), None)
    if chosen is not None and chosen not in partitions:
        out["partition"] = unavailable(f"sinfo lists no partition {chosen!r} (it lists {', '.join(partitions)})")
    else:
        out["partition"] = chosen or unavailable("sinfo marks no default partition; give --partition")
    return out


def _gpus(probe: Probe, items: dict[str, InventoryItem], topo: NodeTopology | None) -> dict[str, Any]:
    out: dict[str, Any] = {"driver": _item_value(items.get("gpu.driver"))}
    listed: list[dict[str, Any]] = []
    try:
        text, found = nvidia_smi_gpus(probe)
        listed = [{"model": g["name"], "memory_gib": g["memory_gib"] if g["memory_gib"] is not None
                   else unavailable("nvidia-smi says [N/A]"), "source": "nvidia-smi --query-gpu"} for g in found]
        smi_why = ("nvidia-smi lists no GPU" if text is not None else "nvidia-smi not found on PATH"
                   if probe.include_commands else "commands are not run (include_commands=false)")
    except (CommandError, ValueError) as exc:
        smi_why = str(exc)
    if not listed:
        folder = probe.path("/proc/driver/nvidia/gpus")
        for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
            info = probe.read(f"/proc/driver/nvidia/gpus/{entry.name}/information") or ""
            model = re.search(r"^Model:\s*(.+?)\s*$", info, re.M)
            listed.append({"model": model.group(1) if model else unavailable(f"no Model line in {entry}/information"),
                           "memory_gib": unavailable(f"the driver's file does not give it; {smi_why}"),
                           "source": "/proc/driver/nvidia/gpus"})
    sysfs = list(topo.gpus) if topo is not None else []
    if not listed and not sysfs:
        out["count"] = 0
        out["devices"] = unavailable(f"no NVIDIA driver (/proc/driver/nvidia/gpus absent), {smi_why}, "
                                     f"and no GPU on the PCI bus" + ("" if topo is not None else " (sysfs unread)"))
    else:
        out["count"] = max(len(listed), len(sysfs))
        devices = []
        for i in range(out["count"]):
            gpu = dict(listed[i]) if i < len(listed) else {
                "model": unavailable(f"the NVIDIA driver does not list it ({smi_why})"),
                "memory_gib": unavailable(smi_why), "source": "sysfs"}
            if i < len(sysfs):
                gpu.update(pci=sysfs[i].pci, numa_node=sysfs[i].numa_node if sysfs[i].numa_node is not None
                           else unavailable("the kernel gives no NUMA node (-1)"))
            devices.append({"name": f"GPU{i}", **gpu})
        out["devices"] = devices
    if out["count"] == 0:
        out["links"] = unavailable("no GPU")
        return out
    text, why = _command(probe, TOPO_ARGV)
    if text is None:
        out["links"] = unavailable(why)
        return out
    try:
        matrix = parse_nvidia_smi_topo(text)
    except ValueError as exc:
        out["links"] = unavailable(str(exc))
        return out
    gpus = [d for d in matrix["devices"] if d.startswith("GPU")]
    pairs: dict[str, int] = {}
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            link = matrix["links"].get(a, {}).get(b, "?")
            pairs[link] = pairs.get(link, 0) + 1
    out["links"] = {"gpu_pairs": pairs, "matrix": matrix["links"], "devices": matrix["devices"],
                    "nic_names": matrix["nic_names"], "cpu_affinity": matrix["cpu_affinity"],
                    "numa_affinity": matrix["numa_affinity"], "source": " ".join(TOPO_ARGV)}
    return out


def _near_gpus(nic: Any, topo: NodeTopology, matrix: dict[str, Any] | None) -> dict[str, Any]:
    """The GPUs a NIC sits near: on one PCIe switch (topo -m's PIX/PXB), else on its NUMA node (sysfs)."""
    if matrix is not None:
        column = next((col for col, dev in matrix["nic_names"].items() if dev == nic.name), None)
        if column is not None:
            row = matrix["matrix"].get(column, {})
            gpus = sorted((d for d, link in row.items() if d.startswith("GPU") and link in NEAR_LINKS),
                          key=lambda d: int(d[3:]))
            best = sorted({row[d] for d in gpus}, key=_link_rank)
            return {"gpus": gpus, "how": f"{'/'.join(best)}, from nvidia-smi topo -m" if gpus
                    else "none on its PCIe switch, from nvidia-smi topo -m"}
    if nic.numa_node is None:
        return {"gpus": [], "how": "unknown: the kernel gives the NIC no NUMA node (-1)"}
    gpus = [f"GPU{i}" for i, g in enumerate(topo.gpus) if g.numa_node == nic.numa_node]
    return {"gpus": gpus, "how": f"on its NUMA node {nic.numa_node}, from sysfs"}


def _nics(probe: Probe, items: dict[str, InventoryItem], topo: NodeTopology | None,
          gpus: dict[str, Any]) -> list[dict[str, Any]] | str:
    if topo is None:
        return unavailable("sysfs unread (see cpus)")
    if not topo.nics:
        return unavailable("no NIC on the PCI bus (/sys/class/infiniband and /sys/class/net list none)")
    links = gpus.get("links")
    matrix = links if isinstance(links, dict) else None
    out = []
    for nic in topo.nics:
        entry: dict[str, Any] = {"name": nic.name, "link": nic.link, "pci": nic.pci,
                                 "numa_node": nic.numa_node if nic.numa_node is not None
                                 else unavailable("the kernel gives no NUMA node (-1)")}
        if nic.link == "infiniband":
            ports = sorted({m.group(1) for name in items if (m := re.fullmatch(
                rf"infiniband\.{re.escape(nic.name)}\.port(\d+)\.rate", name))}, key=int)
            entry["ports"] = [{"port": int(p), **{attr: _item_value(items.get(f"infiniband.{nic.name}.port{p}.{attr}"))
                                                 for attr in ("rate", "state", "link_layer")}}
                              for p in ports] or unavailable(f"/sys/class/infiniband/{nic.name}/ports lists none")
        else:
            source = f"/sys/class/net/{nic.name}/speed"
            try:
                value = (probe.read(source) or "").strip()
            except OSError as exc:  # a link that is down answers EINVAL: its speed is unknown, not an error
                value = f"unreadable ({exc.strerror or exc})"
            entry["rate"] = (f"{int(value) / 1000:g} Gb/s" if value.isdigit() and int(value) > 0 else unavailable(
                f"{source} " + (f"says {value}" if value else "absent")))
        entry["near"] = _near_gpus(nic, topo, matrix) if topo.gpus else {"gpus": [], "how": "no GPU"}
        out.append(entry)
    return out


def _nccl(probe: Probe) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if is_live(probe):
        out["torch"] = _torch_nccl()
    else:
        out["torch"] = unavailable("torch's NCCL is this process's; the survey reads a recorded root")
    found = []
    dirs = list(NCCL_LIBRARY_DIRS) + [d for d in probe.env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    for folder in dict.fromkeys(dirs):
        base = probe.path(folder)
        for lib in sorted(base.glob("libnccl.so.*.*.*")) if base.is_dir() else []:
            found.append({"version": lib.name[len("libnccl.so."):], "path": f"{folder.rstrip('/')}/{lib.name}"})
    out["libraries"] = found or unavailable(f"no libnccl.so.X.Y.Z in {', '.join(dict.fromkeys(dirs))}")
    versions = [out["torch"]] if is_available(out["torch"]) else [lib["version"] for lib in found]
    out["version"] = versions[0] if versions else unavailable(
        "neither torch's NCCL nor a libnccl.so.X.Y.Z library was found")
    out["variables"] = {k: v for k, v in sorted(probe.env.items()) if k.startswith("NCCL_")}
    return out


def _torch_nccl() -> str:
    try:
        import torch  # lazy: seconds to import, and only the live survey asks it
    except ImportError:
        return unavailable("torch is not installed")
    if not torch.version.cuda:
        return unavailable(f"torch {torch.__version__} is a CPU build: no NCCL")
    try:
        version = torch.cuda.nccl.version()
    except (RuntimeError, AttributeError) as exc:
        return unavailable(f"torch.cuda.nccl.version() failed: {exc}")
    return ".".join(str(v) for v in version) if isinstance(version, (tuple, list)) else str(version)


def _filesystem(probe: Probe, path: str, mounts: str | None) -> dict[str, Any]:
    live = is_live(probe)
    absolute = str(Path(path).resolve()) if live else os.path.normpath(os.path.abspath(path))
    out: dict[str, Any] = {"path": absolute}
    if mounts is None:
        out["filesystem"] = unavailable("/proc/mounts absent")
        return out
    fstype, mount, device = mount_of(absolute, mounts)
    md = re.fullmatch(r"/dev/(md\d+)", device)
    slaves_dir = probe.path(f"/sys/block/{md.group(1)}/slaves") if md else None
    slaves = [p.name for p in slaves_dir.iterdir()] if slaves_dir is not None and slaves_dir.is_dir() else []
    out.update(filesystem=f"{fstype} at {mount}", type=fstype, mount=mount, device=device,
               kind=filesystem_kind(fstype, device, slaves))
    if not live:
        out["free_bytes"] = unavailable("statvfs reads only live file systems; this is a recorded root")
        return out
    existing = Path(absolute)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        st = os.statvfs(existing)
    except OSError as exc:
        out["free_bytes"] = unavailable(f"statvfs({existing}): {exc.strerror or exc}")
        return out
    out["free_bytes"] = st.f_bavail * st.f_frsize
    out["size_bytes"] = st.f_blocks * st.f_frsize
    out["writable"] = os.access(existing, os.W_OK)
    out["checked_at"] = str(existing)
    return out


def _cpus(items: dict[str, InventoryItem], topo: NodeTopology | None, topo_why: str) -> dict[str, Any]:
    out: dict[str, Any] = {"model": _item_value(items.get("cpu.model")),
                           "memory_gib": (items["memory.total"].numeric if items.get("memory.total")
                                          and items["memory.total"].numeric is not None
                                          else _item_value(items.get("memory.total")))}
    if topo is None:
        out["topology"] = unavailable(topo_why)
        return out
    out.update(sockets=len(set(topo.packages.values())), cores=len(topo.physical_cores()), cpus=len(topo.cpus),
               smt=topo.smt(), numa=[{"node": n.id, "cpus": format_cpulist(n.cpus),
                                      "memory_gib": round(n.memory_bytes / (1 << 30), 1) if n.memory_bytes
                                      else unavailable("no meminfo in sysfs")} for n in topo.numa])
    return out


def survey(probe: Probe, *, out_dir: str | os.PathLike, data_dir: str | os.PathLike | None = None,
           partition: str | None = None) -> dict[str, Any]:
    """What this node and its cluster offer, read through ``probe``.

    Args:
        probe: files under its root, commands on its ``PATH`` (the inventory's :class:`Probe`).
        out_dir: where run dirs go (a suite's ``--out``): the run dir's file system is this folder's.
        data_dir: the data set's folder; None: the run dir's (experiments generate their data there).
        partition: the SLURM partition a suite would use; None: sinfo's default.

    Returns:
        the parts (module docstring), plus ``host``, ``root``, ``usable_cpus`` and ``mem_available_bytes``.
    """
    items = {it.metric: it for it in collect_inventory(
        None, probe=probe, collectors=["host", "slurm", "nvidia_driver", "cpu", "memory", "infiniband"])}
    try:
        topo, topo_why = read_topology(probe.root), ""
    except HpcbenchError as exc:
        topo, topo_why = None, str(exc)
    gpus = _gpus(probe, items, topo)
    mounts = probe.read("/proc/mounts")
    data = data_dir if data_dir is not None else out_dir
    usable = usable_cores() if is_live(probe) else len(topo.cpus) if topo is not None else None
    return {
        "host": _item_value(items.get("host.hostname")),
        "root": str(probe.root),
        "slurm": _slurm(probe, items, partition),
        "gpus": gpus,
        "nics": _nics(probe, items, topo, gpus),
        "nccl": _nccl(probe),
        "filesystems": {"run_dir": _filesystem(probe, str(out_dir), mounts),
                        "data": _filesystem(probe, str(data), mounts)},
        "cpus": _cpus(items, topo, topo_why),
        "usable_cpus": usable,
        "mem_available_bytes": mem_available(probe.read("/proc/meminfo") or ""),
    }
