"""The job wrapper's policy (guide sec. 2.5, C15): rerun a failed job, repair storage between tries.

The guide's third level of fault tolerance is a loop around ``srun``: up to **3** runs,
storage repaired between them. Two things carry it out here, with one policy:

* ``slurm/run_with_retries.sh`` for job scripts: it calls ``hpcbench repair``
  between tries;
* ``hpcbench suite --backend slurm --retries N``: the SLURM backend resubmits a task whose
  *job* failed (:func:`job_failure_reason` says which failures qualify).

The repair step (:func:`repair`) checks every shard of each data set against its manifest
and copies a bad one back from the manifest's source (:mod:`hpcbench.data.resilience`),
and removes torn checkpoints (:func:`hpcbench.fault.checkpoint.remove_torn`), so the next
try neither reads a corrupt shard nor resumes from half a checkpoint.

Why 3 tries: a job whose tries fail independently with probability ``p`` fails for good
with probability ``p ** tries`` (:func:`job_failure_probability`); :func:`measure_survival`
checks that model against real runs, counting the attempts they really made.

    hpcbench repair --data DATA_DIR --checkpoints CKPT_DIR [--verify size]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from hpcbench.core.config import Config, param
from hpcbench.core.errors import HpcbenchError

__all__ = ["RetryPolicy", "RepairReport", "DataSetRepair", "repair", "repair_targets", "job_failure_reason",
           "job_failure_probability", "survival", "expected_attempts", "SurvivalMeasurement",
           "measure_survival", "binomial_interval", "main"]

#: SLURM job states of a job that ended before its task could record an end, and that a
#: new submission may well get past: the node, not the task, failed.
RETRYABLE_JOB_STATES = ("NODE_FAIL", "BOOT_FAIL", "FAILED", "PREEMPTED", "unknown")
# Not retried: TIMEOUT, OUT_OF_MEMORY, DEADLINE, CANCELLED: the same limit, or the same person,
# would stop the next try too.
#: Signals that, when they end a rank, come from outside the program: SIGKILL (the OOM
#: killer, an administrator, a node health check, this suite's injector) and SIGBUS
#: (a memory or device fault). A rank that raised an exception exits 1 instead.
RETRYABLE_SIGNALS = {9: "SIGKILL", 7: "SIGBUS"}
#: Upper bound of RetryPolicy.max_tries: a job failing 100 times in a row needs a person, not a loop.
MAX_TRIES = 100

# torchrun's failure summary (torch.distributed.elastic): "exitcode  : -9 (pid: 1234)".
_EXITCODE = re.compile(r"exitcode\s*:\s*-(\d+)")
# srun's words when a task it started died of a signal (hpcbench's SLURM launcher starts the ranks
# itself): "srun: error: n2: task 1: Killed", "...: Bus error" (strsignal's names).
_SRUN_SIGNALLED = re.compile(r"srun: error: \S+: tasks? [\d,\-]+: (Killed|Bus error)")
_SRUN_SIGNAL_NAMES = {"Killed": 9, "Bus error": 7}
# srun's own words (SLURM 22.05) when a node is lost, not when a task exits: "Node failure on n2"
# (slurmctld declared it down), "Task launch for StepId=5.0 failed on node n2: Communication
# connection failure" (its slurmd does not answer).
_SRUN_LOST = re.compile(r"srun: error: (Node failure on \S+|Task launch for \S+ failed on node \S+?)(?::|\s|$)")


@dataclass
class RetryPolicy(Config):
    """How often to run a job, and what to do between runs."""

    config_name = "RetryPolicy"

    max_tries: int = param(3, "runs in all, the first one included. 3 is the guide's wrapper (C15): "
                              "`retry=0; while retry < 3: srun ...`", min=1, max=MAX_TRIES)
    delay_s: float = param(2.0, "seconds between a failed try (after its repair) and the next: the failed "
                                "step's processes end and SLURM notes the node states. It does not wait out "
                                "SLURM's SlurmdTimeout, after which a silent node is declared down",
                           min=0.0, max=3600.0)
    repair: bool = param(True, "before each retry, check data shards against their manifests (repairing a "
                               "bad one from its source) and remove torn checkpoints")
    verify: str = param("sha256", "how the repair step checks a shard: sha256 (reads every byte) or size "
                                  "(cheap; misses a flipped byte)", choices=("sha256", "size"))


# -- the repair step ---------------------------------------------------------------------------

@dataclass
class DataSetRepair:
    """What the repair step did to one data set."""

    folder: str
    shards: int = 0
    repaired: list[str] = field(default_factory=list)
    #: ``[path, why]`` of shards still bad (no source copy, or the source is bad too).
    unrepaired: list[list[str]] = field(default_factory=list)
    #: Set when the data set itself could not be read (no folder, no manifest).
    error: str | None = None


@dataclass
class RepairReport:
    """What one repair step found and did."""

    data_sets: list[DataSetRepair] = field(default_factory=list)
    checkpoints_removed: list[str] = field(default_factory=list)
    #: ``[folder, why]`` of checkpoint folders that could not be cleaned.
    checkpoint_errors: list[list[str]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Nothing is left that the next try would trip over."""
        return not self.checkpoint_errors and all(d.error is None and not d.unrepaired for d in self.data_sets)

    def summary(self) -> str:
        """One line: shards checked and repaired, checkpoints removed, what is still wrong."""
        shards = sum(d.shards for d in self.data_sets)
        repaired = sum(len(d.repaired) for d in self.data_sets)
        parts = [f"{shards} shard(s) in {len(self.data_sets)} data set(s) checked, {repaired} repaired",
                 f"{len(self.checkpoints_removed)} torn checkpoint(s) removed"]
        bad = [f"{p}: {why}" for d in self.data_sets for p, why in d.unrepaired]
        bad += [f"{d.folder}: {d.error}" for d in self.data_sets if d.error]
        bad += [f"{p}: {why}" for p, why in self.checkpoint_errors]
        if bad:
            parts.append("NOT repaired: " + "; ".join(bad))
        return "; ".join(parts) + f" ({self.seconds:.2f} s)"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _repair_data_set(folder: Path, verify: str) -> DataSetRepair:
    # Imported here: the data layer is only needed when a data set is named.
    from hpcbench.data.errors import DataError
    from hpcbench.data.manifest import load_manifest
    from hpcbench.data.resilience import EventLog, ShardAccess, ShardCheckFailed

    result = DataSetRepair(str(folder))
    try:
        manifest, folder = load_manifest(folder)
    except DataError as exc:
        result.error = str(exc)
        return result
    result.shards = len(manifest.shards)
    # The event log only tells us why a repair failed; it must not land in the data set.
    with tempfile.TemporaryDirectory(prefix="hpcbench-repair-") as tmp:
        access = ShardAccess(folder, manifest, verify=verify, events=EventLog(Path(tmp) / "events.jsonl"))
        for i in range(len(manifest.shards)):
            try:
                access.open(i)
                continue
            except (ShardCheckFailed, OSError) as exc:
                reason = str(exc) if isinstance(exc, ShardCheckFailed) else f"{type(exc).__name__}: {exc}"
            if access.repair(i, reason, stage="retry"):
                result.repaired.append(str(access.path(i)))
            else:
                why = (access.events.read("repair_failed") or [{"why": reason}])[-1].get("why", reason)
                result.unrepaired.append([str(access.path(i)), why])
    return result


