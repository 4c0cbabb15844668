"""Every benchmark by name: ``hpcbench bench NAME [--json] [options]`` runs one, ``hpcbench bench --list`` lists them.

A benchmark is a module that defines

* ``add_arguments(parser)``: its options, added to an ``argparse`` parser;
* ``run(args) -> BenchResult``: the measurement, returning a :class:`~hpcbench.bench.result.BenchResult`
  (an experiment's ``bench.py``, below this layer, returns its dict form);

and whose docstring's first line says what it compares (``--list`` shows it; ``NAME --help`` the whole
docstring). The shared machinery's benchmarks live beside this module and are registered below by
name. An experiment's benchmark is its package's ``bench.py``, found on disk and registered under the
experiment's name (``io_formats`` -> ``io-formats``), so that adding one needs no edit here; one that
defines ``suite_from`` instead of ``run`` is a cluster benchmark, which :mod:`hpcbench.bench.cluster_task`
runs for it (the run layer sits above the experiments).

Nothing here imports a benchmark: a module is imported by its dotted path when it runs, and the
descriptions are read from the source with ``ast``, so ``--list`` costs no torch import.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import sys
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import Any, Callable

from hpcbench.core.errors import ConfigError, HpcbenchError, RegistryError, SuiteError
from hpcbench.core.registry import Registry

PACKAGE = Path(__file__).resolve().parents[1]
#: Runs an experiment's cluster benchmark (a ``bench.py`` defining ``suite_from``) for it.
CLUSTER_RUNNER = "hpcbench.bench.cluster_task"
#: Errors of a run that mean the command line asked for something wrong: exit 2, as every hpcbench
#: command answers bad input. Any other HpcbenchError of a run is the benchmark failing: exit 1.
BAD_INPUT = (ConfigError, RegistryError, SuiteError)


def _module_file(module: str) -> Path:
    """The source file of ``hpcbench.x.y``, found without importing anything."""
    return PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py")


@dataclass(frozen=True)
class Benchmark:
    """One registered benchmark: its name and the module that measures it, imported only to run."""

    name: str
    """what a user types: ``hpcbench bench NAME``"""
    module: str
    """dotted path of the module defining ``add_arguments`` and ``run`` (or, with ``runner``, what the
    runner needs)"""
    runner: str | None = None
    """dotted path of a module whose ``add_bench_arguments(parser, bench)`` and ``run_bench(args, bench)``
    run ``module`` for it; None: ``module`` runs itself"""

    @cached_property
    def doc(self) -> str:
        """The module's docstring, read from its source (no import)."""
        return ast.get_docstring(ast.parse(_module_file(self.module).read_text(encoding="utf-8"))) or ""

    @property
    def description(self) -> str:
        return self.doc.split("\n\n")[0].replace("\n", " ")

    def load(self) -> tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], Any]]:
        """(add_arguments, run), importing the benchmark (and torch, where it needs it) now."""
        bench = importlib.import_module(self.module)
        if self.runner is None:
            return bench.add_arguments, bench.run
        runner = importlib.import_module(self.runner)
        return partial(runner.add_bench_arguments, bench=bench), partial(runner.run_bench, bench=bench)


BENCHMARKS: Registry[Benchmark] = Registry("benchmark")


def register(name: str, module: str, runner: str | None = None) -> Benchmark:
    return BENCHMARKS.register(name, Benchmark(name, module, runner))


def _defines(path: Path, name: str) -> bool:
    """Whether the module at ``path`` defines a top-level function ``name`` (read, not imported)."""
    return any(isinstance(node, ast.FunctionDef) and node.name == name
               for node in ast.parse(path.read_text(encoding="utf-8")).body)


def experiment_benchmarks() -> list[tuple[str, str, str | None]]:
    """(name, module, runner) of every experiment's ``bench.py``: a run of its own or a cluster benchmark."""
    found = []
    for path in sorted((PACKAGE / "experiments").glob("*/bench.py")):
        experiment = path.parent.name
        runner = CLUSTER_RUNNER if _defines(path, "suite_from") else None
        found.append((experiment.replace("_", "-"), f"hpcbench.experiments.{experiment}.bench", runner))
    return found


# The shared machinery's benchmarks (gpu_check.py is a pass/fail check, `make gpu-check`, not one of them).
register("hdf5-reads", "hpcbench.bench.hdf5_reads")
register("shard-reads", "hpcbench.bench.shard_reads")
register("sampler-overhead", "hpcbench.bench.sampler_overhead")
register("train-step", "hpcbench.bench.train_step")
register("slurm-cluster", "hpcbench.bench.slurm_cluster")
register("cluster-task", "hpcbench.bench.cluster_task")
for _name, _module, _runner in experiment_benchmarks():
    register(_name, _module, _runner)


def describe_benchmarks() -> str:
    """One line per benchmark: its name and what it compares."""
    names = BENCHMARKS.names()
    width = max(map(len, names))
    lines = ["usage: hpcbench bench NAME [--json] [options]   (hpcbench bench NAME --help: its options)", ""]
    lines += [f"  {name.ljust(width)}  {BENCHMARKS.get(name).description}" for name in names]
    return "\n".join(lines)


def _json_flag() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--json", action="store_true",
                        help="print the result as one JSON object on stdout (everything else goes to stderr)")
    return parser


def run_benchmark(bench: Benchmark, argv: list[str]) -> int:
    """Parse ``argv`` with the benchmark's options, run it, print its result; the command's exit code.

    Returns:
        0 when the benchmark produced its result, 1 when it failed or produced no measurement (a
        failed task; a dry run that would not start). Bad options exit 2 (argparse, or a
        :data:`BAD_INPUT` error raised to the caller).
    """
    from hpcbench.bench.result import BenchResult, format_result, stdout_to_stderr

    # --json is taken from anywhere on the line first: a benchmark with sub-commands (cluster-task
    # EXPERIMENT ...) would otherwise refuse it after its sub-command
    as_json, argv = _json_flag().parse_known_args(argv)
    parser = argparse.ArgumentParser(prog=f"hpcbench bench {bench.name}", description=bench.doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     parents=[_json_flag()])
    add_arguments, run = bench.load()
    add_arguments(parser)
    args = parser.parse_args(argv)
    del args.json  # taken above; the parser has it for --help only
    params = dict(vars(args))
    # stdout holds the result alone, as a table or as JSON: progress lines, a library's prints and child
    # processes' output go to stderr while the benchmark runs
    with stdout_to_stderr():
        try:
            out = run(args)
        except BAD_INPUT:
            raise
        except HpcbenchError as exc:
            out = BenchResult(bench.name, notes=[f"failed: {exc}"], ok=False)
            print(f"hpcbench bench {bench.name}: failed: {exc}", file=sys.stderr)
    result = out if isinstance(out, BenchResult) else BenchResult.from_dict(out, name=bench.name)
    result.params = result.params or params
    print(result.to_json() if as_json.json else format_result(result), flush=True)
    return 0 if result.ok else 1
