"""A node of the emulated cluster taken out for real, and brought back.

:func:`node_down` stops its slurmd, SIGKILLs every process inside it (a power loss) or takes its
link down; :func:`node_up` brings it back and waits until SLURM can schedule on it again.
Needs root and a running emulated cluster (:mod:`hpcbench.cluster`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field

from hpcbench.fault.inject.base import FaultError

NODE_HOW = ("slurmd", "crash", "link")


@dataclass
class NodeOutage:
    """A node taken out of the emulated cluster, and how; :func:`node_up` undoes it."""

    node: str
    how: str
    at: float
    killed: list[int] = field(default_factory=list)  #: pids killed inside the node ("crash")


def _cluster_paths(cluster, node: str):
    # The emulated cluster's own layout of its state dir (pid files, logs), so a restarted
    # slurmd is found and stopped by `hpcbench cluster down` like the others.
    from hpcbench.cluster.emulated import _layout

    layout = _layout(cluster.state_dir)
    return layout.pid_file(f"slurmd-{node}"), layout.log / f"slurmd-{node}.out"


def _scontrol(cluster, *args: str, check: bool = True):
    from hpcbench.cluster.slurm_daemons import slurm_client

    return slurm_client(["scontrol", *args], cluster.slurm_conf, timeout=30, check=check)


def node_down(cluster, node: str, *, how: str = "slurmd", notify: bool = True) -> NodeOutage:
    """Take node ``node`` of a running emulated cluster out, for real.

    Args:
        cluster: the :class:`~hpcbench.cluster.ClusterInfo`.
        node: its name, e.g. ``"n2"``.
        how: ``"slurmd"`` stops its slurmd (running job steps go on; nothing new starts there);
            ``"crash"`` SIGKILLs every process inside the node (slurmd, slurmstepd, the job's
            ranks), as a power loss would; ``"link"`` takes its link down (the node goes silent).
        notify: tell slurmctld at once that the node is down (``scontrol update State=DOWN``),
            which it would otherwise conclude only after ``SlurmdTimeout`` (60 s here, 300 s by
            default): jobs on the node then end NODE_FAIL and srun reports the node failure.
    Returns:
        What was done, and when.
    """
    from hpcbench.cluster import daemons
    from hpcbench.cluster.host_commands import run_command

    if how not in NODE_HOW:
        raise FaultError(f"how={how!r}; allowed: {list(NODE_HOW)}")
    info = cluster.node(node)
    pid_file, _ = _cluster_paths(cluster, node)
    fault = NodeOutage(node, how, time.time())
    if how == "slurmd":
        daemons.stop_daemon(pid_file)
    elif how == "crash":
        pids = [int(p) for p in run_command(["ip", "netns", "pids", info.netns], check=False).stdout.split()
                if p.isdigit()]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        fault.killed = pids
        daemons.stop_daemon(pid_file, timeout=2)  # reaps it if we started it; removes the pid file
    else:
        run_command(["ip", "link", "set", info.veth_host, "down"])
    if notify:
        _scontrol(cluster, "update", f"NodeName={node}", "State=DOWN", "Reason=hpcbench_fault_injection")
    return fault


def node_up(cluster, fault: NodeOutage | str, *, timeout_s: float = 60.0) -> float:
    """Bring a node back (slurmd restarted, or link up) and wait until SLURM can schedule on it.

    Args:
        cluster: the :class:`~hpcbench.cluster.ClusterInfo`.
        fault: what :func:`node_down` returned, or a node name (then slurmd is (re)started and
            the link set up, whichever was wrong).
        timeout_s: how long to wait for the node to be ``idle`` (or allocated) in sinfo.
    Returns:
        Seconds until it was schedulable again.
    """
    from hpcbench.cluster import daemons, slurm_daemons
    from hpcbench.cluster.host_commands import run_command

    t0 = time.monotonic()
    node = fault.node if isinstance(fault, NodeOutage) else fault
    info = cluster.node(node)
    pid_file, out_file = _cluster_paths(cluster, node)
    run_command(["ip", "link", "set", info.veth_host, "up"], check=False)
    if not daemons.is_running(pid_file):
        slurm_daemons.start_slurmd(node, info.netns, cluster.slurm_conf, cluster.hosts_file, pid_file, out_file)
    deadline = time.monotonic() + timeout_s
    resumed = False
    state = "?"
    while time.monotonic() < deadline:
        state = slurm_daemons.node_states(cluster.slurm_conf).get(node, "?")
        base = state.rstrip("*~#!%$@^-")
        if base in ("idle", "alloc", "mix") and not state.endswith("*"):
            return time.monotonic() - t0
        if not resumed and daemons.is_running(pid_file) and base in ("down", "drain", "drng", "fail", "comp"):
            # Registered again but still marked down or draining by our notify (or by
            # slurmctld's own "not responding"): return it to service as an admin would.
            if _scontrol(cluster, "update", f"NodeName={node}", "State=RESUME", check=False).returncode == 0:
                resumed = True
        time.sleep(0.3)
    raise FaultError(f"node {node} not schedulable {timeout_s:g} s after node_up (sinfo state {state!r}); "
                     f"see {out_file}")