def repair(data_dirs: Iterable[str | Path] = (), checkpoint_dirs: Iterable[str | Path] = (), *,
           verify: str = "sha256") -> RepairReport:
    """The repair step between two tries of a job.

    Args:
        data_dirs: data set folders (each holding a ``manifest.json``); every shard is checked
            and a bad one is copied back from the manifest's ``source``.
        checkpoint_dirs: checkpoint roots; checkpoints whose manifest is missing or invalid
            (a save killed half-way) are deleted with :func:`hpcbench.fault.checkpoint.remove_torn`.
            A root that does not exist yet is fine (nothing was saved).
        verify: ``sha256`` or ``size`` (see :class:`RetryPolicy`).

    Returns:
        What was checked, repaired, removed, and what could not be (``report.ok``).
    """
    if verify not in ("sha256", "size"):
        raise HpcbenchError(f"verify={verify!r}; allowed: ['sha256', 'size']")
    t0 = time.perf_counter()
    report = RepairReport()
    for folder in data_dirs:
        report.data_sets.append(_repair_data_set(Path(folder), verify))
    checkpoint_dirs = [Path(c) for c in checkpoint_dirs]
    if checkpoint_dirs:
        from hpcbench.fault.checkpoint import remove_torn

        for root in checkpoint_dirs:
            if not root.exists():
                continue
            try:
                report.checkpoints_removed += [str(p) for p in remove_torn(root)]
            except OSError as exc:
                report.checkpoint_errors.append([str(root), f"{type(exc).__name__}: {exc}"])
    report.seconds = round(time.perf_counter() - t0, 4)
    return report


