"""A dress rehearsal of GPU jobs: GPUs declared as SLURM GRES on the emulated cluster, CPU ranks standing in.

Claims tested: the emulated nodes declare stand-in GPUs that SLURM schedules (``--gres=gpu:K``) and
assigns per task; a job asking for more GPUs than a node has is refused with SLURM's own answer, which
``hpcbench suite`` surfaces in one line naming the request; a suite task on GPUs under ``bind: plan``,
with the plan made from a recorded DGX-like node, gets on every rank the GPU SLURM assigned and the plan
gave it, and the cores (stood in for by this machine's), memory node and NIC the plan gave it.

What "the cores the plan gave it" means on a 2-core machine: the recorded node's CPUs 48-55 do not
exist here, so each rank runs on its stand-in share of the real CPUs (local rank i: the i-th share,
:mod:`hpcbench.affinity.stand_in`) and records the plan's numbers beside them; the memory node is the
plan's, recorded and not applied (one memory node here); the NIC is the plan's NCCL variable, which
must reach the rank (the HCA itself does not exist here).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from hpcbench.affinity.applied import assigned_gpu
from hpcbench.affinity.plan import plan_binding
from hpcbench.affinity.stand_in import stand_in_binding, stand_in_cpus
from hpcbench.affinity.topology import format_cpulist, read_topology
from hpcbench.cluster import ClusterSpec
from hpcbench.cluster.slurm_daemons import STAND_IN_DEVICE, make_stand_in_gpus, render_gres_conf, render_slurm_conf
from hpcbench.core.errors import ConfigError
from hpcbench.dist.binding import (BIND_ENV, TOPOLOGY_ROOT_ENV, device_index, gpu_bound_by_slurm, gpu_mismatch,
                                   srun_gpu_binding, topology_root)

REPO = Path(__file__).resolve().parents[1]
#: The recorded DGX-like node (8 GPUs, 8 NUMA nodes, 4 InfiniBand HCAs) the rehearsal plans for.
DGX = REPO / "tests" / "fixtures" / "topology" / "two_socket_8gpu_4nic"


def dgx_plan(ranks: int):
    return plan_binding(read_topology(DGX), ranks)


# -- declaring GPUs (no cluster needed) ---------------------------------------------------------

def test_slurm_conf_declares_gres_only_when_asked(tmp_path):
    common = dict(controller_host="h", controller_address="198.18.0.1", nodes=[("n1", "a1"), ("n2", "a2")], cpus=2,
                  memory_mb=1000, state_dir=tmp_path)
    with_gpus = render_slurm_conf(**common, gpus=8).splitlines()
    assert "GresTypes=gpu" in with_gpus
    assert [ln for ln in with_gpus if ln.startswith("NodeName=")] and \
        all(" Gres=gpu:8 " in ln for ln in with_gpus if ln.startswith("NodeName="))
    plain = render_slurm_conf(**common)
    assert "Gres" not in plain


def test_gres_conf_lists_every_stand_in_device_in_index_order(tmp_path):
    devices = {"n1": [tmp_path / "n1" / f"nvidia{i}" for i in range(2)], "n2": [tmp_path / "n2" / "nvidia0"]}
    lines = render_gres_conf(devices).splitlines()
    assert "AutoDetect=off" in lines
    assert [ln for ln in lines if ln.startswith("NodeName=")] == [
        f"NodeName=n1 Name=gpu File={tmp_path}/n1/nvidia0", f"NodeName=n1 Name=gpu File={tmp_path}/n1/nvidia1",
        f"NodeName=n2 Name=gpu File={tmp_path}/n2/nvidia0"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root (the emulated cluster does too)")
def test_stand_in_gpus_are_character_devices_that_open_as_dev_null(tmp_path):
    paths = make_stand_in_gpus(tmp_path / "n1", 3)
    assert [p.name for p in paths] == ["nvidia0", "nvidia1", "nvidia2"]
    for path in paths:
        st = os.stat(path)
        assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == STAND_IN_DEVICE
    assert make_stand_in_gpus(tmp_path / "n1", 3) == paths  # again, in place


@pytest.mark.parametrize("value", [-1, 17, "eight"])
def test_gpus_per_node_is_bounded_and_named(value):
    with pytest.raises(ConfigError) as err:
        ClusterSpec(gpus_per_node=value)
    assert err.value.field == "gpus_per_node"
    assert ClusterSpec(gpus_per_node="8").gpus_per_node == 8 and ClusterSpec().gpus_per_node == 0


# -- a recorded node's plan on this machine ----------------------------------------------------

def test_stand_in_cores_are_each_ranks_share_of_the_real_ones():
    assert [stand_in_cpus(r, 2, [0, 1]) for r in range(2)] == [((0,), None), ((1,), None)]
    assert [stand_in_cpus(r, 2, range(8))[0] for r in range(2)] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    shared = [stand_in_cpus(r, 4, [0, 1]) for r in range(4)]
    assert [cpus for cpus, _ in shared] == [(0,), (1,), (0,), (1,)]
    assert all("share CPUs round robin" in note for _, note in shared)
    with pytest.raises(ConfigError, match="local_rank"):
        stand_in_cpus(2, 2, [0, 1])


def test_stand_in_keeps_the_plans_gpu_and_nic_and_says_what_it_could_not_apply():
    planned = dgx_plan(4).bindings[2]  # GPU 2, on NUMA node 1 with mlx5_1
    assert (planned.gpu, planned.mem_node, planned.nic) == (2, 1, "mlx5_1") and len(planned.cpus) == 8
    stand_in = stand_in_binding(planned, 4, [0, 1], memory_nodes=[0])
    applied = stand_in.applied
    assert applied.cpus == (0,) and applied.threads == 1 and applied.mem_node is None
    assert (applied.gpu, applied.nic, applied.nic_link) == (2, "mlx5_1", "infiniband")
    text = " ".join(stand_in.notes)
    assert f"planned CPUs {format_cpulist(planned.cpus)}" in text and "memory node 1 of the recorded node" in text


def test_the_topology_root_must_be_an_absolute_folder(tmp_path):
    assert topology_root({}) is None
    assert topology_root({TOPOLOGY_ROOT_ENV: str(DGX)}) == DGX
    for bad in ("tests/fixtures/topology/two_socket_8gpu_4nic", str(tmp_path / "absent")):
        with pytest.raises(ConfigError) as err:
            topology_root({TOPOLOGY_ROOT_ENV: bad})
        assert err.value.field == TOPOLOGY_ROOT_ENV


# -- the GPU SLURM assigns, against the plan's ---------------------------------------------------

def test_the_assigned_gpu_is_read_as_slurm_and_the_worker_see_it():
    assert assigned_gpu({"slurm_step_gpus": "3", "cuda_visible_devices": "0"}, 0)[0] == 3  # a device cgroup renumbers
    assert assigned_gpu({"cuda_visible_devices": "0,1"}, 1)[0] == 1  # every rank sees the step's GPUs
    assert assigned_gpu({"cuda_visible_devices": "GPU-5e1c,GPU-77aa"}, 0)[0] is None
    assert assigned_gpu({}, 0) == (None, "no GPU assigned: neither SLURM_STEP_GPUS nor CUDA_VISIBLE_DEVICES is set")
    bound = {"SLURM_STEP_GPUS": "1", "CUDA_VISIBLE_DEVICES": "1"}
    assert gpu_bound_by_slurm(bound) and device_index(1, bound) == 0
    assert not gpu_bound_by_slurm({"CUDA_VISIBLE_DEVICES": "0"}) and device_index(1, {"CUDA_VISIBLE_DEVICES": "0"}) == 1


def test_slurms_fallback_device_is_reported_as_a_mismatch():
    # What slurmstepd does with map_gpu:0,1 in a job holding GPUs 2,3: "Binding to the first device in the
    # allocation instead" (seen on SLURM 22.05): both tasks get GPU 2.
    planned = dgx_plan(2).bindings[0]
    seen = {"slurm_step_gpus": "2", "cuda_visible_devices": "2", "slurm_job_gpus": "2,3"}
    assert gpu_mismatch(planned, seen) == "local rank 0: GPU 2 (SLURM_STEP_GPUS=2), planned GPU 0"
    assert gpu_mismatch(planned, {**seen, "slurm_step_gpus": "0", "cuda_visible_devices": "0"}) is None
    assert gpu_mismatch(planned, {"slurm_job_gpus": "0,1"}).endswith("planned GPU 0")  # the step got none
    assert gpu_mismatch(planned, {}) is None  # nothing assigns GPUs here: nothing to compare


def test_srun_gives_each_task_the_plans_gpu_only_where_the_job_holds_gpus(monkeypatch):
    from hpcbench.dist import launcher

    env = {TOPOLOGY_ROOT_ENV: str(DGX)}
    assert srun_gpu_binding(4, env) == []
    assert srun_gpu_binding(4, {**env, "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7"}) == [
        "--gres=gpu:4", "--gpu-bind=map_gpu:0,1,2,3"]
    monkeypatch.setattr(launcher, "slurm_hostnames", lambda nodelist, env: ["n1", "n2"])
    alloc = {**env, "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7"}
    planned = launcher.plan_slurm(nodes=2, ranks_per_node=2, spec_path=Path("/x"), tag="t", env=alloc, bind="plan")
    assert "--gpu-bind=map_gpu:0,1" in planned.cmd and "--gres=gpu:2" in planned.cmd
    assert "GPUs 0,1 by the plan" in planned.description
    unbound = launcher.plan_slurm(nodes=2, ranks_per_node=2, spec_path=Path("/x"), tag="t", env=alloc)
    assert not [a for a in unbound.cmd if a.startswith(("--gres", "--gpu-bind"))]


def test_a_refused_submission_names_the_request_and_slurms_reason_in_one_line(tmp_path, monkeypatch):
    from hpcbench.run.backends.slurm import SlurmError, submit

    script = tmp_path / "task.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=hpcb-x\n#SBATCH --nodes=2\n#SBATCH --exclusive\n"
                      "#SBATCH --chdir=/run\n#SBATCH --gres=gpu:9\necho never\n")
    fake = tmp_path / "bin" / "sbatch"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'sbatch: error: Batch job submission failed: Requested node configuration is "
                    "not available' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    with pytest.raises(SlurmError) as err:
        submit(script)
    assert str(err.value) == ("SLURM refused the job (--job-name=hpcb-x --nodes=2 --exclusive --gres=gpu:9): Batch job "
                              f"submission failed: Requested node configuration is not available (script {script})")


#: A rank without torch: applies this rank's plan and prints what it recorded, as JSON.
PROBE = r"""
import json, os
from hpcbench.dist.topology import ranks_from_srun
if "SLURM_PROCID" in os.environ:
    os.environ.update(ranks_from_srun(os.environ))
