"""The ``hpcbench`` command: parse arguments, then call the library.

    hpcbench --version                             the installed hpcbench's version
    hpcbench list                                  experiments, their claims and needs; shipped suites
    hpcbench params EXPERIMENT                     an experiment's parameters, defaults and allowed values
    hpcbench run EXPERIMENT [-p key=value ...]     one task, the same way a suite runs it (--toy: in seconds)
    hpcbench suite SUITE [--backend local|slurm] [--out results/] [--jobs N] [--dry-run] [--oversubscribe]
                         [--report reports/NAME]
    hpcbench suite resume RUN_DIR                  rerun only the failed, interrupted or missing tasks
    hpcbench status RUN_DIR                        each task's state; `running` tasks whose process is gone: stale
    hpcbench advise RUN_DIR [--task ID] [--json]   C14's advice from what the run measured, each option's predicted gain
    hpcbench report RUN_DIR... [--out reports/NAME] [--traces] [--allow-unreadable] [--scheduler A | --dask-slurm]
    hpcbench report --compare A B                  the claims that moved from report A to report B
    hpcbench publish REPORT_DIR --to SITE_DIR [--replace] [--allow-unreadable]
                                                   copy a report into a site, rewrite its index and claims page
    hpcbench cluster up|down|status [--nodes N] [--link-rate 1gbit|1e9] [--gpus-per-node N] [--state DIR]
    hpcbench plan-binding [--ranks-per-node N] [--root DIR] [--show table|srun|numactl|env|sbatch]
    hpcbench doctor [--backend local|slurm] [--json]   what this machine/cluster lets the suite measure, claim by claim
    hpcbench bench [NAME [--json] [options] | --list]   a benchmark of hpcbench itself: ratios measured side by side
    hpcbench docs [--write]                        regenerate the pages made from the code
    hpcbench reproduce [--nics N] [--only regime] [--resume RUN_DIR]   (root) verdicts from the emulated cluster
    hpcbench gpu-check [--out DIR] [--quick]       every CUDA/NCCL path of one GPU, pass/fail
    hpcbench repair --data DIR --checkpoints DIR   the job wrapper's repair step
    hpcbench train --checkpoint-dir D --steps N    a small resumable training driver
    hpcbench sample --out F.parquet                this node's monitoring sources into records

``python -m hpcbench ...`` is the same command, for job scripts and launchers (torchrun, srun).

Exit codes: 0 success, 1 some task failed (report: an input unreadable), 2 bad input (the message names it),
130 / 143 / 138 stopped by SIGINT / SIGTERM / SIGUSR1 (every process of the run ended; resume continues).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Sequence

from hpcbench.core.errors import HpcbenchError

#: Subcommands that hand the rest of the command line to their module's ``main(argv)``: each keeps
#: its options beside the code they drive, and none is imported until it runs (``rank`` and
#: ``train`` start every rank of a job, where each import is paid once per rank). A help of None
#: hides an internal command from ``hpcbench --help``.
DELEGATED: dict[str, tuple[str, str | None]] = {
    "reproduce": ("hpcbench.reproduce", "(root) verdicts from the emulated SLURM cluster: brings it up, calibrates "
                                        "its link, runs the reproduce suite, writes the report"),
    "gpu-check": ("hpcbench.bench.gpu_check", "every CUDA/NCCL path of one GPU as a pass/fail table "
                                              "(no GPU: says so, exit 0)"),
    "repair": ("hpcbench.fault.retry", "the job wrapper's repair step: check and repair data shards from their "
                                       "manifests, remove torn checkpoints"),
    "train": ("hpcbench.fault.train", "a small resumable training driver on the checkpoint library "
                                      "(under torchrun: -m hpcbench train -- OPTIONS)"),
    "sample": ("hpcbench.monitor.sampler", "sample this node's monitoring sources into a records file"),
    "rank": ("hpcbench.dist.worker", None),  # one rank of a task, started by torchrun or srun
}


def _parse_params(pairs: Sequence[str]) -> dict[str, str]:
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise HpcbenchError(f"-p {pair!r}: expected key=value")
        params[key.strip()] = value
    return params


def cmd_list(args: argparse.Namespace) -> int:
    from hpcbench.experiments import EXPERIMENTS, get_claim
    from hpcbench.guide.claims import KINDS
    from hpcbench.run.suite import shipped_suites

    rows = []
    for name in EXPERIMENTS:
        exp = EXPERIMENTS.get(name)
        claims = ", ".join(f"{cid} {get_claim(cid).kind}" for cid in exp.claims.ids)
        rows.append((name, claims, exp.resources(exp.config()).describe(), f"notebooks/{exp.notebook}",
                     exp.description))
    header = ("experiment", "claims (kind)", "needs (defaults)", "notebook")
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(3)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)) + "  " + header[3])
    for *cols, notebook, description in rows:
        print("  ".join(c.ljust(w) for c, w in zip(cols, widths)) + "  " + notebook)
        print(" " * (widths[0] + 2) + description)
    print("\nclaim kinds: " + "; ".join(f"{kind}: {what}" for kind, what in KINDS.items()))
    print("\nshipped suites: " + ", ".join(shipped_suites()))
    return 0


def cmd_params(args: argparse.Namespace) -> int:
    from hpcbench.experiments import EXPERIMENTS

    exp = EXPERIMENTS.get(args.experiment)
    for row in exp.config.describe():
        print(f"{row['name']} = {row['default']!r}  ({row['type']}; {row['allowed']})\n    {row['doc']}")
    toy = ", ".join(f"{k}={v!r}" for k, v in exp.toy.items()) or "the defaults (cheap already)"
    print(f"\ntoy size (hpcbench run {exp.name} --toy): {toy}")
    return 0


def _backend_options(args: argparse.Namespace) -> dict:
    from hpcbench.run.backends.slurm import SBATCH_OPTIONS

    opts = {k: getattr(args, k) for k in SBATCH_OPTIONS if getattr(args, k, None)}
    if getattr(args, "sbatch_arg", None):
        opts["sbatch_args"] = list(args.sbatch_arg)
    return opts


def _summary(statuses, run_dir: Path, interrupted: str | None = None, report: str | None = None) -> int:
    """Print what became of every task and what to do next; the exit code (0 or 1).

    With ``report`` (``--report DIR``) the report is about to be written there: the next step is
    not suggested, since a suggestion naming another folder would contradict what follows.
    """
    from shlex import quote

    by_state: dict[str, list] = {}
    for s in statuses:
        by_state.setdefault(s.state, []).append(s)
    counts = ", ".join(f"{len(v)} {k}" for k, v in sorted(by_state.items()))
    print(f"{interrupted + ': ' if interrupted else ''}{counts or 'no task'}; run dir: {run_dir}")
    for s in statuses:
        if s.state in ("failed", "interrupted"):
            log = f"; job log: {s.batch_log}" if s.batch_log else ""
            print(f"  {s.state.upper()} {s.task_id}: {s.error}  "
                  f"(notebook: {run_dir / 'tasks' / s.task_id / s.notebook}{log})")
    if any(s.state != "done" for s in statuses):
        print(f"rerun what is not done: hpcbench suite resume {quote(str(run_dir))}")
    if report is None:
        print(f"next: hpcbench report {quote(str(run_dir))} --out {quote('reports/' + run_dir.name)}")
    return 1 if any(s.state != "done" for s in statuses) else 0


def _summary_and_report(statuses, run_dir: Path, report: str | None) -> int:
    """The summary, then the report into ``report`` when asked (also after failed tasks: it lists them)."""
    code = _summary(statuses, run_dir, report=report)
    if report is not None:
        from hpcbench.report import build_report
        from hpcbench.report.report_folder import describe_report

        print(f"report: {describe_report(build_report([run_dir], Path(report)).resolve())}")
    return code


def _run(suite, args: argparse.Namespace) -> int:
    from hpcbench.run.backends import BACKENDS
    from hpcbench.run.limits import check_limits
    from hpcbench.run.rundir import check_run_dir, new_run_dir
    from hpcbench.run.runner import retry_options, run_suite

    retry_options(args.backend, None, args.retries)  # refused (exit 2) before anything else
    run_dir = Path(args.run_dir) if args.run_dir else new_run_dir(Path(args.out), suite.name)
    if args.dry_run:
        from hpcbench.run.limits import dry_run

        text, ok = dry_run(suite, run_dir, backend=args.backend, options=_backend_options(args),
                           oversubscribe=args.oversubscribe)
        print(text)
        return 0 if ok else 2
    check_run_dir(run_dir, f"--run-dir {args.run_dir}" if args.run_dir else f"--out {args.out}")
    if args.report:  # refused now, not after a run of hours
        from hpcbench.report.report_folder import check_report_folder

        check_report_folder(Path(args.report))
    BACKENDS.get(args.backend).check(_backend_options(args))  # run_suite does too
    check_limits(suite, args.backend, _backend_options(args), oversubscribe=args.oversubscribe)  # run_suite does too
    print(f"run dir: {run_dir}")  # only once it is accepted: the line must not precede a refusal
    statuses = run_suite(suite, run_dir, backend=args.backend, jobs=args.jobs, progress=not args.quiet,
                         options=_backend_options(args), oversubscribe=args.oversubscribe, retries=args.retries)
    return _summary_and_report(statuses, run_dir, args.report)


def cmd_run(args: argparse.Namespace) -> int:
    from hpcbench.run.suite import single_task_suite

    params = _parse_params(args.param)
    if args.toy:
        from hpcbench.experiments import EXPERIMENTS

        params = {**EXPERIMENTS.get(args.experiment).toy, **params}  # an explicit -p wins over the toy size
    return _run(single_task_suite(args.experiment, params, args.variant), args)


def cmd_suite(args: argparse.Namespace) -> int:
    from hpcbench.run.runner import resume_suite
    from hpcbench.run.suite import load_suite

    if args.suite[0] == "resume":
        if len(args.suite) != 2:
            raise HpcbenchError("usage: hpcbench suite resume RUN_DIR")
        run_dir = Path(args.suite[1])
        if args.dry_run:
            from hpcbench.run.limits import dry_run_resume

            text, ok = dry_run_resume(run_dir, backend=args.backend, options=_backend_options(args),
                                      oversubscribe=args.oversubscribe)
            print(text)
            return 0 if ok else 2
        if args.report:
            from hpcbench.report.report_folder import check_report_folder

            check_report_folder(Path(args.report))
        statuses = resume_suite(run_dir, backend=args.backend, jobs=args.jobs, progress=not args.quiet,
                                options=_backend_options(args), oversubscribe=args.oversubscribe,
                                retries=args.retries)
        return _summary_and_report(statuses, run_dir, args.report) if statuses else 0
    if len(args.suite) != 1:
        raise HpcbenchError(f"one suite at a time, got {args.suite}")
    if args.backend is None:
        args.backend = "local"
    from hpcbench.run.suite import Layout

    layout = Layout.parse(args.layout) if args.layout else None
    return _run(load_suite(args.suite[0], layout=layout, toy=args.toy), args)


def cmd_task(args: argparse.Namespace) -> int:
    from hpcbench.run.execute import run_manifest_task
    from hpcbench.run.interrupt import RunInterrupted

    try:
        status = run_manifest_task(Path(args.run_dir), Path(args.manifest), args.index)
    except RunInterrupted as exc:  # scancel, or SLURM's time-limit signal
        status = exc.statuses[0]
        print(f"{status.task_id}: {status.state} -- {status.error}")
        return exc.exit_code
    print(f"{status.task_id}: {status.state}" + (f" -- {status.error}" if status.error else ""))
    return 0 if status.state == "done" else 1


def cmd_status(args: argparse.Namespace) -> int:
    from hpcbench.run.runner import run_state

    state = run_state(Path(args.run_dir))
    holder = state.holder.describe() if state.holder else "none"
    print(f"run dir: {args.run_dir}  (suite {state.suite}, backend {state.backend}; runner: {holder})")
    for st, shown, why in state.tasks:
        where = f" on {st.node}" if st.started else ""
        job = f" job {st.job_id}" if st.job_id else ""
        took = f" {st.duration_s:.0f} s" if st.duration_s is not None else ""
        print(f"  {shown:<12} {st.task_id}  attempt {st.attempt}{where}{job}{took}")
        if why:
            print(f"      {why}")
        elif st.error and shown != "done":
            print(f"      {st.error.splitlines()[0][:200]}")
    counts: dict[str, int] = {}
    for _, shown, _ in state.tasks:
        counts[shown] = counts.get(shown, 0) + 1
    print(", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    return 0


def cmd_advise(args: argparse.Namespace) -> int:
    from hpcbench.advise import advice_json, format_advice
    from hpcbench.report.advice import collect_run_advice

    found = collect_run_advice(Path(args.run_dir), task=args.task)
    if not found.advices:
        raise found.refused()
    if args.json:  # JSON only on stdout: a script reads it
        print(advice_json(found.advices))
        return 0
    print(format_advice(found.advices))
    if found.skipped:
        tasks = len({s.task for s in found.skipped})
        print(f"\nnot advised ({tasks} task(s)), by reason:\n{found.describe_skipped()}")
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    from hpcbench import cluster

    if args.action == "up":
        spec = cluster.ClusterSpec.from_dict({k: v for k, v in {
            "nodes": args.nodes, "link_rate": args.link_rate, "link_delay": args.link_delay,
            "state_dir": args.state, "cpus_per_node": args.cpus_per_node,
            "gpus_per_node": args.gpus_per_node}.items() if v is not None})
        info = cluster.cluster_up(spec)
        print(cluster.cluster_status(info.state_dir))
        exports = " ".join(f"{k}={v}" for k, v in info.env().items())
        print(f"\nSLURM clients use this cluster with:  export {exports}")
    elif args.action == "down":
        cluster.cluster_down(args.state or cluster.DEFAULT_STATE_DIR)
        print("emulated cluster is down")
    else:
        print(cluster.cluster_status(args.state or cluster.DEFAULT_STATE_DIR))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from hpcbench.report import build_report
    from hpcbench.report.report_folder import describe_report

    if args.compare:
        return _compare_reports(args)
    if not args.run_dirs:
        raise HpcbenchError("give one or more RUN_DIRs to report on, or --compare A B")
    # Resolved: `report .` or `report ../R/..` must not name the report folder reports/ itself.
    out = Path(args.out) if args.out else Path("reports") / Path(args.run_dirs[0]).resolve().name
    dask_slurm = None
    if args.dask_slurm:
        from hpcbench.report.dask_slurm import DaskSlurmConfig

        dask_slurm = DaskSlurmConfig.from_dict({
            "jobs": args.dask_slurm_jobs, "cores": args.dask_slurm_cores, "memory": args.dask_slurm_memory,
            "interface": args.dask_slurm_interface or "",
            "scheduler_interface": args.dask_slurm_scheduler_interface or "",
            "sbatch_options": _backend_options(args), "start_timeout_s": args.dask_slurm_timeout})
    path = build_report(args.run_dirs, out, scheduler=args.scheduler, dask_slurm=dask_slurm, traces=args.traces,
                        allow_unreadable=args.allow_unreadable)
    print(f"report: {describe_report(path.resolve())}")
    return 0


def _compare_reports(args: argparse.Namespace) -> int:
    """`hpcbench report --compare A B`: the claims that moved from A to B, one line each on stdout."""
    from hpcbench.report.claim_history import compare_reports
    from hpcbench.report.report_json import read_report_json

    if args.run_dirs:
        raise HpcbenchError("--compare A B takes two reports, no RUN_DIR: give one or the other")
    a, b = (read_report_json(path) for path in args.compare)
    lines = compare_reports(a, b)
    for line in lines:
        print(line)
    print(f"{len(lines)} claim(s) moved from {args.compare[0]} to {args.compare[1]}", file=sys.stderr)
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    from hpcbench.report.publish import publish_report

    site = Path(args.to)
    publication = publish_report(Path(args.report_dir), site, replace_existing=args.replace,
                                 allow_unreadable=args.allow_unreadable)
    print(f"published: {(site / publication.slug / 'index.html').resolve()}")
    print(f"site index: {(site / 'index.html').resolve()}")
    return 0


def cmd_affinity(args: argparse.Namespace) -> int:
    from hpcbench import affinity

    topo = affinity.read_topology(args.root)
    plan = affinity.plan_binding(topo, args.ranks_per_node, use_smt=args.use_smt,
                                 loader_workers_per_rank=args.loader_workers)
    print(f"# {topo.describe()}")
    if args.show == "sbatch":
        print(affinity.sbatch_script(plan, nodes=args.nodes, command=args.command))
    elif args.show == "srun":
        print(" ".join(["srun", *affinity.srun_args(plan), args.command]))
    else:
        for b in plan.bindings:
            if args.show == "numactl":
                print(" ".join([*affinity.numactl_argv(b, topo), args.command]))
            elif args.show == "env":
                print(" ".join(f"{k}={v}" for k, v in affinity.rank_env(b).items()))
        if args.show == "table":
            for row in affinity.plan_table(plan):
                print("  ".join(f"{k}={v}" for k, v in row.items()))
        for note in plan.notes:
            print(f"note: {note}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from hpcbench.bench.registry import BENCHMARKS, describe_benchmarks, run_benchmark

    if args.list or args.name is None:
        print(describe_benchmarks())
        return 0
    # an unknown name raises RegistryError, which lists the registered ones (exit 2)
    return run_benchmark(BENCHMARKS.get(args.name), args.options + (["--json"] if args.json else []))


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type of whole numbers >= ``minimum``; the error names the text or the bound."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be >= {minimum}")
        return value

    return parse


#: argparse type of counts such as --jobs: 0 or -3 would otherwise pass and mean 'no cap' or 1.
_positive_int = _int_at_least(1)
#: argparse type of --retries: 0 (the default, no retry) or more.
_non_negative_int = _int_at_least(0)


def package_version() -> str:
    """The installed distribution's version (what pip and bug reports see); the source tree's when not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hpcbench")
    except PackageNotFoundError:  # run from a checkout that was never pip-installed
        from hpcbench import __version__

        return __version__