def repair_targets(params: Mapping[str, Any]) -> tuple[list[Path], list[Path]]:
    """The data sets and checkpoint roots a task names, for the backend's repair step.

    A parameter whose value is a folder holding a data set's ``manifest.json`` is a data set
    (e.g. ``io_formats``' ``dataset``); a non-empty parameter named ``checkpoint_dir`` or
    ``*_checkpoint_dir`` is a checkpoint root. Experiments need declare nothing else.

    Returns:
        (data set folders, checkpoint roots), each without repeats.
    """
    from hpcbench.data.manifest import MANIFEST_NAME

    data: list[Path] = []
    checkpoints: list[Path] = []
    for name, value in params.items():
        if not isinstance(value, str) or not value.strip():
            continue
        path = Path(value)
        if name == "checkpoint_dir" or name.endswith("_checkpoint_dir"):
            if path not in checkpoints:
                checkpoints.append(path)
        elif (path / MANIFEST_NAME).is_file() and path not in data:
            data.append(path)
    return data, checkpoints


# -- which failures are retried (the SLURM backend's rule) -----------------------------------------

def job_failure_reason(*, state: str, ended_early: bool, slurm_state: str | None, error: str | None,
                       logs: Sequence[str] = ()) -> str | None:
    """Why a failed task is worth a new job, or None when a new job would fail the same way.

    Retried (the job, not the task, failed):

    * the job ended before its task could record an end, in one of
      :data:`RETRYABLE_JOB_STATES` (NODE_FAIL, BOOT_FAIL, FAILED: the batch step was killed,
      PREEMPTED, or a state slurmctld no longer remembers);
    * the task's workers failed (a ``LaunchError``) because a rank was killed by a signal
      from outside (:data:`RETRYABLE_SIGNALS`, read from torchrun's failure summary or srun's
      "task N: Killed") or srun
      lost a node or a step (``Node failure``, a task launch that failed on a node).

    Not retried: ``done``; ``interrupted`` (the user's signal, scancel, the time-limit
    warning: the user asked it to stop); an error of the notebook or of a rank's own code
    (a cell's exception, a rank exiting 1 with a traceback): it is deterministic and would
    recur; jobs ended by TIMEOUT, OUT_OF_MEMORY, DEADLINE or CANCELLED.

    Args:
        state: the task's final state.
        ended_early: the job left the queue without the task writing a final status.
        slurm_state: the job's last SLURM state.
        error: the task's error text.
        logs: text of the workers' log and the job's log (their tails suffice).
    Returns:
        A short reason ("NODE_FAIL", "rank killed by SIGKILL", "srun: Node failure on n2"), or None.
    """
    if state != "failed":
        return None
    if ended_early:
        job_state = (slurm_state or "unknown").split()[0]
        return f"job ended {job_state}" if job_state.split("+")[0] in RETRYABLE_JOB_STATES else None
    if not error or "LaunchError" not in error:
        return None
    text = "\n".join([error, *logs])
    signals = [int(m.group(1)) for m in _EXITCODE.finditer(text)]
    signals += [_SRUN_SIGNAL_NAMES[m.group(1)] for m in _SRUN_SIGNALLED.finditer(text)]
    for sig in signals:
        if sig in RETRYABLE_SIGNALS:
            return f"a rank was killed by {RETRYABLE_SIGNALS[sig]}"
    m = _SRUN_LOST.search(text)
    if m:
        return f"srun: {m.group(1).strip()[:120]}"
    return None


