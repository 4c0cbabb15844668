"""Sanity limits, checked before a run starts: ranks against cores, memory against the machine.

Every task's experiment gives an :class:`~hpcbench.experiments.Estimate` from its config
alone (memory per rank and in all, rough time, the formula). Before a run dir is written,
:func:`check_limits` compares each task with what its backend can give it:

* **local** backend (every emulated node runs on this machine): the task's ranks
  (nodes x ranks_per_node) against this process's usable cores (``os.sched_getaffinity``)
  unless oversubscription is asked for (``--oversubscribe``, or ``oversubscribe: true`` in
  the suite: a functional run of 2 nodes x 2 ranks on 2 cores measures nothing but works);
  and the task's total memory against ``MemAvailable`` of ``/proc/meminfo``.
* **slurm** backend: the ranks are the scheduler's business; a task's share of one node
  (ranks per node x memory per rank, plus the notebook's kernel) against the smallest node
  memory ``sinfo`` reports (the partition's, when ``--partition`` is given). Not checked
  when ``sinfo`` does not answer.

The checks are pure functions of the numbers (:func:`rank_problem`, :func:`memory_problem`,
:func:`plan_run`); :func:`capacity_for` is the thin part that reads the machine.
:func:`dry_run` renders the same plan for ``--dry-run``: it starts nothing and writes nothing.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from hpcbench.core.errors import HpcbenchError
from hpcbench.core.registry import Registry
from hpcbench.core.units import approx_bytes
from hpcbench.system.facts import mem_available, usable_cores
from hpcbench.experiments import EXPERIMENTS, Estimate, Resources, wants_gpu
from hpcbench.run.suite import Suite, TaskSpec

#: How to force a run past the rank limit, as the refusal says it.
FORCE_HINT = ("pass --oversubscribe (or set `oversubscribe: true` in the suite) to run it anyway, "
              "as a functional run whose timings mean little")
#: sinfo must answer quickly; a slow or absent controller leaves the per-node memory unknown.
SINFO_TIMEOUT_S = 10


class LimitError(HpcbenchError):
    """A task exceeds what its backend can give it; the message names the task, its numbers and the fix."""


@dataclass(frozen=True)
class Capacity:
    """What one task may use where a backend runs it; None: not known, not checked."""

    backend: str
    where: str
    """how the messages name the place: "this machine", "each SLURM node of partition gpu" """
    cores: int | None = None
    """usable cores for all ranks of one task (local backend); None: ranks not limited here"""
    memory_bytes: int | None = None
    """memory one task may use: available memory (local), or one node's memory (SLURM)"""
    per_node: bool = False
    """memory_bytes is one node's: compare a task's per-node share"""
    memory_source: str = ""
    """what memory_bytes is and where it comes from, written after the number in messages"""
    gpus: int | None = None
    """CUDA devices one task may use (local: this machine's); None: not known, not checked (SLURM: --gres)"""

    def describe(self) -> str:
        cores = f"{self.cores} usable core(s), " if self.cores is not None else ""
        gpus = f"{self.gpus} CUDA device(s), " if self.gpus is not None else ""
        memory = (f"{approx_bytes(self.memory_bytes)} {self.memory_source}" if self.memory_bytes is not None
                  else "memory unknown: not checked")
        return f"{self.where}: {cores}{gpus}{memory}"


@dataclass(frozen=True)
class TaskPlan:
    """One task as the limits see it."""

    task_id: str
    experiment: str
    variant: str
    resources: Resources
    estimate: Estimate
    problems: tuple[str, ...] = ()

    @property
    def ranks(self) -> int:
        return self.resources.nodes * self.resources.ranks_per_node


@dataclass(frozen=True)
class RunPlan:
    """Every task of a run with its estimate and the limits it breaks."""

    suite: str
    capacity: Capacity
    tasks: tuple[TaskPlan, ...]
    oversubscribe: bool = False

    @property
    def problems(self) -> list[str]:
        return [p for t in self.tasks for p in t.problems]

    @property
    def ok(self) -> bool:
        return not self.problems

    def raise_if_refused(self) -> None:
        """Raise :class:`LimitError` listing every refusal; nothing has started when it does."""
        if self.problems:
            count = len({t.task_id for t in self.tasks if t.problems})
            raise LimitError(f"{count} task(s) of suite {self.suite} exceed the limits of "
                             f"{self.capacity.where}; nothing was started:\n  " + "\n  ".join(self.problems))


