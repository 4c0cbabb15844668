"""What a training experiment's worker records for the diagnostics (T-diag), the same way in every experiment.

The techniques live in :mod:`~hpcbench.diag.step_breakdown`, :mod:`~hpcbench.diag.trace` and
:mod:`~hpcbench.diag.divergence`; this module is the glue between them and a rank's
:class:`~hpcbench.core.results.RecordWriter`, so that every training experiment writes the same
rows (and the report reads them with :mod:`hpcbench.diag.report`):

* :func:`record_tf32` (every rank): ``tf32_state`` text rows, one per setting;
* :func:`record_same_start` (collective): :func:`~hpcbench.diag.divergence.check_same_start` on
  the freshly built model, a ``same_start`` row on the lead rank;
* :func:`phase_accumulation_step`: one optimizer step of k micro-steps (DDP's ``no_sync`` on all
  but the last) with each phase timed by a :class:`StepTimer`, for experiments whose timed
  steps run through code the timer cannot wrap: they time a few extra, untimed steps with it
  (:data:`BREAKDOWN_STEPS`) after their measurement;
* :func:`record_trace` (collective when the step is): a few extra steps under
  ``torch.profiler``, the Chrome trace written to ``<task dir>/trace/<rank>.json`` and its
  ``trace_file``, gap and top-operator rows recorded.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Mapping

from hpcbench.core.errors import ResultsError
from hpcbench.core.results import PATH_UNIT, RECORDS_SUBDIR, stored_path
from hpcbench.diag.divergence import check_same_start, tf32_state
from hpcbench.diag.step_breakdown import StepTimer
from hpcbench.diag.trace import profile_steps, trace_summary

__all__ = ["BREAKDOWN_STEPS", "TRACE_ACTIVE", "TRACE_STEPS", "TRACE_TOP_OPS", "TRACE_WAIT", "TRACE_WARMUP",
           "phase_accumulation_step", "record_same_start", "record_tf32", "record_trace", "task_dir"]

#: Profiled steps of :func:`record_trace`: skipped (the profiler starts), warm-up (its start-up
#: cost is not recorded), recorded. Two recorded steps show one step's gaps next to the next's.
TRACE_WAIT, TRACE_WARMUP, TRACE_ACTIVE = 1, 1, 2
#: Every extra step a trace costs (for the experiments' time estimates).
TRACE_STEPS = TRACE_WAIT + TRACE_WARMUP + TRACE_ACTIVE
#: Operators per rank recorded from the trace (by self time).
TRACE_TOP_OPS = 5
#: Extra, untimed steps phase-timed by experiments that cannot wrap their timed steps: three
#: give a jitter (two would give one difference) at little cost.
BREAKDOWN_STEPS = 3


def task_dir(writer: Any) -> Path:
    """The task directory of a rank's writer: the launcher writes records to ``<task dir>/records/``."""
    folder = Path(writer.path).resolve().parent
    return folder.parent if folder.name == RECORDS_SUBDIR else folder


def record_tf32(writer: Any) -> None:
    """``tf32_state`` rows (text, label ``setting``) of this rank: call it on every rank, since nodes can differ
    (an ``NVIDIA_TF32_OVERRIDE`` exported on some)."""
    for setting, value in tf32_state().items():
        writer.add("tf32_state", None, "", labels={"setting": setting}, text=str(value))


def record_same_start(writer: Any, model: Any, *, lead: bool, labels: Mapping[str, Any] | None = None,
                      group: Any = None) -> str:
    """Check that every rank built the same initial parameters and record it (collective: every rank calls it).

    Call it on the freshly built model, before DDP (whose constructor broadcasts rank 0's weights
    and would hide a rank seeded differently).

    Args:
        writer: this rank's writer; the ``same_start`` row (1.0, ``bool``) is written by ``lead`` only.
        model: the model before wrapping.
        lead: whether this rank writes the row.
        labels: the row's labels (the model's name...).
        group: a process group (None: the world).
    Returns:
        The common parameter checksum.
    Raises:
        DivergenceError: on every rank alike, naming the ranks whose parameters differ.
    """
    import torch.distributed as dist

    checksum = check_same_start(model, group)
    if lead:
        writer.add("same_start", 1.0, "bool", labels=dict(labels or {}),
                   text=f"parameter sha256 {checksum[:16]} equal on all {dist.get_world_size(group)} ranks")
    return checksum


