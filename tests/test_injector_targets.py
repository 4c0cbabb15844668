"""Which processes the process injectors strike: ranks (torchrun's, and those srun starts itself) and a job's try."""

import os
import signal
import time
import subprocess
import sys
import tempfile
import uuid

import psutil
from pathlib import Path

from hpcbench.fault.inject.process import _describe, find_ranks


def _sleeper(marker: str, **env: str) -> subprocess.Popen:
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "SLURM_PROCID", "HPCBENCH_SRUN_RANKS")}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker], env={**base, **env})


def test_torchrun_and_srun_ranks_are_found_with_their_rank_and_a_plain_slurm_task_is_not():
    marker = uuid.uuid4().hex
    procs = [_sleeper(marker, RANK="1"), _sleeper(marker, HPCBENCH_SRUN_RANKS="1", SLURM_PROCID="2"),
             _sleeper(marker, SLURM_PROCID="0")]  # a batch step's process: SLURM numbers it, it is no rank
    # srun itself carries the ranks' command line and, started from a batch step, its SLURM_PROCID and the
    # launch's flag: it must never be taken for a rank (a copy of python named srun stands in for it).
    fake_srun = Path(tempfile.mkdtemp()) / "srun"
    fake_srun.symlink_to(sys.executable)
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "SLURM_PROCID", "HPCBENCH_SRUN_RANKS")}
    procs.append(subprocess.Popen([str(fake_srun), "-c", "import time; time.sleep(60)", marker],
                                  env={**base, "HPCBENCH_SRUN_RANKS": "1", "SLURM_PROCID": "0"}))
    try:
        found = find_ranks(marker)
        assert sorted(p.pid for p in found) == sorted(p.pid for p in procs[:2])
        ranks = {p.pid: _describe(p, signal.SIGTERM, 0.0).rank for p in found}
        assert ranks == {procs[0].pid: 1, procs[1].pid: 2}
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_try_is_told_from_a_helper_that_timeout_put_in_a_group_of_its_own():
    """Between two tries the job wrapper runs `timeout 5 sinfo`; GNU timeout moves itself into a new process
    group, so a search by group alone takes it for a running try (the injector then struck between tries)."""
    from hpcbench.fault.inject.process import try_groups

    marker = uuid.uuid4().hex
    a_try = f'setsid --wait "{sys.executable}" -c "import time; time.sleep(60)" {marker}-try'
    wrapper = subprocess.Popen(["bash", "-c", f"{a_try} & timeout 60 sleep 60 & wait", "wrapper"],
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(try_groups(wrapper.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        both = try_groups(wrapper.pid)
        assert len(both) == 2, both  # the try's group and timeout's
        (only,) = try_groups(wrapper.pid, match=f"{marker}-try")
        assert only in both and " ".join(psutil.Process(only).cmdline()).endswith(f"{marker}-try")
    finally:
        os.killpg(wrapper.pid, signal.SIGKILL)
        for group in try_groups(wrapper.pid):
            os.killpg(group, signal.SIGKILL)
        wrapper.wait()
