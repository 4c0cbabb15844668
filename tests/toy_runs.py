"""Each experiment's toy run through the real CLI, once per test session, shared by the tests that read it.

``hpcbench run NAME --toy`` (or at its defaults, for an experiment without a toy size) is what a new
user types first. tests/test_defaults.py judges every such run (done, or a clear refusal); an
experiment's own tests read the same run's records and notebook where the toy size is what they
check (tests/experiments/<name>/test_<name>_runs.py), instead of running the notebook a second time
at the same size. Runs are cached by name in the session fixture ``toy_runs``.

Each run is local and one machine's: ``SLURM_*`` (the emulated cluster's ``SLURM_CONF`` among them) is
left out of its environment, so a run never depends on which test asked first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

#: A toy run is seconds of work plus start-up (kernel, imports, ranks): far more means the toy size is not one.
TIMEOUT_S = 180


@dataclass
class ToyRun:
    """One finished ``hpcbench run NAME`` (its process, wall seconds and run dir)."""

    name: str
    proc: subprocess.CompletedProcess
    took: float
    run_dir: Path

    @property
    def task_dir(self) -> Path:
        """The task's folder (its output_dir): records/, logs/, notebook.ipynb."""
        (task,) = [p for p in (self.run_dir / "tasks").iterdir() if p.is_dir()]
        return task

    @property
    def notebook(self) -> Path:
        return self.task_dir / "notebook.ipynb"

    def check_size(self, params: dict) -> None:
        """Fail, naming the keys, unless the run's config holds ``params``: a test that reads this run for the
        size it checks learns when the experiment's toy size moved away from it."""
        import json

        config = json.loads((self.task_dir / "config.json").read_text())["config"]
        differ = {k: (v, config.get(k)) for k, v in params.items() if config.get(k) != v}
        assert not differ, f"{self.name}'s toy run is not the size this test checks (wanted, ran): {differ}"

    def records(self):
        """Every record the task wrote, as one frame (the test fails if it wrote none)."""
        import pandas as pd

        from hpcbench.core.results import find_record_files, read_records

        assert self.proc.returncode == 0, f"{self.name}: exit {self.proc.returncode}\n{self.proc.stderr}"
        files = find_record_files(self.task_dir)
        assert files, f"{self.name} wrote no records under {self.task_dir}"
        return pd.concat([read_records(p) for p in files], ignore_index=True)


def _local_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}


class ToyRuns:
    """The session's toy runs by experiment name (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._runs: dict[str, ToyRun] = {}
        self._lock = threading.Lock()

    def _start(self, name: str) -> ToyRun:
        from hpcbench.experiments import EXPERIMENTS

        spec = EXPERIMENTS.get(name)
        run_dir = self.root / name / "run"
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        # --oversubscribe: a functional run; 2 emulated nodes x 2 ranks must run on a 2-core machine too.
        script = Path(sys.executable).with_name("hpcbench")  # the command a user types, from this environment
        cli = [str(script)] if script.is_file() else [sys.executable, "-m", "hpcbench"]
        argv = [*cli, "run", name, "--run-dir", str(run_dir), "--quiet", "--oversubscribe",
                *(["--toy"] if spec.toy else [])]
        start = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=run_dir.parent,
                              env=_local_env())
        return ToyRun(name, proc, time.monotonic() - start, run_dir)

    def get(self, name: str) -> ToyRun:
        """``name``'s toy run, run now if this session has not run it yet."""
        with self._lock:
            if name not in self._runs:
                self._runs[name] = self._start(name)
            return self._runs[name]

    def prefetch(self, names: list[str], at_once: int) -> None:
        """Run those of ``names`` not yet run, ``at_once`` at a time, the longest (by its estimate) first."""
        from hpcbench.experiments import EXPERIMENTS

        def estimate(n: str) -> float:
            spec = EXPERIMENTS.get(n)
            return spec.estimate(spec.config.from_dict(dict(spec.toy))).seconds or 0.0

        todo = sorted((n for n in names if n not in self._runs), key=lambda n: -estimate(n))
        with ThreadPoolExecutor(at_once) as pool:  # the longest first, so that no long one is left alone at the end
            for name, run in zip(todo, pool.map(self._start, todo)):
                with self._lock:
                    self._runs.setdefault(name, run)


@pytest.fixture(scope="session")
def toy_runs(tmp_path_factory) -> ToyRuns:
    return ToyRuns(tmp_path_factory.mktemp("toy"))
