"""Topology from launcher environments and the process-group layouts derived from it."""

import pytest

from hpcbench.dist.topology import Topology
from hpcbench.core.errors import ConfigError


def test_groups_2x2():
    t = Topology(nodes=2, ranks_per_node=2, rank=3)
    assert t.world_size == 4 and t.node_rank == 1 and t.local_rank == 1
    assert t.intra_node_groups() == [[0, 1], [2, 3]]
    assert t.inter_node_groups() == [[0, 2], [1, 3]]
    assert t.groups("world") == [[0, 1, 2, 3]]


def test_groups_3x4_cover_every_rank_once():
    t = Topology(nodes=3, ranks_per_node=4)
    for kind in ("intra_node", "inter_node"):
        flat = sorted(r for g in t.groups(kind) for r in g)
        assert flat == list(range(12))
    assert t.inter_node_groups()[1] == [1, 5, 9]


def test_from_torchrun_env():
    t = Topology.from_env({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"})
    assert (t.nodes, t.ranks_per_node, t.node_rank, t.local_rank, t.source) == (2, 4, 1, 1, "torchrun")


def test_emulation_override():
    t = Topology.from_env({"RANK": "2", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4",
                           "HPCBENCH_EMULATED_NODES": "2"})
    assert t.emulated and (t.nodes, t.ranks_per_node, t.node_rank) == (2, 2, 1)
    assert t.node_name.endswith("/node1")
    with pytest.raises(ConfigError, match="cannot be split"):
        Topology.from_env({"RANK": "0", "WORLD_SIZE": "3", "HPCBENCH_EMULATED_NODES": "2"})


def test_from_slurm_env():
    t = Topology.from_env({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_NNODES": "2",
                           "SLURMD_NODENAME": "n2"})
    assert (t.nodes, t.ranks_per_node, t.rank, t.node_name, t.source) == (2, 2, 3, "n2", "slurm")


def test_single_process_and_bad_layouts():
    assert Topology.from_env({}).world_size == 1
    with pytest.raises(ConfigError, match="LOCAL_WORLD_SIZE"):
        Topology.from_env({"RANK": "0", "WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "4"})
    with pytest.raises(ConfigError, match="rank"):
        Topology(nodes=1, ranks_per_node=2, rank=2)
    with pytest.raises(ConfigError, match="unknown group kind"):
        Topology(nodes=1, ranks_per_node=2).groups("rack")


def test_ranks_srun_starts_get_torchs_variables_from_slurms():
    from hpcbench.dist.topology import ranks_from_srun

    slurm = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_STEP_NUM_NODES": "2",
             "SLURM_NNODES": "5"}  # the step's node count wins over the job's
    got = ranks_from_srun(slurm)
    assert got == {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    t = Topology.from_env({**got, "HPCBENCH_SRUN_RANKS": "1"})
    assert (t.nodes, t.ranks_per_node, t.node_rank, t.local_rank, t.source) == (2, 2, 1, 1, "srun")
    with pytest.raises(ConfigError, match="SLURM_LOCALID"):
        ranks_from_srun({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"})
    with pytest.raises(ConfigError, match="not a multiple"):
        ranks_from_srun({**slurm, "SLURM_NTASKS": "3"})
