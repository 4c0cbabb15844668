"""Prefetching: the DataLoader's prefetch depth, the guide's buffer rule, a device prefetcher.

The guide (C5) sizes the prefetch buffer as ``num_workers x batch_size`` samples. PyTorch's
DataLoader keeps ``prefetch_factor`` batches in flight per worker, i.e.
``num_workers x prefetch_factor x batch_size`` samples, so the guide's rule is
``prefetch_factor = 1``; :func:`prefetch_sweep` gives the depths around it to measure.

:class:`DevicePrefetcher` overlaps the host-to-device copy of batch k+1 with the compute on
batch k: on a GPU with a side CUDA stream (pinned host memory, ``non_blocking`` copies,
``record_stream`` so the caching allocator does not reuse the memory too early); on a CPU
with a background thread that keeps ``depth`` batches ready, which overlaps the
DataLoader's main-process work (collation, ``num_workers=0`` reading) with the step.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Iterable, Iterator

import torch

_END = object()


def buffer_samples(num_workers: int, batch_size: int, prefetch_factor: int) -> int:
    """Samples held ready by a DataLoader: workers x prefetch_factor x batch_size (0 workers: none ahead)."""
    return num_workers * prefetch_factor * batch_size


def guide_prefetch_factor() -> int:
    """The prefetch_factor that makes the buffer num_workers x batch_size (C5): one batch per worker."""
    return 1


def prefetch_sweep(around: int = 1) -> list[int]:
    """Prefetch depths around the guide's: half-way is impossible below 1, so 1, 2x, 4x."""
    return sorted({max(1, around), 2 * around, 4 * around})


def _to_device(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {k: _to_device(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device, non_blocking) for v in batch)
    return batch


def _record_stream(batch: Any, stream) -> None:
    if isinstance(batch, torch.Tensor):
        batch.record_stream(stream)
    elif isinstance(batch, dict):
        for v in batch.values():
            _record_stream(v, stream)
    elif isinstance(batch, (list, tuple)):
        for v in batch:
            _record_stream(v, stream)


class DevicePrefetcher:
    """Iterate ``loader`` with the next batch already on ``device`` (see module docstring).

    Args:
        loader: any iterable of batches (a DataLoader with ``pin_memory=True`` on GPU).
        device: where batches go; ``cpu`` uses a background thread.
        depth: batches kept ready (CPU thread queue size; on GPU one batch is in flight).
    """

    def __init__(self, loader: Iterable, device: str | torch.device = "cpu", depth: int = 2):
        self.loader = loader
        self.device = torch.device(device)
        self.depth = max(1, depth)

    def __iter__(self) -> Iterator[Any]:
        if self.device.type == "cuda":
            return self._cuda()
        return self._thread()

    def _cuda(self) -> Iterator[Any]:  # GPU only: exercised where a GPU is present
        stream = torch.cuda.Stream(device=self.device)
        it = iter(self.loader)

        def preload():
            try:
                batch = next(it)
            except StopIteration:
                return _END
            with torch.cuda.stream(stream):
                return _to_device(batch, self.device, non_blocking=True)

        nxt = preload()
        while nxt is not _END:
            torch.cuda.current_stream(self.device).wait_stream(stream)
            batch = nxt
            _record_stream(batch, torch.cuda.current_stream(self.device))
            nxt = preload()
            yield batch

    def _thread(self) -> Iterator[Any]:
        q: queue.Queue = queue.Queue(maxsize=self.depth)
        stop = threading.Event()

        def produce():
            try:
                for batch in self.loader:
                    put(_to_device(batch, self.device, non_blocking=False))
                    if stop.is_set():
                        return
                put(_END)
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer, re-raised there
                put(exc)

        def put(item):
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return
                except queue.Full:
                    continue

        thread = threading.Thread(target=produce, name="hpcbench-prefetch", daemon=True)
        thread.start()
        try:
            while True:
                item = q.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            thread.join(timeout=5)