def cmd_docs(args: argparse.Namespace) -> int:
    from hpcbench.experiments import catalogue, digest
    from hpcbench.run.notebook_params import notebook_pages

    stale = []
    pages = [(catalogue.PAGE, catalogue.splice), (digest.PAGE, lambda _: digest.render()), *notebook_pages()]
    for page, fresh in pages:
        text = page.read_text(encoding="utf-8")
        new = fresh(text)
        if new == text:
            continue
        if args.write:
            page.write_text(new, encoding="utf-8")
            print(f"wrote {page}")
        else:
            stale.append(page)
            print(f"{page}: differs from the code (`hpcbench docs --write` rewrites it)")
    return 1 if stale else 0


def _add_sbatch_options(p: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """The site's sbatch options (``--partition``, ``--account``, ``--time``, ``--gres``...), as run, suite and doctor take them."""
    slurm = p.add_argument_group("SLURM backend (written as #SBATCH lines into the generated scripts)")
    for opt in ("partition", "account", "time", "gres", "cpus-per-task", "qos", "constraint"):
        slurm.add_argument(f"--{opt}", dest=opt.replace("-", "_"))
    slurm.add_argument("--sbatch-arg", action="append", metavar="--OPTION=VALUE",
                       help="any other sbatch option (repeatable)")
    return slurm


def cmd_doctor(args: argparse.Namespace) -> int:
    import json
    import os

    from hpcbench.run.doctor import doctor, render, run_as_job
    from hpcbench.system.inventory import Probe

    if args.backend == "slurm":
        result = run_as_job(out_dir=args.out, data_dir=args.data, options=_backend_options(args))
    else:
        result = doctor(Probe(Path(args.root), dict(os.environ)), out_dir=args.out, data_dir=args.data,
                        partition=args.partition)
    print(json.dumps(result, indent=1) if args.json else render(result))
    if not result["ready"]["ok"] and not args.json:
        print(f"hpcbench doctor: the suite cannot run here: {result['ready']['problems'][0]}", file=sys.stderr)
    return 0 if result["ready"]["ok"] else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hpcbench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="experiments and shipped suites")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("params", help="an experiment's parameters")
    p.add_argument("experiment")
    p.set_defaults(func=cmd_params)

    def add_run_options(p: argparse.ArgumentParser, backend_default: str | None = "local") -> None:
        p.add_argument("--backend", default=backend_default,
                       help="where tasks run: local or slurm (default: local; resume: the run's own)")
        p.add_argument("--out", default="results", help="parent folder of the new run dir (default: results/)")
        p.add_argument("--run-dir", help="exact run dir to create instead of OUT/<suite>-<timestamp>")
        p.add_argument("--jobs", type=_positive_int, default=None,
                       help="tasks at once (local default 1: concurrent benchmarks distort each other; "
                            "slurm: the array's %%M, default no cap)")
        p.add_argument("--quiet", action="store_true", help="no progress bar")
        p.add_argument("--report", metavar="DIR",
                       help="when the run ends, write its report into DIR, as `hpcbench report RUN_DIR --out DIR` "
                            "would (also when some task failed; not when the run was stopped)")
        p.add_argument("--oversubscribe", action="store_true",
                       help="local backend: run tasks with more ranks than this machine's cores (a functional "
                            "run; timings mean little); refused otherwise")
        p.add_argument("--dry-run", action="store_true",
                       help="print the tasks with their layout, memory and time estimates, the run dir and "
                            "whether the limits pass; start and write nothing (exit 0, or 2 if refused)")
        slurm = _add_sbatch_options(p)
        slurm.add_argument("--retries", type=_non_negative_int, default=0, metavar="N",
                           help="resubmit a task whose job failed (node lost, rank killed, srun failure; not a "
                                "notebook error) up to N times, repairing data shards and torn checkpoints "
                                "first; each try is kept under RUN_DIR/attempts/ (default 0)")

    p = sub.add_parser("run", help="run one experiment as a one-task suite")
    p.add_argument("experiment")
    p.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                   help="a config parameter (repeatable); see `hpcbench params EXPERIMENT`")
    p.add_argument("--variant", default="default", help="variant name recorded with the results")
    p.add_argument("--toy", action="store_true",
                   help="the experiment's toy size: a functional run of seconds whose numbers mean nothing "
                        "(`hpcbench params EXPERIMENT` lists its overrides; -p still wins)")
    add_run_options(p)
    p.set_defaults(func=cmd_run)

    # usage= because argparse would render nargs="+" as "SUITE [SUITE ...]": one suite, or resume.
    p = sub.add_parser("suite", help="run a suite (a shipped name or a YAML path); `suite resume RUN_DIR` "
                                     "reruns only its failed or missing tasks",
                       usage="hpcbench suite [options] SUITE\n       hpcbench suite resume [options] RUN_DIR")
    p.add_argument("suite", nargs="+", metavar="SUITE",
                   help="a shipped suite's name or a YAML path; or `resume RUN_DIR`")
    p.add_argument("--layout", metavar="NODESxGPUS",
                   help="the cluster a sized suite (guide-scale) runs on, e.g. 4x8: fills its {nodes} and "
                        "{gpus_per_node} (`hpcbench doctor` prints this cluster's)")
    p.add_argument("--toy", action="store_true",
                   help="every task at its experiment's toy size, keeping its layout and regime: the suite's "
                        "jobs and placements in seconds (a rehearsal; the numbers mean nothing)")
    add_run_options(p, backend_default=None)
    p.set_defaults(func=cmd_suite)

    p = sub.add_parser("status", help="each task's state in a run dir (stale `running` tasks named)")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("advise", help="classify a run from its measured figures (bandwidth-bound, latency-sensitive "
                                      "or neither) and recommend C14's technique, with each option's predicted gain")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--task", metavar="TASK_ID", help="only this task of the run")
    p.add_argument("--json", action="store_true", help="print the advice as JSON instead of a text table")
    p.set_defaults(func=cmd_advise)

    p = sub.add_parser("task", help="(used by generated job scripts) run task INDEX of a manifest")
    p.add_argument("run_dir")
    p.add_argument("--manifest", required=True)
    p.add_argument("--index", type=int, required=True)
    p.set_defaults(func=cmd_task)

    p = sub.add_parser("cluster", help="an emulated multi-node SLURM cluster on this machine (root)")
    p.add_argument("action", choices=("up", "down", "status"))
    p.add_argument("--nodes", type=int, help="nodes (network namespaces), default 2")
    p.add_argument("--link-rate", help="every node link's rate in bit/s, or e.g. 100mbit, 1gbit (default 1gbit)")
    p.add_argument("--link-delay", help="one-way inter-node delay (needs the netem qdisc), default 0ms")
    p.add_argument("--cpus-per-node", type=int, help="CPUs each node declares (default: the host's)")
    p.add_argument("--gpus-per-node", type=int, help="stand-in GPUs each node declares as SLURM GRES gpu "
                                                     "(default 0): a dress rehearsal of --gres jobs")
    p.add_argument("--state", help="state dir: slurm.conf, logs, pid files (default /tmp/hpcbench-cluster)")
    p.set_defaults(func=cmd_cluster)

    p = sub.add_parser("plan-binding", help="plan each rank's cores, memory node, GPU and NIC on a node; print it "
                                        "as a table, srun/numactl/env lines or an sbatch script")
    p.add_argument("--ranks-per-node", type=_positive_int, default=1, metavar="N", help="ranks on the node (default 1)")
    p.add_argument("--root", default="/", help="read sysfs under this folder (a recorded node; default /)")
    p.add_argument("--use-smt", action="store_true", help="give ranks every hardware thread of their cores")
    p.add_argument("--loader-workers", type=_non_negative_int, default=0, metavar="N",
                   help="DataLoader workers per rank, each on a core of its own (default 0)")
    p.add_argument("--show", choices=("table", "srun", "numactl", "env", "sbatch"), default="table")
    p.add_argument("--nodes", type=_positive_int, default=1, help="sbatch: nodes of this kind (default 1)")
    p.add_argument("--command", default="python train.py", help="what each rank runs (default: python train.py)")
    p.set_defaults(func=cmd_affinity)

    p = sub.add_parser("doctor", help="what this machine or SLURM cluster lets the suite measure: SLURM, GPUs and "
                                      "their links, NICs, NCCL, file systems, CPUs; claim by claim, can it rule; "
                                      "exit 0 when the suite can run here, 1 with the reason")
    p.add_argument("--backend", choices=("local", "slurm"), default="local",
                   help="where the doctor reads: this machine (default), or one compute node as a SLURM job with "
                        "the sbatch options below")
    p.add_argument("--out", default="results", help="where run dirs go (default: results/): its file system is "
                                                   "the run dir's; a SLURM job's files go to OUT/doctor-<timestamp>/")
    p.add_argument("--data", metavar="DIR", help="the data sets' folder (default: the run dir, where experiments "
                                                 "generate their data)")
    p.add_argument("--root", default="/", help="read /proc and /sys under this folder (a recorded node; default /)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")
    _add_sbatch_options(p)
    p.set_defaults(func=cmd_doctor)

    # The benchmark's own options follow its name: its module declares them, and is imported only to run.
    p = sub.add_parser("bench", help="run a benchmark of hpcbench itself (ratios measured side by side); "
                                     "no NAME or --list: list them")
    p.add_argument("--list", action="store_true", help="list the benchmarks with what each compares")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")
    p.add_argument("name", nargs="?", metavar="NAME", help="a benchmark (`hpcbench bench --list`)")
    p.add_argument("options", nargs=argparse.REMAINDER, help="its options (`hpcbench bench NAME --help`)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("report", help="aggregate run dirs into one HTML report, or compare two reports' claims")
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR")
    p.add_argument("--out", help="report folder (default: reports/<first run dir's name>)")
    p.add_argument("--allow-unreadable", action="store_true",
                   help="write the report although some inputs cannot be read (each is named, and listed in the "
                        "report; default: named, no report, exit 1)")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"),
                   help="print the claims that moved from report A to report B (folders or report.json files): "
                        "verdict changed, or B's estimate outside A's interval; no RUN_DIR then")
    p.add_argument("--traces", action="store_true",
                   help="copy the ranks' profiler traces into the report (a few MiB each; default: linked "
                        "files are the failed tasks' notebooks only)")
    p.add_argument("--scheduler", help="address of an existing dask scheduler (default: a LocalCluster)")
    dask = p.add_argument_group("dask workers as SLURM jobs (dask-jobqueue; the nodes must see the run dirs)")
    dask.add_argument("--dask-slurm", action="store_true", help="start the dask workers as SLURM jobs")
    dask.add_argument("--dask-slurm-jobs", type=int, default=2, metavar="N", help="jobs, one worker each (default 2)")
    dask.add_argument("--dask-slurm-cores", type=int, default=1, metavar="N", help="CPUs (threads) per job (default 1)")
    dask.add_argument("--dask-slurm-memory", default="2G", metavar="SIZE", help="memory per job (default 2G)")
    dask.add_argument("--dask-slurm-interface", metavar="IFACE",
                      help="the workers' network interface, e.g. ib0 (default: dask's choice; hpcb0 on the "
                           "emulated cluster)")
    dask.add_argument("--dask-slurm-scheduler-interface", metavar="IFACE",
                      help="interface of this host the nodes reach (default: --dask-slurm-interface)")
    dask.add_argument("--dask-slurm-timeout", type=float, default=180.0, metavar="S",
                      help="seconds to wait for the workers to connect (default 180)")
    for opt in ("partition", "account", "time", "qos", "constraint"):
        dask.add_argument(f"--{opt}", dest=opt.replace("-", "_"), help="#SBATCH option of the worker jobs")
    dask.add_argument("--sbatch-arg", action="append", metavar="--OPTION=VALUE",
                      help="any other sbatch option of the worker jobs (repeatable)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("publish", help="copy a report folder into a static site and rewrite its index page")
    p.add_argument("report_dir", metavar="REPORT_DIR", help="a folder written by `hpcbench report`")
    p.add_argument("--to", required=True, metavar="SITE_DIR",
                   help="the site folder (created); earlier publications in it are kept")
    p.add_argument("--replace", action="store_true",
                   help="publish a report that is published already (same content) again, in its place "
                        "(default: refused)")
    p.add_argument("--allow-unreadable", action="store_true",
                   help="publish a report some of whose inputs were unreadable (default: refused, exit 1)")
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser("docs", help="check or regenerate what is made from the code: notebooks/README.md's "
                                    "experiment table, the guide's digest and each notebook's parameters cell")
    p.add_argument("--write", action="store_true", help="rewrite them (default: print what differs, exit 1 if any)")
    p.set_defaults(func=cmd_docs)

    # Listed for --help only: main() hands these to their modules before this parser runs.
    for name, (_, help_text) in DELEGATED.items():
        if help_text is not None:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def _delegate(name: str, argv: list[str]) -> int:
    import importlib

    return importlib.import_module(DELEGATED[name][0]).main(argv)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        return _delegate(argv[0], argv[1:])
    from hpcbench.run.interrupt import RunInterrupted

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except HpcbenchError as exc:
        print(f"hpcbench: error: {exc}", file=sys.stderr)
        # 2: bad input, refused before anything ran; an error that means otherwise says so (unreadable inputs: 1)
        return getattr(exc, "exit_code", 2)
    except RunInterrupted as exc:
        # The run stopped cleanly (every process of it ended, tasks marked); say where it stands.
        if exc.run_dir is not None:
            _summary(exc.statuses, exc.run_dir, interrupted=str(exc))
        else:
            print(f"hpcbench: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("hpcbench: interrupted", file=sys.stderr)
        return 130

