"""What every injected fault shares: its error, its log, the apply/undo template, the registry of kinds.

A fault that lasts (a slower link, a throttled disk, busy neighbours) is a :class:`NodeFault`:
:meth:`~NodeFault._apply` on entry, :meth:`~NodeFault._undo` on exit, always, also after an
apply that failed half-way, and a :class:`FaultLog` of what it did. A kind that an experiment
can put on a node for a phase is registered in :data:`FAULT_KINDS` with how to build it from a
:class:`FaultSite`; :func:`hpcbench.fault.inject.record.apply_and_record` applies it and writes
what happened as records.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, ContextManager, Sequence

from hpcbench.core.errors import HpcbenchError
from hpcbench.core.registry import Registry

#: Seconds a busy or neighbour process gets to exit after SIGTERM before SIGKILL.
STOP_GRACE_S = 2.0


class FaultError(HpcbenchError):
    """A fault could not be injected (nothing matched, no permission); names what was looked for."""


class NodeFaultError(FaultError):
    """A fault could not be applied here; the message says exactly why (and what is needed)."""


@dataclass
class FaultLog:
    """What one fault did: its kind and node, the actions in order, counters, start and stop times."""

    kind: str
    node: str
    actions: list[str] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=dict)
    started: float | None = None
    stopped: float | None = None
    undone: bool = False

    def describe(self) -> str:
        lines = [f"{self.kind} on {self.node}: " + ("undone" if self.undone else "NOT undone")]
        lines += [f"  {a}" for a in self.actions]
        if self.counters:
            lines.append("  counters: " + ", ".join(f"{k}={v:g}" for k, v in sorted(self.counters.items())))
        if self.started is not None and self.stopped is not None:
            at = datetime.fromtimestamp(self.started, timezone.utc).strftime("%H:%M:%S.%f")[:-3]
            lines.append(f"  on from {at} UTC for {self.stopped - self.started:.2f} s")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "node": self.node, "actions": list(self.actions), "counters": dict(self.counters),
                "started": self.started, "stopped": self.stopped, "undone": self.undone}


class NodeFault:
    """Template of a fault: :meth:`_apply` on entry, :meth:`_undo` on exit (always, also after a failed apply).

    Subclasses fill in the two methods and append to ``self.log.actions``; ``_undo`` must be
    safe to call after a partial ``_apply``.
    """

    kind = "fault"

    def __init__(self, node: str) -> None:
        self.log = FaultLog(self.kind, node)
        self._active = False

    def __enter__(self) -> "NodeFault":
        if self._active:
            raise NodeFaultError(f"{self.kind} on {self.log.node} is already applied")
        self._active = True
        try:
            self._apply()
        except BaseException:
            self._exit()
            raise
        self.log.started = time.time()
        return self

    def __exit__(self, *exc) -> None:
        self._exit()

    def _exit(self) -> None:
        if not self._active:
            return
        self._active = False
        try:
            self._undo()
            self.log.undone = True
        finally:
            self.log.stopped = time.time()

    def _apply(self) -> None:
        raise NotImplementedError

    def _undo(self) -> None:
        raise NotImplementedError


def run_tool(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess:
    """Run a host tool (tc, ip, nsenter) for a fault; :class:`NodeFaultError` names the command when it fails."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NodeFaultError(f"`{' '.join(argv)}` could not run: {exc}") from None
    if check and proc.returncode != 0:
        raise NodeFaultError(f"`{' '.join(argv)}` failed (rc {proc.returncode}): {proc.stderr.strip()}")
    return proc


def stop_processes(procs: Sequence[subprocess.Popen], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM every process of ``procs``, SIGKILL those still there ``grace_s`` later; all reaped."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- the kinds an experiment can put on a node for a phase ------------------------------------------

@dataclass(frozen=True)
class FaultSite:
    """What a fault acts on: the faulty node, its ranks' pids, the task's data set, the settings it reads."""

    node: str
    pids: list[int]
    data: Path
    settings: Any
    """the experiment's config: each kind reads the fields it names in :attr:`FaultKind.reads`"""


@dataclass(frozen=True)
class FaultKind:
    """One fault an experiment can apply to a node for a phase."""

    name: str
    how: str
    """what is really done, in words (naming the settings it reads)"""
    node_part: Callable[[FaultSite], Any] | None
    """site -> a NodeFault to apply on the node, or why not (str); None: the fault has no node part"""
    rank_part: Callable[[Any], ContextManager[str]] | None = None
    """settings -> a context manager each rank of the faulty node enters, yielding what it did
    (only a process can change its own threads)"""
    needs_cluster: bool = False
    """needs the emulated cluster's per-node link"""
    reads: tuple[str, ...] = ()
    """the settings fields the kind reads"""


FAULT_KINDS: Registry[FaultKind] = Registry("fault kind")


def build_node_part(name: str, site: FaultSite):
    """The node part of fault ``name`` at ``site`` (a NodeFault), None without one, or why it cannot be here (str)."""
    kind = FAULT_KINDS.get(name)
    if kind.node_part is None:
        return None
    try:
        return kind.node_part(site)
    except (NodeFaultError, OSError) as exc:
        return str(exc)
