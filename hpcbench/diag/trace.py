"""A ``torch.profiler`` trace per task, and what the report reads from it (T-diag, guide 5.1).

:func:`profile_steps` wraps ``torch.profiler.profile`` with a wait / warmup / active
schedule and writes the active steps as a Chrome trace (JSON, the format Perfetto and
``chrome://tracing`` open) to ``<task dir>/trace/<rank>.json``::

    with profile_steps(task_dir, steps=2) as prof:
        for _ in range(prof.total_steps):
            train_step()
            prof.step()
    prof.paths  # [Path('<task dir>/trace/0.json')]

:func:`trace_summary` reads such a file back: the operators with the most *self* time
(their time minus that of the operators they call), and **gaps**, the guide's first
lens on utilisation swings:

* GPU traces: idle time between consecutive GPU activities (kernels, memcpy, memset) on
  each stream: launch overhead, host-side stalls, waits for data or for other ranks;
* CPU-only traces have no kernels; the gaps are then those between consecutive *top-level*
  CPU operators on each thread (Python and framework time between operators, the CPU
  analogue of launch gaps). ``GapStats.basis`` says which was measured.

Reference: PyTorch profiler recipe
(https://pytorch.org/tutorials/recipes/recipes/profiler_recipe.html); Chrome trace event
format (complete events ``ph: "X"`` with ``ts``/``dur`` in microseconds).
"""

from __future__ import annotations

import gzip
import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from hpcbench.core.errors import ConfigError, ResultsError

__all__ = ["GPU_CATEGORIES", "GapStats", "OpTime", "StepProfiler", "TRACE_SUBDIR", "TraceSummary", "profile_steps",
           "trace_summary"]

#: Folder of a task's traces, under the task directory.
TRACE_SUBDIR = "trace"
#: Chrome-trace categories of work on a GPU stream (Kineto's names).
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
_CPU_OP = "cpu_op"
_US = 1e-6  # trace timestamps and durations are microseconds


# -- writing a trace --------------------------------------------------------------------------

def _default_rank() -> int:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except ImportError:
        pass
    return int(os.environ.get("RANK", "0"))


class StepProfiler:
    """The context :func:`profile_steps` returns; call :meth:`step` after every training step.

    A trace is evidence, not the run: a profiler that cannot start or a trace that cannot
    be written is noted in :attr:`error` and the steps go on unprofiled, so that every
    rank still runs the same steps (and collectives) as the others.

    Attributes:
        total_steps: wait + warmup + active: the steps to run for one complete trace.
        paths: the trace files written (after the active steps, or at exit inside them).
        error: why no trace was written ("" when none failed).
    """

    def __init__(self, out_dir: str | os.PathLike, *, steps: int, wait: int, warmup: int, enabled: bool,
                 rank: int | None, compress: bool, tag: str, record_shapes: bool, with_stack: bool):
        for name, value, low in (("steps", steps, 1), ("wait", wait, 0), ("warmup", warmup, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"{value!r} is out of range; allowed: an integer >= {low}", field=name,
                                  config="profile_steps")
        self.enabled = enabled
        self.wait, self.warmup, self.active = wait, warmup, steps
        self.total_steps = wait + warmup + steps
        self.rank = _default_rank() if rank is None else rank
        name = f"{tag}.{self.rank}" if tag else str(self.rank)
        self.target = Path(out_dir) / TRACE_SUBDIR / (name + (".json.gz" if compress else ".json"))
        self.paths: list[Path] = []
        self.error = ""
        self._options = {"record_shapes": record_shapes, "with_stack": with_stack}
        self._prof: Any = None

    def _export(self, prof: Any) -> None:
        self.target.parent.mkdir(parents=True, exist_ok=True)
        # Written beside, then renamed: a reader never sees half a trace. The temporary
        # name keeps the suffix, which decides whether torch compresses.
        partial = self.target.with_name("." + self.target.name.replace(".json", ".partial.json", 1))
        try:
            prof.export_chrome_trace(str(partial))
            os.replace(partial, self.target)
        except (OSError, RuntimeError) as exc:
            self.error = f"trace not written to {self.target}: {exc}"
            return
        self.paths.append(self.target)

    def __enter__(self) -> "StepProfiler":
        if not self.enabled:
            return self
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():  # GPU-only: kernels and copies on the streams
            activities.append(ProfilerActivity.CUDA)
        prof = profile(activities=activities,
                       schedule=schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1),
                       on_trace_ready=self._export, **self._options)
        try:
            prof.__enter__()
        except RuntimeError as exc:  # e.g. another profiler is already running in this process
            self.error = f"profiler did not start: {exc}"
            return self
        self._prof = prof
        return self

    def step(self) -> None:
        """Mark the end of one training step (a no-op when disabled)."""
        if self._prof is not None:
            self._prof.step()

    def __exit__(self, *exc: object) -> None:
        if self._prof is not None:
            prof, self._prof = self._prof, None
            prof.__exit__(*exc)


