"""An emulated multi-node SLURM cluster on one machine.

Each node is a network namespace (``hpcb-nX``) with its own address, hostname and
slurmd; the links between nodes are veth pairs on a host bridge, shaped with ``tc``
(see :mod:`hpcbench.cluster.network`); slurmctld runs on the host at the bridge address.
Jobs started with ``srun``/``sbatch`` (with :meth:`ClusterInfo.env`) therefore run on
"different machines" whose traffic crosses a link of known rate, while ranks inside a
node talk over that node's loopback, as on a real cluster.

Usage::

    info = cluster_up(ClusterSpec(nodes=2, link_rate="1gbit"))   # or link_rate=1e9 (bit/s)
    subprocess.run(["srun", "-N2", "-l", "hostname"], env={**os.environ, **info.env()})
    cluster_down(info.state_dir)

With ``gpus_per_node=N`` every node also declares N GPUs as SLURM GRES (stand-in device files),
so ``sbatch --gres=gpu:K`` is scheduled, refused beyond N, and each task gets its devices
(``CUDA_VISIBLE_DEVICES``, ``SLURM_STEP_GPUS``) while CPU ranks stand in for GPU ranks.

Needs root, iproute2 (ip, tc), util-linux (nsenter, unshare), munge and slurm-wlm.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from hpcbench.cluster import daemons, network, slurm_daemons
from hpcbench.cluster.host_commands import INSTALL_HINT, ClusterError, run_command
from hpcbench.core.config import BitRate, Config, param

__all__ = ["ClusterSpec", "NodeInfo", "ClusterInfo", "ClusterError", "DEFAULT_STATE_DIR", "cluster_up",
           "cluster_down", "cluster_status", "load_cluster", "check_prerequisites", "reshape_links"]

DEFAULT_STATE_DIR = "/tmp/hpcbench-cluster"
#: Seconds cluster_up waits for every node to show ``idle`` in sinfo.
IDLE_TIMEOUT_S = 60
_REQUIRED_TOOLS = ("ip", "tc", "nsenter", "unshare", "munge", "unmunge", "munged", "slurmctld", "slurmd",
                   "srun", "sbatch", "sinfo", "scontrol")


@dataclass
class ClusterSpec(Config):
    """What to emulate: how many nodes, how their links are shaped, where state goes."""

    config_name = "ClusterSpec"

    nodes: int = param(2, "number of emulated nodes (network namespaces hpcb-n1..); 16 addresses are reserved",
                       min=1, max=16)
    link_rate: BitRate = param(BitRate(1e9), "rate of every node's link in bit/s (or 100mbit, 1gbit, 10gbit); "
                                              "at least 1 Mbit/s so that SLURM's own messages get through")
    link_delay: str = param("0ms", "one-way delay added with netem on each end of every node link (node to "
                                   "node crosses two, so 2x); '0ms' for none. The default is 0ms because "
                                   "some kernels (this project's VM) lack sch_netem; a delay there is an error")
    state_dir: str = param(DEFAULT_STATE_DIR, "directory for slurm.conf, the hosts file, cluster.json, logs, "
                                              "pid files and SLURM state")
    cpus_per_node: int = param(0, "CPUs each NodeName line declares; 0 = all host CPUs (os.cpu_count()). "
                                  "More than the host has is allowed (oversubscribed emulation)",
                               min=0, max=1024)
    gpus_per_node: int = param(0, "GPUs each node declares as SLURM GRES (Gres=gpu:N, with a gres.conf whose File= "
                                  "are stand-in character devices under state_dir/dev/<node>/ that open as "
                                  "/dev/null); 0 = none. A dress rehearsal of GPU jobs: SLURM schedules --gres and "
                                  "assigns each task its devices while CPU ranks stand in. At most 16, as many "
                                  "as the largest GPU nodes (HGX-2) hold", min=0, max=16)

    def validate(self) -> None:
        if self.link_rate < 1e6:
            raise self._error("link_rate", f"{self.link_rate} is below 1 Mbit/s; SLURM would time out")
        try:
            delay = network.parse_delay(self.link_delay)
        except ValueError as exc:
            raise self._error("link_delay", str(exc)) from None
        if delay > 1.0:
            raise self._error("link_delay", f"{self.link_delay!r} is above 1s; SLURM would time out")
        if not str(self.state_dir).strip():
            raise self._error("state_dir", "must not be empty")

    @property
    def cpus(self) -> int:
        """CPUs declared per node (``cpus_per_node`` resolved)."""
        return self.cpus_per_node or (os.cpu_count() or 1)

    @property
    def link_rate_bits(self) -> float:
        """``link_rate`` in bits per second, as a plain float."""
        return float(self.link_rate)


@dataclass
class NodeInfo:
    """One emulated node."""

    name: str          #: hostname and SLURM node name, e.g. "n1"
    address: str       #: its address on the cluster network, e.g. "198.18.0.11"
    netns: str         #: network namespace, e.g. "hpcb-n1" (/run/netns/hpcb-n1)
    veth_host: str     #: host end of its link, on the bridge, e.g. "hpcb-h1"
    veth_node: str     #: its end inside the namespace ("hpcb0" on every node): GLOO_SOCKET_IFNAME


@dataclass
class ClusterInfo:
    """A running emulated cluster, as saved in ``state_dir/cluster.json``."""

    spec: ClusterSpec
    nodes: list[NodeInfo]
    controller_address: str
    slurm_conf: Path
    state_dir: Path
    partition: str = slurm_daemons.PARTITION
    controller_host: str = ""
    hosts_file: Path | None = None
    #: "started" when cluster_up started munged (and cluster_down stops it), "reused" otherwise.
    munge: str = "started"

    def env(self) -> dict[str, str]:
        """What a SLURM client (srun, sbatch, sinfo) on the host needs to reach this cluster."""
        return {"SLURM_CONF": str(self.slurm_conf)}

    def job_env(self) -> dict[str, str]:
        """What distributed jobs on the nodes need; a TaskProlog exports it into every task.

        The node-side veth has the same name on every node, so one value fits all; naming it
        keeps gloo/NCCL off interfaces they might otherwise guess. Traffic to a rank on the
        same node still goes over loopback (the kernel routes local addresses there).
        """
        ifname = network.NODE_IFNAME
        return {"GLOO_SOCKET_IFNAME": ifname, "NCCL_SOCKET_IFNAME": ifname}

    def node(self, name: str) -> NodeInfo:
        for n in self.nodes:
            if n.name == name:
                return n
        raise ClusterError(f"no node {name!r}; nodes: {[n.name for n in self.nodes]}")

    def to_dict(self) -> dict:
        return {"spec": self.spec.to_dict(), "nodes": [asdict(n) for n in self.nodes],
                "controller_address": self.controller_address, "slurm_conf": str(self.slurm_conf),
                "state_dir": str(self.state_dir), "partition": self.partition,
                "controller_host": self.controller_host, "hosts_file": str(self.hosts_file or ""),
                "munge": self.munge}

    @classmethod
    def from_dict(cls, data: dict) -> "ClusterInfo":
        return cls(spec=ClusterSpec.from_dict(data["spec"]), nodes=[NodeInfo(**n) for n in data["nodes"]],
                   controller_address=data["controller_address"], slurm_conf=Path(data["slurm_conf"]),
                   state_dir=Path(data["state_dir"]), partition=data["partition"],
                   controller_host=data.get("controller_host", ""),
                   hosts_file=Path(data["hosts_file"]) if data.get("hosts_file") else None,
                   munge=data.get("munge", "started"))


# -- state-dir layout ------------------------------------------------------------------------

@dataclass(frozen=True)
class _Layout:
    root: Path

    @property
    def cluster_json(self) -> Path:
        return self.root / "cluster.json"

    @property
    def slurm_conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def hosts(self) -> Path:
        return self.root / "hosts"

    @property
    def task_prolog(self) -> Path:
        return self.root / "task_prolog.sh"

    @property
    def gres_conf(self) -> Path:
        """SLURM reads gres.conf from slurm.conf's folder."""
        return self.root / "gres.conf"

    @property
    def devices(self) -> Path:
        return self.root / "dev"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def log(self) -> Path:
        return self.root / "log"

    def pid_file(self, daemon: str) -> Path:
        return self.run / f"{daemon}.pid"

    def scratch_dirs(self) -> list[Path]:
        """Rebuilt by every cluster_up (logs are kept until then, for diagnosis)."""
        return [self.root / "ctld-state", self.root / "spool", self.run, self.log, self.devices]


