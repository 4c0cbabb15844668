"""``hpcbench doctor``: the survey of a recorded DGX-like node and of this machine, claim by claim.

The recorded node is ``tests/fixtures/topology/two_socket_8gpu_4nic`` (the one ``plan-binding`` reads:
8 A100s in pairs on NUMA nodes 3, 1, 7, 5, one ConnectX-6 HDR HCA per pair), extended with what the
preflight reads besides sysfs: ``/proc/mounts`` (Lustre on ``/lustre``, an NVMe RAID on ``/raid``, NFS
home), ``/proc/meminfo``, the NVIDIA driver's ``/proc/driver/nvidia``, the HCAs' ports and a
``libnccl.so.2.18.5``. Its commands (``nvidia-smi`` with ``--query-gpu`` and ``topo -m``, ``sinfo``,
``scontrol show config``) are stand-ins on PATH printing the recorded outputs of
``tests/fixtures/environment/commands/``, chosen by their arguments. This machine is read for real.

The claims are judged from the same requirements the rules ask (``ClaimSet.applicability``), so a
test here also writes launches with the facts the doctor predicts and reads their ledger row.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from synthetic import launches, noisy

from hpcbench.cli import main
from hpcbench.experiments import EXPERIMENTS
from hpcbench.judge.applicability import SLOW_LINK, nodes_of, requires
from hpcbench.report.ledger import evaluate_claim
from hpcbench.run.doctor import auto_backend, doctor, gres_gpus, write_job
from hpcbench.system.facts import mount_of
from hpcbench.system.inventory import Probe
from hpcbench.system.preflight import (SINFO_ARGV, filesystem_kind, is_available, node_usable,
                                       parse_nvidia_smi_topo, parse_scontrol_config, parse_sinfo_nodes)

FIXTURES = Path(__file__).parent / "fixtures"
DGX = FIXTURES / "topology" / "two_socket_8gpu_4nic"
COMMANDS = FIXTURES / "environment" / "commands"
#: Recorded outputs by command and arguments (``"$*"`` of the stand-in).
RECORDED = {
    "nvidia-smi": {"--query-gpu=name,memory.total,driver_version --format=csv,noheader": "nvidia-smi.txt",
                   "topo -m": "nvidia-smi-topo-m.txt"},
    "sinfo": {"--version": "sinfo.txt", " ".join(SINFO_ARGV[1:]): "sinfo-nodes.txt"},
    "scontrol": {"show config": "scontrol-show-config.txt"},
}
NCCL_ENV = {"NCCL_IB_HCA": "mlx5_0,mlx5_1,mlx5_2,mlx5_3", "NCCL_SOCKET_IFNAME": "ib0"}


def stand_ins(folder: Path, recorded: dict[str, dict[str, str]], extra: dict[str, str] | None = None) -> str:
    """A PATH folder whose commands print the recorded output for their arguments (exit 2 for others)."""
    folder.mkdir(parents=True, exist_ok=True)
    cat = shutil.which("cat")
    for command, by_args in recorded.items():
        cases = "".join(f"  '{args}') exec {cat} '{COMMANDS / name}' ;;\n" for args, name in by_args.items())
        body = f'case "$*" in\n{cases}esac\necho "{command} stand-in: nothing recorded for: $*" >&2\nexit 2\n'
        (folder / command).write_text("#!/bin/sh\n" + body)
    for command, body in (extra or {}).items():
        (folder / command).write_text("#!/bin/sh\n" + body + "\n")
    for script in folder.iterdir():
        script.chmod(0o755)
    return str(folder)


@pytest.fixture(scope="module")
def dgx_bin(tmp_path_factory) -> str:
    return stand_ins(tmp_path_factory.mktemp("dgx") / "bin", RECORDED, {"sbatch": "echo 4242"})


@pytest.fixture(scope="module")
def dgx(dgx_bin):
    probe = Probe(DGX, {"PATH": dgx_bin, **NCCL_ENV})
    return doctor(probe, out_dir="/lustre/scratch/alice/results", data_dir="/lustre/datasets/imagenet")


@pytest.fixture(scope="module")
def here(tmp_path_factory):
    return doctor(Probe(Path("/"), dict(os.environ)), out_dir=str(tmp_path_factory.mktemp("results")))


def claim(result: dict, claim_id: str) -> dict:
    return next(c for c in result["claims"] if c["claim"] == claim_id)


# -- parsers, on the recorded outputs --------------------------------------------------------

def test_sinfo_nodes_partitions_states_and_gres():
    rows = parse_sinfo_nodes((COMMANDS / "sinfo-nodes.txt").read_text())
    assert [r["node"] for r in rows] == ["dgx01", "dgx02", "dgx03", "dgx04", "dgx05", "cpu01", "cpu02"]
    assert rows[0] == {"node": "dgx01", "partition": "gpu", "default": True, "state": "idle", "cpus": 256,
                       "memory_mib": 1000000, "gres": "gpu:a100:8"}
    assert rows[5]["gres"] == "" and not rows[5]["default"]
    assert [node_usable(s) for s in ("idle", "mixed", "allocated", "drained", "draining", "down*", "idle*",
                                     "maint", "idle~")] == [True, True, True, False, False, False, False, False, True]
    with pytest.raises(ValueError, match="expected 6"):
        parse_sinfo_nodes("dgx01|gpu*|idle\n")
    assert gres_gpus(["gpu:a100:8"]) == 8 and gres_gpus(["gpu:4,shard:16"]) == 4 and gres_gpus([]) == 0


def test_scontrol_config_main_section_only():
    config = parse_scontrol_config((COMMANDS / "scontrol-show-config.txt").read_text())
    assert config["ClusterName"] == "dgxcluster" and config["SLURM_VERSION"] == "23.02.7"
    assert config["SelectType"] == "select/cons_tres" and config["TaskPlugin"] == "task/affinity,task/cgroup"
    assert "ConstrainCores" not in config  # the cgroup plugin's section after the blank line


def test_topo_matrix_and_nic_legend():
    topo = parse_nvidia_smi_topo((COMMANDS / "nvidia-smi-topo-m.txt").read_text())
    assert topo["devices"] == [f"GPU{i}" for i in range(8)] + [f"NIC{i}" for i in range(4)]
    assert topo["links"]["GPU0"]["GPU7"] == "NV12" and topo["links"]["GPU0"]["GPU0"] == "X"
    assert topo["links"]["NIC1"]["GPU2"] == "PXB" and topo["links"]["NIC1"]["GPU0"] == "SYS"
    assert topo["nic_names"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1", "NIC2": "mlx5_2", "NIC3": "mlx5_3"}
    assert topo["cpu_affinity"]["GPU0"] == "48-63,176-191" and topo["numa_affinity"]["GPU6"] == "5"
    with pytest.raises(ValueError, match="no header row"):
        parse_nvidia_smi_topo("No devices were found\n")


def test_mounts_and_file_system_kinds():
    mounts = (DGX / "proc" / "mounts").read_text()
    assert mount_of("/lustre/scratch/x", mounts)[:2] == ("lustre", "/lustre")
    assert mount_of("/raid/data", mounts) == ("ext4", "/raid", "/dev/md1")
    assert mount_of("/home/alice", mounts)[:2] == ("nfs4", "/home")
    assert mount_of("/lustrefs", mounts)[:2] == ("ext4", "/")  # a prefix of a name is no parent
    assert filesystem_kind("lustre", "10.0.0.5@o2ib:/scratch") == "Lustre"
    assert filesystem_kind("gpfs", "gpfs0") == "GPFS (Storage Scale)"
    assert filesystem_kind("nfs4", "nfs01:/export") == "NFS"
    assert filesystem_kind("xfs", "/dev/nvme0n1p1") == "local NVMe"
    assert filesystem_kind("ext4", "/dev/md1", ["nvme2n1", "nvme3n1"]) == "local NVMe (software RAID)"
    assert filesystem_kind("ext4", "/dev/sda1") == "local disk"
    assert filesystem_kind("tmpfs", "tmpfs") == "memory (tmpfs)"


# -- the recorded DGX-like node --------------------------------------------------------------

def test_fixture_node_reports_8_gpus_with_their_links(dgx):
    gpus = dgx["survey"]["gpus"]
    assert gpus["count"] == 8 and gpus["driver"] == "535.129.03"
    assert {d["model"] for d in gpus["devices"]} == {"NVIDIA A100-SXM4-80GB"}
    assert {d["memory_gib"] for d in gpus["devices"]} == {80.0}
    assert [d["numa_node"] for d in gpus["devices"]] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert gpus["links"]["gpu_pairs"] == {"NV12": 28}


def test_fixture_node_reports_4_nics_near_their_gpus_and_numa_nodes(dgx):
    nics = {n["name"]: n for n in dgx["survey"]["nics"]}
    ib = [n for n in nics.values() if n["link"] == "infiniband"]
    assert [n["name"] for n in ib] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert all(n["ports"] == [{"port": 1, "rate": "200 Gb/sec (4X HDR)", "state": "ACTIVE",
                               "link_layer": "InfiniBand"}] for n in ib)
    assert [(n["numa_node"], n["near"]["gpus"]) for n in ib] == [
        (3, ["GPU0", "GPU1"]), (1, ["GPU2", "GPU3"]), (7, ["GPU4", "GPU5"]), (5, ["GPU6", "GPU7"])]
    assert all("nvidia-smi topo -m" in n["near"]["how"] for n in ib)
    assert nics["enp225s0"]["link"] == "ethernet" and not is_available(nics["enp225s0"]["rate"])


def test_without_nvidia_smi_nics_are_placed_by_numa_node_alike(tmp_path):
    # The driver's files still list the GPUs; the switch-level matrix is gone, the NUMA nodes agree with it.
    result = doctor(Probe(DGX, {"PATH": str(tmp_path)}), out_dir="/lustre/r")
    gpus = result["survey"]["gpus"]
    assert gpus["count"] == 8 and gpus["devices"][0]["model"] == "NVIDIA A100-SXM4-80GB"
    assert gpus["devices"][0]["memory_gib"].startswith("not available:")
    assert gpus["links"] == "not available: nvidia-smi not found on PATH"
    ib = [n for n in result["survey"]["nics"] if n["link"] == "infiniband"]
    assert [n["near"]["gpus"] for n in ib] == [["GPU0", "GPU1"], ["GPU2", "GPU3"], ["GPU4", "GPU5"], ["GPU6", "GPU7"]]
    assert result["survey"]["slurm"]["partitions"] == "not available: sinfo not found on PATH"
    assert result["launch"]["backend"] == "local"


def test_fixture_node_nccl_lustre_slurm_cpus(dgx):
    s = dgx["survey"]
    assert s["host"] == "dgx01"
    assert s["nccl"]["version"] == "2.18.5" and s["nccl"]["variables"] == NCCL_ENV
    assert s["nccl"]["libraries"] == [{"version": "2.18.5", "path": "/usr/lib/x86_64-linux-gnu/libnccl.so.2.18.5"}]
    run_dir, data = s["filesystems"]["run_dir"], s["filesystems"]["data"]
    assert (run_dir["filesystem"], run_dir["kind"]) == ("lustre at /lustre", "Lustre")
    assert data["filesystem"] == "lustre at /lustre"
    assert run_dir["free_bytes"].startswith("not available: statvfs")  # a recorded root: no made-up number
    slurm = s["slurm"]
    assert slurm["version"] == "23.02.7" and slurm["config"]["ClusterName"] == "dgxcluster"
    gpu = next(p for p in slurm["partitions"] if p["name"] == "gpu")
    assert (gpu["nodes"], gpu["usable"], gpu["gres"], gpu["default"]) == (5, 4, ["gpu:a100:8"], True)
    assert slurm["partition"] == "gpu"
    assert (s["cpus"]["sockets"], s["cpus"]["cores"], s["cpus"]["cpus"], len(s["cpus"]["numa"])) == (2, 128, 256, 8)
    assert s["cpus"]["model"].startswith("not available:")  # no /proc/cpuinfo recorded


def test_fixture_launch_and_claims(dgx):
    launch = dgx["launch"]
    assert (launch["backend"], launch["nodes"], launch["layout"]) == ("slurm", 4, "4x8")
    assert launch["facts"]["cluster"] == "SLURM, 4 node(s)" and launch["facts"]["infiniband"] == "present"
    assert launch["facts"]["gpus"] == 8.0 and launch["backend_of_workers"] == "nccl"
    for claim_id in ("C3", "C4", "C17"):
        c = claim(dgx, claim_id)
        assert c["can_rule"] and c["verdict"].startswith("can rule: "), c
        assert all(cond["met"] for cond in c["conditions"])
    assert [cond["name"] for cond in claim(dgx, "C17")["conditions"]] == ["infiniband", "nccl"]
    assert claim(dgx, "C1")["verdict"] == "can rule (no platform condition)"
    # C2's platform allows it, but its default layout is one node: the doctor says what to change.
    assert "not with its default 1 node(s): one node: there is no inter-node link" in claim(dgx, "C2")["verdict"]
    assert dgx["ready"] == {**dgx["ready"], "ok": True, "backend": "slurm", "problems": []}


def test_a_partition_too_small_for_an_experiment_says_so(dgx_bin, tmp_path):
    result = doctor(Probe(DGX, {"PATH": dgx_bin}), out_dir="/lustre/r", partition="cpu")
    assert result["launch"]["nodes"] == 1 and result["launch"]["facts"]["cluster"] == "SLURM, 1 node(s)"
    c13 = claim(result, "C13")
    assert not c13["can_rule"] and "scaling needs 4 node(s) by default; SLURM partition cpu (1 usable node(s)) " \
                                   "has 1" in c13["verdict"]
    assert "one node: there is no inter-node link" in claim(result, "C3")["verdict"]
    assert not result["ready"]["ok"]  # the demo suite's 2-node tasks would pend for ever on one node
    assert any(p.endswith("needs 2 node(s); SLURM partition cpu (1 usable node(s)) has 1")
               for p in result["ready"]["problems"])
    missing = doctor(Probe(DGX, {"PATH": dgx_bin}), out_dir="/lustre/r", partition="nope")
    assert missing["survey"]["slurm"]["partition"].startswith("not available: sinfo lists no partition 'nope'")
    assert missing["launch"]["backend"] == "local"


def test_fixture_through_the_command_line(dgx_bin, capsys, monkeypatch):
    monkeypatch.setenv("PATH", dgx_bin)
    for name, value in NCCL_ENV.items():
        monkeypatch.setenv(name, value)
    code = main(["doctor", "--root", str(DGX), "--out", "/lustre/scratch/alice/results"])
    text = capsys.readouterr().out
    assert code == 0
    for line in ("GPU links       NV12 between 28 pair(s) (nvidia-smi topo -m)",
                 "mlx5_2          port 1: 200 Gb/sec (4X HDR), ACTIVE, InfiniBand; NUMA node 7; near GPU4, GPU5",
                 "layout          4x8", "partition gpu*  5 node(s): 2 idle, 1 mixed, 1 allocated, 1 drained; 4 usable"):
        assert line in text, line
    assert "C17  technique comm_modes            can rule: an active InfiniBand port" in text
    assert "Ready: the suite can run here (--backend slurm)" in text
    assert main(["doctor", "--root", str(DGX), "--json"]) == 0
    parsed = json.loads(capsys.readouterr().out)
    assert parsed["survey"]["gpus"]["count"] == 8 and len(parsed["claims"]) == 17


# -- this machine, for real ------------------------------------------------------------------

def test_this_machine_says_what_it_cannot_and_why(here):
    s = here["survey"]
    if not Path("/proc/driver/nvidia/gpus").is_dir() and shutil.which("nvidia-smi") is None:
        assert s["gpus"]["count"] == 0
        assert s["gpus"]["devices"].startswith("not available: no NVIDIA driver (/proc/driver/nvidia/gpus absent)")
        assert claim(here, "C10")["verdict"] == "cannot rule: ran on gloo, which ignores NCCL_* settings"
    if not any(Path("/sys/class/infiniband").glob("*/ports/*/state")):
        assert claim(here, "C17")["why_not"][0] == "no active InfiniBand port was recorded, so there is no IB MTU to match"
    if not s["filesystems"]["data"]["filesystem"].startswith("lustre"):
        assert claim(here, "C4")["why_not"][0].startswith(f"the data was on {s['filesystems']['data']['filesystem']}; ")
    if not s["slurm"]["reachable"]:
        assert here["launch"]["backend"] == "local"
        assert "every byte crosses one loopback" in claim(here, "C3")["verdict"]
    assert s["host"] == socket.gethostname()
    assert isinstance(s["filesystems"]["run_dir"]["free_bytes"], int)  # statvfs, live
    assert s["cpus"]["cpus"] == os.cpu_count()
    # every part either read or saying why not; none is empty
    assert all(value not in ("", None) for value in s["slurm"].values())


def test_this_machine_through_the_command_line(capsys, tmp_path):
    code = main(["doctor", "--out", str(tmp_path / "results")])
    captured = capsys.readouterr()
    assert "Claim by claim" in captured.out
    ready = "Ready: the suite can run here" in captured.out
    assert code == (0 if ready else 1)
    if not ready:
        assert "hpcbench doctor: the suite cannot run here:" in captured.err


# -- the doctor and the ledger ask the same question --------------------------------------------

def bucket_rows(ratio: float, seed: int):
    return [("throughput", noisy(1000 * factor, seed=seed * 13 + i), "samples/s",
             {"model": "gpt2_tiny", "mode": "ddp", "bucket_cap_mb": bucket, "scope": "total"})
            for i, (bucket, factor) in enumerate(((25.0, 1.0), (4096 / (1 << 20), ratio)))]


@pytest.mark.parametrize("where", ["dgx", "here"])
def test_c17_the_ledger_agrees_with_the_doctor(where, request, tmp_path):
    """Launches recording exactly the facts the doctor predicts get the verdict it announced."""
    result = request.getfixturevalue(where)
    exp = EXPERIMENTS.get("comm_modes")
    predicted = {**result["launch"]["facts"]}
    resources = exp.resources(exp.config())
    backend = auto_backend(int(predicted["gpus"]), resources.ranks_per_node)
    records = launches(tmp_path, "comm_modes", lambda k: bucket_rows(1.02, k), 6,
                       params={"nodes": 2, "ranks_per_node": resources.ranks_per_node}, facts=predicted,
                       backend=backend)
    row = evaluate_claim("C17", records)
    doctor_says = claim(result, "C17")
    if doctor_says["can_rule"]:
        assert "not applicable" not in row.measured and row.verdict == "reproduced"
    else:
        first = next(c["why_not"] for c in doctor_says["conditions"] if not c["met"])
        assert row.verdict == "inconclusive" and f"not applicable: {first}" in row.measured


# -- the conditions registry ------------------------------------------------------------------

def test_each_declared_requirement_belongs_to_a_claim_its_experiment_rules_on():
    declared = {}
    for name in EXPERIMENTS.names():
        claims = EXPERIMENTS.get(name).claims
        assert set(claims.applicability) <= set(claims.rules), name
        declared.update({cid: req for cid, req in claims.applicability.items()})
    assert {"C2", "C3", "C4", "C5", "C7", "C8", "C9", "C10", "C11", "C13", "C14", "C17"} <= set(declared)


def test_conditions_read_facts_the_way_rules_record_them():
    loopback = {"cluster": "emulated nodes, one loopback", "params": json.dumps({"nodes": 2})}
    assert SLOW_LINK.why_not(loopback).startswith("ran on emulated nodes, one loopback: every byte crosses one")
    assert SLOW_LINK.why_not({**loopback, "params": "{}"}) == "one node: there is no inter-node link"
    assert SLOW_LINK.why_not({"cluster": "SLURM, 2 node(s)", "params": {"nodes": 2}}) is None
    assert nodes_of({"params": float("nan")}) == 1
    both = requires("infiniband", "nccl")
    assert both.why_not({"infiniband": "absent", "backend": "gloo"}).startswith("no active InfiniBand port")
    assert both.why_not({"infiniband": "present", "backend": "gloo"}) == "ran on gloo"
    assert requires("lustre").why_not({"storage.filesystem": float("nan")}) == "the data was on unknown"
    assert requires("storage_write").why_not({"storage.filesystem": "tmpfs at /dev/shm"}).endswith("in memory")
    with pytest.raises(Exception, match="unknown applicability condition 'lustr'.*did you mean 'lustre'"):
        requires("lustr")


# -- as a SLURM job --------------------------------------------------------------------------

def test_the_job_script_runs_the_doctor_with_the_site_options(tmp_path):
    script = write_job(tmp_path, out_dir=str(tmp_path / "results"), data_dir=None,
                       options={"partition": "gpu", "account": "proj", "time": "00:10:00"})
    text = script.read_text()
    for line in ("#SBATCH --nodes=1", "#SBATCH --partition=gpu", "#SBATCH --account=proj", "#SBATCH --time=00:10:00",
                 f"#SBATCH --output={tmp_path.resolve() / 'doctor.out'}"):
        assert line in text.splitlines(), line
    assert f"-m hpcbench doctor --json --out {tmp_path.resolve() / 'results'}" in text
    assert "--partition gpu >" in text and "${SLURM_JOB_ID}" in text


def test_doctor_as_a_job_through_stand_in_slurm_commands(tmp_path, monkeypatch, capsys):
    """sbatch runs the generated script at once (the node is this machine), squeue lists nothing."""
    bin_dir = stand_ins(tmp_path / "bin", {}, {
        "sbatch": f'script=""; for a; do script="$a"; done\n{shutil.which("bash")} "$script" > "$script.log" 2>&1\n'
                  'echo 777',
        "squeue": "exit 0", "scontrol": "exit 0"})
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "results"
    code = main(["doctor", "--backend", "slurm", "--partition", "debug", "--out", str(out), "--json"])
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert code == (0 if result["ready"]["ok"] else 1)
    assert result["survey"]["host"] == socket.gethostname() and len(result["claims"]) == 17
    assert "job 777 submitted" in captured.err
    folder = next(out.glob("doctor-*"))
    assert "#SBATCH --partition=debug" in (folder / "doctor.sbatch").read_text()


def test_doctor_as_a_job_without_slurm_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("SLURM_CONF", raising=False)
    if shutil.which("squeue") is not None and subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True,
                                                             timeout=60).returncode == 0:
        pytest.skip("a SLURM controller answers here: the refusal needs a machine without one")
    assert main(["doctor", "--backend", "slurm", "--out", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert "--backend slurm: no slurmctld answers" in err or "is not on PATH" in err
    assert not (tmp_path / "results").exists()