# -- the checks: pure functions of the numbers ---------------------------------------------

def rank_problem(task_id: str, resources: Resources, cores: int | None, *, oversubscribe: bool) -> str | None:
    """Why a local task's ranks do not fit ``cores``; None when they do, when forced, or when not limited."""
    ranks = resources.nodes * resources.ranks_per_node
    if cores is None or oversubscribe or ranks <= cores:
        return None
    return (f"{task_id}: {_ranks(ranks)} ({resources.nodes} node(s) x {_ranks(resources.ranks_per_node)} per node, "
            f"every emulated node on this machine) but this machine has {cores} usable core(s) "
            f"(os.sched_getaffinity); {FORCE_HINT}")


def memory_problem(task_id: str, experiment: str, estimate: Estimate, resources: Resources,
                   capacity: Capacity) -> str | None:
    """Why a task's estimated memory exceeds ``capacity``; None when it fits or the memory is unknown."""
    if capacity.memory_bytes is None:
        return None
    if capacity.per_node:
        # The first node's share: its ranks, and the task's base (the notebook's kernel starts them there).
        ranks_here = min(resources.ranks_per_node, estimate.ranks)
        need = estimate.memory_per_rank * ranks_here + estimate.overhead
        how = f"{approx_bytes(estimate.memory_per_rank)} per rank x {_ranks(ranks_here)} per node"
        scope = " per node"
    else:
        ranks_here, need = estimate.ranks, estimate.memory_total
        how = f"{approx_bytes(estimate.memory_per_rank)} per rank x {_ranks(ranks_here)}"
        scope = ""
    if need <= capacity.memory_bytes:
        return None
    if estimate.overhead:
        how += f" + {approx_bytes(estimate.overhead)} per task: notebook kernel, launcher"
    return (f"{task_id}: needs about {approx_bytes(need)}{scope} ({how}), {capacity.where} has "
            f"{approx_bytes(capacity.memory_bytes)} {capacity.memory_source}; estimate: {estimate.basis}; "
            f"lower its sizes (hpcbench params {experiment}) or run it where there is more memory")


def gpu_problem(task_id: str, asks: str | None, resources: Resources, capacity: Capacity) -> str | None:
    """Why a task whose resources need a GPU per rank cannot have them here; None when it can or nobody knows.

    ``asks``: the config field that asks for them, for the message (:func:`~hpcbench.experiments.wants_gpu`).
    """
    if not resources.gpu or capacity.gpus is None:
        return None
    need = resources.nodes * resources.ranks_per_node  # every emulated node is this machine
    if capacity.gpus >= need:
        return None
    return (f"{task_id}: {asks} asks for one CUDA device per rank ({_ranks(need)}), {capacity.where} has "
            f"{capacity.gpus} ({GPU_SOURCE}); run it where there are GPUs (e.g. --backend slurm with --gres "
            f"gpu:N), or set backend: gloo / device: cpu")


def _ranks(n: int) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"


def plan_task(spec: TaskSpec, capacity: Capacity, *, oversubscribe: bool) -> TaskPlan:
    """One task's resources, estimate and the limits it breaks."""
    exp = EXPERIMENTS.get(spec.experiment)
    cfg = exp.config.from_dict(spec.params)
    resources, estimate = exp.resources(cfg), exp.estimate(cfg)
    problems = [rank_problem(spec.task_id, resources, capacity.cores, oversubscribe=oversubscribe),
                gpu_problem(spec.task_id, wants_gpu(cfg), resources, capacity),
                memory_problem(spec.task_id, exp.name, estimate, resources, capacity)]
    return TaskPlan(spec.task_id, spec.experiment, spec.variant, resources, estimate,
                    tuple(p for p in problems if p))


