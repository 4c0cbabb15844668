"""``hpcbench bench``: every benchmark by name, one result protocol, and each run at its declared toy size.

A benchmark is registered in :mod:`hpcbench.bench.registry` (the shared machinery's by name, every
experiment's ``bench.py`` found on disk) and declares ``TOY_ARGS``, the command line of a run of
seconds (or of a dry run, for those that need the emulated cluster as root). The figures of a toy
run mean nothing; it shows that the benchmark still parses, runs every path and returns its result.
Each runs through the real command in a fresh folder (some write under ``./results``) with its own
temporary folder, as ``make bench`` would.
"""

from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hpcbench
from hpcbench.bench.registry import BENCHMARKS, CLUSTER_RUNNER, Benchmark, experiment_benchmarks
from hpcbench.bench.result import BenchResult, Ratio, format_result
from hpcbench.core.errors import HpcbenchError

PACKAGE = Path(hpcbench.__file__).parent
#: Seconds one toy run may take here (2 cores shared) before it counts as stuck.
TOY_TIMEOUT_S = 120
SHARED = {"hdf5-reads", "shard-reads", "sampler-overhead", "train-step", "slurm-cluster", "cluster-task"}
EXPERIMENTS = {"collectives", "comm-modes", "fault-tolerance", "gradient-compression", "io-formats", "weather-case"}
#: The benchmark the end-to-end JSON test runs: seconds, no ranks, and every ratio a positive share.
CHEAP = "hdf5-reads"


def hpcbench_command() -> list[str]:
    """The installed ``hpcbench`` command beside this interpreter (what ``make bench`` runs)."""
    script = Path(sys.executable).with_name("hpcbench")
    return [str(script)] if script.exists() else [sys.executable, "-m", "hpcbench"]