# -- the survival model --------------------------------------------------------------------------

def job_failure_probability(p: float, tries: int) -> float:
    """Probability that a job fails for good: all ``tries`` fail, each independently with ``p``."""
    _check_p(p, tries)
    return p ** tries


def survival(p: float, tries: int) -> float:
    """Probability that a job finishes within ``tries`` runs: ``1 - p ** tries``."""
    return 1.0 - job_failure_probability(p, tries)


def expected_attempts(p: float, tries: int) -> float:
    """Mean runs a job makes: ``1 + p + ... + p ** (tries - 1)`` (it stops at the first success)."""
    _check_p(p, tries)
    return float(tries) if p == 1.0 else (1 - p ** tries) / (1 - p)


def _check_p(p: float, tries: int) -> None:
    if not 0.0 <= p <= 1.0:
        raise HpcbenchError(f"p={p!r}: a probability is between 0 and 1")
    if tries < 1:
        raise HpcbenchError(f"tries={tries!r}: at least 1")


def _binom_cdf(k: int, n: int, q: float) -> float:
    """P(X <= k) for X ~ Binomial(n, q), summed in log space (n up to a few 10^4)."""
    if k < 0:
        return 0.0
    if k >= n or q <= 0.0:
        return 1.0
    if q >= 1.0:
        return 0.0
    lq, l1q = math.log(q), math.log1p(-q)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lq + (n - i) * l1q
             for i in range(k + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def binomial_interval(k: int, n: int, confidence: float = 0.99) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval of a binomial proportion ``k / n``.

    Reference: Clopper & Pearson, Biometrika 26 (1934) 404-413. Found by bisection on the
    binomial CDF, so no statistics package is needed.
    """
    if n < 1 or not 0 <= k <= n:
        raise HpcbenchError(f"binomial_interval: need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    alpha = 1.0 - confidence

    def solve(f: Callable[[float], float]) -> float:  # f increasing in q; root in [0, 1]
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
        return (lo + hi) / 2

    lower = 0.0 if k == 0 else solve(lambda q: (1.0 - _binom_cdf(k - 1, n, q)) - alpha / 2)
    upper = 1.0 if k == n else solve(lambda q: alpha / 2 - _binom_cdf(k, n, q))
    return lower, upper


@dataclass
class SurvivalMeasurement:
    """Real jobs run with an injected per-try failure probability, against the model."""

    p: float
    tries: int
    jobs: int
    failed_jobs: int
    attempts: int
    failed_attempts: int
    confidence: float
    seconds: float

    @property
    def failure_fraction(self) -> float:
        return self.failed_jobs / self.jobs

    @property
    def predicted(self) -> float:
        return job_failure_probability(self.p, self.tries)

    @property
    def interval(self) -> tuple[float, float]:
        """The exact binomial interval of the measured job failure fraction."""
        return binomial_interval(self.failed_jobs, self.jobs, self.confidence)

    @property
    def consistent(self) -> bool:
        """The predicted ``p ** tries`` lies inside the measured interval."""
        lo, hi = self.interval
        return lo <= self.predicted <= hi

    @property
    def attempt_failure_fraction(self) -> float:
        """Failed runs over all runs: the ``p`` the jobs really saw."""
        return self.failed_attempts / self.attempts if self.attempts else float("nan")

    def describe(self) -> str:
        lo, hi = self.interval
        return (f"p={self.p:g}, tries={self.tries}: {self.failed_jobs}/{self.jobs} jobs failed "
                f"({self.failure_fraction:.4f}; {self.confidence:.0%} interval [{lo:.4f}, {hi:.4f}]), "
                f"model p^{self.tries}={self.predicted:.4f} -> {'consistent' if self.consistent else 'INCONSISTENT'}; "
                f"{self.attempts} attempts ({self.attempts / self.jobs:.3f} per job, model "
                f"{expected_attempts(self.p, self.tries):.3f}), {self.failed_attempts} failed "
                f"({self.attempt_failure_fraction:.3f} vs p={self.p:g}); {self.seconds:.1f} s")

    def to_dict(self) -> dict[str, Any]:
        lo, hi = self.interval
        return {**asdict(self), "failure_fraction": self.failure_fraction, "predicted": self.predicted,
                "interval_low": lo, "interval_high": hi, "consistent": self.consistent,
                "attempt_failure_fraction": self.attempt_failure_fraction}


def measure_survival(p: float, tries: int, jobs: int, run_one: Callable[[int], tuple[bool, int]], *,
                     confidence: float = 0.99) -> SurvivalMeasurement:
    """Run ``jobs`` real jobs and compare their failure fraction with ``p ** tries``.

    Args:
        p: the failure probability injected into each try (``run_one`` injects it).
        tries: the wrapper's tries per job.
        jobs: how many jobs to run.
        run_one: ``run_one(job_index) -> (succeeded, attempts)``: runs one job through the
            wrapper (e.g. ``slurm/run_with_retries.sh``) and reports whether it finally
            succeeded and how many attempts it really made (from the wrapper's log, not
            from the model).
        confidence: of the binomial interval the prediction must fall in.

    Returns:
        The counts and the verdict (``consistent``).
    """
    _check_p(p, tries)
    if jobs < 1:
        raise HpcbenchError(f"jobs={jobs!r}: at least 1")
    t0 = time.perf_counter()
    failed_jobs = attempts = failed_attempts = 0
    for j in range(jobs):
        ok, made = run_one(j)
        if made < 1 or made > tries or (not ok and made != tries):
            raise HpcbenchError(f"job {j}: {made} attempt(s) with success={ok} is impossible for a wrapper "
                                f"of {tries} tries; is run_one counting the wrapper's attempts?")
        failed_jobs += not ok
        attempts += made
        failed_attempts += made - ok
    return SurvivalMeasurement(p, tries, jobs, failed_jobs, attempts, failed_attempts, confidence,
                               round(time.perf_counter() - t0, 3))


# -- command line (used by slurm/run_with_retries.sh) -----------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """``hpcbench repair ...``: exit 0 repaired or nothing to do, 1 something could not be repaired
    (or a --data folder holds no readable data set), 2 bad arguments."""
    p = argparse.ArgumentParser(prog="hpcbench repair",
                                description="The repair step of slurm/run_with_retries.sh: check and repair data "
                                            "shards from their manifests; remove torn checkpoints.")
    p.add_argument("--data", action="append", default=[], metavar="DIR",
                   help="a data set folder with a manifest.json (repeatable)")
    p.add_argument("--checkpoints", action="append", default=[], metavar="DIR",
                   help="a checkpoint root (repeatable)")
    p.add_argument("--verify", default="sha256", choices=("sha256", "size"))
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    try:
        report = repair(args.data, args.checkpoints, verify=args.verify)
    except HpcbenchError as exc:
        print(f"repair: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        print(f"repair: {report.summary()}")
        for d in report.data_sets:
            for path in d.repaired:
                print(f"repair: shard repaired: {path}")
        for path in report.checkpoints_removed:
            print(f"repair: torn checkpoint removed: {path}")
    return 0 if report.ok else 1

