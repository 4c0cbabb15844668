"""The practice experiment run for real, and the node faults it added.

* its notebook under papermill on one machine (2 emulated nodes on one loopback), with the faults
  that need no cluster (CPU contention, a slow node's CPU quota) and a link fault that must be
  recorded as not injected there;
* its notebook in a SLURM job on the emulated cluster (2 nodes x 1 gloo rank) with the baseline,
  slow storage and a slow link, each applied for real on n2 and undone;
* the faults added to :mod:`hpcbench.fault.inject` (a CPU quota, a thread-hungry
  neighbour, a flapping link) and the ranks' own unbound threads, each applied and undone.

Its rule is tested from recorded records in tests/experiments/practice/test_practice_rules.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from cluster_fixtures import require_cluster_prerequisites, run_task_on_cluster
from conftest import missing

from hpcbench.affinity.applied import allowed_cpus
from hpcbench.cluster import network
from hpcbench.core.tc import parse_rate
from hpcbench.fault.inject import NodeFaultError, node_link
from hpcbench.fault.inject.cgroups import cgroup_v1_of
from hpcbench.fault.inject.cpu import (CPU_CGROUP_PREFIX, CPU_ROOT, CpuQuota, ThreadHungryNeighbour,
                                       cpu_quota_problem)
from hpcbench.fault.inject.link import LinkFlap
from hpcbench.fault.inject.storage import BLKIO_ROOT, CGROUP_PREFIX
from hpcbench.experiments.practice.config import PracticeConfig
from hpcbench.experiments.practice.regime import GATE_REGIME
from hpcbench.experiments.practice.summary import summarize, verify_records

#: Tiny phases: a few seconds each, at least 5 steps for the gate's spread, small batches.
TINY = dict(phase_s=1.5, min_steps=5, warmup_steps=1, batch_size=4, calibration_s=1.0)
#: The faults one machine can apply (CPU contention, a slow node's CPU quota) and a link fault it cannot.
LOCAL_FAULTS = ["none", "cpu_contention", "slow_node", "slow_link"]
#: The cluster run: the baseline and two faults that need the cluster's pieces (a blkio cgroup, a node's link).
CLUSTER_FAULTS = ["none", "slow_storage", "slow_link"]


def _outputs(path: Path) -> tuple[str, list]:
    nb = nbformat.read(path, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    return "".join(o.get("text", "") for o in outputs), outputs


def test_notebook_runs_on_one_machine_with_the_faults_that_need_no_cluster(toy_runs):
    # the session's `hpcbench run practice --toy` (tests/toy_runs.py; test_defaults reads it too)
    faults = LOCAL_FAULTS
    run = toy_runs.get("practice")
    run.check_size({"nodes": 2, "ranks_per_node": 1, "faults": faults, **TINY})
    df = run.records()
    s = summarize(df).set_index("fault")
    assert list(s.index) == faults
    assert s["steps"].ge(TINY["min_steps"]).all() and s["gate_passed"].notna().all()
    assert s.loc["cpu_contention", "injected"] == True  # noqa: E712 - busy processes need no privilege
    # a link fault without the cluster: recorded as not injected, with why, and never caught or missed
    assert s.loc["slow_link", "injected"] == False and s.loc["slow_link", "caught"] is None  # noqa: E712
    assert "no emulated cluster" in s.loc["slow_link", "injection"]
    if cpu_quota_problem() is None:
        assert s.loc["slow_node", "injected"] == True  # noqa: E712
        assert "cpu.cfs_quota_us" in s.loc["slow_node", "injection"]
    else:
        assert s.loc["slow_node", "injected"] == False  # noqa: E712
    assert not list(CPU_ROOT.glob(f"{CPU_CGROUP_PREFIX}-*"))
    assert verify_records(df, PracticeConfig.from_dict({"faults": faults, **TINY})).ok
    # C12's regime: one calibration per launch, the median of the ranks' healthy spreads, written by rank 0
    (cv,) = df.loc[df["metric"] == "fact.regime.healthy_step_cv", "value"]
    per_rank = sorted(df.loc[df["metric"] == "healthy_step_cv", "value"])
    assert len(per_rank) == 2 and cv == pytest.approx(sum(per_rank) / 2) and 0 < cv < 1
    assert df.loc[df["metric"] == "fact.regime.healthy_steps", "value"].iloc[0] >= TINY["min_steps"]
    text, outputs = _outputs(run.notebook)
    assert "C12: inconclusive" in text and "PASS" in text
    assert "regime: guide's regime: a healthy run's step-time spread below 2.5%" in text
    # in the regime the one launch is too few; outside it (2 shared cores: ~10 %) the regime says why
    assert ("n = 1 launches" if cv < GATE_REGIME.max_cv else "inconclusive: regime: healthy step-time spread") in text
    assert "slow_link: not injected here" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)


@pytest.fixture(scope="module")
def cluster_run(emulated_cluster, tmp_path_factory):
    require_cluster_prerequisites()
    run_dir = tmp_path_factory.mktemp("practice") / "run"
    # 330 KB block reads at 1 MB/s: ~0.3 s each under slow_storage
    params = {"faults": CLUSTER_FAULTS, "phase_s": 2.0, "min_steps": 5, "warmup_steps": 1, "batch_size": 4,
              "storage_read_bps": 1_000_000, "calibration_s": 1.0}
    _, df = run_task_on_cluster(emulated_cluster, run_dir, "practice", params)
    return df, run_dir, emulated_cluster


def test_cluster_faults_are_applied_on_n2_undone_and_gated(cluster_run):
    df, run_dir, cluster = cluster_run
    assert set(df["node"]) == {"n1", "n2"}
    s = summarize(df).set_index("fault")
    assert list(s.index) == CLUSTER_FAULTS
    assert s.loc["slow_storage", "injected"] == True and s.loc["slow_link", "injected"] == True  # noqa: E712
    logs = "\n".join(df[df["metric"] == "fault_injected"]["text"].dropna())
    assert logs.count("on n2: undone") == 2 and "blkio.throttle.read_bps_device" in logs and "tbf rate 50000kbit" in logs
    # nothing left behind: both ends of n2's link back at the cluster's rate, no throttle cgroup
    n2 = cluster.node("n2")
    ends = network.read_qdiscs(n2.veth_host) + network.read_qdiscs(n2.veth_node, netns=network.netns_path(n2.netns))
    assert [q.rate_bps for q in ends if q.rate_bps is not None] == [parse_rate("1gbit")] * 2, ends
    assert not list(BLKIO_ROOT.glob(f"{CGROUP_PREFIX}-*"))
    # the gate ran on every phase, on both ranks' rows; throttled reads break its read P99 (0.3 s per block)
    assert s["gate_passed"].notna().all() and s["gate"].str.contains("median over 2 rank").all()
    assert s.loc["slow_storage", "read_p99_s"] > 0.1 and "read_p99" in s.loc["slow_storage", "failed"]
    assert s.loc["slow_storage", "caught"] == True  # noqa: E712
    assert s.loc["slow_link", "caught"] is not None
    assert verify_records(df, PracticeConfig.from_dict({"faults": CLUSTER_FAULTS, "min_steps": 5})).ok
    (path,) = list((run_dir / "tasks").glob("*/notebook.ipynb"))
    text, _ = _outputs(path)
    assert "C12: inconclusive" in text and "slow_storage: step p50" in text


# -- the node faults added for the practice gate -------------------------------------------------

def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_cpu_quota_slows_a_real_process_and_is_removed():
    problem = cpu_quota_problem()
    if problem:
        missing(problem)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with CpuQuota("n2", [busy.pid], cpus=0.1) as fault:
            assert cgroup_v1_of(busy.pid, "cpu") == "/" + fault.cgroup.name
            start, t0 = _cpu_seconds(busy.pid), time.monotonic()
            time.sleep(1.0)
            share = (_cpu_seconds(busy.pid) - start) / (time.monotonic() - t0)
        # 0.1 CPU, whatever else the machine runs; a tick (10 ms) of rounding either way
        assert share < 0.25, share
        assert cgroup_v1_of(busy.pid, "cpu") == "/" and not fault.cgroup.exists()
        assert fault.log.undone and fault.log.counters["nr_throttled"] > 0
    finally:
        busy.kill()
        busy.wait()
    with pytest.raises(NodeFaultError, match="quota"):
        CpuQuota("n2", [os.getpid()], cpus=0.001)
    with pytest.raises(NodeFaultError, match="no process"):
        CpuQuota("n2", [], cpus=0.5)


def test_thread_hungry_neighbour_runs_its_threads_on_the_ranks_cpus_and_stops():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        with ThreadHungryNeighbour("n2", [sleeper.pid], threads=3) as fault:
            pid = fault.proc.pid
            deadline, threads = time.monotonic() + 60, 0
            while time.monotonic() < deadline and threads < 3:  # torch's pool starts after its import
                status = Path(f"/proc/{pid}/status").read_text()
                threads = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))
                time.sleep(0.2)
            assert threads >= 3 and allowed_cpus(pid) == allowed_cpus(sleeper.pid)
        assert not Path(f"/proc/{pid}").exists() and fault.log.undone
    finally:
        sleeper.kill()
        sleeper.wait()
    with pytest.raises(NodeFaultError, match="threads"):
        ThreadHungryNeighbour("n2", [os.getpid()], threads=0)


def test_unbound_rank_threads_change_and_restore_the_rank_itself():
    import torch

    from hpcbench.fault.inject.cpu import unbound_rank_threads

    before_threads, before_cpus = torch.get_num_threads(), os.sched_getaffinity(0)
    cfg = PracticeConfig(thread_factor=3)
    with unbound_rank_threads(cfg) as what:
        assert torch.get_num_threads() == 3 * len(before_cpus)
        assert os.sched_getaffinity(0) == set(range(os.cpu_count()))
        assert "(unbound)" in what
    assert torch.get_num_threads() == before_threads and os.sched_getaffinity(0) == before_cpus


def test_link_flap_takes_the_link_down_and_brings_it_back(emulated_cluster):
    require_cluster_prerequisites()
    if os.geteuid() != 0:
        missing("a link flap needs root (ip, nsenter)")
    link = node_link(emulated_cluster, "n2")
    state = Path(f"/sys/class/net/{link.host_veth}/operstate")
    seen = set()
    with LinkFlap(link, down_s=0.3, period_s=0.8) as fault:
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline:
            seen.add(state.read_text().strip())
            time.sleep(0.02)
    assert "down" in seen and state.read_text().strip() != "down"
    assert fault.log.undone and fault.log.counters["flaps"] >= 1 and len(fault.flaps) >= 1
    assert all(0.25 < b - a < 1.0 for a, b in fault.flaps)
    with pytest.raises(NodeFaultError, match="down_s"):
        LinkFlap(link, down_s=1.0, period_s=0.5)
