"""Every registered experiment runs through the real CLI on the local backend, as a new user would start it.

`hpcbench run NAME` at the experiment's defaults, or at its declared toy size (``--toy``, the ``toy`` of its
SPEC) when the defaults take minutes. Each must either succeed (exit 0, its task done, its records written)
or refuse clearly: a non-zero exit whose message names what this machine lacks (no GPU, not root, no SLURM)
and holds no traceback. A traceback, or a task that failed, is a bug of the experiment at that size.

The experiments come from the registry, never from a list here: a new one is tested the day it lands.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from pathlib import Path

import pytest

from hpcbench.experiments import EXPERIMENTS
from hpcbench.run.rundir import read_statuses

NAMES = EXPERIMENTS.names()
#: Words a refusal uses to name what is missing; a non-zero exit without one of them (or with a traceback)
#: says nothing a user can act on.
REFUSAL = re.compile(r"needs|requires|not installed|not root|no GPU|no CUDA|SLURM|slurmctld|not available|"
                     r"is not on PATH|cannot run here|refus", re.I)
#: A toy run is seconds of work plus start-up (kernel, imports, ranks): far more means the toy size is not one.
TIMEOUT_S = 180
#: Runs at once. Most of a toy run is start-up and waiting (rendezvous, timed phases, the kernel's
#: shutdown), so two overlap well on 2 cores; each task still runs alone in its own run dir and ports.
AT_ONCE = 2


def _run(name: str, run_dir: Path) -> tuple[subprocess.CompletedProcess, float]:
    spec = EXPERIMENTS.get(name)
    # --oversubscribe: a functional run; 2 emulated nodes x 2 ranks must run on a 2-core machine too.
    script = Path(sys.executable).with_name("hpcbench")  # the command a user types, from this environment
    cli = [str(script)] if script.is_file() else [sys.executable, "-m", "hpcbench.cli"]
    argv = [*cli, "run", name, "--run-dir", str(run_dir), "--quiet", "--oversubscribe",
            *(["--toy"] if spec.toy else [])]
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=run_dir.parent)
    return proc, time.monotonic() - start


def _estimate_s(name: str) -> float | None:
    spec = EXPERIMENTS.get(name)
    return spec.estimate(spec.config.from_dict(dict(spec.toy))).seconds


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, float]]:
    """The selected experiments' runs, :data:`AT_ONCE` at a time, by name."""
    wanted = [item.callspec.params["name"] for item in request.session.items
              if item.originalname == "test_experiment_runs_at_its_defaults_or_toy_size_or_refuses_clearly"]
    root = tmp_path_factory.mktemp("defaults")
    start = time.monotonic()
    with ThreadPoolExecutor(AT_ONCE) as pool:  # the longest first, so that no long one is left alone at the end
        futures = {name: pool.submit(_run, name, root / name / "run")
                   for name in sorted(wanted, key=lambda n: -(_estimate_s(n) or 0.0))}
        done = {name: f.result() for name, f in futures.items()}
    print(f"\n{len(done)} experiments in {time.monotonic() - start:.0f} s, {AT_ONCE} at a time")
    return done


@pytest.mark.parametrize("name", NAMES)
def test_experiment_runs_at_its_defaults_or_toy_size_or_refuses_clearly(name, runs):
    proc, took = runs[name]
    run_dir = Path(proc.args[proc.args.index("--run-dir") + 1])
    said = proc.stdout + proc.stderr
    size = "toy size" if EXPERIMENTS.get(name).toy else "defaults"
    print(f"{name} at its {size}: exit {proc.returncode} in {took:.1f} s")
    assert "Traceback (most recent call last)" not in said, f"{name}: a traceback, not a refusal:\n{said}"
    if proc.returncode == 0:
        (status,) = read_statuses(run_dir)
        assert status.state == "done", said
        records = list((run_dir / "tasks" / status.task_id / "records").rglob("*.parquet"))
        assert records, f"{name}: done but no records under {run_dir / 'tasks' / status.task_id / 'records'}"
        return
    assert proc.returncode == 2, f"{name}: a task failed (exit {proc.returncode}), not a refusal:\n{said}"
    assert REFUSAL.search(proc.stderr), f"{name}: refused without naming what is missing:\n{said}"


@pytest.mark.parametrize("name", NAMES)
def test_toy_size_is_valid_and_only_what_differs(name):
    spec = EXPERIMENTS.get(name)
    cfg = spec.config.from_dict(dict(spec.toy))  # raises, naming the field, on a bad override
    defaults = {f.name: getattr(spec.config(), f.name) for f in fields(spec.config)}
    for key, value in spec.toy.items():
        assert key in defaults, f"{name}: toy key {key!r} is not a parameter"
        assert getattr(cfg, key) != defaults[key], f"{name}: toy {key}={value!r} is the default already"
