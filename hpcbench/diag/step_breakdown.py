"""Where a training step's time goes: data wait, forward, backward, exposed communication, optimizer.

The guide's section 5.1 (T-diag) reads GPU utilisation swings through three lenses: gaps
between kernels (:mod:`hpcbench.diag.trace`), communication wait and data-loading latency.
:class:`StepTimer` splits every step into those phases, so a training experiment records
them next to its step time::

    timer = StepTimer(device)
    for batch in loader:                         # or time the fetch itself:
        with timer.phase("data_wait"):
            x, y = next(it)
        with timer.phase("forward"):
            loss = loss_fn(model(x), y)
        timer.backward(loss)                     # backward + comm_wait
        with timer.phase("optimizer"):
            opt.step(); opt.zero_grad()
        steps.append(timer.end_step())

**Exposed communication wait** (``comm_wait``). DDP all-reduces a gradient bucket as soon
as its gradients are computed, so most communication overlaps backward; what is left is
the wait *after* autograd computed the last gradient, until every bucket's reduction has
finished (DDP's ``finalize_backward`` waits on the buckets' futures, then copies the
averaged gradients back). :meth:`StepTimer.backward` measures it without touching DDP: a
hook on the loss queues an autograd *final callback* as soon as backward starts; autograd
runs final callbacks in the order they were queued, and DDP queues its own (the wait) only
when the last bucket is ready, so ours runs first and marks the end of gradient compute.
``backward`` = start of ``loss.backward()`` to that mark, ``comm_wait`` = the mark to the
return of ``loss.backward()`` (on GPU: to the point on the stream where the reduced
gradients are ready).

What ``comm_wait`` includes: the reductions that did not finish under backward, and a
slower rank's lateness (a rank that computes faster waits for the others' buckets; that
is why the phase differs between ranks). What it does not include: communication a comm
hook does synchronously inside backward (counted in ``backward``), collectives outside
``loss.backward()`` (a loss all-reduce, a barrier: time them with ``phase("comm_wait")``),
and work in DDP's forward (the buffer broadcast is counted in ``forward``). Without DDP it
is near zero (the cost of the callback itself).

Timing: on CPU ``time.perf_counter``; on CUDA pairs of ``torch.cuda.Event`` recorded on the
current stream and resolved in :meth:`StepTimer.end_step` (one synchronisation per step,
after the step). A CUDA phase is the *stream's* time between its marks: a host-side wait
(``data_wait``) shows only as far as it leaves the GPU idle, which is the share that costs
utilisation.

Reference: PyTorch DDP design notes (https://pytorch.org/docs/stable/notes/ddp.html);
``torch/csrc/distributed/c10d/reducer.cpp`` (``mark_variable_ready`` queues
``finalize_backward`` as an autograd final callback).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from typing import Any, Iterator, Mapping, Sequence

from hpcbench.core.errors import ConfigError, HpcbenchError

__all__ = ["OTHER", "PHASES", "STEP", "StepTimer", "StepTimerError", "breakdown_records", "jitter",
           "write_breakdown"]

#: The phases of a training step, in the order they happen.
PHASES = ("data_wait", "forward", "backward", "comm_wait", "optimizer")
#: Key of a step's time outside every phase (Python between phases, barriers, logging).
OTHER = "other"
#: Key of the whole step: from the first phase's start to :meth:`StepTimer.end_step`.
STEP = "step"


class StepTimerError(HpcbenchError):
    """A :class:`StepTimer` was used out of order (a phase inside a phase, a step with no phase)."""


class StepTimer:
    """Times the phases of one training step after another (see the module docstring).

    Args:
        device: the step's device (``torch.device`` or a string); CUDA devices use events.
        annotate: also wrap each phase in ``torch.profiler.record_function("phase:<name>")``,
            so that a profiler trace (:mod:`hpcbench.diag.trace`) shows the phases.

    Attributes:
        steps: every dict :meth:`end_step` returned, in order.
    """

    def __init__(self, device: Any = "cpu", *, annotate: bool = True):
        import torch

        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"  # GPU-only path: events instead of perf_counter
        self.annotate = annotate
        self.steps: list[dict[str, float]] = []
        self._marks: list[tuple[str, Any, Any]] = []  # (phase, start, end) of the current step
        self._open: str | None = None

    # -- clocks --------------------------------------------------------------------------
    def _now(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        import torch  # GPU-only

        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def _seconds(self, start: Any, end: Any) -> float:
        if not self.cuda:
            return end - start
        return start.elapsed_time(end) / 1e3  # GPU-only; elapsed_time is in ms

    # -- phases --------------------------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase ``name`` (one of :data:`PHASES`); a phase repeated in a step adds up.

        Raises:
            ConfigError: ``name`` is not a phase.
            StepTimerError: another phase is open (phases do not nest: their sum would count twice).
        """
        if name not in PHASES:
            raise ConfigError(f"{name!r} is not a phase; allowed: {list(PHASES)}", field="phase")
        if self._open is not None:
            raise StepTimerError(f"phase {name!r} started inside phase {self._open!r}; phases do not nest")
        self._open = name
        record = contextlib.nullcontext()
        if self.annotate:
            import torch

            record = torch.profiler.record_function(f"phase:{name}")
        try:
            with record:
                start = self._now()
                yield
                end = self._now()
            self._marks.append((name, start, end))
        finally:
            self._open = None

    def backward(self, loss: Any, **backward_kwargs: Any) -> None:
        """``loss.backward()``, timed as ``backward`` (gradient compute) then ``comm_wait``.

        ``comm_wait`` is what DDP waits for after the last gradient is computed (see the
        module docstring for what it includes and not).

        Args:
            loss: a scalar tensor that requires grad.
            backward_kwargs: passed to ``loss.backward`` (``retain_graph``...).
        """
        import torch

        if self._open is not None:
            raise StepTimerError(f"backward started inside phase {self._open!r}; phases do not nest")
        mark: list[Any] = []

        def note_compute_done() -> None:
            mark.append(self._now())

        def queue_mark(grad: Any) -> Any:
            # Runs first in backward; the callback it queues runs after the whole graph,
            # before DDP's finalize (queued later, once the last bucket is ready).
            torch.autograd.Variable._execution_engine.queue_callback(note_compute_done)
            return grad

        handle = loss.register_hook(queue_mark) if loss.requires_grad else None
        self._open = "backward"
        record = torch.profiler.record_function("phase:backward+comm_wait") if self.annotate \
            else contextlib.nullcontext()
        try:
            with record:
                start = self._now()
                loss.backward(**backward_kwargs)
                end = self._now()
        finally:
            self._open = None
            if handle is not None:
                handle.remove()
        middle = mark[0] if mark else end
        self._marks.append(("backward", start, middle))
        self._marks.append(("comm_wait", middle, end))

    def end_step(self) -> dict[str, float]:
        """Close the step and return its seconds per phase.

        Returns:
            ``{phase: seconds}`` for the phases timed in this step (a phase not timed is
            absent, never 0), :data:`OTHER` (step time outside the phases) and
            :data:`STEP` (first phase's start to now). On CUDA this waits for the step's
            last event (GPU-only).
        Raises:
            StepTimerError: no phase was timed since the last ``end_step`` or one is open.
        """
        if self._open is not None:
            raise StepTimerError(f"end_step inside phase {self._open!r}")
        if not self._marks:
            raise StepTimerError("end_step with no phase timed in this step")
        last = self._now()
        if self.cuda:
            last.synchronize()  # GPU-only: every earlier event on the stream is done too
        out: dict[str, float] = {}
        for name, start, end in self._marks:
            out[name] = out.get(name, 0.0) + self._seconds(start, end)
        step = self._seconds(self._marks[0][1], last)
        ordered = {name: out[name] for name in PHASES if name in out}
        ordered[OTHER] = step - sum(ordered.values())
        ordered[STEP] = step
        self._marks = []
        self.steps.append(ordered)
        return ordered


