"""Apply a fault for a block, record what was applied and when, and always undo it.

Every experiment that breaks something for a phase (monitoring, practice) goes through
:func:`apply_and_record`, so the guarantees hold once for all of them:

* a fault that cannot be applied here is a recorded fact (value NaN, the reason as text), and
  the block runs without it;
* the fault is undone when the block ends, also when the block raises;
* what was done is one ``fault_injected`` row (1 when applied and undone, NaN otherwise; the
  fault's log as text; the row's time is when it went on), plus ``fault_tcp_retransmitted``
  for the faults that count the node's retransmissions;
* an undo that fails (even half-way) is recorded; it never hides the block's own exception (it
  is added to it as a note) and is raised as :class:`FaultUndoError` when the block succeeded,
  since the next phase would run on a node still broken.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from hpcbench.fault.inject.base import FAULT_KINDS, FaultError, FaultSite, NodeFault, build_node_part

#: The records' metrics (the experiments' summaries read them by these names).
INJECTED, RANK_PART, RETRANSMITTED = "fault_injected", "fault_rank_part", "fault_tcp_retransmitted"


class FaultUndoError(FaultError):
    """A fault could not be (fully) undone; the message says what failed."""


@dataclass
class AppliedFault:
    """What :func:`apply_and_record` did with one fault."""

    labels: dict[str, Any]
    fault: Any = None
    applied: bool = False
    undone: bool | None = None
    """None while applied (or never applied)"""
    text: str = ""
    """what was recorded as the row's text"""
    undo_error: BaseException | None = field(default=None, repr=False)


def _undo(fault: Any, applied: AppliedFault, what: Any) -> None:
    try:
        fault.__exit__(None, None, None)
    except Exception as exc:  # noqa: BLE001 - reported by the caller, never swallowed
        applied.undo_error = exc
    failed = f"{type(applied.undo_error).__name__}: {applied.undo_error}" if applied.undo_error else ""
    if isinstance(fault, NodeFault):
        applied.undone = fault.log.undone and not failed
        applied.text = fault.log.describe() + (f"\n  undo failed: {failed}" if failed else "")
    else:
        applied.undone = not failed
        applied.text = f"{what}; undone" if not failed else f"{what}; NOT undone: {failed}"


@contextlib.contextmanager
def apply_and_record(fault: Any, writer: Any, labels: Mapping[str, Any], *,
                     metric: str = INJECTED) -> Iterator[AppliedFault]:
    """``fault`` on for the ``with`` block, recorded by ``writer``, undone after it whatever happens.

    Args:
        fault: a :class:`~hpcbench.fault.inject.base.NodeFault`; any other context manager whose
            ``__enter__`` returns words on what it did (a rank's own part); or a str: why it
            cannot be applied here (recorded, and the block runs without it).
        writer: a :class:`~hpcbench.core.results.RecordWriter`.
        labels: the rows' labels (``fault``, ``node``...).
        metric: the row's metric (``fault_injected``; ``fault_rank_part`` for a rank's own part).
    Yields:
        The :class:`AppliedFault`, filled in as the block ends.
    Raises:
        FaultUndoError: the undo failed and the block itself did not raise.
    """
    labels = dict(labels)
    applied = AppliedFault(labels, fault=None if isinstance(fault, str) else fault)
    why_not = f"not injected: {fault}" if isinstance(fault, str) else None
    what: Any = None
    started = time.time()
    if why_not is None:
        try:
            what = fault.__enter__()
        except Exception as exc:  # noqa: BLE001 - a fault that cannot be applied is a recorded fact, not a crash
            why_not = f"not injected: {type(exc).__name__}: {exc}"
    if why_not is not None:
        applied.text = why_not
        writer.add(metric, None, "bool", labels=labels, text=why_not)
        yield applied
        return
    applied.applied = True
    started = getattr(getattr(fault, "log", None), "started", None) or started
    try:
        yield applied
    except BaseException as body_error:
        _finish(fault, applied, what, writer, metric, started)
        if applied.undo_error is not None:
            body_error.add_note(f"and the fault could not be undone: {applied.text}")
        raise
    _finish(fault, applied, what, writer, metric, started)
    if applied.undo_error is not None:
        raise FaultUndoError(applied.text) from applied.undo_error


def _finish(fault: Any, applied: AppliedFault, what: Any, writer: Any, metric: str, started: float) -> None:
    """Undo ``fault`` and write its rows (what it did, when it went on, and the retransmissions it caused)."""
    _undo(fault, applied, what)
    writer.add(metric, 1.0 if applied.undone else None, "bool", labels=applied.labels, text=applied.text,
               when=started)
    sent = getattr(fault, "sent", None)
    if sent:
        retransmitted = fault.retransmitted
        writer.add(RETRANSMITTED, retransmitted / sent, "fraction", labels=applied.labels,
                   text=f"{retransmitted:g} of {sent:g} segments retransmitted in the node's namespace "
                        f"while the fault was on (/proc/net/snmp)")


@contextlib.contextmanager
def node_fault_for_phase(name: str, site: FaultSite, writer: Any, labels: Mapping[str, Any], *,
                         baseline: str = "none") -> Iterator[AppliedFault | None]:
    """Fault kind ``name``'s node part (:data:`~hpcbench.fault.inject.base.FAULT_KINDS`) on ``site`` for the block.

    Run by one process per faulty node (the injector). ``baseline`` (the phase without a fault)
    and a kind whose only part is the ranks' own are recorded as such; everything else goes
    through :func:`apply_and_record`.
    """
    if name == baseline:
        writer.add(INJECTED, None, "bool", labels=dict(labels), text="baseline: no fault")
        yield None
        return
    fault = build_node_part(name, site)
    if fault is None:
        writer.add(INJECTED, 1.0, "bool", labels=dict(labels), text=f"{name}: no node part (the ranks' own)")
        yield None
        return
    with apply_and_record(fault, writer, labels) as applied:
        yield applied


@contextlib.contextmanager
def rank_part_for_phase(name: str, settings: Any, writer: Any, labels: Mapping[str, Any], *,
                        baseline: str = "none") -> Iterator[AppliedFault | None]:
    """Fault kind ``name``'s rank part (what each rank of the faulty node does to itself) for the block, recorded
    as ``fault_rank_part``; nothing for the baseline or a kind without one."""
    kind = FAULT_KINDS.get(name) if name != baseline else None
    if kind is None or kind.rank_part is None:
        yield None
        return
    with apply_and_record(kind.rank_part(settings), writer, labels, metric=RANK_PART) as applied:
        yield applied
