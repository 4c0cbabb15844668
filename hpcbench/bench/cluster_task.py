"""One suite task of an experiment's cluster benchmark on the emulated cluster (or, with ``--local``, on emulated nodes here).

    hpcbench bench EXPERIMENT [its options] [--link-rate R] [--local] [--dry-run] ...
    hpcbench bench cluster-task EXPERIMENT [its options] ...    (the same, naming the runner)

An experiment's cluster benchmark is its ``bench.py`` saying what to run and how to read it:
``LINK_RATE``, ``add_arguments(ap)``, ``suite_from(args)`` (a one-task suite) and
``report_run(records, link_bps, link)`` (the result's dict form: rows, ratios, notes; optionally
``NODES``). This module runs it, so the experiment's package never imports the run layer above it
(comm_modes, gradient_compression and weather_case have one). How it gets a cluster and runs the task:

* a cluster already up in ``--state`` is used as it is (and left up);
* otherwise one is brought up with the benchmark's link rate and taken down afterwards (unless
  ``--keep``), but never while another cluster's ``hpcb-*`` namespaces exist: bringing one up
  would tear that one down (someone's tests), so it refuses unless ``--force``;
* ``--local`` runs the task with the local backend on emulated nodes (one loopback, no shaped
  link, the ranks oversubscribing this machine's cores): a check of the pieces, not a measurement;
* ``--dry-run`` starts nothing: the suite is parsed (every parameter checked against the
  experiment's config) and planned against this machine's limits as ``--local`` would run it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pandas as pd

from hpcbench.bench.result import BenchResult
from hpcbench.cluster import network
from hpcbench.core.errors import ConfigError
from hpcbench.core.results import find_record_files, read_records
from hpcbench.run.runner import run_suite
from hpcbench.run.suite import parse_suite

DEFAULT_STATE = "/tmp/hpcbench-bench-cluster"


def add_cluster_arguments(ap: argparse.ArgumentParser, *, link_rate: str) -> None:
    """``--link-rate``, ``--state``, ``--keep``, ``--local``, ``--force`` and ``--dry-run``, ``link_rate`` the default."""
    ap.add_argument("--link-rate", default=link_rate, help="tc rate of each node's link (a new cluster only)")
    ap.add_argument("--state", default=DEFAULT_STATE, help="the cluster's state folder (one up there is used)")
    ap.add_argument("--keep", action="store_true", help="leave the cluster up afterwards")
    ap.add_argument("--local", action="store_true", help="local backend, emulated nodes, no shaped link")
    ap.add_argument("--force", action="store_true",
                    help="bring a cluster up even when hpcb-* namespaces of another cluster exist (tears it down)")
    ap.add_argument("--dry-run", action="store_true",
                    help="start nothing: check the task's parameters and print its plan (as --local would run it)")


@dataclass
class BenchRun:
    """What :func:`run_bench_task` returns."""

    ok: bool
    error: str | None
    records: pd.DataFrame | None
    link: str
    """the link, in words, for the printed report"""
    link_bps: float | None
    """the shaped rate in bits per second (None with ``--local``)"""
    run_dir: Path


@dataclass
class DryRun:
    """What :func:`run_bench_task` returns with ``--dry-run``: the plan and whether the task would start."""

    plan: str
    ok: bool


def run_bench_task(suite: dict, args: argparse.Namespace, *, prefix: str, nodes: int = 2) -> BenchRun | DryRun:
    """Run ``suite`` (one task) on the cluster ``args`` name, or plan it with ``--dry-run``.

    Args:
        suite: the suite as a dict (:func:`~hpcbench.run.suite.parse_suite` reads it).
        args: parsed :func:`add_cluster_arguments` options.
        prefix: name prefix of the temporary run folder.
        nodes: nodes of a cluster brought up here.

    Raises:
        ConfigError: a cluster would have to be brought up while another one's namespaces exist and
            ``--force`` was not given.
    """
    if args.dry_run:
        from hpcbench.run.limits import dry_run

        text, ok = dry_run(parse_suite(suite), Path(tempfile.gettempdir()) / f"{prefix}dry-run", backend="local",
                           oversubscribe=True)
        return DryRun(text, ok)
    out = Path(tempfile.mkdtemp(prefix=prefix))
    started, link_bps = False, None
    if args.local:
        backend, link = "local", "none (local backend: emulated nodes share one loopback)"
    else:
        from hpcbench.cluster import ClusterSpec, cluster_down, cluster_up, load_cluster
        from hpcbench.cluster.emulated import ClusterError

        try:
            info = load_cluster(args.state)
            print(f"using the cluster already up in {args.state}", file=sys.stderr)
        except ClusterError:
            others = network.list_netns()
            if others and not args.force:
                raise ConfigError(f"not given, and namespaces {others} belong to another cluster (someone's "
                                  f"tests?): bringing one up would tear it down. Pass --force, or --state of "
                                  f"that cluster", field="--force") from None
            info = cluster_up(ClusterSpec(nodes=nodes, link_rate=args.link_rate, link_delay="0ms",
                                          state_dir=args.state))
            started = True
        os.environ.update(info.env())
        backend, link = "slurm", f"{info.spec.link_rate} shaped with tc on both ends of each node's veth"
        link_bps = info.spec.link_rate_bits
    try:
        # --local puts every rank on this machine's cores: a check of the pieces, whose timings mean little
        (status,) = run_suite(parse_suite(suite), out / "run", backend=backend, progress=False,
                              oversubscribe=args.local)
    finally:
        if started and not args.keep:
            cluster_down(args.state)
    if status.state != "done":
        return BenchRun(False, status.error, None, link, link_bps, out / "run")
    records = pd.concat([read_records(p) for p in find_record_files(out / "run" / "tasks")], ignore_index=True)
    return BenchRun(True, None, records, link, link_bps, out / "run")


def add_bench_arguments(ap: argparse.ArgumentParser, bench: ModuleType) -> None:
    """The experiment's own options, then the cluster's with its link rate as default."""
    bench.add_arguments(ap)
    add_cluster_arguments(ap, link_rate=bench.LINK_RATE)


def run_bench(args: argparse.Namespace, bench: ModuleType) -> BenchResult:
    """Run the experiment's cluster benchmark ``bench`` with the parsed options; its result.

    ``ok`` is False when the task failed (the error in the notes) or, with ``--dry-run``, when it
    would not start (the plan in the notes).
    """
    name = bench.__name__.split(".")[-2].replace("_", "-")
    suite = bench.suite_from(args)
    run = run_bench_task(suite, args, prefix=f"hpcbench-bench-{name}-", nodes=getattr(bench, "NODES", 2))
    if isinstance(run, DryRun):
        return BenchResult(name, notes=run.plan.splitlines(), ok=run.ok)
    if not run.ok:
        return BenchResult(name, notes=[f"{suite['name']}: the task failed: {run.error}", f"records: {run.run_dir}"],
                           ok=False)
    result = BenchResult.from_dict(bench.report_run(run.records, run.link_bps, run.link), name=name)
    result.notes.append(f"records: {run.run_dir}")
    return result


def cluster_benches() -> dict[str, str]:
    """Benchmark name -> module of every experiment's cluster benchmark, as the registry found them (once)."""
    from hpcbench.bench.registry import BENCHMARKS, CLUSTER_RUNNER

    return {name: BENCHMARKS.get(name).module for name in BENCHMARKS.names()
            if BENCHMARKS.get(name).runner == CLUSTER_RUNNER}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """``EXPERIMENT`` and its options: one sub-command per cluster benchmark, so that
    ``hpcbench bench cluster-task EXPERIMENT --help`` lists that experiment's options and the cluster's."""
    benches = cluster_benches()
    sub = ap.add_subparsers(dest="experiment", required=True, metavar="EXPERIMENT",
                            help=f"an experiment with a cluster benchmark: {', '.join(benches)}")
    for name, module in benches.items():
        bench = importlib.import_module(module)
        # comm-modes or comm_modes: the benchmark's name or the experiment's
        experiment = module.split(".")[-2]
        aliases = [name] if name != experiment else []
        p = sub.add_parser(experiment, aliases=aliases, help=(bench.__doc__ or "").split("\n")[0],
                           description=bench.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
        add_bench_arguments(p, bench)


def run(args: argparse.Namespace) -> BenchResult:
    """``hpcbench bench cluster-task EXPERIMENT ...``: the same as ``hpcbench bench EXPERIMENT ...``."""
    args.experiment = args.experiment.replace("-", "_")
    result = run_bench(args, importlib.import_module(f"hpcbench.experiments.{args.experiment}.bench"))
    result.params = dict(vars(args))  # the experiment as its package is named, whichever spelling was typed
    return result
