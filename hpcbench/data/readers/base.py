"""The reader template: epoch plan, shuffle buffer, resilient shard reads, JPEG decoding.

A subclass implements one method, :meth:`ShardedImageDataset.read_range`, that yields
``(jpeg_bytes, label)`` for positions ``start .. stop-1`` of one opened shard. Everything
else is shared, so the formats differ only in how bytes come off storage:

* which samples this process reads: :func:`hpcbench.data.plan.epoch_pieces` with
  ``consumer = rank x num_workers + worker`` (exactly once per epoch over all ranks and
  DataLoader workers; ``rank``/``world_size`` are passed in, no process group needed);
* shard checks, repairs and open counting: :class:`hpcbench.data.resilience.ShardAccess`;
* decoding: :func:`decode_jpeg`: to a target size, at the smallest DCT scale that still covers it
  (``jpeg_decode="scaled"``, the default), or at full size (``"full"``), then resized.

Each item is a dict: ``image`` (uint8 CHW tensor, or the raw JPEG ``bytes`` when
``decode=False``), ``label``, ``index`` (position in the data set, the same in
every format), ``nbytes`` (JPEG bytes), ``read_s`` (storage time of this sample: the
first sample of a shard also carries the shard's open and check) and ``opens`` (files
opened to produce it). Summing ``opens`` over an epoch counts every open of every worker.

A resized decode (``image_size``) need not make every pixel of the full image: libjpeg can compute
the image at 1/2, 1/4 or 1/8 of its size in the DCT domain, skipping most of the inverse DCT, the
colour conversion and the upsampling of what the resize would throw away (what FFCV- and DALI-class
loaders exploit). ``jpeg_decode="scaled"`` decodes at the smallest such scale whose image still
covers ``image_size`` on both sides (PIL's ``draft``), then resizes as the full path does; an image
under twice the target on a side has no such scale and takes the full path, pixel for pixel. The
entropy decoding of every coefficient is not skipped at any scale, so the gain grows with the
image's size over the target. The result stays within :data:`SCALED_DECODE_MAX_MAD` and
:data:`SCALED_DECODE_MIN_PSNR_DB` of the full path's (``tests/test_data_formats.py``).

Batches built in the reader process (``batch_in_worker=N``, WebDataset's ``.batched(N)``,
tf.data's batch-before-prefetch): each item is then a whole batch of up to ``N`` samples of
this reader's stream, collated by :func:`collate_samples` with ``pack_bytes=True``; use the
DataLoader with ``batch_size=None`` (:func:`loader_options`). The samples, their order and
their split into batches are those the per-sample path gives with
``DataLoader(batch_size=N, collate_fn=collate_samples)`` (which also collates inside each
worker); the last partial batch of each worker is kept. What differs is how a batch travels
from a worker to the main process: raw JPEG bytes are packed into one uint8 tensor allocated
in shared memory (``image``) with ``image_offsets`` (``N + 1`` int64, sample ``k`` is
``image[offsets[k]:offsets[k + 1]]``; :func:`image_bytes` unpacks), so only a handle is
pickled, instead of ``N`` bytes objects (~N x 110 KB) copied through the worker's pipe.

Zero-copy batches (``batch_in_worker`` with ``decode=False``, the storage path): a format that
can say where each sample's bytes lie in its shard file (:meth:`ShardedImageDataset.sample_extents`:
HDF5 shards with unfiltered contiguous chunks, tar and TFRecord shards, small files) is read without any
per-sample ``bytes``: the samples are planned and shuffled as positions, and each batch's samples
are read with one ``os.preadv`` each straight from the file into the batch's shared tensor, the
one copy a plain ``read`` also makes (from a sha256-checked shard in memory: one ``memcpy``). Same
samples, order, batches, ``opens`` and labels as the per-sample path; a piece whose shard cannot
say (an HDF5 shard written otherwise) is read through :meth:`~ShardedImageDataset.read_range`
and copied once. TFRecord's records must pass their CRC checks on every read: each is read whole
into a scratch buffer that stays in the CPU's cache, checked, and its image copied into the batch
(:mod:`hpcbench.data.readers.tfrecord`).
A read that fails there repairs the shard and reads the sample again, as elsewhere; ``allow_skip``
(which would drop samples from batches already planned) uses the per-sample path.

Run reads (``order="runs"``, zero-copy batches only): on a warm page cache a read of one ~110 KB
sample costs a system call and some Python bookkeeping beyond the copy itself, which is most of
the epoch's CPU. Here each piece is cut into runs of up to ``run_samples`` consecutive samples
(:func:`hpcbench.data.plan.cut_runs`, the first run's length drawn per epoch so that boundaries
move), the runs are shuffled as units in a buffer of ``shuffle_buffer // run_samples`` runs, and a
batch is filled run by run (a run longer than the room left is cut, its rest opens the next
batch). Each run, or the part of it in one batch, is one read straight into the batch tensor,
whatever lies between its samples included (tar headers, TFRecord framing, whose CRC-32Cs are
checked in place, in reads of ~1 MiB of whole records so that each is checked while still in the
core's cache); ``image_spans`` (``N x 2``) says where each sample's bytes lie. Each run begins at
an address congruent to its file offset modulo a cache line (:data:`COPY_ALIGN`, up to 63 bytes of
padding before it): the kernel's copy out of the page cache runs its fast path only when source
and destination lie alike within a line (see :data:`COPY_ALIGN` for what it is worth). The order
is coarser than a per-sample shuffle: a batch holds a few runs of neighbours from the shards
in the buffer (FFCV's quasi-random order makes the same trade). Every sample is still read
exactly once per epoch; a run whose read fails repairs the shard and reads its samples one by
one into the places planned for them.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import random
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, Callable, ClassVar, Iterator

import numpy as np

import torch
from torch.utils.data import IterableDataset, get_worker_info

from hpcbench.data.errors import CorruptRecordError, DataError, ManifestError, ShardError
from hpcbench.data.manifest import load_manifest
from hpcbench.data.page_cache import aligned_buffer
from hpcbench.data.plan import Piece, buffer_shuffle, cut_runs, epoch_pieces
from hpcbench.data.resilience import EventLog, OpenedShard, ShardAccess, ShardCheckFailed, Verify, repair_or_raise
from hpcbench.core.registry import Registry

# torchvision 0.29 deprecates its JPEG decoder in favour of torchcodec, which the tested set
# does not include; the decoder still works, and one decoder for every format keeps the
# formats' read times comparable.
warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of TorchVision",
                        category=DeprecationWarning)

#: Faults that trigger a repair and a retry (guide sec. 2.5: IOError or checksum error).
REPAIRABLE = (OSError, CorruptRecordError, ShardCheckFailed)

#: The orders a zero-copy reader reads an epoch's samples in (``ShardedImageDataset(order=...)``).
ORDERS = ("samples", "runs")


#: How a reader decodes a JPEG it resizes (``ShardedImageDataset(jpeg_decode=...)``, :func:`decode_jpeg`):
#: ``scaled`` at the smallest DCT scale that still covers the target size, ``full`` at full size.
JPEG_DECODES = ("scaled", "full")

#: How far a scaled decode may lie from the full-size one, per image, at a target of
#: :data:`SCALED_DECODE_CHECKED_AT` px (tests/test_data_formats.py holds it on generated JPEGs of ImageNet's
#: mean size and of a few times it). The DCT-domain reduction low-passes what the antialiased resize would have
#: low-passed anyway; the two filters' shapes differ, which moves fine texture by a few levels of 255, most
#: where a 1/4 decode lands just above the target. The bounds sit above the worst image of the generated sets
#: (the measured worst cases are on the dated pages under reports/) with room for other libjpeg-turbo builds, and
#: below what a wrong decode gives (channels swapped, the grid shifted by a pixel, a scale far too coarse: the
#: test checks those too). Smaller targets, reached at 1/4 or 1/8 more often, differ more.
SCALED_DECODE_CHECKED_AT = 224
"""the target size the bounds are stated for: the benchmark's, ImageNet training's"""
SCALED_DECODE_MAX_MAD = 8.0
"""mean absolute difference, in levels of 0..255, over every pixel and channel of one image"""
SCALED_DECODE_MIN_PSNR_DB = 27.0
"""peak signal-to-noise ratio of one image against the full path's, in dB"""