def phase_accumulation_step(timer: StepTimer, model: Any, loss_fn: Callable[[Any, Any], Any], optimizer: Any, *,
                            k: int, batch: Callable[[int], tuple[Any, Any]], data_wait: bool,
                            no_sync: bool = True) -> dict[str, float]:
    """One optimizer step over k micro-batches, each phase timed: the step of
    :func:`hpcbench.parallel.overlap.accumulation_step` (losses scaled by 1/k, ``model.no_sync()``
    on all but the last micro-step when ``no_sync``), with the timer's phases around its parts.

    Args:
        timer: where the phases go; the step is closed with :meth:`StepTimer.end_step`.
        model: a DDP module (a plain module has nothing to synchronise).
        loss_fn: ``(output, targets) -> mean loss``.
        optimizer: stepped and zeroed after the last micro-step (phase ``optimizer``).
        k: micro-steps.
        batch: ``batch(i)`` gives micro-batch i (0..k-1) as ``(inputs, targets)`` on the device.
        data_wait: True times ``batch(i)`` as ``data_wait`` (a real loader); False leaves it
            untimed (batches already in memory: there is no loading to time).
        no_sync: False synchronises after every micro-step.
    Returns:
        The step's seconds per phase (:meth:`StepTimer.end_step`).
    """
    skip_sync = getattr(model, "no_sync", None) if no_sync else None
    for i in range(k):
        with timer.phase("data_wait") if data_wait else contextlib.nullcontext():
            x, y = batch(i)
        with skip_sync() if skip_sync is not None and i < k - 1 else contextlib.nullcontext():
            with timer.phase("forward"):
                loss = loss_fn(model(x), y) / k
            timer.backward(loss)
    with timer.phase("optimizer"):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return timer.end_step()


def record_trace(writer: Any, step: Callable[[StepTimer], Any], *, device: Any, rank: int,
                 labels: Mapping[str, Any]) -> Path | None:
    """Profile :data:`TRACE_STEPS` extra steps and record the trace (every rank the same number of steps).

    Args:
        writer: this rank's writer; the trace goes to ``<task dir>/trace/<rank>.json``.
        step: runs one training step, its phases timed by the :class:`StepTimer` it is given
            (``annotate=True``: the phases show in the trace as ``phase:<name>``). A collective step
            must line the ranks up itself (a barrier before it).
        device: the step's device.
        rank: the global rank (the file's name).
        labels: labels of the rows written (what was profiled).
    Returns:
        The trace file, or None when none was written (a ``trace_file`` row says why).

    Rows: ``trace_file`` (unit ``path``, text: the path relative to the run directory, see
    :func:`hpcbench.core.results.stored_path`; unit ``""`` with why when none), ``trace_gap_seconds``,
    ``trace_gap_largest_seconds``,
    ``trace_idle_fraction`` (label ``basis``: GPU kernel gaps, or gaps between top-level CPU
    operators) and ``trace_op_self_seconds`` per top operator (self time per profiled step).
    """
    labels = dict(labels)
    timer = StepTimer(device, annotate=True)
    with profile_steps(task_dir(writer), steps=TRACE_ACTIVE, wait=TRACE_WAIT, warmup=TRACE_WARMUP,
                       rank=rank) as prof:
        for _ in range(prof.total_steps):
            step(timer)
            prof.step()
    if not prof.paths:
        writer.add("trace_file", None, "", labels=labels, text=f"not written: {prof.error or 'profiler saw no step'}")
        return None
    path = prof.paths[0]
    writer.add("trace_file", None, PATH_UNIT, labels=labels, text=stored_path(path, writer.path))
    try:
        summary = trace_summary(path, top=TRACE_TOP_OPS)
    except ResultsError as exc:  # local to this rank: raising would leave the others in a collective
        writer.add("trace_idle_fraction", None, "fraction", labels=labels, text=f"not measured: {exc}")
        return path
    gaps = {**labels, "basis": summary.gaps.basis}
    writer.add("trace_gap_seconds", summary.gaps.total_s, "s", labels=gaps, text=summary.gaps.note)
    writer.add("trace_gap_largest_seconds", summary.gaps.largest_s, "s", labels=gaps)
    writer.add("trace_idle_fraction", summary.gaps.idle_fraction, "fraction", labels=gaps)
    for op in summary.top_ops:
        writer.add("trace_op_self_seconds", op.self_s / max(summary.profiler_steps, 1), "s",
                   labels={**labels, "op": op.name, "device": op.device},
                   text=f"self time per profiled step; {op.calls} calls in {summary.profiler_steps} steps")
    return path