def profile_steps(out_dir: str | os.PathLike, *, steps: int = 2, wait: int = 1, warmup: int = 1,
                  enabled: bool = True, rank: int | None = None, compress: bool = False, tag: str = "",
                  record_shapes: bool = False, with_stack: bool = False) -> StepProfiler:
    """Profile ``wait + warmup + steps`` training steps; the last ``steps`` become a Chrome trace.

    Args:
        out_dir: the task directory; the trace goes to ``out_dir/trace/<rank>.json``
            (``<tag>.<rank>.json`` with a tag, ``.json.gz`` with ``compress``).
        steps: active (recorded) steps.
        wait: steps first skipped (the profiler is off).
        warmup: steps then profiled but discarded (the profiler's own start-up cost).
        enabled: False gives the same object doing nothing, so a loop is written once.
        rank: the file name's rank (default: the process group's rank, else ``$RANK``, else 0).
        compress: gzip the trace (Perfetto opens ``.json.gz``).
        record_shapes, with_stack: ``torch.profiler.profile`` options (larger traces).
    Returns:
        A :class:`StepProfiler`, to use as a context manager.
    Raises:
        ConfigError: a step count out of range.
    """
    return StepProfiler(out_dir, steps=steps, wait=wait, warmup=warmup, enabled=enabled, rank=rank,
                        compress=compress, tag=tag, record_shapes=record_shapes, with_stack=with_stack)


# -- reading a trace --------------------------------------------------------------------------

@dataclass(frozen=True)
class OpTime:
    """One operator's time in a trace, summed over its calls."""

    name: str
    device: str
    """``cpu`` (a CPU operator) or ``gpu`` (a kernel, memcpy or memset)"""
    calls: int
    self_s: float
    """time not spent in the operators it called (for GPU work: its duration)"""
    total_s: float


@dataclass(frozen=True)
class GapStats:
    """Idle time between consecutive pieces of work on each lane (stream or thread) of a trace."""

    basis: str
    """``gpu_kernels`` (GPU activities per stream) or ``cpu_top_level_ops`` (no GPU work in the trace)"""
    lanes: int
    gaps: int
    """gaps longer than zero"""
    total_s: float
    largest_s: float
    span_s: float
    """first start to last end, summed over lanes"""
    idle_fraction: float
    """total_s / span_s (NaN for an empty trace)"""
    note: str = ""


@dataclass(frozen=True)
class TraceSummary:
    """What :func:`trace_summary` found in one trace file."""

    path: Path
    top_ops: list[OpTime]
    gaps: GapStats
    profiler_steps: int
    """``ProfilerStep#N`` annotations: the steps the trace covers"""
    events: int = 0
    """complete (``ph: "X"``) events read"""


def _load_events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, EOFError, ValueError) as exc:
        raise ResultsError(f"not a readable Chrome trace ({exc})", path=str(path)) from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ResultsError("no traceEvents list: not a Chrome trace", path=str(path))
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "dur" in e and "ts" in e]


