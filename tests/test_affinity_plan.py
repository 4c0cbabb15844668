"""The binding planner: topology from recorded sysfs, plans, emitted commands, and binding really applied.

Fixtures (tests/fixtures/topology/): ``two_socket_8gpu_4nic`` is DGX A100-like in NPS4 mode
(2 x 64-core EPYC with SMT = 256 CPUs, 8 NUMA nodes of 16 cores; GPUs in pairs on NUMA nodes
3, 1, 7, 5 with one ConnectX-6 HCA per pair; a BMC VGA that is no GPU; a management Ethernet
port); ``one_socket`` is 16 cores with SMT, one node, a GPU and an HCA whose numa_node is -1;
``this_machine`` is copied from this machine's sysfs (2 CPUs, one node, a virtio NIC).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hpcbench.affinity import (RankBinding, binding_mismatches, format_cpulist, numactl_argv, plan_binding,
                               plan_table, rank_env, read_topology, sbatch_script, srun_args)
from hpcbench.affinity.applied import memory_policy
from hpcbench.cli import main
from hpcbench.core.errors import ConfigError

FIXTURES = Path(__file__).parent / "fixtures" / "topology"
DGX = FIXTURES / "two_socket_8gpu_4nic"
ONE = FIXTURES / "one_socket"
HERE = FIXTURES / "this_machine"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dgx():
    return read_topology(DGX)


def _child(code: str, argv_prefix: list[str] | None = None, env: dict | None = None) -> dict:
    """Run ``code`` in a fresh Python (optionally under a prefix such as numactl); its last line is JSON."""
    import os

    full_env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # a clean, unbound rank
    full_env.update(env or {})
    out = subprocess.run([*(argv_prefix or []), sys.executable, "-c", code], cwd=REPO, env=full_env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


_OBSERVE = "import json; from hpcbench.affinity import observed_binding; print(json.dumps(observed_binding()))"


# -- topology ---------------------------------------------------------------------------------

def test_dgx_fixture_reads_cpus_numa_gpus_and_nics(dgx):
    assert len(dgx.cpus) == 256 and len(dgx.physical_cores()) == 128 and dgx.smt()
    assert set(dgx.packages.values()) == {0, 1}
    assert dgx.siblings[5] == (5, 133) and dgx.physical_cores()[0] == (0, 128)
    assert [n.id for n in dgx.numa] == list(range(8)) and all(len(n.cpus) == 32 for n in dgx.numa)
    assert dgx.numa[3].memory_bytes == 131889172 * 1024
    assert dgx.numa_of_cpu(50) == 3 and dgx.numa_of_cpu(178) == 3
    # 8 A100s in PCI order; the ASPEED BMC display (vendor 0x1a03) is not a GPU.
    assert [g.pci for g in dgx.gpus][:3] == ["0000:07:00.0", "0000:0f:00.0", "0000:47:00.0"]
    assert [g.numa_node for g in dgx.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    # 4 HCAs through /sys/class/infiniband device links; ib0..ib3 are their IPoIB faces, not extra NICs.
    assert [(n.name, n.numa_node, n.link) for n in dgx.nics] == [
        ("mlx5_0", 3, "infiniband"), ("mlx5_1", 1, "infiniband"), ("mlx5_2", 7, "infiniband"),
        ("mlx5_3", 5, "infiniband"), ("enp225s0", 6, "ethernet")]


def test_one_socket_fixture_has_unknown_numa_as_none():
    topo = read_topology(ONE)
    assert len(topo.cpus) == 32 and len(topo.physical_cores()) == 16 and len(topo.numa) == 1
    assert [(g.name, g.numa_node) for g in topo.gpus] == [("gpu0", None)]
    assert [(n.name, n.numa_node) for n in topo.nics] == [("mlx5_0", None)]


def test_this_machine_fixture_and_the_live_sysfs():
    recorded = read_topology(HERE)
    assert recorded.cpus == (0, 1) and len(recorded.numa) == 1 and recorded.gpus == ()
    assert [(n.name, n.pci, n.link) for n in recorded.nics] == [("eth0", "0000:00:03.0", "ethernet")]
    live = read_topology("/")
    online = Path("/sys/devices/system/cpu/online").read_text()
    assert format_cpulist(live.cpus) == online.strip()
    assert sorted(c for n in live.numa for c in n.cpus) == list(live.cpus)
    assert all(g.kind == "gpu" for g in live.gpus) and all(n.kind == "nic" for n in live.nics)


def test_missing_and_garbled_files_are_named(tmp_path):
    root = tmp_path / "node"
    shutil.copytree(HERE, root, symlinks=True)
    (root / "sys/bus/pci/devices/0000:00:03.0/numa_node").write_text("near\n")
    with pytest.raises(ConfigError, match=r"0000:00:03\.0/numa_node: not an integer"):
        read_topology(root)
    (root / "sys/bus/pci/devices/0000:00:03.0/numa_node").write_text("-1\n")
    (root / "sys/devices/system/cpu/cpu1/topology/core_id").unlink()
    with pytest.raises(ConfigError, match=r"cpu1/topology/core_id"):
        read_topology(root)
    with pytest.raises(ConfigError, match=r"cpu/online"):
        read_topology(tmp_path / "empty")


# -- plans ------------------------------------------------------------------------------------

def _assert_disjoint(plan):
    cpus = [c for b in plan.bindings for c in b.cpus + b.loader_cpus]
    assert len(cpus) == len(set(cpus))


def test_dgx_eight_ranks_follow_their_gpu_and_nic(dgx):
    plan = plan_binding(dgx, 8)
    _assert_disjoint(plan)
    for b in plan.bindings:
        gpu = dgx.gpus[b.gpu]
        assert b.gpu == b.local_rank and b.mem_node == gpu.numa_node
        assert {dgx.numa_of_cpu(c) for c in b.cpus} == {gpu.numa_node}
        nic = next(n for n in dgx.nics if n.name == b.nic)
        assert nic.numa_node == gpu.numa_node and nic.link == "infiniband"
        # SMT off by default: one thread per core, no two CPUs of a rank are siblings.
        assert len({dgx.cores[c] for c in b.cpus}) == len(b.cpus) == b.threads == 8
    assert plan.bindings[0].cpus == tuple(range(48, 56))
    assert any("SMT siblings stay idle" in n for n in plan.notes)


def test_smt_and_loader_cores(dgx):
    plan = plan_binding(dgx, 8, use_smt=True)
    _assert_disjoint(plan)
    assert plan.bindings[0].cpus == tuple(range(48, 56)) + tuple(range(176, 184))
    assert plan.bindings[0].threads == 16
    plan = plan_binding(dgx, 8, loader_workers_per_rank=2)
    _assert_disjoint(plan)
    for b, loaders in zip(plan.bindings, plan.loader_cpus):
        assert len(loaders) == 2 and not set(loaders) & set(b.cpus) and b.threads == 6
        assert {dgx.numa_of_cpu(c) for c in loaders} == {b.mem_node}
    assert plan.cpus_per_rank == 8


def test_without_gpus_ranks_spread_over_numa_nodes(dgx):
    topo = dataclasses.replace(dgx, gpus=())
    plan = plan_binding(topo, 2)
    assert [b.mem_node for b in plan.bindings] == [0, 4]  # one per socket
    assert [dgx.packages[b.cpus[0]] for b in plan.bindings] == [0, 1]
    plan = plan_binding(topo, 16)
    assert [b.mem_node for b in plan.bindings] == [n for n in range(8) for _ in range(2)]
    _assert_disjoint(plan)


def test_one_socket_and_this_machine_plans():
    plan = plan_binding(read_topology(ONE), 1)
    b = plan.bindings[0]
    assert b.cpus == tuple(range(16)) and b.gpu == 0 and b.nic == "mlx5_0" and b.mem_node == 0
    assert "one NUMA node: memory binding is trivially local" in plan.notes
    plan = plan_binding(read_topology(HERE), 2)
    assert [b.cpus for b in plan.bindings] == [(0,), (1,)] and all(b.gpu is None for b in plan.bindings)


def test_errors_name_ranks_per_node_and_say_what_fits(dgx):
    with pytest.raises(ConfigError, match=r"ranks_per_node: 9 ranks but the node has 8 GPU\(s\).*at most 8"):
        plan_binding(dgx, 9)
    with pytest.raises(ConfigError, match=r"ranks_per_node: 3 ranks do not fit.*at most 2"):
        plan_binding(read_topology(HERE), 3)
    with pytest.raises(ConfigError, match=r"ranks_per_node: 2 ranks do not fit: with 1 loader.*at most 1"):
        plan_binding(read_topology(HERE), 2, loader_workers_per_rank=1)
    with pytest.raises(ConfigError, match="with use_smt=True 256 fit"):
        plan_binding(dataclasses.replace(dgx, gpus=()), 129)
    with pytest.raises(ConfigError, match="ranks_per_node"):
        plan_binding(dgx, 0)
    with pytest.raises(ConfigError, match="loader_workers_per_rank"):
        plan_binding(dgx, 1, loader_workers_per_rank=-1)


# -- emitted text ------------------------------------------------------------------------------

def test_srun_numactl_env_and_table(dgx):
    plan = plan_binding(dgx, 8)
    args = srun_args(plan)
    assert args[:2] == ["--ntasks-per-node=8", "--cpus-per-task=8"]
    masks = args[2].removeprefix("--cpu-bind=mask_cpu:").split(",")
    assert int(masks[0], 16) == 0xFF << 48 and int(masks[2], 16) == 0xFF << 16
    assert "--mem-bind=map_mem:3,3,1,1,7,7,5,5" in args and "--gpu-bind=map_gpu:0,1,2,3,4,5,6,7" in args
    assert not any(a.startswith("--hint") for a in args)  # srun refuses --hint next to --cpu-bind
    assert numactl_argv(plan.bindings[2]) == ["numactl", "--physcpubind=16-23", "--membind=1"]
    whole_node = plan_binding(dataclasses.replace(dgx, gpus=()), 8, use_smt=True).bindings[1]
    assert numactl_argv(whole_node, dgx) == ["numactl", "--cpunodebind=1", "--membind=1"]
    assert rank_env(plan.bindings[2]) == {"OMP_NUM_THREADS": "8", "CUDA_VISIBLE_DEVICES": "2",
                                          "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "NCCL_IB_HCA": "=mlx5_1"}
    rows = plan_table(plan)
    assert rows[0]["cpus"] == "48-55" and rows[0]["gpu_numa"] == rows[0]["nic_numa"] == rows[0]["mem_node"] == 3
    here = plan_binding(read_topology(HERE), 2)
    assert srun_args(here) == ["--ntasks-per-node=2", "--cpus-per-task=1", "--cpu-bind=mask_cpu:0x1,0x2"]
    assert rank_env(here.bindings[1]) == {"OMP_NUM_THREADS": "1", "NCCL_SOCKET_IFNAME": "=eth0"}


def test_sbatch_script_is_the_guides_made_right(dgx, tmp_path):
    text = sbatch_script(plan_binding(dgx, 8), nodes=4, command="python train.py --epochs 3")
    for line in ("--ntasks=32", "--ntasks-per-node=8", "--cpus-per-task=8", "--gres=gpu:8",
                 "--hint=nomultithread", "--exclusive"):
        assert any(l.startswith("#SBATCH " + line) for l in text.splitlines()), line
    assert all(" # " in l for l in text.splitlines() if l.startswith("#SBATCH"))  # each line says why
    assert "export OMP_NUM_THREADS=8" in text and "0|1) export NCCL_IB_HCA='=mlx5_0'" in text
    assert "--mem-bind=map_mem:3,3,1,1,7,7,5,5" in text
    assert text.splitlines()[-1].endswith("bash -c 'rank_env; exec python train.py --epochs 3'")
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    small = sbatch_script(plan_binding(read_topology(HERE), 2), nodes=2, command="true")
    assert "--gres" not in small and "--hint" not in small and "#SBATCH --cpus-per-task=1 " in small


def test_cli_affinity(capsys):
    assert main(["plan-binding", "--root", str(DGX), "--ranks-per-node", "8", "--show", "sbatch"]) == 0
    assert "#SBATCH --gres=gpu:8" in capsys.readouterr().out
    assert main(["plan-binding", "--root", str(HERE), "--ranks-per-node", "2", "--show", "numactl"]) == 0
    assert "numactl --physcpubind=1 --membind=0 python train.py" in capsys.readouterr().out
    assert main(["plan-binding", "--root", str(HERE), "--ranks-per-node", "3"]) == 2
    assert "ranks_per_node" in capsys.readouterr().err


# -- applied in a real process ------------------------------------------------------------------

def test_apply_binding_really_binds_a_child_and_mismatches_catch_an_unbound_one():
    binding = RankBinding(local_rank=0, cpus=(0,), mem_node=0, gpu=None, nic=None, threads=1)
    bound = _child("import json; from hpcbench.affinity import RankBinding, apply_binding, observed_binding; "
                   "apply_binding(RankBinding(0, (0,), 0, None, None, 1)); print(json.dumps(observed_binding()))")
    assert bound["cpus_allowed_list"] == "0" and bound["omp_num_threads"] == "1"
    assert binding_mismatches(binding, bound) == []
    unbound = _child(_OBSERVE)
    problems = binding_mismatches(binding, unbound)
    if len(unbound["cpus"]) > 1:
        assert any("runs on CPUs" in p and "planned 0" in p for p in problems)
    assert any("OMP_NUM_THREADS=None, planned 1" in p for p in problems)


def test_numactl_prefix_applies_the_plan():
    if shutil.which("numactl") is None:
        pytest.skip("numactl is not installed (apt-get install numactl)")
    binding = plan_binding(read_topology("/"), 1).bindings[0]
    binding = dataclasses.replace(binding, cpus=binding.cpus[-1:], threads=1, nic=None)
    observed = _child(_OBSERVE, numactl_argv(binding), env=rank_env(binding))
    assert observed["cpus"] == list(binding.cpus)
    assert binding_mismatches(binding, observed) == []


def test_memory_policy_syscalls_and_multi_node_mismatch():
    got = _child("import json; from hpcbench.affinity.applied import set_memory_policy, memory_policy; "
                 "set_memory_policy('bind', [0]); print(json.dumps(memory_policy()))")
    assert got == ["bind", [0]]
    assert memory_policy()[0] in ("default", "local", "bind", "preferred", "interleave")
    binding = RankBinding(local_rank=3, cpus=(48,), mem_node=3, gpu=3, nic="mlx5_0", threads=1,
                          nic_link="infiniband")
    observed = {"cpus": [48], "cpus_allowed_list": "48", "mems": list(range(8)), "mempolicy": "default",
                "mempolicy_nodes": [], "omp_num_threads": "1", "torch_threads": 4,
                "cuda_visible_devices": "0,1,2,3", "nccl_ib_hca": "=mlx5_1"}
    problems = binding_mismatches(binding, observed)
    assert len(problems) == 4
    assert any("memory policy default" in p and "NUMA node 3" in p for p in problems)
    assert any("torch uses 4" in p for p in problems) and any("CUDA_VISIBLE_DEVICES=0,1,2,3" in p for p in problems)
    assert any("NCCL_IB_HCA==mlx5_1, planned mlx5_0" in p for p in problems)
