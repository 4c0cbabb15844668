"""``make reproduce``: verdicts from the emulated cluster, end to end.

1. Bring up the emulated SLURM cluster (:mod:`hpcbench.cluster`) with a fast link and as many
   nodes as the suite's largest task asks for (at least 2).
2. Calibrate: one short all_reduce sweep inside one node measures the intra-node busbw
   per rank on this machine.
3. Shape the inter-node link so that the per-rank inter/intra-node bandwidth ratio is the
   guide's platform's: NVLink ~300 GB/s per GPU against HDR's 25 GB/s per NIC shared by
   ``8 / nics`` GPUs — 1:12 with 8 NICs per node, 1:96 with one. The guide does not say
   how many NICs a node has, so ``nics`` is a parameter. Both ranks of a node share its
   link, so the link is ``ranks_per_node`` times the per-rank share.
4. Run the ``reproduce`` suite with the SLURM backend (5 launches of every experiment).
5. Launch again, up to ``--top-up`` more times, every entry judged in a guide regime that has fewer
   than 5 launches in it (a launch that missed its regime is never counted; :func:`top_up`).
6. Write the report, take the cluster down (also on failure).

What it proves and what it cannot is in slurm/README.md ("make reproduce").
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from pathlib import Path

import pandas as pd

from hpcbench.core.config import BitRate
from hpcbench.core.errors import HpcbenchError
from hpcbench.core.facts import LINK_PEAKS_GBPS
from hpcbench.core.results import find_record_files, read_records
from hpcbench.guide.statements import FABRIC, GPUS_PER_NODE
from hpcbench.judge.verdict import MIN_LAUNCHES

NVLINK_GBPS = LINK_PEAKS_GBPS["NVLink 3 (A100, per GPU)"]
HDR_GBPS = LINK_PEAKS_GBPS[FABRIC]
#: A shipped suite: one 16 MiB all_reduce inside one node of 2 ranks.
CALIBRATION_SUITE = "reproduce-calibration"
RANKS_PER_NODE = 2
#: The node link's range in bit/s: SLURM's own messages need more than 1 Mbit/s, and the emulation
#: caps the link at 10 Gbit/s.
MIN_LINK_BPS, MAX_LINK_BPS = 10e6, 10e9


def guide_ratio(nics_per_node: int) -> float:
    """Per-GPU intra-node over inter-node bandwidth on the guide's platform."""
    if not 1 <= nics_per_node <= GPUS_PER_NODE:
        raise HpcbenchError(f"nics_per_node must be 1..{GPUS_PER_NODE}, got {nics_per_node}")
    return NVLINK_GBPS / (HDR_GBPS * nics_per_node / GPUS_PER_NODE)


def link_rate_bps(intra_gbps: float, nics_per_node: int, ranks_per_node: int = RANKS_PER_NODE) -> BitRate:
    """The node link (bit/s, whole Mbit/s) whose per-rank share is ``intra_gbps / guide_ratio``."""
    per_rank = intra_gbps / guide_ratio(nics_per_node)
    bps = round(per_rank * ranks_per_node * 8e9, -6)
    return BitRate(min(max(bps, MIN_LINK_BPS), MAX_LINK_BPS))


def intra_node_busbw(run_dir: Path) -> float:
    """Median busbw (GB/s) of the calibration run's intra-node all_reduce."""
    files = find_record_files(run_dir / "tasks")
    frame = pd.concat([read_records(p) for p in files], ignore_index=True) if files else None
    busbw = None if frame is None else frame[(frame["metric"] == "busbw") & frame["value"].notna()]
    if busbw is None or busbw.empty:
        raise HpcbenchError(f"the calibration run in {run_dir} measured no busbw; see its task's notebook")
    return float(busbw["value"].median())


def recorded_link_rate(run_dir: Path) -> BitRate:
    """The shaped link rate an earlier run recorded (``fact.link_rate_bps``)."""
    for path in find_record_files(run_dir / "tasks"):
        frame = read_records(path)
        rates = frame[(frame["metric"] == "fact.link_rate_bps") & frame["value"].notna()]["value"]
        if len(rates):
            return BitRate(rates.iloc[0])
    raise HpcbenchError(f"{run_dir} records no shaped link rate (fact.link_rate_bps); pass --link-rate")


#: The parameters by which a task asks to be judged in the guide's regime (its link calibrated first).
REGIME_PARAMS = ("regime", "link_regime")


def regime_entries(suite) -> list[str]:
    """The ``experiment.variant`` entries of ``suite`` whose tasks calibrate to the guide's regime.

    Read from the tasks' resolved parameters (``regime: guide`` or ``link_regime: guide``, a default
    included), so the suite file stays the one place that says which entries those are.
    """
    return list(dict.fromkeys(f"{t.experiment}.{t.variant}" for t in suite.tasks
                              if any(t.params.get(p) == "guide" for p in REGIME_PARAMS)))


