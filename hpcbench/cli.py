"""The ``hpcbench`` command: parse arguments, then call the library.

    hpcbench list                                  experiments, their claims and needs; shipped suites
    hpcbench params EXPERIMENT                     an experiment's parameters, defaults and allowed values
    hpcbench run EXPERIMENT [-p key=value ...]     one task, the same way a suite runs it
    hpcbench suite SUITE [--backend local] [--out results/] [--jobs N]
    hpcbench report RUN_DIR... [--out reports/NAME] [--scheduler ADDRESS]

Exit codes: 0 success, 1 some task failed, 2 bad input (the message names it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from hpcbench.errors import HpcbenchError


def _parse_params(pairs: Sequence[str]) -> dict[str, str]:
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise HpcbenchError(f"-p {pair!r}: expected key=value")
        params[key.strip()] = value
    return params


def cmd_list(args: argparse.Namespace) -> int:
    from hpcbench.experiments import EXPERIMENTS
    from hpcbench.suite import shipped_suites

    print(f"{'experiment':<14} {'claims':<12} {'needs (defaults)':<28} notebook")
    for name in EXPERIMENTS:
        exp = EXPERIMENTS.get(name)
        needs = exp.resources(exp.config()).describe()
        print(f"{name:<14} {','.join(exp.claims):<12} {needs:<28} notebooks/{exp.notebook}")
        print(f"{'':<14} {exp.description}")
    print("\nshipped suites: " + ", ".join(shipped_suites()))
    return 0


def cmd_params(args: argparse.Namespace) -> int:
    from hpcbench.experiments import EXPERIMENTS

    exp = EXPERIMENTS.get(args.experiment)
    for row in exp.config.describe():
        print(f"{row['name']} = {row['default']!r}  ({row['type']}; {row['allowed']})\n    {row['doc']}")
    return 0


def _run(suite, args: argparse.Namespace) -> int:
    from hpcbench.runner import new_run_dir, run_suite

    run_dir = Path(args.run_dir) if args.run_dir else new_run_dir(Path(args.out), suite.name)
    print(f"run dir: {run_dir}")
    statuses = run_suite(suite, run_dir, backend=args.backend, jobs=args.jobs, progress=not args.quiet)
    failed = [s for s in statuses if s.state != "done"]
    print(f"{len(statuses) - len(failed)} task(s) done, {len(failed)} failed; run dir: {run_dir}")
    for s in failed:
        print(f"  FAILED {s.task_id}: {s.error}  (notebook: {run_dir / 'tasks' / s.task_id / s.notebook})")
    print(f"next: hpcbench report {run_dir} --out reports/{run_dir.name}")
    return 1 if failed else 0


def cmd_run(args: argparse.Namespace) -> int:
    from hpcbench.suite import single_task_suite

    return _run(single_task_suite(args.experiment, _parse_params(args.param), args.variant), args)


def cmd_suite(args: argparse.Namespace) -> int:
    from hpcbench.suite import load_suite

    return _run(load_suite(args.suite), args)


def cmd_report(args: argparse.Namespace) -> int:
    from hpcbench.report import build_report

    out = Path(args.out) if args.out else Path("reports") / Path(args.run_dirs[0]).name
    path = build_report(args.run_dirs, out, scheduler=args.scheduler)
    print(f"report: {path.resolve()}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hpcbench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="experiments and shipped suites")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("params", help="an experiment's parameters")
    p.add_argument("experiment")
    p.set_defaults(func=cmd_params)

    def add_run_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--backend", default="local", help="where tasks run (default: local)")
        p.add_argument("--out", default="results", help="parent folder of the new run dir (default: results/)")
        p.add_argument("--run-dir", help="exact run dir to create instead of OUT/<suite>-<timestamp>")
        p.add_argument("--jobs", type=int, default=1,
                       help="tasks at once (default 1: concurrent benchmarks distort each other)")
        p.add_argument("--quiet", action="store_true", help="no progress bar")

    p = sub.add_parser("run", help="run one experiment as a one-task suite")
    p.add_argument("experiment")
    p.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                   help="a config parameter (repeatable); see `hpcbench params EXPERIMENT`")
    p.add_argument("--variant", default="default", help="variant name recorded with the results")
    add_run_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("suite", help="run a suite (a shipped name or a YAML path)")
    p.add_argument("suite")
    add_run_options(p)
    p.set_defaults(func=cmd_suite)

    p = sub.add_parser("report", help="aggregate run dirs into one HTML report")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", help="report folder (default: reports/<first run dir's name>)")
    p.add_argument("--scheduler", help="address of an existing dask scheduler (default: a LocalCluster)")
    p.set_defaults(func=cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except HpcbenchError as exc:
        print(f"hpcbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hpcbench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
