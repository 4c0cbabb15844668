"""Asynchronous checkpoints: copy the state to CPU memory, write it from a background thread.

Training stalls only for the copy (``stall_seconds``); serialization, zstd, the write and the
fsyncs overlap with the next steps. The copy is what makes it safe: the optimizer mutates
parameters and moments in place at the next step, so writing the live tensors from another
thread would save a mix of two steps.

Choices, and why:

* a thread, not a process: a process would need the snapshot handed over again (pickled
  through a pipe or placed in shared memory), and the parts that dominate, zstd compression
  (``zstandard`` releases the GIL), ``write`` and ``fsync``, already run outside the GIL;
* one write in flight: a second :meth:`AsyncCheckpointer.save` *waits* for the first (its
  wait counts in ``stall_seconds``) rather than skipping. Skipping would drop checkpoints
  silently exactly when storage is slow; waiting makes slow storage visible as a stall, and
  holds at most two snapshots (the one being written, the one being taken) in memory;
* errors raised in the background (a full disk) are re-raised by the next ``save()`` or
  ``wait()``, so they cannot pass unnoticed;
* the thread is not a daemon: a process that ends normally first finishes the write it
  started. A killed one leaves a hidden temporary directory, never a checkpoint (see
  :mod:`hpcbench.fault.checkpoint`).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Protocol

import torch

from hpcbench.core.errors import CheckpointError


class CheckpointWriter(Protocol):
    """What the background writer needs of :class:`hpcbench.fault.checkpoint.CheckpointManager`.

    A protocol, not an import: the manager itself makes an :class:`AsyncCheckpointer` for its
    asynchronous light saves, so importing it here would make the two modules import each other.
    """

    root: Path

    def save(self, tier: str, step: int, state: dict, *, mark: bool = True) -> Any: ...

    def mark_saved(self, tier: str) -> None: ...


__all__ = ["AsyncCheckpointer", "CheckpointWriter", "snapshot_to_cpu"]


def snapshot_to_cpu(state: Any) -> Any:
    """A copy of ``state`` whose tensors are fresh CPU tensors (containers rebuilt, aliasing kept).

    Tensors that are the same object (tied weights) stay one tensor in the copy. GPU tensors
    are copied into pinned memory without blocking and synchronized once at the end.
    """
    memo: dict[int, torch.Tensor] = {}
    cuda_copies = False

    def copy(obj: Any) -> Any:
        nonlocal cuda_copies
        if isinstance(obj, torch.Tensor):
            key = id(obj)
            if key not in memo:
                t = obj.detach()
                if t.is_cuda:
                    out = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)
                    out.copy_(t, non_blocking=True)
                    cuda_copies = True
                else:
                    out = t.clone()
                memo[key] = out
            return memo[key]
        if isinstance(obj, dict):
            return type(obj)((k, copy(v)) for k, v in obj.items())
        if isinstance(obj, list):
            return [copy(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(copy(v) for v in obj)
        return obj  # ints, floats, strings, None: immutable

    out = copy(state)
    if cuda_copies:
        torch.cuda.synchronize()
    return out


class AsyncCheckpointer:
    """Snapshot on the caller's thread, write on a background one, through ``manager.save``.

    Attributes:
        stall_seconds: how long the last :meth:`save` blocked its caller (waiting for the
            previous write, plus the snapshot).
        last: what the last finished background write saved.
    """

    def __init__(self, manager: CheckpointWriter):
        self.manager = manager
        self.stall_seconds = 0.0
        self.last: Any = None  # the manager's SavedCheckpoint
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._what = ""

    def save(self, tier: str, step: int, state: dict) -> None:
        """Snapshot ``state`` to CPU memory and start writing it; returns before the write.

        Raises:
            CheckpointError: the previous background write failed.
        """
        t0 = time.perf_counter()
        self._join()
        self._raise_pending()
        snap = snapshot_to_cpu(state)
        # the interval clocks count from the captured state, not from the end of its write
        self.manager.mark_saved(tier)
        self._what = f"{tier} checkpoint of step {step}"
        self._thread = threading.Thread(target=self._write, args=(tier, step, snap),
                                        name=f"hpcbench-checkpoint-{tier}-{step}")
        self._thread.start()
        self.stall_seconds = time.perf_counter() - t0

    def wait(self) -> Any:
        """Wait for the write in flight; re-raise its error. Returns the last finished write."""
        self._join()
        self._raise_pending()
        return self.last

    @property
    def busy(self) -> bool:
        """A write is in flight."""
        return self._thread is not None and self._thread.is_alive()

    def _write(self, tier: str, step: int, snap: dict) -> None:
        try:
            self.last = self.manager.save(tier, step, snap, mark=False)
        except BaseException as exc:  # handed to the caller's thread by _raise_pending
            self._error = exc

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _raise_pending(self) -> None:
        exc, self._error = self._error, None
        if exc is None:
            return
        if isinstance(exc, CheckpointError):
            raise exc
        raise CheckpointError(f"background write of the {self._what} failed: {exc!r}",
                              path=self.manager.root) from exc