def select_entries(suite, entries: list[str]):
    """``suite`` with only the tasks of the named ``experiment.variant`` entries, in the suite's order.

    Raises:
        HpcbenchError: naming an entry the suite does not have (and the ones it has).
    """
    from dataclasses import replace

    have = list(dict.fromkeys(f"{t.experiment}.{t.variant}" for t in suite.tasks))
    unknown = [e for e in entries if e not in have]
    if unknown:
        raise HpcbenchError(f"--only: {unknown} not in suite {suite.name!r}; its entries: {have}")
    return replace(suite, tasks=[t for t in suite.tasks if f"{t.experiment}.{t.variant}" in entries])


#: Extra launches an entry judged in a guide regime may get, at most, when too few of its launches reached it.
TOP_UP_CAP = 4


def judged_in_guide_regime(experiment: str) -> bool:
    """Whether a rule of ``experiment`` counts only launches that reached a guide regime (its ClaimSet's regimes).

    A test regime of ours (``ours``: C2's, whose band follows the busy share reached) counts every launch, and
    a regime of another quantity (C12's step-time spread) is not a busy share: neither is topped up here.
    """
    from hpcbench.experiments import EXPERIMENTS
    from hpcbench.scale.regime import GuideRegime

    regimes = EXPERIMENTS.get(experiment).claims.regimes.values()
    return any(isinstance(r, GuideRegime) and not r.ours for r in regimes)


def launch_in_regime(records: pd.DataFrame) -> bool:
    """Whether one launch's records say its baseline reached the busy share it was calibrated to."""
    from hpcbench.scale.regime import FACT_REACHED, FACT_TARGET, TOLERANCE, finite_number

    def fact(name: str) -> float | None:
        rows = records[(records["metric"] == f"fact.{name}") & records["value"].notna()]["value"]
        return finite_number(rows.iloc[0]) if len(rows) else None

    target, reached = fact(FACT_TARGET), fact(FACT_REACHED)
    return target is not None and reached is not None and abs(reached - target) <= TOLERANCE


def regime_shortfall(run_dir: Path, suite, need: int) -> dict[str, int]:
    """``experiment.variant`` -> launches it still needs in its guide regime (done tasks only); 0s left out."""
    from hpcbench.run.rundir import read_statuses

    done = {s.task_id for s in read_statuses(run_dir) if s.state == "done"}
    reached: dict[str, int] = {}
    for task in suite.tasks:
        if not any(task.params.get(p) == "guide" for p in REGIME_PARAMS) or not judged_in_guide_regime(task.experiment):
            continue
        entry = f"{task.experiment}.{task.variant}"
        files = find_record_files(run_dir / "tasks" / task.task_id) if task.task_id in done else []
        frame = pd.concat([read_records(p) for p in files], ignore_index=True) if files else None
        reached[entry] = reached.get(entry, 0) + int(frame is not None and launch_in_regime(frame))
    return {entry: need - n for entry, n in reached.items() if n < need}


def top_up(run_dir: Path, *, need: int, cap: int = TOP_UP_CAP, run=None) -> list[str]:
    """Launch entries again, up to ``cap`` extra launches each, until each has ``need`` launches in its regime.

    A calibrated launch that misses the guide's regime costs a verdict (it is never counted): with 6
    launches and 2 misses a figure reads "n = 4, a verdict needs 5". Each round adds exactly the shortfall.

    Args:
        run: ``run(run_dir)`` that runs the run dir's pending tasks (the SLURM resume); None: only plan.

    Returns:
        The task ids added, in the order they were added.
    """
    from dataclasses import replace as _replace

    from hpcbench.run.rundir import extend_run, load_run

    added: list[str] = []
    extra: dict[str, int] = {}
    while True:
        suite, _ = load_run(run_dir)
        short = {e: n for e, n in regime_shortfall(run_dir, suite, need).items() if extra.get(e, 0) < cap}
        if not short:
            return added
        tasks = []
        for entry, n in short.items():
            mine = [t for t in suite.tasks if f"{t.experiment}.{t.variant}" == entry]
            for _ in range(min(n, cap - extra.get(entry, 0))):
                rep = max(t.repetition for t in mine) + 1
                task = _replace(mine[-1], task_id=f"{entry}.r{rep}", repetition=rep)
                mine.append(task)
                tasks.append(task)
                extra[entry] = extra.get(entry, 0) + 1
        print(f"regime top-up: {', '.join(f'{e} needs {n} more' for e, n in short.items())}; launching "
              f"{len(tasks)} more ({', '.join(t.task_id for t in tasks)})", flush=True)
        extend_run(run_dir, tasks)
        added += [t.task_id for t in tasks]
        if run is None:
            return added
        run(run_dir)


