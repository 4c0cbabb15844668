"""Every benchmark runs at its declared toy size: a benchmark nothing runs rots unseen.

A benchmark is a module with a ``main(argv)`` in ``hpcbench/bench/`` (shared machinery) or an
experiment's ``bench.py``, or an experiment's cluster benchmark (its ``bench.py`` describes it,
``python -m hpcbench.bench.cluster_task NAME`` runs it); each declares ``TOY_ARGS``, the command line of a run of seconds (or of
a dry run, for those that need the emulated cluster as root). The figures of a toy run mean
nothing; it shows that the benchmark still parses, runs every path and prints its table. Each
runs as ``python -m`` in a fresh folder (some write under ``./results``) with its own temporary
folder, as ``make bench`` would.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hpcbench

PACKAGE = Path(hpcbench.__file__).parent
#: Seconds one toy run may take here (2 cores shared) before it counts as stuck.
TOY_TIMEOUT_S = 120


def _defines(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
    return False


#: The runner of the experiments' cluster benchmarks (a module with a main of its own, and no TOY_ARGS).
RUNNER = "hpcbench.bench.cluster_task"


def bench_modules() -> list[str]:
    """Dotted names of every benchmark module: hpcbench/bench/*.py and experiments/*/bench.py.

    Those with a main() run as ``python -m MODULE``; an experiment's bench.py with ``suite_from``
    instead is a cluster benchmark, run as ``python -m hpcbench.bench.cluster_task NAME``.
    """
    paths = sorted((PACKAGE / "bench").glob("*.py")) + sorted((PACKAGE / "experiments").glob("*/bench.py"))
    return [".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts) for p in paths
            if _defines(p, "main") or _defines(p, "suite_from")]


def command_of(module: str) -> list[str]:
    path = PACKAGE.parent / (module.replace(".", "/") + ".py")
    if _defines(path, "main"):
        return ["-m", module]
    return ["-m", RUNNER, module.split(".")[-2]]


def test_the_benchmarks_are_found_and_each_declares_its_toy_size():
    from hpcbench.bench.cluster_task import cluster_benches

    modules = [m for m in bench_modules() if m != RUNNER]
    assert "hpcbench.bench.sampler_overhead" in modules and "hpcbench.experiments.comm_modes.bench" in modules
    assert cluster_benches() == ["comm_modes", "gradient_compression", "weather_case"]
    assert command_of("hpcbench.experiments.weather_case.bench") == ["-m", RUNNER, "weather_case"]
    missing = [m for m in modules if not _defines(PACKAGE.parent / (m.replace(".", "/") + ".py"), "TOY_ARGS")]
    assert not missing, f"benchmarks without TOY_ARGS: {missing}"


def test_the_cluster_runner_names_its_benchmarks_when_asked_for_another():
    from hpcbench.bench.cluster_task import main

    assert main(["no_such_experiment"]) == 2
    assert main(["--help"]) == 0


@pytest.mark.slow
@pytest.mark.parametrize("module", [m for m in bench_modules() if m != RUNNER])
def test_benchmark_runs_at_toy_size(module, tmp_path):
    import importlib

    toy = list(importlib.import_module(module).TOY_ARGS)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(PACKAGE.parent)}
    command = command_of(module) + toy
    done = subprocess.run([sys.executable, *command], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=TOY_TIMEOUT_S)
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}\n" \
                                 f"{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"{' '.join(command)} printed nothing"