def plan_run(suite: Suite, capacity: Capacity, *, oversubscribe: bool = False) -> RunPlan:
    """Every task of ``suite`` planned against ``capacity``; ``oversubscribe`` or the suite's own flag forces ranks."""
    forced = oversubscribe or suite.oversubscribe
    return RunPlan(suite.name, capacity, tuple(plan_task(t, capacity, oversubscribe=forced) for t in suite.tasks),
                   forced)


# -- reading the machine: the thin part -----------------------------------------------------

#: Where the GPU count comes from: the NVIDIA driver lists one folder per GPU it drives. Read without
#: importing torch (seconds) or starting CUDA (a context on every device), and without NVML.
GPU_SOURCE = "/proc/driver/nvidia/gpus"


def cuda_devices(root: str | Path = GPU_SOURCE) -> int:
    """GPUs the NVIDIA driver drives on this machine (0 without the driver)."""
    try:
        return sum(1 for p in Path(root).iterdir() if p.is_dir())
    except OSError:
        return 0


def local_capacity(options: dict[str, Any] | None = None) -> Capacity:
    """This machine: usable cores, CUDA devices and available memory."""
    try:
        memory = mem_available(Path("/proc/meminfo").read_text())
    except OSError:
        memory = None
    return Capacity("local", "this machine", cores=usable_cores(), memory_bytes=memory,
                    memory_source="available (MemAvailable, /proc/meminfo)", gpus=cuda_devices())


def smallest_node_memory(sinfo_output: str) -> int | None:
    """Bytes of the smallest node in ``sinfo -h -N -o %m`` output (MiB, maybe with a '+'); None if none."""
    sizes = [int(m.group(1)) for m in re.finditer(r"^\s*(\d+)\+?\s*$", sinfo_output, re.MULTILINE)]
    return min(sizes) << 20 if sizes else None