def _layout(state_dir: str | Path) -> _Layout:
    return _Layout(Path(state_dir).expanduser().resolve())


def _plan_nodes(count: int) -> list[NodeInfo]:
    return [NodeInfo(name=f"n{i}", address=network.node_address(i), netns=network.netns_name(i),
                     veth_host=network.host_veth_name(i), veth_node=network.NODE_IFNAME)
            for i in range(1, count + 1)]


# -- public API ------------------------------------------------------------------------------

def check_prerequisites() -> list[str]:
    """What is missing to run the emulated cluster (empty when all is there).

    Returns:
        One line per missing piece, saying how to get it.
    """
    missing = []
    if os.geteuid() != 0:
        missing.append("root privileges (namespaces, veths and tc need CAP_NET_ADMIN)")
    for tool in _REQUIRED_TOOLS:
        if shutil.which(tool) is None and not any(Path(d, tool).is_file() for d in ("/usr/sbin", "/sbin")):
            missing.append(f"{tool} ({INSTALL_HINT})")
    if not Path("/etc/munge/munge.key").exists():
        missing.append("/etc/munge/munge.key (apt-get install munge creates it)")
    return missing


def cluster_up(spec: ClusterSpec) -> ClusterInfo:
    """Build the emulated cluster and wait until every node is idle in sinfo.

    Idempotent: a cluster already up in ``spec.state_dir``, or one from another state_dir
    holding the same namespace/bridge names, is torn down first. On failure everything
    started is torn down again and the error names the log to read (logs are kept).

    Args:
        spec: the cluster to build.
    Returns:
        The running cluster (also saved as ``state_dir/cluster.json``).
    """
    missing = check_prerequisites()
    if missing:
        raise ClusterError("cannot start the emulated cluster, missing: " + "; ".join(missing))
    layout = _layout(spec.state_dir)
    owner = network.network_owner()
    if owner and Path(owner) != layout.root:
        cluster_down(owner)
    cluster_down(layout.root)
    network.delete_network()  # leftovers whose owner is unknown
    network.check_subnet_free()

    for d in layout.scratch_dirs():
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True, mode=0o755)
    nodes = _plan_nodes(spec.nodes)
    host = slurm_daemons.controller_hostname()
    pairs = [(n.name, n.address) for n in nodes]
    for n in nodes:
        (layout.root / "spool" / n.name).mkdir(mode=0o755)
    layout.slurm_conf.write_text(slurm_daemons.render_slurm_conf(
        controller_host=host, controller_address=network.CONTROLLER_ADDRESS, nodes=pairs, cpus=spec.cpus,
        memory_mb=slurm_daemons.host_memory_mb(), state_dir=layout.root, gpus=spec.gpus_per_node))
    layout.gres_conf.unlink(missing_ok=True)  # a cluster without GPUs must not read the last one's
    if spec.gpus_per_node:
        devices = {n.name: slurm_daemons.make_stand_in_gpus(layout.devices / n.name, spec.gpus_per_node)
                   for n in nodes}
        layout.gres_conf.write_text(slurm_daemons.render_gres_conf(devices))
    layout.hosts.write_text(slurm_daemons.render_hosts(host, network.CONTROLLER_ADDRESS, pairs))
    info = ClusterInfo(spec=replace(spec, state_dir=str(layout.root)), nodes=nodes,
                       controller_address=network.CONTROLLER_ADDRESS, slurm_conf=layout.slurm_conf,
                       state_dir=layout.root, controller_host=host, hosts_file=layout.hosts)
    layout.task_prolog.write_text(slurm_daemons.render_task_prolog(info.job_env()))
    layout.task_prolog.chmod(0o755)
    try:
        network.create_network(spec.nodes, owner=str(layout.root))
        network.shape_all_links(spec.nodes, network.LinkShaping(spec.link_rate, spec.link_delay))
        info.munge = _ensure_munge(layout)
        # cluster.json is written early so that cluster_down can always find what to stop.
        _save(info)
        _start_slurm(info, layout)
    except BaseException:
        cluster_down(layout.root)
        raise
    return info