def decode_jpeg(data: bytes, image_size: int | None = None, jpeg_decode: str = "scaled") -> torch.Tensor:
    """JPEG bytes -> uint8 RGB tensor (3, H, W), resized to ``image_size`` squared when given.

    The one decoding path of every reader, so that formats differ only in storage.

    Args:
        image_size: the square side to resize to; None keeps the image's size (then there is nothing
            to scale: both ways decode at full size).
        jpeg_decode: ``"scaled"``: decode at the smallest DCT scale (1/2, 1/4, 1/8) whose image still
            covers ``image_size`` on both sides, then resize (module docstring); ``"full"``: decode at
            full size (``torchvision.io.decode_jpeg``), then resize. Both resize with torchvision's
            antialiased bilinear filter.

    Returns:
        The image; a scaled decode lies within :data:`SCALED_DECODE_MAX_MAD` and
        :data:`SCALED_DECODE_MIN_PSNR_DB` of the full one.

    Raises:
        RuntimeError: ``data`` is not a decodable JPEG.
        DataError: an unknown ``jpeg_decode``.
    """
    import torchvision.io
    from torchvision.transforms.v2 import functional as F

    if jpeg_decode not in JPEG_DECODES:
        raise DataError(f"jpeg_decode={jpeg_decode!r}; choose one of {', '.join(map(repr, JPEG_DECODES))}")
    if image_size and jpeg_decode == "scaled":
        image = _decode_scaled(data, image_size)
        if image is not None:
            return F.resize(image, [image_size, image_size], antialias=True)
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    image = torchvision.io.decode_jpeg(raw, mode=torchvision.io.ImageReadMode.RGB)
    if image_size:
        image = F.resize(image, [image_size, image_size], antialias=True)
    return image


