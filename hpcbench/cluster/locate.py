"""Where a process stands on the emulated cluster: the cluster it runs in, and the host's network namespace.

A rank, a notebook's driver or a fault injector runs inside one node's network namespace
(slurmd was started there), yet the link faults and the link phases must reach the
bridge-side ends of the veths, which live in the host's namespace. These two look-ups are
what they share (:mod:`hpcbench.cluster.link_phase`, :mod:`hpcbench.fault.inject.link`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping

from hpcbench.cluster.host_commands import ClusterError


def cluster_of(env: Mapping[str, str] | None = None):
    """The emulated cluster this process belongs to (``SLURM_CONF``'s folder holds cluster.json), or None."""
    from hpcbench.cluster.emulated import ClusterInfo

    env = os.environ if env is None else env
    conf = env.get("SLURM_CONF")
    if not conf:
        return None
    path = Path(conf).parent / "cluster.json"
    try:
        return ClusterInfo.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def host_netns_of(cluster) -> str:
    """The host's network namespace, reachable from any node: that of the cluster's slurmctld.

    slurmctld runs on the host at the bridge address, and every node's processes share the host's
    pid namespace (slurmd is started with ``nsenter --net``, no new pid namespace), so its
    ``/proc/PID/ns/net`` is the bridge's namespace seen from anywhere. (``/proc/1`` may belong to
    an init that root cannot inspect, as in a micro-VM.)

    Raises:
        ClusterError: the cluster's slurmctld is not running.
    """
    from hpcbench.cluster import daemons

    pid_file = Path(cluster.state_dir) / "run" / "slurmctld.pid"
    record = daemons.read_pid_file(pid_file)
    path = f"/proc/{record[0]}/ns/net" if record else ""
    if not record or not os.path.exists(path):
        raise ClusterError(f"the cluster's slurmctld is not running ({pid_file}): its network namespace, the "
                           f"host's, holds the bridge-side veths")
    return path
