"""Every registered experiment runs through the real CLI on the local backend, as a new user would start it.

`hpcbench run NAME` at the experiment's defaults, or at its declared toy size (``--toy``, the ``toy`` of its
SPEC) when the defaults take minutes. Each must either succeed (exit 0, its task done, its records written)
or refuse clearly: a non-zero exit whose message names what this machine lacks (no GPU, not root, no SLURM)
and holds no traceback. A traceback, or a task that failed, is a bug of the experiment at that size.

The experiments come from the registry, never from a list here: a new one is tested the day it lands.
The runs are the session's toy runs (tests/toy_runs.py), which an experiment's own tests also read.
"""

from __future__ import annotations

import re
import time
from dataclasses import fields

import pytest

from hpcbench.experiments import EXPERIMENTS
from hpcbench.run.rundir import read_statuses

NAMES = EXPERIMENTS.names()
#: Words a refusal uses to name what is missing; a non-zero exit without one of them (or with a traceback)
#: says nothing a user can act on.
REFUSAL = re.compile(r"needs|requires|not installed|not root|no GPU|no CUDA|SLURM|slurmctld|not available|"
                     r"is not on PATH|cannot run here|refus", re.I)
#: Runs at once. Most of a toy run is start-up and waiting (rendezvous, timed phases, the kernel's
#: shutdown), so two overlap well on 2 cores; each task still runs alone in its own run dir and ports.
AT_ONCE = 2


@pytest.fixture(scope="module")
def runs(request, toy_runs):
    """The selected experiments' toy runs (tests/toy_runs.py): those an experiment's own tests already read
    are reused, the rest run :data:`AT_ONCE` at a time."""
    wanted = [item.callspec.params["name"] for item in request.session.items
              if item.originalname == "test_experiment_runs_at_its_defaults_or_toy_size_or_refuses_clearly"]
    start = time.monotonic()
    toy_runs.prefetch(wanted, AT_ONCE)
    print(f"\n{len(wanted)} experiments' toy runs ready in {time.monotonic() - start:.0f} s, {AT_ONCE} at a time")
    return toy_runs


@pytest.mark.parametrize("name", NAMES)
def test_experiment_runs_at_its_defaults_or_toy_size_or_refuses_clearly(name, runs):
    run = runs.get(name)
    proc, took, run_dir = run.proc, run.took, run.run_dir
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
