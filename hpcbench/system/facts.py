"""The facts of one launch that decide whether a claim applies: where it ran and over what link.

Rules read applicability from these recorded facts, never from labels or guesses, and
the same way whatever the measured value (see :mod:`hpcbench.judge.verdict`). Every
launch (:class:`hpcbench.run.task.Task`) writes them as ``fact.<name>`` records:

* ``fact.cluster`` — ``emulated cluster, shaped link`` (the netns + tc cluster of
  :mod:`hpcbench.cluster`, found through ``SLURM_CONF``'s folder), ``emulated nodes, one
  loopback`` (``HPCBENCH_EMULATED_NODES`` without a cluster), ``SLURM, N node(s)`` or
  ``one machine``;
* ``fact.link_rate_bps``, ``fact.link_delay`` — the shaped inter-node link (emulated cluster);
* ``fact.infiniband`` — ``present`` when ``/sys/class/infiniband`` lists a device with an
  ACTIVE port, else ``absent``;
* ``fact.gpus`` — NVIDIA devices under ``/proc/driver/nvidia/gpus`` (no torch, no driver call).

The transport (gloo or NCCL) is the workers' own ``backend`` record, and the file system
is the ``storage.filesystem`` record of the experiments that read data.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Mapping

from hpcbench.core.facts import EMULATED_CLUSTER, EMULATED_NODES, ONE_MACHINE


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, which cgroups and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def mem_available(meminfo: str) -> int | None:
    """``MemAvailable`` in bytes from the text of ``/proc/meminfo``; None when absent."""
    m = re.search(r"^MemAvailable:\s+(\d+)\s*kB", meminfo, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def _emulated_cluster(env: Mapping[str, str]) -> dict | None:
    conf = env.get("SLURM_CONF")
    if not conf:
        return None
    path = Path(conf).parent / "cluster.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _infiniband(root: Path) -> str:
    base = root / "sys/class/infiniband"
    try:
        for state in base.glob("*/ports/*/state"):
            if "ACTIVE" in state.read_text():
                return "present"
    except OSError:
        pass
    return "absent"


def _gpus(root: Path) -> int:
    folder = root / "proc/driver/nvidia/gpus"
    try:
        return sum(1 for _ in folder.iterdir())
    except OSError:
        return 0


def launch_facts(nodes: int = 1, env: Mapping[str, str] | None = None,
                 root: str | os.PathLike = "/") -> dict[str, str | float]:
    """The facts of a launch starting now in this process.

    Args:
        nodes: the nodes the launch asks for; more than 1 outside SLURM is an emulated split.
        env: the environment to read (default ``os.environ``).
        root: where ``/sys`` and ``/proc`` are read (tests point it at a recorded tree).

    Returns:
        ``{name: text or number}``; names without the ``fact.`` prefix.
    """
    env = os.environ if env is None else env
    root = Path(root)
    facts: dict[str, str | float] = {}
    cluster = _emulated_cluster(env)
    if cluster is not None:
        from hpcbench.core.config import parse_bit_rate
        from hpcbench.core.tc import parse_delay

        spec = cluster.get("spec", {})
        facts["cluster"] = EMULATED_CLUSTER
        facts["link_rate_bps"] = parse_bit_rate(spec.get("link_rate", 0))  # bit/s (older cluster.json: "1gbit")
        facts["link_delay_s"] = float(parse_delay(str(spec.get("link_delay", "0ms"))))
        facts["cluster_nodes"] = float(len(cluster.get("nodes", [])))
    elif env.get("SLURM_JOB_NUM_NODES"):
        facts["cluster"] = f"SLURM, {env['SLURM_JOB_NUM_NODES']} node(s)"
    elif nodes > 1 or env.get("HPCBENCH_EMULATED_NODES"):
        facts["cluster"] = EMULATED_NODES
    else:
        facts["cluster"] = ONE_MACHINE
    facts["infiniband"] = _infiniband(root)
    facts["gpus"] = float(_gpus(root))
    return facts


def write_facts(writer, facts: Mapping[str, str | float]) -> None:
    """One ``fact.<name>`` record per fact: numbers as values, text as text."""
    for name, value in facts.items():
        if isinstance(value, (int, float)):
            writer.add(f"fact.{name}", float(value), "")
        else:
            writer.add(f"fact.{name}", None, "", text=str(value))


def mount_of(path: str, mounts: str) -> tuple[str, str, str]:
    """(file system type, mount point, source device) holding the absolute ``path``, from ``/proc/mounts`` text.

    The longest mount point that is ``path`` or one of its parents wins; a later line wins a tie (the
    mount on top). ``("unknown", "/", "")`` when no line matches.
    """
    best = ("unknown", "/", "")
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            mount = parts[1].replace("\\040", " ")
            if (path == mount or path.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best[1]):
                best = (parts[2], mount, parts[0])
    return best


def filesystem_of(path: Path) -> tuple[str, str]:
    """(file system type, mount point) holding ``path``, from /proc/mounts."""
    try:
        real = str(path.resolve())
        with open("/proc/mounts") as fh:
            fstype, mount, _ = mount_of(real, fh.read())
    except OSError:
        return ("unknown", "/")
    return fstype, mount