def nodes_needed(suite) -> int:
    """The most nodes any task of ``suite`` asks for (its experiment's resources), at least 2."""
    from hpcbench.experiments import EXPERIMENTS

    most = 2
    for task in suite.tasks:
        exp = EXPERIMENTS.get(task.experiment)
        most = max(most, exp.resources(exp.config.from_dict(task.params)).nodes)
    return most


def _bit_rate(text: str) -> BitRate:
    try:
        return BitRate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    from hpcbench.cluster import ClusterSpec, check_prerequisites, cluster_down, cluster_up, reshape_links
    from hpcbench.report import build_report
    from hpcbench.run.rundir import new_run_dir, read_statuses
    from hpcbench.run.runner import resume_suite, run_suite
    from hpcbench.run.suite import load_suite

    ap = argparse.ArgumentParser(prog="hpcbench reproduce", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nics", type=int, default=8, help="InfiniBand NICs per 8-GPU node on the guide's platform "
                                                        "(8: ratio 1:12; 1: ratio 1:96)")
    ap.add_argument("--suite", default="reproduce", help="suite name or YAML path (default: reproduce)")
    ap.add_argument("--only", metavar="EXP.VARIANT,...", help="run only these entries of the suite (`regime`: "
                    "those whose tasks calibrate the link to the guide's regime, regime or link_regime: guide)")
    ap.add_argument("--out", default="results", help="parent folder of the run dir")
    ap.add_argument("--report", default="reports/reproduce", help="report folder")
    ap.add_argument("--state", default="/tmp/hpcbench-reproduce", help="the emulated cluster's state dir")
    ap.add_argument("--link-rate", type=_bit_rate, help="skip the calibration and shape the link to this rate "
                                                         "(bit/s, or e.g. 800mbit)")
    ap.add_argument("--resume", metavar="RUN_DIR", help="rerun only the failed or missing tasks of an earlier "
                                                        "reproduce run, on a link shaped as that run's was")
    ap.add_argument("--top-up", type=int, default=TOP_UP_CAP, metavar="N",
                    help=f"launch an entry calibrated to a guide regime again, up to N more times, until "
                         f"{MIN_LAUNCHES} of its launches reached the regime (default {TOP_UP_CAP}; 0: never)")
    args = ap.parse_args(argv)
    if args.top_up < 0:
        ap.error(f"--top-up {args.top_up}: give 0 or more launches")
    guide_ratio(args.nics)  # a bad --nics fails before anything starts
    suite = load_suite(args.suite)
    if args.only:
        only = regime_entries(suite) if args.only == "regime" else [e.strip() for e in args.only.split(",") if e.strip()]
        suite = select_entries(suite, only)
    if args.resume:
        # The same link as the first attempt, or its launches would land in another group.
        args.link_rate = args.link_rate or recorded_link_rate(Path(args.resume))
    missing = check_prerequisites()
    if missing:
        print("hpcbench reproduce needs root and: " + "; ".join(missing), file=sys.stderr)
        return 2
    # SIGTERM (a killed job, a closed session) must still take the cluster down: turn it into an
    # exit that runs the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    info = cluster_up(ClusterSpec(nodes=nodes_needed(suite), link_rate=MAX_LINK_BPS, link_delay="0ms",
                                  state_dir=args.state))
    os.environ.update(info.env())
    try:
        if args.link_rate:
            rate = args.link_rate
        else:
            calib = Path(tempfile.mkdtemp(prefix="hpcbench-calibration-")) / "run"
            run_suite(load_suite(CALIBRATION_SUITE), calib, backend="slurm", progress=False)
            intra = intra_node_busbw(calib)
            rate = link_rate_bps(intra, args.nics)
            print(f"calibration: intra-node all_reduce busbw {intra:.3g} GB/s per rank; the guide's platform "
                  f"with {args.nics} NIC(s) per node has a 1:{guide_ratio(args.nics):.0f} inter/intra ratio "
                  f"-> node link {rate}", flush=True)
        reshape_links(args.state, link_rate=rate)
        # One job at a time: the emulated nodes share this machine's cores, and two benchmarks
        # running side by side would measure each other.
        if args.resume:
            run_dir = Path(args.resume)
            resume_suite(run_dir, backend="slurm", jobs=1)
        else:
            run_dir = new_run_dir(Path(args.out), suite.name)
            run_suite(suite, run_dir, backend="slurm", jobs=1)
        if args.top_up:
            top_up(run_dir, need=MIN_LAUNCHES, cap=args.top_up,
                   run=lambda d: resume_suite(d, backend="slurm", jobs=1))
        failed = [s.task_id for s in read_statuses(run_dir) if s.state != "done"]
        index = build_report([run_dir], args.report)
        print(f"report: {index.resolve()}")
        if failed:
            print(f"{len(failed)} task(s) failed (they are not counted): {', '.join(failed)}", file=sys.stderr)
            return 1
        return 0
    finally:
        cluster_down(args.state)