def _self_times(ops: list[dict[str, Any]]) -> list[float]:
    """Self time (µs) of each op: its duration minus its direct children's, per thread by nesting."""
    selfs = [float(e["dur"]) for e in ops]
    lanes: dict[Any, list[int]] = defaultdict(list)
    for i, e in enumerate(ops):
        lanes[(e.get("pid"), e.get("tid"))].append(i)
    for idx in lanes.values():
        idx.sort(key=lambda i: (float(ops[i]["ts"]), -float(ops[i]["dur"])))
        stack: list[int] = []  # open ops, outermost first
        for i in idx:
            ts = float(ops[i]["ts"])
            while stack and float(ops[stack[-1]]["ts"]) + float(ops[stack[-1]]["dur"]) <= ts + 1e-3:
                stack.pop()
            if stack:
                selfs[stack[-1]] -= float(ops[i]["dur"])
            stack.append(i)
    return [max(s, 0.0) for s in selfs]


def _top_level(ops: Iterable[dict[str, Any]]) -> dict[Any, list[tuple[float, float]]]:
    """Per thread, the (start, end) of ops not nested in another op (µs)."""
    lanes: dict[Any, list[tuple[float, float]]] = defaultdict(list)
    for e in sorted(ops, key=lambda e: (float(e["ts"]), -float(e["dur"]))):
        lane = lanes[(e.get("pid"), e.get("tid"))]
        start, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        if lane and end <= lane[-1][1] + 1e-3:
            continue  # inside the previous top-level op
        lane.append((start, end))
    return lanes


def _gaps(lanes: dict[Any, list[tuple[float, float]]], basis: str, note: str) -> GapStats:
    count, total, largest, span = 0, 0.0, 0.0, 0.0
    for intervals in lanes.values():
        intervals = sorted(intervals)
        if not intervals:
            continue
        end = intervals[0][1]
        for start, stop in intervals[1:]:
            gap = start - end
            if gap > 0:
                count += 1
                total += gap
                largest = max(largest, gap)
            end = max(end, stop)
        span += end - intervals[0][0]
    return GapStats(basis=basis, lanes=len(lanes), gaps=count, total_s=total * _US, largest_s=largest * _US,
                    span_s=span * _US, idle_fraction=total / span if span > 0 else float("nan"), note=note)


def trace_summary(path: str | os.PathLike, *, top: int = 10) -> TraceSummary:
    """The top operators by self time and the gaps of a Chrome trace (``.json`` or ``.json.gz``).

    Args:
        path: a trace written by :func:`profile_steps` (any Kineto Chrome trace works).
        top: how many operators to list.
    Returns:
        A :class:`TraceSummary`; ``gaps.basis`` says whether GPU kernel gaps or (in a trace
        without GPU work) gaps between top-level CPU operators were measured.
    Raises:
        ResultsError: naming the file, when it is not a readable Chrome trace.
    """
    path = Path(path)
    events = _load_events(path)
    cpu = [e for e in events if e.get("cat") == _CPU_OP]
    gpu = [e for e in events if e.get("cat") in GPU_CATEGORIES]
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for e, self_us in zip(cpu, _self_times(cpu)):
        t = totals[(str(e.get("name")), "cpu")]
        t[0] += 1
        t[1] += self_us
        t[2] += float(e["dur"])
    for e in gpu:
        t = totals[(str(e.get("name")), "gpu")]
        t[0] += 1
        t[1] += float(e["dur"])
        t[2] += float(e["dur"])
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][1])[:top]
    ops = [OpTime(name, device, int(calls), self_us * _US, total_us * _US)
           for (name, device), (calls, self_us, total_us) in ranked]
    if gpu:
        lanes: dict[Any, list[tuple[float, float]]] = defaultdict(list)
        for e in gpu:
            stream = (e.get("args") or {}).get("stream", e.get("tid"))
            lanes[(e.get("pid"), stream)].append((float(e["ts"]), float(e["ts"]) + float(e["dur"])))
        gaps = _gaps(lanes, "gpu_kernels", "idle time between consecutive kernels/copies on each GPU stream")
    else:
        gaps = _gaps(_top_level(cpu), "cpu_top_level_ops",
                     "no GPU work in this trace: gaps between consecutive top-level CPU operators on each "
                     "thread (Python and framework time between operators), not kernel gaps")
    steps = sum(1 for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    return TraceSummary(path=path, top_ops=ops, gaps=gaps, profiler_steps=steps, events=len(events))
