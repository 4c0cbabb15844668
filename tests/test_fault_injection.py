"""Real faults on the emulated cluster: the job wrapper, ``--retries``, repair, and the survival model.

Nothing is mocked: ranks get a real SIGKILL, a node really loses its slurmd (or every process
in it), a shard gets a flipped byte on disk, a checkpoint folder is a tmpfs that fills up.
The whole file needs the emulated cluster's prerequisites (root, SLURM, munge, iproute2):
without them it skips locally and fails in CI (``HPCBENCH_REQUIRE_INTEGRATION=1``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from cluster_fixtures import require_cluster_prerequisites
from conftest import REPO, need_executable
from hpcbench.data.manifest import Manifest, sha256_file, shard_entry
from hpcbench.fault.inject import corrupt_shard, full_disk, kill_during_write, kill_one_rank, node_down, node_up
from hpcbench.fault.retry import measure_survival, repair
from hpcbench.run.runner import run_suite
from hpcbench.run.suite import parse_suite

WRAPPER = REPO / "slurm" / "run_with_retries.sh"
MARKER = "HPCBENCH_FAULT_TEST_MARKER"
#: Training of (a): 12 steps, a full checkpoint every 3 (only full ones resume bit-exactly).
STEPS, FULL_EVERY, STEP_SLEEP = 12, 3, 0.25

#: ``hpcbench train`` with times added: each loss-log line gets "time", and the
#: checkpoint search and load are timed into $TIMING_LOG (rank 0). Written next to the test's
#: files and started by srun on the nodes. The loss log's path comes from $LOSS_LOG because
#: torchrun's parser rejects a "--log" after the script as an ambiguous abbreviation.
TIMED_TRAIN = '''\
import json, os, sys, time
started = time.time()
from hpcbench.fault import checkpoint, train

def record(event, t0, t1):
    if os.environ.get("RANK", "0") == "0":
        with open(os.environ["TIMING_LOG"], "a") as fh:
            fh.write(json.dumps({"event": event, "start": t0, "end": t1, "process_start": started}) + "\\n")

def timed(name):
    original = getattr(checkpoint.CheckpointManager, name)
    def wrapper(self, *args, **kwargs):
        t0 = time.time()
        try:
            return original(self, *args, **kwargs)
        finally:
            record(name, t0, time.time())
    setattr(checkpoint.CheckpointManager, name, wrapper)

for name in ("latest_valid", "load"):
    timed(name)
append = train._append_line
train._append_line = lambda path, rec: append(path, {**rec, "time": time.time()})
sys.exit(train.main(sys.argv[1:] + ["--log", os.environ["LOSS_LOG"]]))
'''


@pytest.fixture(autouse=True, scope="module")
def _cluster_prerequisites():
    require_cluster_prerequisites()


@pytest.fixture
def cluster_env(emulated_cluster, monkeypatch):
    for key, value in emulated_cluster.env().items():
        monkeypatch.setenv(key, value)
    return emulated_cluster


_ATTEMPT = re.compile(r"attempt=(\d+)/(\d+) start=(\S+) end=(\S+) seconds=(\S+) rc=(\d+) nodes=(\S+)")


def wrapper_attempts(log: Path) -> list[dict]:
    """The attempt lines of run_with_retries.sh's log, times as unix seconds."""
    stamp = lambda s: dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc).timestamp()  # noqa: E731
    rows = []
    for m in _ATTEMPT.finditer(log.read_text() if log.exists() else ""):
        rows.append({"attempt": int(m[1]), "tries": int(m[2]), "start": stamp(m[3]), "end": stamp(m[4]),
                     "seconds": float(m[5]), "rc": int(m[6]), "nodes": m[7]})
    return rows


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def full_checkpoints(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("full-*")) if folder.is_dir() else []


def json_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def train_argv(script: Path, ckpt: Path) -> list[str]:
    return [str(script), "--checkpoint-dir", str(ckpt), "--steps", str(STEPS), "--full-every-steps",
            str(FULL_EVERY), "--step-sleep", str(STEP_SLEEP)]


def train_env(folder: Path) -> dict[str, str]:
    return {**os.environ, "TIMING_LOG": str(folder / "timing.jsonl"), "LOSS_LOG": str(folder / "loss.jsonl"),
            "HPCBENCH_PYTHON": sys.executable}


