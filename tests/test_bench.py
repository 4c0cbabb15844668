"""Every benchmark runs at its declared toy size: a benchmark nothing runs rots unseen.

A benchmark is a module with a ``main(argv)`` in ``hpcbench/bench/`` (shared machinery) or an
experiment's ``bench.py``; each declares ``TOY_ARGS``, the command line of a run of seconds (or of
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


def bench_modules() -> list[str]:
    """Dotted names of every benchmark: hpcbench/bench/*.py and experiments/*/bench.py with a main()."""
    paths = sorted((PACKAGE / "bench").glob("*.py")) + sorted((PACKAGE / "experiments").glob("*/bench.py"))
    return [".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts) for p in paths if _defines(p, "main")]


def test_the_benchmarks_are_found_and_each_declares_its_toy_size():
    modules = bench_modules()
    assert "hpcbench.bench.sampler_overhead" in modules and "hpcbench.experiments.comm_modes.bench" in modules
    assert "hpcbench.bench.cluster_task" not in modules  # a helper, no main
    missing = [m for m in modules if not _defines(PACKAGE.parent / (m.replace(".", "/") + ".py"), "TOY_ARGS")]
    assert not missing, f"benchmarks without TOY_ARGS: {missing}"


@pytest.mark.slow
@pytest.mark.parametrize("module", bench_modules())
def test_benchmark_runs_at_toy_size(module, tmp_path):
    import importlib

    toy = list(importlib.import_module(module).TOY_ARGS)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(PACKAGE.parent)}
    done = subprocess.run([sys.executable, "-m", module, *toy], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=TOY_TIMEOUT_S)
    assert done.returncode == 0, f"{module} {' '.join(toy)} exited {done.returncode}:\n{done.stdout[-3000:]}\n" \
                                 f"{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"{module} printed nothing"
