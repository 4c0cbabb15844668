"""One suite task of a benchmark on the emulated cluster (or, with ``--local``, on emulated nodes here).

    python -m hpcbench.bench.cluster_task EXPERIMENT [its options] [--link-rate R] [--local] [--dry-run] ...

An experiment's cluster benchmark is its ``bench.py`` saying what to run and how to read it:
``LINK_RATE``, ``add_arguments(ap)``, ``suite_from(args)`` (a one-task suite) and
``report_run(records, link_bps, link)`` (optionally ``NODES``). This module runs it, so the
experiment's package never imports the run layer above it (comm_modes, gradient_compression and
weather_case have one). How it gets a cluster and runs the task:

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
from typing import Callable

import pandas as pd

from hpcbench.cluster import network
from hpcbench.core.results import find_record_files, read_records
from hpcbench.run.runner import run_suite
from hpcbench.run.suite import parse_suite

DEFAULT_STATE = "/tmp/hpcbench-bench-cluster"


def add_cluster_arguments(ap: argparse.ArgumentParser, *, link_rate: str) -> None:
    """``--link-rate``, ``--state``, ``--keep``, ``--local`` and ``--force``, with ``link_rate`` as default."""
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


def run_bench_task(suite: dict, args: argparse.Namespace, *, prefix: str, nodes: int = 2) -> BenchRun | int:
    """Run ``suite`` (one task) on the cluster ``args`` name; exit code 2 when refusing to bring one up.

    With ``--dry-run`` the exit code of the plan instead: 0 when the task would start, 1 when not.

    Args:
        suite: the suite as a dict (:func:`~hpcbench.run.suite.parse_suite` reads it).
        args: parsed :func:`add_cluster_arguments` options.
        prefix: name prefix of the temporary run folder.
        nodes: nodes of a cluster brought up here.
    """
    if args.dry_run:
        from hpcbench.run.limits import dry_run

        text, ok = dry_run(parse_suite(suite), Path(tempfile.gettempdir()) / f"{prefix}dry-run", backend="local",
                           oversubscribe=True)
        print(text)
        return 0 if ok else 1
    out = Path(tempfile.mkdtemp(prefix=prefix))
    started, link_bps = False, None
    if args.local:
        backend, link = "local", "none (local backend: emulated nodes share one loopback)"
    else:
        from hpcbench.cluster import ClusterSpec, cluster_down, cluster_up, load_cluster
        from hpcbench.cluster.emulated import ClusterError

        try:
            info = load_cluster(args.state)
            print(f"using the cluster already up in {args.state}")
        except ClusterError:
            others = network.list_netns()
            if others and not args.force:
                print(f"refusing to bring up a cluster: namespaces {others} belong to another one (someone's "
                      f"tests?); bringing one up would tear it down. Pass --force, or --state of that cluster.",
                      file=sys.stderr)
                return 2
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


def run_and_report(suite: dict, args: argparse.Namespace, report: Callable[[BenchRun], str], *, prefix: str,
                   nodes: int = 2) -> int:
    """:func:`run_bench_task`, then ``report(run)`` and the records' folder printed; a benchmark's exit code.

    Returns:
        0 when the task ran (or the dry run would start it), 1 when it failed, 2 when a cluster was refused.
    """
    run = run_bench_task(suite, args, prefix=prefix, nodes=nodes)
    if isinstance(run, int):
        return run
    if not run.ok:
        print(f"{suite['name']}: the task failed: {run.error}", file=sys.stderr)
        return 1
    print(report(run))
    print(f"records: {run.run_dir}")
    return 0


def cluster_benches() -> list[str]:
    """Experiments whose ``bench.py`` describes a cluster benchmark (it defines ``suite_from``)."""
    root = Path(__file__).resolve().parents[1] / "experiments"
    return sorted(p.parent.name for p in root.glob("*/bench.py") if "\ndef suite_from(" in p.read_text())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    names = cluster_benches()
    if not argv or argv[0] not in names:
        given = f"{argv[0]!r} has none; " if argv and not argv[0].startswith("-") else ""
        print(f"usage: python -m hpcbench.bench.cluster_task EXPERIMENT [options]\n{given}experiments with a "
              f"cluster benchmark: {', '.join(names)} (`... EXPERIMENT --help` lists its options)", file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    name = argv[0]
    bench = importlib.import_module(f"hpcbench.experiments.{name}.bench")
    ap = argparse.ArgumentParser(prog=f"python -m hpcbench.bench.cluster_task {name}",
                                 description=(bench.__doc__ or "").split("\n\n")[0])
    bench.add_arguments(ap)
    add_cluster_arguments(ap, link_rate=bench.LINK_RATE)
    args = ap.parse_args(argv[1:])
    return run_and_report(bench.suite_from(args), args,
                          lambda run: bench.report_run(run.records, run.link_bps, run.link),
                          prefix=f"hpcbench-bench-{name}-", nodes=getattr(bench, "NODES", 2))


if __name__ == "__main__":
    sys.exit(main())