from hpcbench.dist.binding import apply_plan_for_this_rank, record_binding

class Writer:
    def __init__(self):
        self.rows = []
    def add(self, metric, value, unit, labels=None, text=None):
        self.rows.append({"metric": metric, "value": value, "labels": labels or {}, "text": text})

writer = Writer()
record_binding(writer, "plan", apply_plan_for_this_rank())
fields = {r["labels"]["field"]: r["text"] for r in writer.rows if r["metric"] == "rank_binding"}
planned = next(r["text"] for r in writer.rows if r["metric"] == "rank_binding_planned")
mismatches = [r["text"] for r in writer.rows if r["labels"].get("field") == "mismatch"]
print(json.dumps({"local_rank": int(os.environ["LOCAL_RANK"]), "node": os.environ.get("SLURMD_NODENAME", ""),
                  "fields": fields, "planned": planned, "mismatches": mismatches}), flush=True)
"""


def _probe_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NCCL_", "CUDA_"))}
    return {**env, "PYTHONPATH": str(REPO), TOPOLOGY_ROOT_ENV: str(DGX), **extra}


def test_a_rank_applies_the_recorded_nodes_plan_through_its_stand_in():
    rows = []
    for rank in range(2):
        proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60,
                              env=_probe_env(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2"))
        assert proc.returncode == 0, proc.stderr
        rows.append(json.loads(proc.stdout))
    cpus = sorted(os.sched_getaffinity(0))
    for row, planned in zip(rows, dgx_plan(2).bindings):
        expected = stand_in_cpus(planned.local_rank, 2, cpus)[0]
        assert row["fields"]["cpus_allowed_list"] == format_cpulist(expected)
        assert row["fields"]["nccl_ib_hca"] == f"={planned.nic}"
        assert f"cpus {format_cpulist(planned.cpus)}; memory node {planned.mem_node}; gpu {planned.gpu}" in row["planned"]
        assert "assigned_gpu" in row["fields"] and row["mismatches"] == []  # no GPU assigned outside SLURM


# -- on the emulated cluster with stand-in GPUs --------------------------------------------------

def _slurm(cluster, *argv: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          env={**_probe_env(**env), **cluster.env()})


@pytest.mark.integration
def test_every_task_gets_the_plans_gpu_from_slurm_and_its_cores_memory_node_and_nic(gres_cluster):
    info = _slurm(gres_cluster, "sinfo", "-h", "-N", "-o", "%N %G")
    assert info.stdout.split() == ["n1", "gpu:8", "n2", "gpu:8"], info.stdout + info.stderr
    ranks = 4  # GPUs 0-3 of the recorded node: NUMA nodes 3, 3, 1, 1 and HCAs mlx5_0, mlx5_0, mlx5_1, mlx5_1
    gpu_args = srun_gpu_binding(ranks, {TOPOLOGY_ROOT_ENV: str(DGX), "SLURM_JOB_GPUS": "all"})
    # An allocation of the 2 whole nodes, then a step of 4 ranks per node on their 2 CPUs (--overcommit holds
    # for a step, not for an allocation), as the launcher runs one.
    proc = _slurm(gres_cluster, "salloc", "-N2", "--exclusive", "srun", f"--ntasks-per-node={ranks}", "--cpu-bind=none",
                  "--overcommit", *gpu_args, sys.executable, "-c", PROBE)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert sorted((r["node"], r["local_rank"]) for r in rows) == [(n, r) for n in ("n1", "n2") for r in range(ranks)]
    for row in rows:
        planned = dgx_plan(ranks).bindings[row["local_rank"]]
        fields = row["fields"]
        # the device SLURM assigned this task is the one the plan gave it
        assert fields["slurm_step_gpus"] == fields["cuda_visible_devices"] == str(planned.gpu), fields
        # its cores: the stand-in share of the 2 real CPUs, with the plan's own numbers recorded beside
        assert fields["cpus_allowed_list"] == str(row["local_rank"] % 2), fields
        assert f"cpus {format_cpulist(planned.cpus)}; memory node {planned.mem_node}" in row["planned"]
        # its NIC: the plan's NCCL variable reached the rank
        assert fields["nccl_ib_hca"] == f"={planned.nic}", fields
        assert row["mismatches"] == [], row
    assert {r["fields"]["nccl_ib_hca"] for r in rows} == {"=mlx5_0", "=mlx5_1"}


@pytest.mark.integration
def test_a_suite_task_on_gpus_is_placed_by_the_plan(gres_cluster, tmp_path, monkeypatch):
    """The guide-scale suite's collectives task at toy size on 2 nodes x 2 stand-in GPUs: the suite's own
    ``bind: plan`` reaches every rank through sbatch and srun (nothing else sets $HPCBENCH_BIND)."""
    from dataclasses import replace

    from hpcbench.core.results import find_record_files, read_records
    from hpcbench.run.runner import run_suite
    from hpcbench.run.suite import Layout, load_suite

    monkeypatch.delenv(BIND_ENV, raising=False)
    for key, value in {**gres_cluster.env(), TOPOLOGY_ROOT_ENV: str(DGX)}.items():
        monkeypatch.setenv(key, value)
    guide_scale = load_suite("guide-scale", layout=Layout(2, 2), toy=True)
    suite = replace(guide_scale, tasks=[t for t in guide_scale.tasks if t.task_id == "collectives.every_size.r0"])
    assert suite.bind == "plan" and len(suite.tasks) == 1
    run_dir = tmp_path / "run"
    (status,) = run_suite(suite, run_dir, backend="slurm", progress=False, options={"gres": "gpu:2"})
    assert status.state == "done", status.error
    assert "#SBATCH --gres=gpu:2" in next((run_dir / "slurm").glob("*.sbatch")).read_text()
    df = pd.concat([read_records(p) for p in find_record_files(run_dir / "tasks")], ignore_index=True)
    df = df[df["metric"].str.startswith("rank_binding")].assign(
        field=lambda d: d["labels"].map(lambda lab: json.loads(lab).get("field")))
    assert sorted(set(zip(df["node"], df["rank"]))) == [("n1", 0), ("n1", 1), ("n2", 2), ("n2", 3)]
    for (node, rank), rows in df.groupby(["node", "rank"]):
        local = rank % 2
        planned = dgx_plan(2).bindings[local]
        fields = dict(zip(rows["field"], rows["text"]))
        assert fields["slurm_step_gpus"] == fields["cuda_visible_devices"] == str(planned.gpu), (node, rank, fields)
        assert fields["cpus_allowed_list"] == str(local)
        assert fields["nccl_ib_hca"] == f"={planned.nic}"
        text = rows.loc[rows["metric"] == "rank_binding_planned", "text"].item()
        assert f"cpus {format_cpulist(planned.cpus)}; memory node {planned.mem_node}; gpu {planned.gpu}; " \
               f"nic {planned.nic}" in text
        assert rows.loc[rows["metric"] == "rank_binding_mismatches", "value"].tolist() == [0], fields.get("mismatch")


@pytest.mark.integration
def test_more_gpus_than_a_node_has_is_refused_with_slurms_answer_in_one_line(gres_cluster, tmp_path):
    raw = _slurm(gres_cluster, "sbatch", "--gres=gpu:9", "--wrap", "true")
    assert raw.returncode != 0 and "Requested node configuration is not available" in raw.stderr, raw.stderr
    suite = tmp_path / "gpus.yaml"
    suite.write_text("name: gpus\ntasks:\n  - experiment: environment\n")
    proc = _slurm(gres_cluster, sys.executable, "-m", "hpcbench", "suite", str(suite), "--backend", "slurm",
                  "--gres", "gpu:9", "--quiet", "--run-dir", str(tmp_path / "run"), timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("hpcbench: error: SLURM refused the job (") and "--gres=gpu:9" in lines[0]
    assert "Requested node configuration is not available" in lines[0]
