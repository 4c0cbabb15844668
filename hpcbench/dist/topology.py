"""Where a rank sits: nodes and local ranks, from torchrun, SLURM or an emulation.

The topology is a pure value (no torch import) so that process-group layouts can be
computed and tested anywhere. On one machine an *emulation* override splits the
local ranks into pretend nodes (``HPCBENCH_EMULATED_NODES=2`` with 4 ranks gives
2 nodes x 2 ranks), so that intra-node and inter-node process groups exist and
their code paths run, even though every byte crosses the same loopback.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Mapping

from hpcbench.core.errors import ConfigError

EMULATED_NODES_ENV = "HPCBENCH_EMULATED_NODES"
#: Set for ranks that srun starts itself (no torchrun): each one takes RANK, WORLD_SIZE and LOCAL_RANK
#: from SLURM's task variables (:func:`ranks_from_srun`) and joins rank 0's store at MASTER_ADDR:MASTER_PORT.
SRUN_RANKS_ENV = "HPCBENCH_SRUN_RANKS"


@dataclass(frozen=True)
class Topology:
    """One rank's view of a homogeneous job: ``nodes`` x ``ranks_per_node`` ranks.

    Ranks are numbered node-major (rank = node_rank * ranks_per_node + local_rank),
    as torchrun and ``srun --distribution=block`` number them.
    """

    nodes: int
    ranks_per_node: int
    rank: int = 0
    node_name: str = ""
    emulated: bool = False
    source: str = "explicit"

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ConfigError(f"{self.nodes} is out of range; allowed: >= 1", field="nodes", config="Topology")
        if self.ranks_per_node < 1:
            raise ConfigError(f"{self.ranks_per_node} is out of range; allowed: >= 1",
                              field="ranks_per_node", config="Topology")
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank {self.rank} is outside 0..{self.world_size - 1}",
                              field="rank", config="Topology")

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def node_rank(self) -> int:
        return self.rank // self.ranks_per_node

    @property
    def local_rank(self) -> int:
        return self.rank % self.ranks_per_node

    def intra_node_groups(self) -> list[list[int]]:
        """Ranks sharing a node: ``[[0, 1], [2, 3]]`` for 2 x 2."""
        r = self.ranks_per_node
        return [list(range(n * r, (n + 1) * r)) for n in range(self.nodes)]

    def inter_node_groups(self) -> list[list[int]]:
        """Ranks with the same local rank on every node: ``[[0, 2], [1, 3]]`` for 2 x 2.

        These are the peer groups of hierarchical reduction: each carries 1/ranks_per_node
        of the data across the node boundary.
        """
        r = self.ranks_per_node
        return [[n * r + lr for n in range(self.nodes)] for lr in range(r)]

    def groups(self, kind: str) -> list[list[int]]:
        """Rank lists for ``world``, ``intra_node`` or ``inter_node``."""
        if kind == "world":
            return [list(range(self.world_size))]
        if kind == "intra_node":
            return self.intra_node_groups()
        if kind == "inter_node":
            return self.inter_node_groups()
        raise ConfigError(f"unknown group kind {kind!r}; valid: {list(GROUP_KINDS)}", field="groups")

    def describe(self) -> str:
        how = "emulated " if self.emulated else ""
        return f"{self.nodes} {how}node(s) x {self.ranks_per_node} rank(s) = {self.world_size} ranks ({self.source})"

    # -- construction from a launcher's environment ---------------------------
    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Topology":
        """Read the topology a launcher gave this process.

        Order: the emulation override, then torchrun's variables (``RANK``,
        ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``), then SLURM's (``SLURM_PROCID``,
        ``SLURM_NTASKS``, ``SLURM_NNODES``), else a single process.
        """
        env = os.environ if env is None else env
        host = env.get("SLURMD_NODENAME") or socket.gethostname()
        if "RANK" in env and "WORLD_SIZE" in env:
            rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
            emulated = int(env.get(EMULATED_NODES_ENV, "0") or 0)
            if emulated:
                if world % emulated:
                    raise ConfigError(f"{world} ranks cannot be split into {emulated} equal nodes",
                                      field=EMULATED_NODES_ENV, config="Topology")
                per = world // emulated
                return cls(nodes=emulated, ranks_per_node=per, rank=rank,
                           node_name=f"{host}/node{rank // per}", emulated=True, source="emulated")
            per = int(env.get("LOCAL_WORLD_SIZE", world))
            if world % per:
                raise ConfigError(f"WORLD_SIZE={world} is not a multiple of LOCAL_WORLD_SIZE={per}; "
                                  "hpcbench needs the same number of ranks on every node",
                                  field="LOCAL_WORLD_SIZE", config="Topology")
            source = "srun" if env.get(SRUN_RANKS_ENV) == "1" else "torchrun"
            return cls(nodes=world // per, ranks_per_node=per, rank=rank, node_name=host, source=source)
        if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
            rank, world = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])
            nodes = int(env.get("SLURM_NNODES", env.get("SLURM_JOB_NUM_NODES", "1")))
            if world % nodes:
                raise ConfigError(f"SLURM_NTASKS={world} is not a multiple of SLURM_NNODES={nodes}",
                                  field="SLURM_NTASKS", config="Topology")
            return cls(nodes=nodes, ranks_per_node=world // nodes, rank=rank, node_name=host, source="slurm")
        return cls(nodes=1, ranks_per_node=1, rank=0, node_name=host, source="single")


def ranks_from_srun(env: Mapping[str, str]) -> dict[str, str]:
    """torch.distributed's rank variables for a task srun started: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE.

    srun numbers a step's tasks (``SLURM_PROCID``) block-wise over its nodes, as torchrun numbers
    its ranks, so the two give every rank the same place.

    Raises:
        ConfigError: a SLURM variable is missing, or the tasks do not split evenly over the nodes.
    """
    missing = [k for k in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID") if k not in env]
    if missing:
        raise ConfigError(f"{SRUN_RANKS_ENV}=1 but srun did not set {', '.join(missing)}: start the ranks with srun",
                          field=missing[0], config="Topology")
    world = int(env["SLURM_NTASKS"])
    nodes = int(env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or 1)
    if world % nodes:
        raise ConfigError(f"SLURM_NTASKS={world} is not a multiple of the step's {nodes} node(s); "
                          "hpcbench needs the same number of ranks on every node", field="SLURM_NTASKS",
                          config="Topology")
    return {"RANK": env["SLURM_PROCID"], "WORLD_SIZE": str(world), "LOCAL_RANK": env["SLURM_LOCALID"],
            "LOCAL_WORLD_SIZE": str(world // nodes)}


GROUP_KINDS = ("world", "intra_node", "inter_node")


def gather_node_pids(topo: Topology) -> list[tuple[str, int]]:
    """(node name, pid) of every rank, in rank order, the same list on every rank (a collective call).

    What a rank needs to act on the processes of a node (move them into a cgroup, pin busy
    processes next to them): torch.distributed must be initialised.
    """
    import torch.distributed as dist

    out: list = [None] * topo.world_size
    dist.all_gather_object(out, (topo.node_name, os.getpid()))
    return [tuple(x) for x in out]