def _decode_scaled(data: bytes, image_size: int) -> torch.Tensor | None:
    """The image decoded at the smallest DCT scale whose result still covers ``image_size`` squared, as a
    (3, H, W) uint8 view of its pixels; None where no scale below 1 covers it (a side under twice the
    target), or where PIL does not read it as an RGB or grey JPEG: the full path decodes those.

    PIL's ``draft`` picks the largest of libjpeg's reductions 1/8, 1/4, 1/2 that keeps both sides at
    least the requested size. torchvision's decoder has no scaled decode; it is the faster of the two at
    full size, so an image without a reduction goes to it.
    """
    from PIL import Image
    from torchvision.transforms.v2 import functional as F

    try:
        image = Image.open(io.BytesIO(data))
    except Exception:  # noqa: BLE001 - not an image PIL reads: the full path decodes it or says why not
        return None
    with image:
        if (image.format != "JPEG" or image.mode not in ("RGB", "L")
                or min(image.width // image_size, image.height // image_size) < 2):
            return None
        image.draft("RGB", (image_size, image_size))
        try:
            image.load()
            pixels = image if image.mode == "RGB" else image.convert("RGB")
            # (H, W, 3) pixels as a (3, H, W) view: torchvision's resize runs its fast path on this layout
            return F.pil_to_tensor(pixels)
        except (OSError, SyntaxError, ValueError) as exc:  # a truncated or damaged JPEG
            raise RuntimeError(f"PIL could not decode the JPEG ({exc})") from None


def _empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor; in a DataLoader worker, allocated in shared memory.

    A tensor sent from a worker travels as a shared-memory handle; one allocated in ordinary
    memory would first be copied into shared memory (as ``default_collate`` avoids too).
    """
    numel = 1
    for n in shape:
        numel *= n
    if get_worker_info() is None or numel == 0:
        return torch.empty(shape, dtype=dtype)
    storage = torch.UntypedStorage._new_shared(numel * dtype.itemsize)
    return torch.empty(0, dtype=dtype).set_(storage, 0, shape)



def _close_epoch(stream: Any, sources: list) -> None:
    """What an epoch left early (or ended) still holds open: its position stream and its pieces' files."""
    stream.close()
    for source in sources:
        source.close()

class BufferPool:
    """Read buffers for the reader's own process, reused once nothing holds them any more.

    A fresh multi-MB array per batch or block costs its page faults (the kernel zeroes every
    page) on the first write: on a warm page cache about as much CPU again as reading the bytes
    into it. A buffer here is a numpy array that what the reader hands out views (a batch tensor
    through ``torch.from_numpy``, a block's pairs as slices); every view keeps a reference to the
    array, so an array only the pool references is free to fill again. Thread-safe (a read-ahead
    thread takes buffers too). A batch sent from a DataLoader worker travels as shared memory
    that the main process holds, so workers allocate those fresh (:func:`_empty`).
    """

    def __init__(self, keep: int = 4):
        self.keep = keep
        self.arrays: list[np.ndarray] = []
        self._lock = threading.Lock()

    def array(self, nbytes: int) -> np.ndarray:
        """A uint8 array of ``nbytes`` (contents undefined)."""
        with self._lock:
            for array in self.arrays:
                # 3: the list, this loop's name and getrefcount's argument; anything handed out adds its own.
                if sys.getrefcount(array) == 3 and array.nbytes >= nbytes:
                    return array[:nbytes]
            # Room for a larger batch than this one: sizes vary, and a buffer a few bytes short
            # would be passed over every time. Page-aligned, so that a run read into it can be placed as
            # its file's bytes lie (COPY_ALIGN).
            array = np.frombuffer(aligned_buffer(max(nbytes + nbytes // 2, 1)), dtype=np.uint8)
            if len(self.arrays) >= self.keep:
                self.arrays.pop(0)
            self.arrays.append(array)
            return array[:nbytes]

    def tensor(self, nbytes: int) -> torch.Tensor:
        return torch.from_numpy(self.array(nbytes))

    def __reduce__(self):
        # A dataset travels to spawned DataLoader workers pickled: each starts with an empty pool.
        return BufferPool, (self.keep,)


#: Bytes before a ring buffer's batch: its generation stamp (int64), padded to a cache line.
RING_HEADER = 64


class BatchRing:
    """One DataLoader worker's batch buffers in shared memory, reused in turn (``batch_ring``).

    A batch sent from a worker travels as shared-memory handles. Fresh shared memory per batch
    costs a segment's creation and a page fault per 4 KiB page the worker writes (the kernel
    zeroes each), every batch, and so does each small tensor of it (labels, indexes), a segment of
    its own. On this project's 2-core VM, 14 MB batches through 2 workers moved 1.4 GB/s in fresh
    segments against 7.4 GB/s in reused ones (the receiving process maps a segment once and keeps
    the mapping), and 7 small tensors per batch in segments of their own took another ~2.5 ms per
    batch, none as views of the reused one. So a ring buffer holds the whole batch: a stamp, then
    the small arrays, then the bytes. The price is a contract: a batch's memory is written again
    ``slots`` batches of its worker later, so the consumer must be done with it (or have copied it)
    by then. The stamp holds the generation of the batch the buffer holds now and each batch carries
    its own as a plain int: :func:`batch_is_current` tells whether its memory was reused.

    Each buffer crosses to the consumer once (:class:`RingBatch`): torch sends a shared tensor as a
    file descriptor, which the consumer fetches from the worker in a round trip to a thread of the
    worker's, one per batch, that waits for the worker's GIL while it reads. Later batches of the same
    buffer travel as its key and their views' offsets.
    """

    def __init__(self, slots: int):
        self.slots: list[torch.UntypedStorage | None] = [None] * slots
        self.turn = 0
        self.generation = 0
        # This ring's name among every ring a consumer receives from (a pid is reused; 8 random bytes are not),
        # each buffer's allocation count (a grown buffer is a new one), and the buffers already sent.
        self.token = (os.getpid(), os.urandom(8).hex())
        self.allocations = [0] * slots
        self.sent: set[tuple] = set()

    def take(self, nbytes: int, meta_bytes: int) -> "RingSlot":
        """The next buffer, stamped, with room for ``meta_bytes`` of small arrays and ``nbytes`` of batch bytes."""
        k = self.turn
        self.turn = (k + 1) % len(self.slots)
        need = RING_HEADER + meta_bytes + nbytes
        storage = self.slots[k]
        if storage is None or storage.nbytes() < need:
            # room for a larger batch than this one, so that sizes varying by a few percent reuse it
            storage = self.slots[k] = torch.UntypedStorage._new_shared(need + nbytes // 4)
            self.allocations[k] += 1
        whole = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),))
        self.generation += 1
        whole[:8].view(torch.int64)[0] = self.generation
        return RingSlot(whole, meta_bytes, nbytes, self.generation, (*self.token, k, self.allocations[k]), self)


@dataclass
class RingSlot:
    """A batch's place in a :class:`BatchRing` buffer: ``[stamp | small arrays | bytes]``."""

    whole: torch.Tensor
    meta_bytes: int
    nbytes: int
    generation: int
    #: (worker pid, ring token, buffer, allocation): the buffer's name for its consumer
    key: tuple
    ring: BatchRing

    @property
    def image(self) -> torch.Tensor:
        at = RING_HEADER + self.meta_bytes
        return self.whole[at:at + self.nbytes]

    def batch(self, arrays: dict[str, np.ndarray], image: torch.Tensor) -> "RingBatch":
        """The batch: its ``image`` bytes (:attr:`image`, filled) and its small ``arrays`` copied into the buffer,
        every tensor of it a view of the buffer."""
        out = RingBatch(image=image)
        at = RING_HEADER
        for key, array in arrays.items():
            source = torch.from_numpy(np.ascontiguousarray(array))
            size = source.numel() * source.element_size()
            if at + size > RING_HEADER + self.meta_bytes:
                raise AssertionError(f"ring slot: {key} does not fit its {self.meta_bytes} bytes of small arrays")
            view = self.whole[at:at + size].view(source.dtype).view(source.shape)
            view.copy_(source)
            out[key] = view
            at += -(-size // 8) * 8
        out["ring_stamp"] = self.whole[:8].view(torch.int64)
        out["ring_generation"] = self.generation
        out.slot = self
        return out


class RingBatch(dict):
    """A batch whose tensors are views of one :class:`BatchRing` buffer (a dict, read as any batch).

    Pickled in the worker that owns the buffer, it carries the buffer itself the first time (torch's
    shared-memory handle) and afterwards only the buffer's key: the consumer keeps every buffer it
    received (:data:`_RECEIVED`), and a worker's batches reach it in the order they were sent, so the
    buffer always arrives before a batch that names it. Pickled anywhere else (a consumer passing the
    batch on), it is a plain dict of tensors. ``copy.copy`` (the DataLoader's ``default_convert``) keeps
    the slot.
    """

    slot: RingSlot | None = None

    def __copy__(self) -> "RingBatch":
        out = RingBatch(self)
        out.slot = self.slot
        return out

    def __deepcopy__(self, memo: dict) -> dict[str, Any]:
        # Its own memory, no longer the buffer's: a plain dict (deepcopy would otherwise go through __reduce__
        # and count as the buffer's crossing).
        import copy

        return {key: copy.deepcopy(value, memo) for key, value in self.items()}

    def __reduce__(self):
        slot = self.slot
        if slot is None or os.getpid() != slot.key[0]:
            return dict, (dict(self),)
        storage = slot.whole.untyped_storage()
        views, plain = {}, {}
        for name, value in self.items():
            if isinstance(value, torch.Tensor) and value.untyped_storage().data_ptr() == storage.data_ptr():
                views[name] = (value.dtype, value.storage_offset(), tuple(value.shape), value.stride())
            else:
                plain[name] = value
        # The buffer goes with the first batch of it this worker sends (pickled in send order, by the
        # queue's feeder thread); the set is the worker's own.
        first = slot.key not in slot.ring.sent
        slot.ring.sent.add(slot.key)
        return _ring_batch_arrived, (slot.key, slot.whole if first else None, views, plain)


#: Buffers received from DataLoader workers' rings, by key: {key: storage}. A worker's buffers are dropped
#: once the worker has exited, when a later buffer arrives; a grown buffer replaces its earlier allocation.
_RECEIVED: dict[tuple, torch.UntypedStorage] = {}
_RECEIVED_LOCK = threading.Lock()


def _ring_batch_arrived(key: tuple, whole: torch.Tensor | None, views: dict[str, tuple],
                        plain: dict[str, Any]) -> dict[str, Any]:
    """Unpickling a :class:`RingBatch` in its consumer: the batch's tensors as views of its buffer."""
    with _RECEIVED_LOCK:
        if whole is not None:
            import psutil

            pid, token, k, allocation = key
            for old in [old for old in _RECEIVED if (old[:3] == key[:3] and old[3] < allocation)
                        or (old[0] != pid and not psutil.pid_exists(old[0]))]:
                del _RECEIVED[old]
            _RECEIVED[key] = whole.untyped_storage()
        storage = _RECEIVED.get(key)
    if storage is None:
        raise DataError(f"a batch of DataLoader worker {key[0]}'s ring buffer {key[2]} arrived in a process that "
                        f"never received that buffer: ring batches are read by the process that iterates the "
                        f"DataLoader")
    out = dict(plain)
    for name, (dtype, offset, shape, stride) in views.items():
        out[name] = torch.empty(0, dtype=dtype).set_(storage, offset, shape, stride)
    return out


def batch_is_current(batch: dict[str, Any]) -> bool:
    """Whether a batch's memory still holds it: always for a batch in memory of its own; for one in a worker's
    ring buffer (``batch_ring``), until the worker reuses that buffer."""
    stamp = batch.get("ring_stamp")
    return stamp is None or int(stamp[0]) == batch["ring_generation"]


def _pack(values: list[bytes]) -> tuple[torch.Tensor, torch.Tensor]:
    """Byte strings -> (one uint8 tensor holding them end to end, int64 offsets of len + 1)."""
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum([len(v) for v in values], out=offsets[1:])
    packed = _empty((int(offsets[-1]),), torch.uint8)
    view = packed.numpy()
    for k, v in enumerate(values):
        view[offsets[k]:offsets[k + 1]] = np.frombuffer(v, dtype=np.uint8)
    return packed, torch.from_numpy(offsets)


def collate_samples(batch: list[dict[str, Any]], pack_bytes: bool = False) -> dict[str, Any]:
    """Stack a list of items; images of different shapes stay a list.

    Raw JPEG bytes stay a list of ``bytes``, or with ``pack_bytes`` become one uint8 tensor
    (shared memory in a worker) plus ``KEY_offsets`` (see the module docstring; unpack with
    :func:`image_bytes`). Same-shaped tensors are stacked, in a worker straight into shared memory.
    """
    out: dict[str, Any] = {}
    for key in batch[0]:
        values = [item[key] for item in batch]
        if isinstance(values[0], torch.Tensor):
            first = values[0]
            if all(v.shape == first.shape for v in values):
                out[key] = torch.stack(values, out=_empty((len(values), *first.shape), first.dtype))
            else:
                out[key] = values
        elif isinstance(values[0], bytes):
            if pack_bytes:
                out[key], out[f"{key}_offsets"] = _pack(values)
            else:
                out[key] = values
        elif isinstance(values[0], float):
            out[key] = torch.tensor(values, dtype=torch.float64)
        else:
            out[key] = torch.tensor(values)
    return out


def image_bytes(batch: dict[str, Any], key: str = "image") -> list[bytes]:
    """The raw JPEG bytes of a collated batch, packed (``pack_bytes``) or a list."""
    values = batch[key]
    spans, offsets = batch.get(f"{key}_spans"), batch.get(f"{key}_offsets")
    if spans is not None:  # run batches (order="runs"): each sample's [start, end) in the tensor
        data = values.cpu().numpy()
        return [data[a:b].tobytes() for a, b in spans.tolist()]
    if offsets is None:
        return list(values)
    data, cuts = values.cpu().numpy(), offsets.tolist()
    return [data[a:b].tobytes() for a, b in zip(cuts, cuts[1:])]


def loader_options(dataset: "ShardedImageDataset", batch_size: int) -> dict[str, Any]:
    """DataLoader ``batch_size`` and ``collate_fn`` for ``dataset``'s path (per-sample or batched).

    A dataset built with ``batch_in_worker`` yields batches already (``batch_size=None``; it
    must equal ``batch_size``, so that both paths mean the same batch).
    """
    n = getattr(dataset, "batch_in_worker", None)
    if n:
        if n != batch_size:
            raise DataError(f"the dataset batches {n} samples in its workers, but batch_size={batch_size}")
        return {"batch_size": None, "collate_fn": None}
    return {"batch_size": batch_size, "collate_fn": collate_samples}


class ShardReader(IterableDataset):
    """What every reader of a sharded, checked and repaired data set shares: the epoch its workers
    read, which of the consumers this process is, its shard files, and its event log's repairs and losses.

    A subclass (:class:`ShardedImageDataset`, :class:`hpcbench.data.readers.weather.WeatherDataset`)
    sets ``manifest``, ``rank``, ``world_size``, ``events``, ``access`` (its
    :class:`~hpcbench.data.resilience.ShardAccess`) and ``_epoch``: a ``multiprocessing.RawValue("q")``,
    shared with the DataLoader's workers (inherited at fork, passed at spawn), so that
    :meth:`set_epoch` reaches persistent workers too.
    """

    def set_epoch(self, epoch: int) -> None:
        """Read in the order of ``epoch`` (call before each ``iter(loader)``, as with DistributedSampler).

        It reaches the workers, persistent ones included.
        """
        self._epoch.value = epoch

    @property
    def epoch(self) -> int:
        return int(self._epoch.value)

    @property
    def shard_paths(self) -> list[Path]:
        return [self.access.path(i) for i in range(len(self.manifest.shards))]

    def repairs(self) -> list[dict[str, Any]]:
        return self.events.read("repair")

    def lost(self) -> list[dict[str, Any]]:
        return self.events.read("lost")

    def _consumer(self) -> tuple[int, int, int]:
        """(this DataLoader worker, the workers of this rank, this reader among all ranks' workers).

        Outside a DataLoader worker: ``(0, 1, rank)``.
        """
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return worker, workers, self.rank * workers + worker


@dataclass
class RawSample:
    index: int
    label: int
    data: bytes
    read_s: float
    opens: int


@dataclass
class SampleExtents:
    """Where samples ``start .. stop-1`` of an opened shard lie, for reads straight into a batch.

    Sample ``start + k`` is ``sizes[k]`` bytes at offset ``starts[k]`` of the shard: of the file
    behind ``fd`` (read with ``os.preadv``), or of ``data`` (the shard in memory after a sha256
    check). A format whose samples sit inside checked records (TFRecord) gives ``read`` instead:
    ``read(out, k)`` fills ``out`` with sample ``start + k`` and returns the bytes it put there,
    raising :class:`CorruptRecordError` when a record fails its check. ``close`` releases what the
    extents hold open, once their last sample was read.
    """

    starts: np.ndarray
    sizes: np.ndarray
    labels: np.ndarray
    fd: int | None = None
    data: memoryview | None = None
    close: Callable[[], None] | None = None
    read: Callable[[memoryview, int], int] | None = None
    extra: tuple[np.ndarray, ...] = ()
    """The format's own per-sample arrays from its shard index, cut like the others (for its ``read``)."""
    records: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    """For run reads (``order="runs"``): per sample, where its record begins and ends in the shard and where
    its bytes begin; None when a sample's bytes are its record. A run of samples is read as one byte range,
    from the first one's record start to the last one's record end."""
    check: Callable[[memoryview, int], None] | None = None
    """``check(record, k)`` raises :class:`CorruptRecordError` unless sample ``start + k``'s record (read
    whole into ``record``) passes its checks (TFRecord's CRC-32Cs)."""


def file_version(fd: int) -> tuple[int, int, int]:
    """(size, mtime, inode) of an open file: what a kept index of it is valid for (a repair renames a
    new file into place, a rewrite changes size or mtime)."""
    st = os.fstat(fd)
    return st.st_size, st.st_mtime_ns, st.st_ino


def _cut(index: tuple[np.ndarray, ...] | None, start: int, stop: int, where: str,
         **source: Any) -> SampleExtents | None:
    """Samples ``start .. stop-1`` of a shard's index as extents; None (closing the source) without an index."""
    if index is None or len(index[0]) < stop:
        if source.get("close") is not None:
            source["close"]()
        if index is None:
            return None
        raise CorruptRecordError(f"holds {len(index[0])} samples, the manifest says at least {stop}", path=where)
    starts, sizes, labels, *extra = (a[start:stop] for a in index)
    return SampleExtents(starts, sizes, labels, extra=tuple(extra), **source)


#: A run is read to an address congruent to its file offset modulo this (:meth:`ShardedImageDataset._read_run_batch`).
#: The kernel copies a read from the page cache, where file offset ``x`` lies at ``x`` modulo the page; with
#: source and destination equally placed within a cache line, it moves whole lines. On this project's VM, 3.6 MB
#: reads from a warm page cache at random offsets moved 10.1 GB/s so placed, 8.0 GB/s 16 bytes off and 4.3 GB/s
#: 8 bytes off.
COPY_ALIGN = 64

#: Bytes per read of a run whose records are checked (:meth:`_Source.read_run`): each piece's records are
#: still in the core's L2 cache (1-2 MB on server CPUs) when they are checked.
CHECKED_PIECE = 1 << 20


def _pieces(ends: list[int], size: int) -> list[int]:
    """Where to end each read of a run whose records end at ``ends`` (ascending): at record ends, a piece
    reaching past ``size`` bytes only by its last record (a record longer than ``size`` is a piece of its own)."""
    stops, begun = [], 0
    for end in ends:
        if end - begun >= size or end == ends[-1]:
            stops.append(end)
            begun = end
    return stops


class _Source:
    """A piece's opened shard while its samples wait in the shuffle buffer; closed after its last is read."""

    __slots__ = ("piece", "left", "starts", "fd", "data", "closer", "read", "ext", "records", "in_order")

    def __init__(self, piece: Piece, left: int, ext: SampleExtents):
        self.piece, self.left = piece, left
        self.closer = None
        self.take(ext)

    def take(self, ext: SampleExtents) -> None:
        """Read from ``ext`` from now on (also a repaired shard's), closing what was open."""
        self.close()
        self.starts = ext.starts.tolist()
        self.fd, self.data, self.closer, self.read = ext.fd, ext.data, ext.close, ext.read
        self.ext = ext
        self.records = ext.records or (ext.starts, ext.starts + ext.sizes, ext.starts)
        lo, hi, _ = self.records
        # A run is one byte range only where each record ends before the next begins (every writer here
        # lays samples out in order); otherwise each sample is a run of its own.
        self.in_order = bool((lo[1:] >= hi[:-1]).all())

    def run_bytes(self, a: int, b: int) -> int:
        """Bytes of one read of samples ``a .. b-1`` of the piece (their records and what lies between)."""
        lo, hi, _ = self.records
        return int(hi[b - 1] - lo[a])

    def read_run(self, out: memoryview, a: int, b: int) -> int:
        """Samples ``a .. b-1`` of the piece in one read into ``out`` (:meth:`run_bytes` long), each record
        checked (sample ``k``'s bytes then begin at ``records[2][k] - records[0][a]`` in ``out``); records that
        are checked are read in pieces of about :data:`CHECKED_PIECE` bytes. Returns the reads made.

        Raises:
            CorruptRecordError: fewer bytes than planned (the shard changed), or a record fails its check.
        """
        lo, hi, _ = self.records
        base = int(lo[a])
        check = self.ext.check
        # Records that are checked (TFRecord's CRC-32Cs) are read in pieces of whole records of about
        # CHECKED_PIECE bytes, each checked right after its piece's read, while it is still in the core's
        # cache; checked after the run's one read, they would be read back from L3 or memory (a DataLoader
        # worker's batch does not stay in L3 the way one process's two batch buffers do). Unchecked runs stay
        # one read.
        starts, ends = (lo[a:b] - base).tolist(), (hi[a:b] - base).tolist()
        pieces = [len(out)] if check is None else _pieces(ends, CHECKED_PIECE)
        done = k = 0
        for stop in pieces:
            if self.fd is not None:
                got = os.preadv(self.fd, (out[done:stop],), base + done)
            else:
                chunk = self.data[base + done:base + stop]
                got = len(chunk)
                if got == stop - done:
                    out[done:stop] = chunk
            if got != stop - done:
                # the caller repairs the shard, naming its file
                raise CorruptRecordError(f"read {done + got} of {len(out)} bytes of samples {a}..{b - 1} of "
                                         f"the piece")
            done = stop
            while check is not None and k < len(ends) and ends[k] <= done:
                check(out[starts[k]:ends[k]], a + k)
                k += 1
        return len(pieces)

    def read_into(self, out: memoryview, k: int) -> int:
        """Sample ``k`` of the piece into ``out``; the bytes read (fewer: the shard changed)."""
        if self.read is not None:
            return self.read(out, k)
        if self.fd is not None:
            return os.preadv(self.fd, (out,), self.starts[k])
        start = self.starts[k]
        out[:] = self.data[start:start + len(out)]
        return len(out)

    def done_with_one(self, n: int = 1) -> None:
        self.left -= n
        if self.left == 0:
            self.close()

    def close(self) -> None:
        closer, self.closer, self.data, self.read = self.closer, None, None, None  # a shard in memory is let go too
        if closer is not None:
            closer()


class ShardedImageDataset(ShardReader):
    """Base of the image readers (see the module docstring).

    Args:
        path: the data set's folder (holding ``manifest.json``).
        rank, world_size: this process's data-parallel rank and the number of ranks.
        shuffle: shuffle the shard order per epoch and mix samples in a buffer.
        seed: the shuffling seed (the same on every rank).
        shuffle_buffer: samples held by the mixing buffer (per reader process).
        decode: decode JPEGs to tensors; ``False`` yields the raw bytes (storage only).
        image_size: resize decoded images to this square size (``None`` keeps them as they are).
        jpeg_decode: ``"scaled"``: a resized image is decoded at the smallest DCT scale that still covers
            ``image_size``; ``"full"``: at full size (:func:`decode_jpeg`, :data:`JPEG_DECODES`).
        verify: ``"sha256"`` (check every shard when opened), ``"size"`` or ``"none"``.
        repair_from: a pristine copy of the data set to repair shards from (default: the
            manifest's ``source``, which staging sets).
        allow_skip: when a shard cannot be repaired, count its unread samples as lost (an
            event in :attr:`events`) instead of raising :class:`ShardError`.
        max_repairs: repair attempts per shard and read before giving up.
        events_path: the shared event log (default: a fresh temporary file).
        batch_in_worker: yield collated batches of this many samples (the last one of each
            reader process may be smaller) instead of single samples; raw bytes are packed
            into one tensor per batch (module docstring). Use ``DataLoader(batch_size=None)``.
        order: ``"samples"`` (each sample shuffled on its own) or ``"runs"``: runs of ``run_samples``
            consecutive samples of a shard shuffled as units, each run read with one call (zero-copy
            batches only; see the module docstring).
        run_samples: the longest run of ``order="runs"``.
        batch_ring: in DataLoader workers, keep zero-copy batches in a ring of this many shared-memory
            buffers per worker, reused in turn, instead of fresh shared memory per batch (``0``). A batch is
            then overwritten ``batch_ring`` batches of its worker later: give at least the DataLoader's
            ``prefetch_factor`` + the batches the consumer holds at once + 1, and check with
            :func:`batch_is_current` (:class:`BatchRing`).
    """

    format: ClassVar[str] = ""

    reads: int = 0
    """Storage reads made by this process: HDF5 calls of the HDF5 reader, ``preadv`` calls of the zero-copy
    batch path (one per sample, or with ``order="runs"`` one per run, TFRecord's per ~1 MiB piece of a run)."""

    def __init__(self, path: str | os.PathLike, *, rank: int = 0, world_size: int = 1, shuffle: bool = True,
                 seed: int = 0, shuffle_buffer: int = 64, decode: bool = True, image_size: int | None = None,
                 verify: Verify = "sha256", repair_from: str | os.PathLike | None = None,
                 allow_skip: bool = False, max_repairs: int = 2, events_path: str | os.PathLike | None = None,
                 batch_in_worker: int | None = None, order: str = "samples", run_samples: int = 32,
                 batch_ring: int = 0, jpeg_decode: str = "scaled"):
        super().__init__()
        manifest, folder = load_manifest(path)
        if manifest.format != self.format:
            raise ManifestError(f"field 'format' is {manifest.format!r}, not {self.format!r}", path=str(folder))
        if not 0 <= rank < world_size:
            raise DataError(f"rank {rank} is outside 0..{world_size - 1}")
        if batch_in_worker is not None and batch_in_worker < 1:
            raise DataError(f"batch_in_worker={batch_in_worker}; give a batch size >= 1, or None for single samples")
        self.batch_in_worker = batch_in_worker or None
        if order not in ORDERS:
            raise DataError(f"order={order!r}; choose one of {', '.join(map(repr, ORDERS))}")
        if run_samples < 1:
            raise DataError(f"run_samples={run_samples}; a run holds at least one sample")
        self.order, self.run_samples = order, run_samples
        if batch_ring < 0:
            raise DataError(f"batch_ring={batch_ring}; give 0 (fresh memory per batch) or the ring's buffers")
        self.batch_ring = batch_ring
        self.manifest, self.folder = manifest, folder
        self.rank, self.world_size = rank, world_size
        self.shuffle, self.seed, self.shuffle_buffer = shuffle, seed, shuffle_buffer
        if jpeg_decode not in JPEG_DECODES:
            raise DataError(f"jpeg_decode={jpeg_decode!r}; choose one of {', '.join(map(repr, JPEG_DECODES))}")
        self.decode, self.image_size, self.jpeg_decode = decode, image_size, jpeg_decode
        self.allow_skip, self.max_repairs = allow_skip, max_repairs
        self.events = EventLog(events_path)
        self.access = ShardAccess(folder, manifest, verify=verify, repair_from=repair_from, events=self.events)
        # Shared with DataLoader workers (inherited at fork, passed at spawn), so that
        # set_epoch reaches persistent workers too.
        self._epoch = multiprocessing.RawValue("q", 0)
        self._offsets = [0]
        for shard in manifest.shards:
            self._offsets.append(self._offsets[-1] + shard.samples)
        if batch_ring and not self.zero_copy:
            raise DataError(f"batch_ring={batch_ring} holds zero-copy batches: it needs batch_in_worker, decode=False "
                            f"and allow_skip=False (got batch_in_worker={batch_in_worker}, decode={decode}, "
                            f"allow_skip={allow_skip})")
        if order == "runs" and not self.zero_copy:
            raise DataError(f"order='runs' reads raw batches straight into their tensor: it needs batch_in_worker, "
                            f"decode=False and allow_skip=False, and a format whose shards say where their samples "
                            f"lie (got batch_in_worker={batch_in_worker}, decode={decode}, allow_skip={allow_skip}, "
                            f"format {self.format!r})")
        repair_or_raise(self.access, self.manifest, self.folder)

    # -- what subclasses implement ------------------------------------------------------
    def read_range(self, shard: OpenedShard, start: int, stop: int) -> Iterator[tuple[bytes, int]]:
        """Yield ``(jpeg_bytes, label)`` for positions ``start .. stop-1`` of ``shard``."""
        raise NotImplementedError

    def sample_extents(self, shard: OpenedShard, start: int, stop: int) -> SampleExtents | None:
        """Where samples ``start .. stop-1`` of ``shard`` lie (the zero-copy batch path), or ``None``
        when this format (or this shard's layout) cannot say without reading them.

        Counts its opens like :meth:`read_range` and raises what it raises on a damaged shard. A
        format whose shards carry an index implements :meth:`shard_index` and uses :meth:`indexed_extents`.
        """
        return None

    def shard_index(self, fh: BinaryIO, shard: OpenedShard) -> tuple[np.ndarray, ...] | None:
        """(offsets, sizes, labels, and any arrays of the format's own) of every sample of the shard,
        read from ``fh``; None when the shard has no such layout."""
        raise NotImplementedError

    def open_indexed(self, shard: OpenedShard) -> tuple[tuple[np.ndarray, ...] | None, int, Callable[[], None]]:
        """Open the shard file once: (its :meth:`shard_index`, a descriptor to read samples from, its closer).

        The open is counted by the caller. A format whose library reads its index faster from the
        path than through a Python file object (HDF5) overrides this.
        """
        fd = os.open(shard.path, os.O_RDONLY)
        try:
            with os.fdopen(os.dup(fd), "rb") as fh:
                return self.shard_index(fh, shard), fd, lambda: os.close(fd)
        except BaseException:
            os.close(fd)
            raise

    def indexed_extents(self, shard: OpenedShard, start: int, stop: int) -> SampleExtents | None:
        """Extents from :meth:`shard_index`, built once per version of the shard file in this process.

        Reading an index (HDF5's metadata, a tar's headers) costs Python time per shard or per
        member; kept per file version (size, mtime, inode; a repair renames a new file into place),
        a persistent DataLoader worker pays it in its first epoch only. One counted open per call,
        as :meth:`read_range` makes; a stale index is read again through a second one.
        """
        cache = self.__dict__.setdefault("_shard_indexes", {})
        where = str(shard.path)
        if shard.data is not None:
            key = ("memory", self.manifest.shards[shard.index].sha256)
            hit = cache.get(shard.index)
            if hit is None or hit[0] != key:
                hit = cache[shard.index] = (key, self.shard_index(io.BytesIO(shard.data), shard))
            return _cut(hit[1], start, stop, where, data=memoryview(shard.data))
        shard.access.opens += 1
        hit, fd, closer = cache.get(shard.index), None, None
        try:
            if hit is not None:
                fd = os.open(shard.path, os.O_RDONLY)
                closer = partial(os.close, fd)
                if hit[0] != file_version(fd):  # the file changed (repaired, replaced): read its index again
                    closer()
                    shard.access.opens += 1
                    hit = None
            if hit is None:
                index, fd, closer = self.open_indexed(shard)
                hit = cache[shard.index] = (file_version(fd), index)
            return _cut(hit[1], start, stop, where, fd=fd, close=closer)
        except BaseException:
            if closer is not None:
                closer()
            raise

    # -- public -----------------------------------------------------------------------
    @property
    def zero_copy(self) -> bool:
        """Whether batches are read straight into their tensor (module docstring): raw batches of a format
        that implements :meth:`sample_extents`, samples never skipped."""
        return (bool(self.batch_in_worker) and not self.decode and not self.allow_skip
                and type(self).sample_extents is not ShardedImageDataset.sample_extents)

    @property
    def order_label(self) -> str:
        """The order this reader reads an epoch in, as a benchmark row states it: ``per-sample`` (each sample
        its own unit in the shuffle buffer), ``runs of K`` (``order="runs"``: runs of up to K neighbours
        shuffled as units) or ``none`` (``shuffle=False``: file order)."""
        if not self.shuffle:
            return "none"
        return f"runs of {self.run_samples}" if self.order == "runs" else "per-sample"

    def __len__(self) -> int:
        """Samples this rank reads per epoch (all its workers together), also with ``batch_in_worker``."""
        n = self.manifest.samples
        return n * (self.rank + 1) // self.world_size - n * self.rank // self.world_size

    def __iter__(self) -> Iterator[dict[str, Any]]:
        worker, workers, consumer = self._consumer()
        pieces = epoch_pieces([s.samples for s in self.manifest.shards], consumers=self.world_size * workers,
                              consumer=consumer, seed=self.seed, epoch=self.epoch, shuffle=self.shuffle)
        rng = random.Random(f"{self.seed}:{self.epoch}:{consumer}")
        where = {"rank": self.rank, "worker": worker, "epoch": self.epoch}
        if self.zero_copy:
            batches = self._run_batches if self.order == "runs" else self._zero_copy_batches
            yield from batches(pieces, rng, where)
            return
        raw = self._read_pieces(pieces, where)
        samples = buffer_shuffle(raw, self.shuffle_buffer if self.shuffle else 1, rng)
        if not self.batch_in_worker:
            for sample in samples:
                yield self._item(sample)
            return
        batch: list[dict[str, Any]] = []
        for sample in samples:
            batch.append(self._item(sample))
            if len(batch) == self.batch_in_worker:
                yield collate_samples(batch, pack_bytes=True)
                batch = []
        if batch:  # the last, partial batch of this reader process
            yield collate_samples(batch, pack_bytes=True)

    # -- internals ------------------------------------------------------------------------
    def _zero_copy_batches(self, pieces: list[Piece], rng: random.Random,
                           where: dict[str, int]) -> Iterator[dict[str, Any]]:
        """The storage path's batches (module docstring): positions shuffled, bytes read once into the batch."""
        sources: list[_Source] = []
        positions = self._positions(pieces, where, sources)
        batch: list[tuple] = []
        try:
            for position in buffer_shuffle(positions, self.shuffle_buffer if self.shuffle else 1, rng):
                batch.append(position)
                if len(batch) == self.batch_in_worker:
                    yield self._read_batch(batch, where)
                    batch = []
            if batch:
                yield self._read_batch(batch, where)
        finally:
            _close_epoch(positions, sources)

    def _run_batches(self, pieces: list[Piece], rng: random.Random,
                     where: dict[str, int]) -> Iterator[dict[str, Any]]:
        """``order="runs"`` (module docstring): runs shuffled as units, a batch filled run by run, each run (or
        the part of it that fits) read in one call."""
        sources: list[_Source] = []
        runs = self._runs(pieces, where, sources, rng)
        # The buffer holds positions, not bytes: shuffle_buffer samples' worth of runs
        window = max(1, self.shuffle_buffer // self.run_samples) if self.shuffle else 1
        n, batch, count = self.batch_in_worker, [], 0
        try:
            for source, a, b, index, seconds, opens in buffer_shuffle(runs, window, rng):
                while a < b:  # a run longer than the batch's room is cut, its rest starts the next batch
                    take = min(b - a, n - count)
                    batch.append((source, a, a + take, index, seconds, opens))
                    count, index, a, seconds, opens = count + take, index + take, a + take, 0.0, 0
                    if count == n:
                        yield self._read_run_batch(batch, where)
                        batch, count = [], 0
            if batch:
                yield self._read_run_batch(batch, where)
        finally:
            _close_epoch(runs, sources)

    def _runs(self, pieces: list[Piece], where: dict[str, int], sources: list[_Source],
              rng: random.Random) -> Iterator[tuple]:
        """Every sample of ``pieces`` as runs ``(source, a, b, index of a, seconds, opens)``: samples ``a .. b-1``
        of the source's piece, ``seconds`` and ``opens`` the piece's open and check (carried by its first run).
        A shard that cannot say where its samples lie is read sample by sample, each a run of its own."""
        for piece in pieces:
            t0, reported = time.perf_counter(), self.access.opens
            ext = self._extents(piece, where)
            if ext is None:
                for pos, data, label, seconds in self._read_piece(piece, where):
                    opens, reported = self.access.opens - reported, self.access.opens
                    copied = SampleExtents(np.zeros(1, np.int64), np.array([len(data)]), np.array([label]),
                                           data=memoryview(data))
                    yield _Source(piece, 1, copied), 0, 1, self._offsets[piece.shard] + pos, seconds, opens
                continue
            seconds, opens = time.perf_counter() - t0, self.access.opens - reported
            source = _Source(piece, len(piece), ext)
            sources.append(source)
            index = self._offsets[piece.shard] + piece.start
            longest = self.run_samples if source.in_order else 1
            for a, b in cut_runs(len(piece), longest, rng if self.shuffle else None):
                yield source, a, b, index + a, seconds, opens
                seconds, opens = 0.0, 0

    def _read_run_batch(self, batch: list[tuple], where: dict[str, int]) -> dict[str, Any]:
        """One batch of runs: each read in one call into the batch's tensor, records and gaps included;
        ``image_spans`` says where each sample's bytes lie in it (:func:`image_bytes` unpacks). Each run
        begins at an address congruent to its file offset modulo :data:`COPY_ALIGN`, a few bytes of padding
        before it at most."""
        total = sum(source.run_bytes(a, b) for source, a, b, *_ in batch) + COPY_ALIGN * len(batch)
        n = sum(b - a for _, a, b, *_ in batch)
        packed, slot = self._batch_memory(total, n)
        view = memoryview(packed.numpy())
        address = packed.data_ptr()
        spans, labels = np.empty((n, 2), np.int64), np.empty(n, np.int64)
        read_s, opens = np.zeros(n), np.zeros(n, np.int64)
        index = np.empty(n, np.int64)
        pos = row = reads = 0
        perf = time.perf_counter
        for source, a, b, first, seconds, opened in batch:
            m, size = b - a, source.run_bytes(a, b)
            lo, _, at = source.records
            pos += (int(lo[a]) - address - pos) % COPY_ALIGN
            at = at[a:b] - lo[a]  # taken before the read: a repair keeps the planned layout (_read_run_again)
            sizes, labels[row:row + m] = source.ext.sizes[a:b], source.ext.labels[a:b]
            out = view[pos:pos + size]
            t0 = perf()
            try:
                reads += source.read_run(out, a, b)
            except REPAIRABLE as exc:
                opened += self._read_run_again(source, a, out, at, sizes, where, exc)
                reads += b - a
            took = perf() - t0
            spans[row:row + m, 0] = pos + at
            spans[row:row + m, 1] = pos + at + sizes
            index[row:row + m] = np.arange(first, first + m)
            # the run's read time shared by its samples in proportion to their bytes
            read_s[row:row + m] = took * sizes / max(int(sizes.sum()), 1)
            read_s[row] += seconds
            opens[row] += opened
            source.done_with_one(m)
            pos, row = pos + size, row + m
        self.reads += reads
        return self._batch(packed, slot, {"image_spans": spans, "label": labels, "index": index,
                                          "nbytes": spans[:, 1] - spans[:, 0], "read_s": read_s, "opens": opens})

    def _read_run_again(self, source: _Source, a: int, out: memoryview, at: np.ndarray, sizes: np.ndarray,
                        where: dict[str, int], exc: BaseException) -> int:
        """A run whose read failed: repair the shard once, then read each of its samples on its own from the
        repaired copy into the place planned for it. Returns the opens this made."""
        opens, failed = 0, exc
        for j, (x, size) in enumerate(zip(at.tolist(), sizes.tolist())):
            k, dest = a + j, out[x:x + size]
            if failed is None:
                try:
                    got = source.read_into(dest, k)
                    if got == size:
                        continue
                    failed = CorruptRecordError(f"read {got} of {size} bytes of sample {k} of the piece",
                                                path=str(self.access.path(source.piece.shard)))
                except REPAIRABLE as again:
                    failed = again
            opens += self._read_again((None, None, source, k, size, 0.0, 0), dest, where, failed)
            failed = None
        return opens

    def _positions(self, pieces: list[Piece], where: dict[str, int], sources: list[_Source]) -> Iterator[tuple]:
        """Every sample of ``pieces`` in order as ``(index, label, source, k, size, seconds, opens)`` (``k``:
        the sample's place in its source's piece).

        Tuples, not objects: per sample only a ``preadv`` and this bookkeeping cost Python time.
        ``seconds`` and ``opens`` are the piece's open and check, carried by its first sample. Each
        source opened is appended to ``sources``: the caller closes them if the epoch stops early
        (a source closes itself once its last sample is read, maybe long after this generator ended).
        """
        for piece in pieces:
            t0, reported = time.perf_counter(), self.access.opens
            ext = self._extents(piece, where)
            if ext is None:  # this shard cannot say where its samples lie: read them, one copy each
                for pos, data, label, seconds in self._read_piece(piece, where):
                    opens, reported = self.access.opens - reported, self.access.opens
                    copied = SampleExtents(np.zeros(1, np.int64), np.array([len(data)]), np.array([label]),
                                           data=memoryview(data))
                    yield (self._offsets[piece.shard] + pos, label, _Source(piece, 1, copied), 0, len(data),
                           seconds, opens)
                continue
            seconds, opens = time.perf_counter() - t0, self.access.opens - reported
            source = _Source(piece, len(piece), ext)
            sources.append(source)
            index = self._offsets[piece.shard] + piece.start
            for k, (size, label) in enumerate(zip(ext.sizes.tolist(), ext.labels.tolist())):
                yield index + k, label, source, k, size, seconds, opens
                seconds, opens = 0.0, 0

    def _extents(self, piece: Piece, where: dict[str, int]) -> SampleExtents | None:
        """The piece's extents, after repairs as :meth:`_read_piece` makes them; ShardError when none helps."""
        repairs = 0
        while True:
            try:
                shard = self.access.open(piece.shard)
                ext = self.sample_extents(shard, piece.start, piece.stop)
                if ext is not None and len(ext.sizes) != len(piece):
                    if ext.close is not None:
                        ext.close()
                    raise CorruptRecordError(f"holds {len(ext.sizes)} of samples {piece.start}..{piece.stop - 1}",
                                             path=str(shard.path))
                return ext
            except REPAIRABLE as exc:
                self._repair(piece, exc, len(piece), repairs, where)
                repairs += 1

    def _repair(self, piece: Piece, exc: BaseException, lost: int, repairs: int, where: dict[str, int]) -> None:
        """Repair the piece's shard after ``exc``, or raise the ShardError that names what is left unread."""
        reason = f"{type(exc).__name__}: {exc}"
        if repairs < self.max_repairs and self.access.repair(piece.shard, reason, **where):
            return
        raise ShardError(f"shard is corrupt and could not be repaired ({reason}); {lost} samples "
                         f"unread (pass allow_skip=True to count them as lost instead)",
                         path=str(self.access.path(piece.shard)), samples=lost) from None

    def _read_batch(self, batch: list[tuple], where: dict[str, int]) -> dict[str, Any]:
        """One batch as :func:`collate_samples` packs it, each sample read straight into the packed tensor."""
        n = len(batch)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum([p[4] for p in batch], out=offsets[1:])
        total = int(offsets[-1])
        packed, slot = self._batch_memory(total, n)
        view = memoryview(packed.numpy())
        ends = offsets.tolist()
        read_s = [0.0] * n
        opens = [p[6] for p in batch]
        perf = time.perf_counter
        for k, (_, _, source, j, size, seconds, _) in enumerate(batch):
            out = view[ends[k]:ends[k] + size]
            t0 = perf()
            try:
                got = source.read_into(out, j)
                if got != size:
                    raise CorruptRecordError(f"read {got} of {size} bytes of sample {j} of the piece",
                                             path=str(self.access.path(source.piece.shard)))
            except REPAIRABLE as exc:
                opens[k] += self._read_again(batch[k], out, where, exc)
            read_s[k] = seconds + perf() - t0
            source.done_with_one()
        self.reads += n
        return self._batch(packed, slot, {
            "image_offsets": offsets, "label": np.array([p[1] for p in batch], np.int64),
            "index": np.array([p[0] for p in batch], np.int64), "nbytes": np.diff(offsets),
            "read_s": np.array(read_s, np.float64), "opens": np.array(opens, np.int64)})

    def _batch_memory(self, nbytes: int, n: int) -> tuple[torch.Tensor, RingSlot | None]:
        """A zero-copy batch's uint8 tensor of ``nbytes`` (``n`` samples), and its ring slot if it has one.

        In the reader's own process a pooled buffer (reused once nothing holds it); in a DataLoader
        worker fresh shared memory, or with ``batch_ring`` the worker's next ring buffer (:class:`BatchRing`).
        """
        if get_worker_info() is None:
            return self.__dict__.setdefault("_buffers", BufferPool()).tensor(nbytes), None
        if not self.batch_ring:
            return _empty((nbytes,), torch.uint8), None
        # Made in the worker, never pickled with the dataset: each worker has a ring of its own. Room for
        # the batch's small arrays: at most 8 of 8 bytes per sample (spans count twice), and a few more.
        slot = self.__dict__.setdefault("_ring", BatchRing(self.batch_ring)).take(nbytes, 8 * (8 * n + 8))
        return slot.image, slot

    @staticmethod
    def _batch(packed: torch.Tensor, slot: RingSlot | None, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
        """A zero-copy batch: its bytes, its small arrays as tensors (in its ring slot when it has one)."""
        if slot is None:
            return {"image": packed, **{key: torch.from_numpy(np.ascontiguousarray(a)) for key, a in arrays.items()}}
        return slot.batch(arrays, image=packed)

    def _read_again(self, position: tuple, out: memoryview, where: dict[str, int], exc: BaseException) -> int:
        """A read that failed (the shard changed under the reader, a record failed its check): repair
        the shard and read the sample from the repaired copy.

        Returns the opens this made (the sample carries them, as the per-sample path's retry does).
        """
        _, _, source, k, size, _, _ = position
        piece, reported = source.piece, self.access.opens
        for repairs in range(self.max_repairs + 1):
            self._repair(piece, exc, source.left, repairs, where)  # raises once the repairs are spent
            try:
                ext = self._extents(piece, where)
                if ext is None or int(ext.sizes[k]) != size:
                    raise ShardError("the repaired shard no longer holds this sample as the manifest planned it",
                                     path=str(self.access.path(piece.shard)), samples=source.left)
                source.take(ext)  # the piece's other samples read from the repaired shard too
                got = source.read_into(out, k)
                if got == size:
                    return self.access.opens - reported
                exc = CorruptRecordError(f"read {got} of {size} bytes after a repair",
                                         path=str(self.access.path(piece.shard)))
            except REPAIRABLE as again:
                exc = again
        raise AssertionError("unreachable: _repair raises once the repairs are spent")

    def _item(self, s: RawSample) -> dict[str, Any]:
        if self.decode:
            try:
                image = decode_jpeg(s.data, self.image_size, self.jpeg_decode)
            except RuntimeError as exc:
                raise DataError(f"sample {s.index} is not a decodable JPEG ({exc})", path=str(self.folder)) from None
        else:
            # Plain bytes, not tensors: per sample a tensor would need its own shared-memory
            # segment; batched, collate_samples packs them into one (pack_bytes).
            image = s.data
        return {"image": image, "label": s.label, "index": s.index, "nbytes": len(s.data),
                "read_s": s.read_s, "opens": s.opens}

    def _read_pieces(self, pieces: list[Piece], where: dict[str, int]) -> Iterator[RawSample]:
        reported = self.access.opens
        for piece in pieces:
            for pos, data, label, seconds in self._read_piece(piece, where):
                opens, reported = self.access.opens - reported, self.access.opens
                yield RawSample(self._offsets[piece.shard] + pos, label, data, seconds, opens)

    def _read_piece(self, piece: Piece, where: dict[str, int]) -> Iterator[tuple[int, bytes, int, float]]:
        """One piece, retried after a repair from where it failed; no sample twice, none lost silently."""
        done, repairs = 0, 0
        while True:
            try:
                t0 = time.perf_counter()
                shard = self.access.open(piece.shard)
                records = self.read_range(shard, piece.start + done, piece.stop)
                while True:
                    item = next(records, None)
                    seconds = time.perf_counter() - t0
                    if item is None:
                        return
                    yield piece.start + done, item[0], item[1], seconds
                    done += 1
                    t0 = time.perf_counter()
            except REPAIRABLE as exc:
                reason = f"{type(exc).__name__}: {exc}"
                if repairs < self.max_repairs and self.access.repair(piece.shard, reason, **where):
                    repairs += 1
                    continue
                if self.allow_skip:
                    self.events.add("lost", shard=str(self.access.path(piece.shard)), samples=len(piece) - done,
                                    reason=reason, **where)
                    return
                self._repair(piece, exc, len(piece) - done, self.max_repairs, where)


READERS: Registry[type[ShardedImageDataset]] = Registry("data format")


def register_reader(cls: type[ShardedImageDataset]) -> type[ShardedImageDataset]:
    READERS.register(cls.format, cls)
    return cls


def open_dataset(path: str | os.PathLike, format: str | None = None, **options: Any) -> ShardedImageDataset:
    """The reader for the data set at ``path``, chosen from its manifest's format.

    Args:
        format: when given, must match the manifest (a check, not a conversion).
        options: passed to the reader (see :class:`ShardedImageDataset`), e.g. ``batch_in_worker=N``
            for whole batches per item (then ``DataLoader(..., **loader_options(ds, N))``).

    Raises:
        DatasetNotFoundError, ManifestError: bad path or manifest (named).
        RegistryError: a format no reader is registered for (lists the known ones).
    """
    manifest, folder = load_manifest(path)
    if format is not None and format != manifest.format:
        READERS.get(format)  # an unknown name is reported as such first
        raise ManifestError(f"field 'format' is {manifest.format!r}, but {format!r} was asked for",
                            path=str(folder / "manifest.json"))
    return READERS.get(manifest.format)(folder, **options)