# -- statistics and records -----------------------------------------------------------------------

def jitter(step_times: Sequence[float]) -> float:
    """Step-time jitter: the *sample* standard deviation (n - 1) over the mean.

    The sample form because the steps timed are a sample of the run's steps (it is the
    larger, unbiased-variance estimate; for n steps it exceeds the population form by
    sqrt(n / (n - 1))).

    Args:
        step_times: seconds per step.
    Returns:
        std / mean (a fraction; 0.05 = 5 %), NaN for a single step (no spread to measure).
    Raises:
        ConfigError: no steps, or a mean that is not a positive time.
    """
    xs = [float(t) for t in step_times]
    if not xs:
        raise ConfigError("is empty; allowed: one or more step times", field="step_times")
    mean = statistics.fmean(xs)
    if not mean > 0 or math.isinf(mean):
        raise ConfigError(f"mean {mean!r} is not a positive time", field="step_times")
    if len(xs) < 2:
        return math.nan
    return statistics.stdev(xs) / mean


def breakdown_records(steps: Sequence[Mapping[str, float]], labels: Mapping[str, Any] | None = None, *,
                      first_step: int = 0, not_measured: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Rows of the results schema for steps from :meth:`StepTimer.end_step`.

    Per step ``i``: ``step_phase_seconds`` (unit ``s``, label ``phase``: each timed phase and
    :data:`OTHER`) and ``step_seconds``; once: ``step_jitter`` (fraction, :func:`jitter` of
    ``step_seconds``, NaN with a reason for one step), and for each phase in
    ``not_measured`` a row without a value whose text says why.

    Args:
        steps: the per-step dicts.
        labels: the series' labels (model, mode...); ``phase`` is added.
        first_step: the ``step`` column of the first dict.
        not_measured: ``{phase: reason}`` for phases this loop has no such thing for.
    Returns:
        dicts with the keyword arguments of :meth:`hpcbench.core.results.RecordWriter.add`
        (``metric``, ``value``, ``unit``, ``step``, ``labels``, ``text``).
    """
    labels = dict(labels or {})
    rows: list[dict[str, Any]] = []
    for i, step in enumerate(steps):
        for name in (*PHASES, OTHER):
            if name in step:
                rows.append({"metric": "step_phase_seconds", "value": float(step[name]), "unit": "s",
                             "step": first_step + i, "labels": {**labels, "phase": name}, "text": None})
        rows.append({"metric": "step_seconds", "value": float(step[STEP]), "unit": "s", "step": first_step + i,
                     "labels": labels, "text": None})
    for name, reason in (not_measured or {}).items():
        if name not in PHASES:
            raise ConfigError(f"{name!r} is not a phase; allowed: {list(PHASES)}", field="not_measured")
        rows.append({"metric": "step_phase_seconds", "value": None, "unit": "s", "step": first_step,
                     "labels": {**labels, "phase": name}, "text": f"not measured: {reason}"})
    if steps:
        value = jitter([s[STEP] for s in steps])
        rows.append({"metric": "step_jitter", "value": None if math.isnan(value) else value, "unit": "fraction",
                     "step": first_step, "labels": labels,
                     "text": (f"sample std / mean of step_seconds over {len(steps)} steps" if not math.isnan(value)
                              else "not measured: one step has no spread")})
    return rows


def write_breakdown(writer: Any, steps: Sequence[Mapping[str, float]], labels: Mapping[str, Any] | None = None,
                    **kwargs: Any) -> int:
    """Add :func:`breakdown_records` to a :class:`~hpcbench.core.results.RecordWriter`; returns the row count."""
    rows = breakdown_records(steps, labels, **kwargs)
    for row in rows:
        writer.add(row["metric"], row["value"], row["unit"], step=row["step"], labels=row["labels"], text=row["text"])
    return len(rows)