def slurm_capacity(options: dict[str, Any] | None = None) -> Capacity:
    """One SLURM node's memory as ``sinfo`` reports it (the partition's nodes with ``--partition``)."""
    partition = (options or {}).get("partition")
    argv = ["sinfo", "-h", "-N", "-o", "%m"] + (["-p", str(partition)] if partition else [])
    where = f"each SLURM node of partition {partition}" if partition else "each SLURM node"
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=SINFO_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
        memory = smallest_node_memory(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        memory = None
    return Capacity("slurm", where, memory_bytes=memory, per_node=True,
                    memory_source="(the smallest node's memory in sinfo)")


#: Backend name -> its capacity probe; a backend without one is not checked.
CAPACITIES: Registry[Callable[[dict[str, Any] | None], Capacity]] = Registry("capacity probe")
CAPACITIES.register("local", local_capacity)
CAPACITIES.register("slurm", slurm_capacity)


def capacity_for(backend: str, options: dict[str, Any] | None = None) -> Capacity:
    """What ``backend`` can give one task, read now; nothing known for a backend without a probe."""
    if backend in CAPACITIES:
        return CAPACITIES.get(backend)(options)
    return Capacity(backend, f"backend {backend}")


def check_limits(suite: Suite, backend: str, options: dict[str, Any] | None = None, *,
                 oversubscribe: bool = False) -> RunPlan:
    """Plan ``suite`` on ``backend`` and refuse it when a task breaks a limit.

    Raises:
        LimitError: listing every task at fault with its numbers; nothing has started.
    """
    plan = plan_run(suite, capacity_for(backend, options), oversubscribe=oversubscribe)
    plan.raise_if_refused()
    return plan


# -- the dry run ----------------------------------------------------------------------------

def approx_seconds(seconds: float | None) -> str:
    """``"~25 s"``, ``"~4 min"``, ``"~1.5 h"``; ``"?"`` when unknown."""
    if seconds is None:
        return "?"
    if seconds < 90:
        return f"~{seconds:.0f} s"
    if seconds < 5400:
        return f"~{seconds / 60:.0f} min"
    return f"~{seconds / 3600:.1f} h"


def render_plan(plan: RunPlan, *, run_dir: Path, backend: str, extra_problems: Sequence[str] = (),
                header: str = "", run_dir_note: str = "not created: dry run") -> str:
    """The dry run's text: the task table, totals, where the run would go, and the verdict of the limits."""
    rows = [("task", "experiment", "nodes x ranks", "memory", "per rank", "GPU/rank", "time")]
    for t in plan.tasks:
        est = t.estimate
        rows.append((t.task_id, t.experiment, f"{t.resources.nodes} x {t.resources.ranks_per_node}",
                     approx_bytes(est.memory_total), approx_bytes(est.memory_per_rank),
                     approx_bytes(est.device_memory_per_rank) if est.device_memory_per_rank else "-",
                     approx_seconds(est.seconds)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [header] if header else []
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    known = [t.estimate.seconds for t in plan.tasks if t.estimate.seconds is not None]
    unknown = len(plan.tasks) - len(known)
    lines.append(f"total: {len(plan.tasks)} task(s), at most {max(t.ranks for t in plan.tasks)} ranks and "
                 f"{approx_bytes(max(t.estimate.memory_total for t in plan.tasks))} in one task, "
                 f"{approx_seconds(sum(known))} with one task after another"
                 + (f" (+ {unknown} task(s) without a time estimate)" if unknown else ""))
    lines.append("estimates:")
    seen = set()
    for t in plan.tasks:
        key = (t.experiment, t.variant)
        if key not in seen:
            seen.add(key)
            lines.append(f"  {t.experiment}.{t.variant}: {t.estimate.basis}")
    lines.append(f"backend: {backend}; run dir: {run_dir} ({run_dir_note})")
    forced = " (oversubscription allowed)" if plan.oversubscribe else ""
    lines.append(f"limits of {plan.capacity.describe()}{forced}")
    problems = [*extra_problems, *plan.problems]
    if problems:
        lines.append(f"REFUSED: {len(problems)} problem(s); a real run would start nothing:")
        lines += [f"  {p}" for p in problems]
    else:
        lines.append("limits: ok; the run would start")
    return "\n".join(lines)


def dry_run(suite: Suite, run_dir: Path, *, backend: str, options: dict[str, Any] | None = None,
            oversubscribe: bool = False, resuming: bool = False) -> tuple[str, bool]:
    """What ``hpcbench run/suite`` would do, as text, and whether it would start; reads only.

    Checks what a real run checks first: the backend can run here, the run dir is free
    (unless ``resuming`` it), and the limits.
    """
    from hpcbench.run.backends import BACKENDS

    extra = []
    try:
        BACKENDS.get(backend).check(options or {})
    except HpcbenchError as exc:
        extra.append(f"backend {backend} cannot run here: {exc}")
    run_dir = Path(run_dir)
    if not resuming and run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        extra.append(f"run dir {run_dir} already exists and is not an empty folder")
    plan = plan_run(suite, capacity_for(backend, options), oversubscribe=oversubscribe)
    what = "resume" if resuming else "suite"
    header = f"dry run of {what} {suite.name}: {len(suite.tasks)} task(s); nothing is started or written"
    text = render_plan(plan, run_dir=run_dir, backend=backend, extra_problems=extra, header=header,
                       run_dir_note="the run's own, unchanged: dry run" if resuming else "not created: dry run")
    return text, plan.ok and not extra


def dry_run_resume(run_dir: Path, *, backend: str | None = None, options: dict[str, Any] | None = None,
                   oversubscribe: bool = False) -> tuple[str, bool]:
    """:func:`dry_run` of ``suite resume RUN_DIR``: the tasks not done, on the run's backend unless given."""
    from hpcbench.run.rundir import load_run, tasks_to_resume

    suite, info = load_run(Path(run_dir))
    todo = tasks_to_resume(Path(run_dir), suite)
    backend = backend or info.get("backend", "local")
    if not todo:
        return f"{run_dir}: every task is done; resume would start nothing", True
    todo_suite = Suite(suite.name, suite.description, todo, suite.source, suite.oversubscribe)
    return dry_run(todo_suite, Path(run_dir), backend=backend, options=options, oversubscribe=oversubscribe,
                   resuming=True)


__all__ = ["CAPACITIES", "Capacity", "LimitError", "RunPlan", "TaskPlan", "capacity_for", "check_limits",
           "dry_run", "dry_run_resume", "local_capacity", "mem_available", "memory_problem", "plan_run", "plan_task",
           "rank_problem", "render_plan", "slurm_capacity", "smallest_node_memory", "usable_cores"]