def cluster_down(state_dir: str | Path = DEFAULT_STATE_DIR) -> None:
    """Stop the daemons this cluster started (by pid file) and remove its network.

    Safe to call twice or when nothing is up. munged is stopped only if cluster_up started
    it. Processes still inside the cluster's namespaces (job leftovers) are terminated too.
    The network is left alone when it belongs to a cluster of another state_dir.

    Args:
        state_dir: the cluster's state directory.
    """
    layout = _layout(state_dir)
    for pid_file in sorted(layout.run.glob("slurmd-*.pid")) if layout.run.is_dir() else []:
        daemons.stop_daemon(pid_file)
    daemons.stop_daemon(layout.pid_file("slurmctld"))
    owner = network.network_owner()
    if owner is None or Path(owner) == layout.root or not _layout(owner).cluster_json.exists():
        for ns in network.list_netns():
            pids = run_command(["ip", "netns", "pids", ns], check=False).stdout.split()
            daemons.terminate_pids([int(p) for p in pids if p.isdigit()])
        network.delete_network()
    daemons.stop_daemon(layout.pid_file("munged"))
    layout.cluster_json.unlink(missing_ok=True)


def load_cluster(state_dir: str | Path = DEFAULT_STATE_DIR) -> ClusterInfo:
    """The cluster running in ``state_dir``; ClusterError when none is up there."""
    layout = _layout(state_dir)
    if not layout.cluster_json.exists():
        raise ClusterError(f"no emulated cluster is up in {layout.root} (start one: hpcbench cluster up)")
    try:
        info = ClusterInfo.from_dict(json.loads(layout.cluster_json.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ClusterError(f"{layout.cluster_json} is unreadable: {exc}") from None
    if not daemons.is_running(layout.pid_file("slurmctld")):
        raise ClusterError(f"the emulated cluster in {layout.root} is down (slurmctld is not running); "
                           "run hpcbench cluster up", log_path=layout.log / "slurmctld.log")
    return info


def cluster_status(state_dir: str | Path = DEFAULT_STATE_DIR) -> str:
    """A human-readable report: nodes, addresses, link shaping, sinfo, daemon pids alive or not."""
    layout = _layout(state_dir)
    if not layout.cluster_json.exists():
        return f"no emulated cluster is up in {layout.root}"
    try:
        info = ClusterInfo.from_dict(json.loads(layout.cluster_json.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{layout.cluster_json} is unreadable ({exc}); run hpcbench cluster down, then up"
    spec = info.spec
    lines = [f"emulated cluster in {info.state_dir}",
             f"  controller {info.controller_host} at {info.controller_address}:{slurm_daemons.SLURMCTLD_PORT}, "
             f"SLURM_CONF={info.slurm_conf}, partition {info.partition}",
             f"  links: rate {spec.link_rate}, delay {spec.link_delay} per hop, "
             f"{spec.cpus} CPUs per node, "
             + (f"{spec.gpus_per_node} stand-in GPUs per node (GRES gpu, {info.state_dir / 'gres.conf'}), "
                if spec.gpus_per_node else "") + f"munge {info.munge}",
             "nodes:"]
    lines += [f"  {n.name}: {n.address} netns {n.netns} veth {n.veth_host} <-> {n.veth_node}" for n in info.nodes]
    lines.append("link shaping (tc qdisc show):")
    lines.append(network.shaping_report(len(info.nodes)))
    lines.append("daemons:")
    pid_files = [layout.pid_file("munged"), layout.pid_file("slurmctld"),
                 *sorted(layout.run.glob("slurmd-*.pid"))]
    for pid_file in pid_files:
        record = daemons.read_pid_file(pid_file)
        if record is None:
            if pid_file.stem == "munged":
                lines.append("  munged: not ours (reused the running one)")
            continue
        alive = "alive" if daemons.is_running(pid_file) else "DEAD"
        lines.append(f"  {pid_file.stem}: pid {record[0]} {alive}")
    lines.append("sinfo:")
    try:
        proc = slurm_daemons.slurm_client(["sinfo", "-N", "-l"], info.slurm_conf, timeout=10, check=False)
        lines += ["  " + line for line in (proc.stdout or proc.stderr).strip().splitlines()]
    except ClusterError as exc:
        lines.append(f"  {exc}")
    return "\n".join(lines)


def reshape_links(state_dir: str | Path = DEFAULT_STATE_DIR, *, link_rate: float | str | None = None,
                  link_delay: str | None = None) -> ClusterInfo:
    """Change the link rate/delay of a running cluster without restarting SLURM.

    Lets a benchmark sweep link speeds on one cluster; cluster.json records the new values.

    Args:
        state_dir: the cluster's state directory.
        link_rate: the new rate in bit/s (or tc's spelling, ``"800mbit"``); None keeps the current one.
        link_delay: the new delay (None keeps the current one); both validated as in ClusterSpec.
    Returns:
        The updated ClusterInfo.
    """
    info = load_cluster(state_dir)
    spec = ClusterSpec.from_dict({**info.spec.to_dict(), **({"link_rate": link_rate} if link_rate is not None else {}),
                                  **({"link_delay": link_delay} if link_delay else {})})
    try:
        network.shape_all_links(spec.nodes, network.LinkShaping(spec.link_rate, spec.link_delay))
    except ClusterError:
        # Never leave a link half-shaped (or unshaped): put the previous shaping back.
        network.shape_all_links(spec.nodes, network.LinkShaping(info.spec.link_rate, info.spec.link_delay))
        raise
    info.spec = spec
    _save(info)
    return info


# -- helpers ---------------------------------------------------------------------------------

def _save(info: ClusterInfo) -> None:
    path = _layout(info.state_dir).cluster_json
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(info.to_dict(), indent=2) + "\n")
    tmp.replace(path)


def _ensure_munge(layout: _Layout) -> str:
    """Reuse a working munged (and never stop it), else start ours; returns "reused" or "started"."""
    if slurm_daemons.munge_works():
        return "reused"
    slurm_daemons.start_munged(layout.pid_file("munged"), layout.log / "munged.log")
    return "started"


def _start_slurm(info: ClusterInfo, layout: _Layout) -> None:
    logs = {"slurmctld": layout.log / "slurmctld.log"}
    pid_files = {"slurmctld": layout.pid_file("slurmctld")}
    slurm_daemons.start_slurmctld(info.slurm_conf, pid_files["slurmctld"], logs["slurmctld"],
                                  layout.log / "slurmctld.out")
    for n in info.nodes:
        key = f"slurmd {n.name}"
        pid_files[key] = layout.pid_file(f"slurmd-{n.name}")
        logs[key] = layout.log / f"slurmd-{n.name}.log"
        slurm_daemons.start_slurmd(n.name, n.netns, info.slurm_conf, layout.hosts, pid_files[key],
                                   layout.log / f"slurmd-{n.name}.out")
    slurm_daemons.wait_for_idle(info.slurm_conf, [n.name for n in info.nodes], timeout=IDLE_TIMEOUT_S,
                                pid_files=pid_files, logs=logs)
    expected = {n.name: n.address for n in info.nodes}
    expected[info.controller_host] = info.controller_address
    for n in info.nodes:
        slurm_daemons.check_node_view(pid_files[f"slurmd {n.name}"], n.name, expected)