def run_cli(args: list[str], cwd: Path, timeout: float = TOY_TIMEOUT_S) -> subprocess.CompletedProcess:
    tmp = cwd / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(PACKAGE.parent)}
    return subprocess.run([*hpcbench_command(), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _module_tree(bench: Benchmark) -> ast.Module:
    return ast.parse((PACKAGE.parent / (bench.module.replace(".", "/") + ".py")).read_text())


def _top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def toy_args(name: str) -> list[str]:
    """A benchmark's ``TOY_ARGS``, read from its source (importing it would import torch here)."""
    for node in _module_tree(BENCHMARKS.get(name)).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "TOY_ARGS" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{name} declares no TOY_ARGS")


def test_every_benchmark_is_registered_under_the_name_a_user_would_guess():
    assert set(BENCHMARKS.names()) == SHARED | EXPERIMENTS
    # every experiment's bench.py is found, none by name in the registry
    found = {name for name, _, _ in experiment_benchmarks()}
    assert found == EXPERIMENTS
    assert "gpu-check" not in BENCHMARKS and all("gpu_check" not in BENCHMARKS.get(n).module for n in BENCHMARKS)
    assert [n for n in BENCHMARKS if BENCHMARKS.get(n).runner == CLUSTER_RUNNER] == [
        "comm-modes", "gradient-compression", "weather-case"]


@pytest.mark.parametrize("name", sorted(SHARED | EXPERIMENTS))
def test_each_benchmark_follows_the_protocol_and_has_no_entry_of_its_own(name):
    bench = BENCHMARKS.get(name)
    tree = _module_tree(bench)
    names = _top_level_names(tree)
    needed = {"add_arguments", "suite_from", "report_run", "LINK_RATE"} if bench.runner else {"add_arguments", "run"}
    assert needed <= names, f"{bench.module} lacks {needed - names}"
    assert "main" not in names, f"{bench.module}: the CLI is the only entry; remove main()"
    guards = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
    assert not guards, f"{bench.module} keeps an `if __name__ == '__main__'` block"
    assert bench.description and not bench.description.startswith("Run"), bench.description
    assert "python -m" not in bench.doc, f"{bench.module}'s docstring still says `python -m`"
    if name != "cluster-task":  # the runner: its toy runs are the experiments' own
        assert toy_args(name)


def test_listing_names_every_benchmark_without_importing_one(tmp_path):
    done = run_cli(["bench", "--list"], tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ")}
    assert listed == SHARED | EXPERIMENTS
    assert "HDF5 readers against a plain sequential read" in done.stdout  # the module's first docstring line
    assert run_cli(["bench"], tmp_path, timeout=60).stdout == done.stdout  # no name: the same list
    # registration imports no benchmark: --list must not pay for torch
    code = ("import sys; from hpcbench.cli import main; assert main(['bench', '--list']) == 0; "
            "heavy = {'torch', 'pandas', 'h5py'} & set(sys.modules); assert not heavy, heavy")
    probe = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr


def test_an_unknown_name_is_one_line_naming_the_benchmarks_and_exit_2(tmp_path):
    done = run_cli(["bench", "hdf5-read"], tmp_path, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "unknown benchmark 'hdf5-read'" in lines[0] and "did you mean 'hdf5-reads'?" in lines[0]
    assert all(name in lines[0] for name in SHARED | EXPERIMENTS)
    assert done.stdout == ""


def test_a_benchmark_runs_end_to_end_and_prints_its_result_as_one_json_object(tmp_path):
    done = run_cli(["bench", CHEAP, *toy_args(CHEAP), "--json"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)  # stdout holds the JSON object and nothing else
    assert result["name"] == CHEAP and result["ok"] is True
    assert set(result) == {"name", "ok", "rows", "ratios", "notes", "params"}
    assert result["params"]["steps"] == 16 and result["params"]["cache"] == "cold,warm"
    # 5 weather block paths (block sizes 4, 8; the default size without read-ahead, as HDF5 calls with and
    # without), their 4 per-pair twins (direct or HDF5 calls, with read-ahead or without: the naive one among
    # them) and 4 image paths (runs of 32 and 3 per-sample ones), each in 2 cache states; each row states its order
    assert len(result["rows"]) == 26 and {r["cache"] for r in result["rows"]} == {"cold", "warm"}
    assert {r["order"] for r in result["rows"]} == {"runs of 4", "runs of 8", "runs of 16", "runs of 32",
                                                    "per-sample"}
    ratios = result["ratios"]
    # each path against the sequential read and against cat; each runs path against its per-sample twin
    twins = [r for r in ratios if "its per-sample twin" in r["name"]]
    assert len(twins) == 2 * 6 and len(ratios) == 2 * len(result["rows"]) + len(twins)
    assert all(math.isfinite(r["value"]) and r["value"] >= 0 for r in ratios), ratios
    # cat's time has its start-up subtracted, which at toy size can leave nothing (a share of 0); the plain
    # sequential read is timed whole, so every share of it is a positive figure
    against_read = [r for r in ratios if r["denominator"] == "sequential read MB/s"]
    assert len(against_read) == len(result["rows"]) and all(r["value"] > 0 for r in against_read), against_read
    judged = [r for r in ratios if r["target"] is not None]
    # the block paths are judged against the target, and only they: the per-sample reference reads are context
    assert judged and all(r["met"] in (True, False) for r in judged)
    assert {r["name"] for r in judged} == {r["name"] for r in against_read if "per sample (before)" not in r["name"]
                                           and "per pair" not in r["name"]}
    # the same run read back is the shared type, and its table is what the command prints without --json
    assert format_result(BenchResult.from_dict(result)).startswith(f"== {CHEAP}")


def test_bad_options_exit_2_naming_the_option(tmp_path):
    done = run_cli(["bench", "hdf5-reads", "--cache", "lukewarm"], tmp_path, timeout=60)
    assert done.returncode == 2 and "--cache: unknown ['lukewarm']" in done.stderr, done.stderr
    done = run_cli(["bench", "hdf5-reads", "--no-such-option"], tmp_path, timeout=60)
    assert done.returncode == 2 and "usage: hpcbench bench hdf5-reads" in done.stderr


def test_the_cluster_runner_takes_an_experiment_and_plans_its_task(tmp_path):
    done = run_cli(["bench", "cluster-task", "comm-modes", "--dry-run", "--json"], tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["name"] == "comm-modes" and result["ok"] and result["params"]["experiment"] == "comm_modes"
    assert any(line.startswith("dry run of suite bench-comm-modes") for line in result["notes"])
    done = run_cli(["bench", "cluster-task", "no_such_experiment"], tmp_path, timeout=60)
    assert done.returncode == 2 and "invalid choice" in done.stderr
    done = run_cli(["bench", "cluster-task", "weather_case", "--help"], tmp_path, timeout=60)
    assert done.returncode == 0 and "--link-rate" in done.stdout and "--micro-batch" in done.stdout


def test_a_ratio_is_judged_against_its_target_either_way():
    assert Ratio("share", "a", "b", 0.8, 0.7).met is True
    assert Ratio("overhead", "on", "off", 1.02, 1.01, higher_is_better=False).met is False
    assert Ratio("reported", "a", "b", 2.0).met is None
    assert Ratio("no figure", "a", "b", math.nan, 1.0).met is None


def test_a_result_in_its_dict_form_is_checked_key_by_key():
    result = BenchResult.from_dict({"rows": [{"x": 1.0}], "ratios": [{"name": "r", "numerator": "a",
                                    "denominator": "b", "value": 2.0, "target": 1.0}]}, name="toy")
    assert result.name == "toy" and result.ratios[0].met is True
    with pytest.raises(HpcbenchError, match=r"unknown keys \['targt'\].*did you mean 'target'"):
        BenchResult.from_dict({"ratios": [{"name": "r", "numerator": "a", "denominator": "b", "value": 1.0,
                                           "targt": 1.0}]}, name="toy")
    with pytest.raises(HpcbenchError, match=r"unknown keys \['row'\]"):
        BenchResult.from_dict({"row": []}, name="toy")


def test_the_printer_gives_each_kind_of_row_its_table_and_json_has_no_nan():
    result = BenchResult("toy", rows=[{"size": 1, "busbw": 0.5}, {"size": 2, "busbw": math.nan},
                                      {"backend": "slurm", "wall_s": 3.0, "samples": [1.0, 2.0]}],
                         ratios=[Ratio("busbw / link", "busbw", "link", 0.9, 0.8)], notes=["setup"])
    text = format_result(result)
    tables = text.split("\n\n")
    assert tables[0] == "== toy" and tables[1] == "setup"
    assert tables[2].splitlines()[0].split() == ["size", "busbw"] and "n/a" in tables[2]
    assert tables[3].splitlines()[0].split() == ["backend", "wall_s"]  # lists go to the JSON only
    assert "busbw / link: 0.9  (busbw / link)  target >= 0.8: MET" in tables[4]
    data = json.loads(result.to_json())
    assert data["rows"][1]["busbw"] is None and data["rows"][2]["samples"] == [1.0, 2.0]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SHARED - {"cluster-task"} | EXPERIMENTS))
def test_benchmark_runs_at_toy_size(name, tmp_path):
    toy = toy_args(name)
    done = run_cli(["bench", name, *toy], tmp_path)
    command = " ".join(["hpcbench", "bench", name, *toy])
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.stdout.startswith(f"== {name}\n"), f"{command} printed:\n{done.stdout[:500]}"
    if "--dry-run" not in toy:  # a measurement: its ratios are printed
        assert "\nratios:\n" in done.stdout, f"{command} printed no ratios:\n{done.stdout[-2000:]}"
