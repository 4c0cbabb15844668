"""Which processes the process injector takes for ranks: torchrun's (RANK) and those srun starts itself."""

import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from hpcbench.fault.inject.process import _describe, find_ranks


def _sleeper(marker: str, **env: str) -> subprocess.Popen:
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "SLURM_PROCID", "HPCBENCH_SRUN_RANKS")}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker], env={**base, **env})


def test_torchrun_and_srun_ranks_are_found_with_their_rank_and_a_plain_slurm_task_is_not():
    import signal

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