def rank_env(rank: int, port: int) -> dict[str, str]:
    """What torch.distributed's env:// rendezvous needs, for two ranks started by hand."""
    return {"RANK": str(rank), "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port)}


@pytest.fixture(scope="module")
def reference_final(tmp_path_factory) -> dict:
    """final.json of the same training, uninterrupted, 2 ranks on the host (no torchrun: its agent
    would cost one more torch import)."""
    folder = tmp_path_factory.mktemp("reference")
    script = folder / "timed_train.py"
    script.write_text(TIMED_TRAIN)
    ranks = [subprocess.Popen([sys.executable, *train_argv(script, folder / "ckpt")], cwd=folder,
                              env={**train_env(folder), **rank_env(r, 29612)}, stdout=subprocess.DEVNULL,
                              stderr=open(folder / f"rank{r}.err", "w")) for r in (0, 1)]
    for r, proc in enumerate(ranks):
        assert proc.wait(timeout=180) == 0, (folder / f"rank{r}.err").read_text()[-3000:]
    return json.loads((folder / "ckpt" / "final.json").read_text())


def test_killed_rank_is_retried_and_training_resumes_exactly(cluster_env, tmp_path, reference_final):
    """(a) SIGKILL of one rank mid-step in a 2-node srun job under run_with_retries.sh."""
    script, ckpt, wlog = tmp_path / "timed_train.py", tmp_path / "ckpt", tmp_path / "wrapper.log"
    script.write_text(TIMED_TRAIN)
    # The guide's `srun python train.py`: srun starts the ranks itself, rank = SLURM_PROCID.
    ranks = ('RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=0 MASTER_ADDR=n1 MASTER_PORT=29611 '
             'exec "$@"')
    # -c: task/affinity confines a step to its allocated CPUs; a one-CPU task per node would put
    # both ranks on the host's CPU 0 (the emulated nodes share its cores).
    srun = ["srun", "-N2", "-w", "n1,n2", "-c", str(os.cpu_count()), "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            "bash", "-c", ranks, "rank", sys.executable, *train_argv(script, ckpt)]
    proc = subprocess.Popen([str(WRAPPER), "--tries", "3", "--delay", "0", "--checkpoints", str(ckpt),
                             "--log", str(wlog), "--", *srun], cwd=tmp_path, env=train_env(tmp_path),
                            stdout=open(tmp_path / "stdout.txt", "w"), stderr=open(tmp_path / "stderr.txt", "w"))
    try:
        # Mid-step: the ranks are training and one full checkpoint is on disk.
        killed = kill_one_rank(str(script), when=lambda: full_checkpoints(ckpt), timeout_s=120, poll_s=0.05)
        rc = proc.wait(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = (tmp_path / "stderr.txt").read_text()
    assert rc == 0, err[-3000:]
    attempts = wrapper_attempts(wlog)
    assert [a["rc"] != 0 for a in attempts] == [True, False], (attempts, err[-2000:])
    assert killed.rank == 1 and killed.signal == "SIGKILL" and killed.node == "n2"
    assert "task 1: Killed" in err  # srun names the rank that died of the signal

    log = json_lines(tmp_path / "loss.jsonl")
    resume = next(r for r in log if r.get("event") == "resume")
    before = [r["step"] for r in log[:log.index(resume)] if "step" in r and "event" not in r]
    # The newest valid checkpoint: the last full one before the kill (steps are logged after their save).
    assert resume["tier"] == "full" and resume["step"] % FULL_EVERY == 0
    assert max(before) // FULL_EVERY * FULL_EVERY <= resume["step"] <= max(before) + 1
    final = json.loads((ckpt / "final.json").read_text())
    assert final["params_sha256"] == reference_final["params_sha256"], (final, reference_final)
    assert final["resumed_from"]["step"] == resume["step"]

    # Recovery, from the kill to training again.
    timing = json_lines(tmp_path / "timing.jsonl")
    first, second = attempts
    search = next(t for t in timing if t["event"] == "latest_valid" and t["start"] > first["end"])
    load = next(t for t in timing if t["event"] == "load" and t["start"] >= search["start"])
    back = next(r for r in log[log.index(resume) + 1:] if "step" in r)
    split = {"detection_s": first["end"] - killed.at,
             "restart_s": search["start"] - first["end"],
             "of which repair_and_delay_s": second["start"] - first["end"],
             "of which launch_s": search["start"] - second["start"],
             "checkpoint_load_s": load["end"] - search["start"],
             "first_step_s": back["time"] - load["end"],
             "total_s": back["time"] - killed.at}
    print("recovery split: " + json.dumps({k: round(v, 3) for k, v in split.items()}))
    (tmp_path / "recovery.json").write_text(json.dumps(split, indent=1))
    assert all(v >= 0 for v in split.values()), split
    assert split["detection_s"] < 30 and split["checkpoint_load_s"] < 10, split


@pytest.mark.parametrize("how", ["crash", "slurmd"])
def test_lost_node_fails_srun_and_the_wrapper_retries_once_it_is_back(cluster_env, tmp_path, how):
    """(b) A node is lost; srun fails; the wrapper retries; the node comes back; the retry runs on both."""
    wlog = tmp_path / "wrapper.log"
    # The first attempt says it started on each node, then sleeps, so a crash finds it running; the retry just
    # says where it ran.
    step = (f'if [ "$HPCBENCH_ATTEMPT" = 1 ]; then touch {tmp_path}/running-$(hostname); sleep 60; fi; '
            'hostname')
    argv = [str(WRAPPER), "--tries", "3", "--delay", "0", "--log", str(wlog), "--",
            "srun", "-N2", "-w", "n1,n2", "-l", "bash", "-c", step]
    fault = None
    try:
        if how == "slurmd":
            # slurmd stopped before the launch, and slurmctld not told: srun's launch on n2 fails.
            fault = node_down(cluster_env, "n2", how="slurmd", notify=False)
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if how == "crash":
            # Its tasks running on both nodes, not only its job allocated: under load a step starts a second or
            # more after squeue says R, and a node lost before the step's launch is another scenario (once, in
            # make test, srun then exited 0 and no retry was needed).
            wait_for(lambda: all((tmp_path / f"running-{n}").exists() for n in ("n1", "n2")), 60,
                     "the first attempt's tasks to run on n1 and n2")
            fault = node_down(cluster_env, "n2", how="crash", notify=True)
        wait_for(lambda: wrapper_attempts(wlog), 60, "the first attempt to fail")
        back_after = node_up(cluster_env, fault)
        out, err = proc.communicate(timeout=90)
    finally:
        if fault is not None:
            node_up(cluster_env, "n2")  # later tests need both nodes
        if "proc" in locals() and proc.poll() is None:
            proc.kill()
    attempts = wrapper_attempts(wlog)
    assert proc.returncode == 0, err[-2000:]
    assert [a["rc"] != 0 for a in attempts] == [True, False], (attempts, err[-2000:])
    expected = "Node failure on n2" if how == "crash" else "failed on node n2"
    assert expected in err, err[-2000:]
    assert sorted(out.split()) == ["0:", "1:", "n1", "n2"], out
    print(f"node lost by {how}: attempt 1 failed after {attempts[0]['seconds']:.1f} s; "
          f"n2 schedulable {back_after:.1f} s after node_up; attempt 2 took {attempts[1]['seconds']:.1f} s")


def _data_set(tmp_path: Path) -> tuple[Path, Path]:
    """A source copy and a working copy (whose manifest names the source) of 3 random shards."""
    src, data = tmp_path / "source", tmp_path / "data"
    rng = random.Random(5)
    for folder in (src, data):
        folder.mkdir()
    for i in range(3):
        payload = bytes(rng.getrandbits(8) for _ in range(32 << 10))
        (src / f"shard-{i}.bin").write_bytes(payload)
        (data / f"shard-{i}.bin").write_bytes(payload)
    entries = [shard_entry(src, src / f"shard-{i}.bin", samples=10) for i in range(3)]
    Manifest(format="bin", shards=entries).write(src)
    Manifest(format="bin", shards=entries, source=str(src)).write(data)
    return src, data


def test_corrupt_shard_is_repaired_between_tries(cluster_env, tmp_path):
    """(c) A flipped byte makes the job's shard check fail; the repair step restores it; the retry passes."""
    src, data = _data_set(tmp_path)
    sums = tmp_path / "SHA256SUMS"
    sums.write_text("".join(f"{sha256_file(p)}  {data / p.name}\n" for p in sorted(src.glob("shard-*"))))
    damage = corrupt_shard(data / "shard-1.bin")
    wlog = tmp_path / "wrapper.log"
    proc = subprocess.run([str(WRAPPER), "--tries", "3", "--delay", "0", "--data", str(data), "--log", str(wlog),
                           "--", "srun", "-N2", "-l", "sha256sum", "--quiet", "-c", str(sums)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HPCBENCH_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [a["rc"] != 0 for a in wrapper_attempts(wlog)] == [True, False]
    text = wlog.read_text()
    assert f"shard repaired: {damage.path}" in text and "1 repaired" in text, text
    assert sha256_file(damage.path) == sha256_file(src / "shard-1.bin")


def test_backend_retries_a_task_whose_rank_was_killed(cluster_env, tmp_path, monkeypatch):
    """(d) --retries 1: a rank of a 2-node task is SIGKILLed; the task is resubmitted once and ends done."""
    marker = uuid.uuid4().hex
    monkeypatch.setenv(MARKER, marker)  # the job inherits it through sbatch, the ranks through srun
    suite = parse_suite({"name": "retry", "tasks": [{"experiment": "collectives", "params": {
        "nodes": 2, "ranks_per_node": 1, "ops": "all_reduce", "groups": "world", "min_bytes": "1K",
        "max_bytes": "1K", "warmup_iters": 0, "iters": 200, "check": False}}]})
    killed = {}
    killer = threading.Thread(target=lambda: killed.update(k=kill_one_rank(
        "hpcbench rank", env={MARKER: marker}, timeout_s=150)), daemon=True)
    killer.start()
    run_dir = tmp_path / "run"
    (st,) = run_suite(suite, run_dir, backend="slurm", progress=False, retries=1, options={"retry_delay_s": 0})
    killer.join(timeout=5)
    assert killed, "no rank was killed"
    assert st.state == "done", st.error
    assert st.attempt == 2 and len(st.tries) == 1, st
    first = st.tries[0]
    assert first["attempt"] == 1 and first["state"] == "failed" and "SIGKILL" in first["reason"], first
    kept = json.loads((run_dir / "attempts" / st.task_id / "1" / "status.json").read_text())
    assert kept["state"] == "failed" and "LaunchError" in kept["error"]
    assert (run_dir / "slurm" / "submission-2.json").is_file()


def test_wrapper_failures_follow_p_cubed(tmp_path):
    """(e) Each try fails with probability p (seeded, drawn per try): jobs fail at about p^3."""
    p, tries, jobs = 0.5, 3, 200
    rng = random.Random(20261129)

    def run_one(j: int) -> tuple[bool, int]:
        plan = tmp_path / f"plan-{j}"  # exit status of each try, drawn independently with p
        plan.write_text("".join(f"{int(rng.random() < p)}\n" for _ in range(tries)))
        log = tmp_path / f"wrapper-{j}.log"
        rc = subprocess.run([str(WRAPPER), "--tries", str(tries), "--delay", "0", "--log", str(log), "--",
                             "bash", "-c", 'exit "$(sed -n "${HPCBENCH_ATTEMPT}p" "$1")"', "try", str(plan)],
                            capture_output=True, timeout=30).returncode
        return rc == 0, len(wrapper_attempts(log))

    m = measure_survival(p, tries, jobs, run_one)
    print(m.describe())
    assert m.consistent, m.describe()
    lo, hi = m.interval
    assert not lo <= p ** 2 <= hi  # the check can tell 3 tries from 2
    assert abs(m.attempt_failure_fraction - p) < 0.1


def test_wrapper_is_shellcheck_clean():
    shellcheck = need_executable("shellcheck", "apt-get install shellcheck")
    proc = subprocess.run([shellcheck, str(WRAPPER)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("state,ended_early,slurm_state,error,log,retried", [
    ("failed", True, "NODE_FAIL", "SLURM job 7 ended (NODE_FAIL)", "", "job ended NODE_FAIL"),
    ("failed", True, "TIMEOUT", "SLURM job 7 ended (TIMEOUT)", "", None),
    ("failed", False, "FAILED", "cell 4: LaunchError: worker ranks failed", "  exitcode  : -9 (pid: 12)",
     "a rank was killed by SIGKILL"),
    ("failed", False, "FAILED", "cell 4: LaunchError: worker ranks failed", "srun: error: Node failure on n2",
     "srun: Node failure on n2"),
    # what srun says when a task it started (a rank of hpcbench's SLURM launcher) dies of a signal
    ("failed", False, "FAILED", "cell 4: LaunchError: worker ranks failed", "srun: error: n2: task 1: Killed",
     "a rank was killed by SIGKILL"),
    ("failed", False, "FAILED", "cell 4: LaunchError: worker ranks failed", "srun: error: n2: task 1: Bus error",
     "a rank was killed by SIGBUS"),
    ("failed", False, "FAILED", "cell 4: LaunchError: worker ranks failed", "srun: error: n1: task 0: Terminated",
     None),
    ("failed", False, "FAILED", "cell 4: LaunchError: worker ranks failed", "  exitcode  : 1 (pid: 12)", None),
    ("failed", False, "COMPLETED", "cell 4: RuntimeError: injected failure", "  exitcode  : -9", None),
    ("interrupted", False, "CANCELLED", "SIGTERM", "", None),
])
def test_retry_rule(state, ended_early, slurm_state, error, log, retried):
    from hpcbench.fault.retry import job_failure_reason

    assert job_failure_reason(state=state, ended_early=ended_early, slurm_state=slurm_state, error=error,
                              logs=[log]) == retried


def test_repair_step_reports_what_it_cannot_repair(tmp_path):
    src, data = _data_set(tmp_path)
    corrupt_shard(data / "shard-0.bin", how="truncate")
    corrupt_shard(src / "shard-0.bin")  # the source copy is bad too: nothing to repair from
    corrupt_shard(data / "shard-2.bin")
    proc = subprocess.run([sys.executable, "-m", "hpcbench", "repair", "--data", str(data)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"shard repaired: {data / 'shard-2.bin'}" in proc.stdout
    assert "NOT repaired" in proc.stdout and "shard-0.bin" in proc.stdout
    assert subprocess.run([sys.executable, "-m", "hpcbench", "repair", "--data", str(tmp_path / "no")],
                          capture_output=True, timeout=60).returncode == 1


def test_checkpoint_write_killed_midway_is_never_loaded(tmp_path):
    """A SIGKILL during a checkpoint save leaves a torn write; resume skips it and repair removes it."""
    from hpcbench.fault.checkpoint import CheckpointManager, CheckpointPolicy

    ckpt = tmp_path / "ckpt"
    saver = tmp_path / "saver.py"
    saver.write_text(
        "import sys, torch\n"
        "from hpcbench.fault.checkpoint import CheckpointManager, CheckpointPolicy\n"
        "m = CheckpointManager(sys.argv[1], CheckpointPolicy(zstd_level=0, keep_full=50))\n"
        "state = {'w': torch.randn(8 << 20)}\n"  # 32 MiB: a write long enough to be caught
        "for step in range(1, 1000):\n"
        "    m.save('full', step, state)\n")
    proc = subprocess.Popen([sys.executable, str(saver), str(ckpt)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        wait_for(lambda: full_checkpoints(ckpt), 60, "a first complete checkpoint")
        killed = kill_during_write(f"{ckpt}/.full-*", match=str(saver), timeout_s=60)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL and killed.path
    manager = CheckpointManager(ckpt, CheckpointPolicy())
    latest = manager.latest_valid()
    assert latest is not None and latest.valid and not latest.name.startswith(".")
    assert manager.load(latest)["w"].numel() == 8 << 20
    torn = [p for p in ckpt.iterdir() if p.name.startswith(".")]
    assert torn, "the kill left no torn write behind"
    report = repair([], [ckpt])
    assert sorted(report.checkpoints_removed) == sorted(str(p) for p in torn) and report.ok
    assert manager.latest_valid().path == latest.path


def test_full_disk_fails_the_save_and_keeps_the_previous_checkpoint(tmp_path):
    """ENOSPC on the checkpoint folder (a real 2 MiB tmpfs): the save fails cleanly, nothing torn is left."""
    import torch

    from hpcbench.core.errors import CheckpointError
    from hpcbench.fault.checkpoint import CheckpointManager, CheckpointPolicy

    with full_disk(tmp_path / "ckpt", "2M") as ckpt:
        manager = CheckpointManager(ckpt, CheckpointPolicy(zstd_level=0))
        manager.save("full", 1, {"w": torch.zeros(64 << 10)})       # 256 KiB: fits
        with pytest.raises(CheckpointError):
            manager.save("full", 2, {"w": torch.randn(1 << 20)})    # 4 MiB: does not
        assert manager.latest_valid().step == 1
        assert not [p for p in ckpt.iterdir() if p.name.startswith(".")], list(ckpt.iterdir())
    assert not list((tmp_path / "ckpt").iterdir())  # the tmpfs is gone with what it held
