"""Which launcher a task gets, and the commands they build."""

from pathlib import Path

import pytest

from hpcbench.core.errors import LaunchError, RegistryError
from hpcbench.dist.launcher import choose_launcher, plan_local, plan_slurm, rendezvous_port


def test_local_outside_slurm_and_for_single_node_tasks():
    assert choose_launcher(2, {}) == "local"
    alloc = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "2"}
    assert choose_launcher(1, alloc) == "local"
    assert choose_launcher(2, alloc) == "slurm"
    # an array task holds one node: a 2-node layout is emulated there
    assert choose_launcher(2, {**alloc, "SLURM_JOB_NUM_NODES": "1"}) == "local"


def test_forced_launcher_must_exist():
    assert choose_launcher(2, {"HPCBENCH_LAUNCHER": "local", "SLURM_JOB_ID": "1"}) == "local"
    with pytest.raises(RegistryError, match="local, slurm"):
        choose_launcher(1, {"HPCBENCH_LAUNCHER": "mpirun"})


def test_local_plan_emulates_nodes():
    plan = plan_local(nodes=2, ranks_per_node=3, spec_path=Path("/x/spec.json"), tag="t",
                      env={"HPCBENCH_EMULATED_NODES": "9"})
    assert plan.env["HPCBENCH_EMULATED_NODES"] == "2"
    assert plan.cmd[plan.cmd.index("--nproc-per-node") + 1] == "6"
    assert "--standalone" in plan.cmd and plan.cmd[-1] == "/x/spec.json"
    one = plan_local(nodes=1, ranks_per_node=2, spec_path=Path("/x"), tag="t", env={"HPCBENCH_EMULATED_NODES": "2"})
    assert "HPCBENCH_EMULATED_NODES" not in one.env


def test_a_bad_rendezvous_timeout_is_refused_before_any_srun():
    with pytest.raises(LaunchError, match="HPCBENCH_RDZV_TIMEOUT_S='1m'"):
        plan_slurm(nodes=2, ranks_per_node=1, spec_path=Path("/x"), tag="t",
                   env={"HPCBENCH_RDZV_TIMEOUT_S": "1m", "SLURM_JOB_NODELIST": "n[1-2]"})


def test_rendezvous_port_is_stable_and_in_range():
    assert rendezvous_port("12", "a") == rendezvous_port("12", "a")
    assert rendezvous_port("12", "a") != rendezvous_port("12", "b")
    assert all(29500 <= rendezvous_port(str(j), "t") < 32768 for j in range(200))  # below the ephemeral ports
