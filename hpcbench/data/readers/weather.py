"""The weather data set reader: ``(x_t, x_{t+lead})`` pairs read in blocks of time steps.

The data set (``data_prep/make_weather.py``, :mod:`hpcbench.data.generators.weather`) is
HDF5 shards ``weather-NNNNN.h5`` holding ``fields[time, channel, lat, lon]`` float32, one
chunk per (step, channel), and a manifest whose shard ``samples`` are time steps. A sample
is a forecasting pair: the fields at step ``t`` (input) and at ``t + lead`` (target), both
inside one shard, so a shard of ``n`` steps holds ``n - lead`` pairs.

Reading: one read per *block*, never one per sample. A block is ``block_size``
consecutive pairs of one shard, read as the ``block_size + lead`` steps they span, then cut
into pairs in memory:

* the read: the block's chunks straight from the file with one ``os.preadv`` at the offsets
  HDF5's chunk index gives (:func:`chunk_table`, :func:`read_chunks`; ``direct=True``, for
  unfiltered float32 chunks as the generator writes them), else one HDF5 hyperslab call
  ``fields[t0:t1, c0:c1, y0:y1]``. HDF5 itself reads chunk by chunk (142 ``read`` system
  calls for a block of 17 steps x 8 channels), which cost 10-40 % more CPU per epoch than
  one ``preadv`` (cold to warm page cache, :mod:`hpcbench.bench.hdf5_reads`);
* which blocks this process reads: all blocks of all shards, in manifest order, are
  shuffled per epoch with ``(seed, epoch)`` (the same permutation on every rank) and cut
  into ``rank x num_workers + worker`` slices of near-equal sample counts
  (:func:`hpcbench.data.plan.epoch_pieces`, with blocks in place of shards), so every pair
  is read exactly once per epoch over all ranks and DataLoader workers, and a block is
  split only where one consumer's slice ends;
* the pairs of a block are yielded in a random order (``(seed, epoch, consumer)``): the
  shuffle is real across shards and inside blocks, while every read stays ~16 MB;
* reads ahead: blocks come in random order, so the kernel's readahead cannot prefetch the
  next one; a thread reads ``readahead`` blocks ahead while the current one is consumed,
  so storage latency is paid in parallel (:class:`_ReadAhead`);
* selection: the read covers the channel range and latitude rows asked for (all
  longitudes), and channel picks, the longitude crop and strides are applied in numpy:
  HDF5's strided and point selections cost 100x a plain range;
* shard checks and repairs: :class:`hpcbench.data.resilience.ShardAccess` as for the image
  readers (``verify="sha256"`` hashes a shard the first time this process opens it in an
  epoch; blocks are then read from the file). A shard that fails and cannot be repaired
  raises :class:`ShardError` naming the file, or with ``allow_skip`` its samples are
  logged as lost;
* read times: the first pair yielded from a block carries the block's ``read_bytes`` (bytes
  read from the file) and ``read_s`` (the read, plus the shard's open and check when this
  block opened it); the block's other pairs carry 0, so an epoch's block reads are the
  items with ``read_bytes > 0`` (:func:`block_reads`), the raw data of a storage-latency P99.

Each item is a dict: ``x`` and ``y`` (float32 tensors ``(channels, lat, lon)`` after
selection), ``index`` (the pair's number in the data set, ``0 .. pairs-1`` in manifest
order), ``step`` (the data set's time step of ``x``), ``read_bytes``, ``read_s`` and
``opens`` (files opened to produce it). Batch with the DataLoader's default collate::

    ds = WeatherDataset("data/weather", rank=rank, world_size=world, seed=0, channels=["t2m", "z500"])
    loader = DataLoader(ds, batch_size=16, num_workers=4)
    for epoch in range(3):
        ds.set_epoch(epoch)
        for batch in loader: ...   # batch["x"]: (16, 2, 121, 240), batch["y"]: the next steps
"""

from __future__ import annotations

import multiprocessing
import os
import random
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from hpcbench.data.errors import CorruptRecordError, DataError, ManifestError, ShardError
from hpcbench.data.manifest import load_manifest
from hpcbench.data.plan import epoch_pieces
from hpcbench.data.readers.base import REPAIRABLE, BufferPool, ShardReader, file_version
from hpcbench.data.resilience import EventLog, ShardAccess, Verify, repair_or_raise

#: The manifest format the generator writes.
FORMAT = "weather_hdf5"
#: Pairs per block. With the default grid (8 x 121 x 240 float32, 0.93 MB a step) a read is
#: ~16 MB: bare preadv calls of shuffled 8 MB blocks reached ~60 % of a sequential read of the
#: same files (cold cache) on the development VM's disk, 16 MB ~80 %, 32 MB ~95 %: each random
#: read pays the storage latency once. Larger blocks keep more consecutive (correlated) steps
#: together; hpcbench.bench.hdf5_reads compares block sizes through the reader.
BLOCK_SIZE = 16
#: Bytes of unwanted data (HDF5 index nodes, channels not asked for) a direct read may read
#: and drop between two wanted chunks rather than issue another ``preadv``.
GAP_BYTES = 256 << 10
#: Buffers per ``preadv`` call (the kernel's limit).
IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024
#: Blocks read ahead by a background thread (its read overlaps the current one's: bare preadv
#: calls of shuffled 16 MB blocks went from ~84 % to ~94 % of the sequential read with two in
#: flight, on the development VM; DataLoader workers add their own reads in flight).
READAHEAD = 1
#: Shard files a reader process keeps open (least recently used closed first): blocks come
#: from shards in random order, and reopening a file per block would cost an open each.
MAX_OPEN_SHARDS = 16

Axis = slice | tuple[int | None, ...] | None


@dataclass(frozen=True)
class Block:
    """Pairs ``start .. stop-1`` (positions inside shard ``shard``), read with one call."""

    shard: int
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start


def shard_blocks(pairs_per_shard: Sequence[int], block_size: int) -> list[Block]:
    """Every block of the data set, in manifest order (the last block of a shard may be shorter)."""
    return [Block(shard, a, min(a + block_size, n))
            for shard, n in enumerate(pairs_per_shard) for a in range(0, n, block_size)]


def epoch_blocks(blocks: Sequence[Block], *, consumers: int, consumer: int, seed: int, epoch: int,
                 shuffle: bool) -> list[Block]:
    """The blocks (or parts of blocks) consumer ``consumer`` of ``consumers`` reads in ``epoch``.

    The blocks are shuffled with ``(seed, epoch)``, laid end to end and cut into near-equal
    slices of pairs (:func:`hpcbench.data.plan.epoch_pieces`, blocks in the role of shards),
    so the consumers partition the epoch's pairs; a block is split only at a slice's end.
    """
    pieces = epoch_pieces([len(b) for b in blocks], consumers=consumers, consumer=consumer, seed=seed,
                          epoch=epoch, shuffle=shuffle)
    return [Block(blocks[p.shard].shard, blocks[p.shard].start + p.start, blocks[p.shard].start + p.stop)
            for p in pieces]


def block_reads(batch: dict[str, Any]) -> list[tuple[int, float]]:
    """``(bytes, seconds)`` of each block read recorded in an item or collated batch."""
    nbytes, seconds = batch["read_bytes"], batch["read_s"]
    if isinstance(nbytes, torch.Tensor):
        nbytes, seconds = nbytes.tolist(), seconds.tolist()
    elif not isinstance(nbytes, list):
        nbytes, seconds = [nbytes], [seconds]
    return [(int(b), float(s)) for b, s in zip(nbytes, seconds) if b > 0]


def _axis(value: Axis, size: int, name: str) -> range:
    """A crop/stride given as a slice or ``(start, stop[, step])`` -> the indices it keeps."""
    if value is None:
        return range(size)
    if isinstance(value, tuple):
        value = slice(*value)
    if not isinstance(value, slice):
        raise DataError(f"{name}={value!r}; give a slice or (start, stop[, step])")
    if value.step == 0:
        raise DataError(f"{name}={value!r}: the step must not be 0")
    kept = range(size)[value]
    if not kept:
        raise DataError(f"{name}={value!r} keeps no point of the {size} the data set has")
    return kept


def _local(kept: range, lo: int) -> slice:
    """``kept`` as a slice into an array whose index 0 is ``lo``."""
    stop = kept.stop - lo
    return slice(kept.start - lo, stop if stop >= 0 else None, kept.step)


def chunk_table(fields) -> np.ndarray | None:
    """Where each chunk of ``fields`` lies in its file, when the chunks can be read without HDF5.

    Returns:
        ``[time, channel]`` byte offsets (``-1`` for a chunk never written) when every chunk is
        one (step, channel) plane of native float32, stored without filters (compression,
        checksums); else ``None``, and blocks are read through HDF5.
    """
    steps, channels, lat, lon = fields.shape
    if fields.chunks != (1, 1, lat, lon) or fields.dtype != np.dtype(np.float32):
        return None
    if fields.id.get_create_plist().get_nfilters():
        return None
    size = lat * lon * 4
    table = np.full((steps, channels), -1, dtype=np.int64)
    odd: list[Any] = []

    def note(info) -> None:
        if info.size != size or info.filter_mask:
            odd.append(info)
        table[info.chunk_offset[0], info.chunk_offset[1]] = info.byte_offset

    if hasattr(fields.id, "chunk_iter"):  # HDF5 >= 1.12.3: one pass over the chunk index
        fields.id.chunk_iter(note)
    else:
        for k in range(fields.id.get_num_chunks()):
            note(fields.id.get_chunk_info(k))
    return None if odd else table


class _NotDirect(Exception):
    """Internal: this block cannot be read straight from the file (a chunk was never written)."""


def read_chunks(fd: int, table: np.ndarray, steps: slice, channels: slice, out: np.ndarray) -> tuple[int, int]:
    """Read chunks ``table[steps, channels]`` into ``out`` with as few ``preadv`` calls as the layout allows.

    The chunks are taken in file order; a gap of at most :data:`GAP_BYTES` between two of
    them (HDF5's index nodes, other channels) is read into a scratch buffer rather than
    starting another call, so the usual layout (steps written in order) is one call per block.

    Returns:
        (``preadv`` calls, bytes read from the file).

    Raises:
        CorruptRecordError: chunks overlap or the file ends early (a damaged index or file).
    """
    offsets = table[steps, channels].ravel()
    if (offsets < 0).any():
        raise _NotDirect
    dest = out.reshape(len(offsets), -1).view(np.uint8)
    chunk = dest.shape[1]
    scratch = memoryview(bytearray(GAP_BYTES))
    order = np.argsort(offsets, kind="stable")
    calls = nbytes = i = 0
    while i < len(order):
        start = pos = int(offsets[order[i]])
        buffers: list[memoryview] = []
        while i < len(order) and len(buffers) <= IOV_MAX - 2:
            at = int(offsets[order[i]])
            if at < pos:
                raise CorruptRecordError(f"chunks overlap at byte {at}: a damaged chunk index")
            if at - pos > GAP_BYTES:
                break
            if at > pos:
                buffers.append(scratch[:at - pos])
            buffers.append(memoryview(dest[order[i]]))
            pos = at + chunk
            i += 1
        n = os.preadv(fd, buffers, start)
        calls, nbytes = calls + 1, nbytes + n
        if n != pos - start:
            raise CorruptRecordError(f"the file ends early: {n} of {pos - start} bytes at byte {start}")
    return calls, nbytes


@dataclass
class _Shard:
    """One open shard file: HDF5's handle, and what direct reads need (``table`` None: HDF5 reads only)."""

    file: Any
    fields: Any
    fd: int | None
    table: np.ndarray | None


class _OpenShards:
    """The shard files of one reader process, opened and checked on first use, LRU-bounded."""

    def __init__(self, access: ShardAccess, steps: list[int], grid: tuple[int, int, int], limit: int,
                 direct: bool, tables: dict[int, tuple[tuple[int, int, int], np.ndarray | None]] | None = None):
        self.access, self.steps, self.grid, self.limit, self.direct = access, steps, grid, limit, direct
        # Chunk tables by shard, kept by the dataset across epochs with the file version they describe
        # (size, mtime, inode; a repair renames a new file into place): walking a shard's chunk
        # index costs ~1 ms per shard and epoch, a tenth of a warm epoch's CPU.
        self.tables = {} if tables is None else tables
        self.files: OrderedDict[int, _Shard] = OrderedDict()
        self.checked: set[int] = set()
        self.pins: dict[int, int] = {}  # shard -> reads in flight on it (never closed meanwhile)

    def get(self, i: int) -> _Shard:
        """Shard ``i``, open and checked against the manifest.

        Raises:
            ShardCheckFailed, OSError, CorruptRecordError: repairable faults (see REPAIRABLE).
        """
        import h5py

        if i in self.files:
            self.files.move_to_end(i)
            return self.files[i]
        if i not in self.checked:
            # The manifest check (sha256 reads the whole file) once per shard and epoch,
            # not once per block: blocks visit the shards in random order.
            self.access.open(i)
            self.checked.add(i)
        while len(self.files) >= self.limit:
            idle = next((j for j in self.files if not self.pins.get(j)), None)
            if idle is None:
                break  # every open shard has a read in flight: exceed the limit for now
            self.files.pop(idle).file.close()
        path = self.access.path(i)
        self.access.opens += 1
        # No chunk cache: a block reads each chunk once, straight into the result array.
        f = h5py.File(path, "r", rdcc_nbytes=0)
        try:
            fields = f["fields"]
            if fields.ndim != 4 or fields.shape[0] != self.steps[i] or tuple(fields.shape[1:]) != self.grid:
                raise CorruptRecordError(f"fields has shape {fields.shape}, the manifest says "
                                         f"({self.steps[i]}, {', '.join(map(str, self.grid))})", path=str(path))
            fd = _file_descriptor(f) if self.direct else None
            table = self._table(i, fields, fd) if fd is not None else None
        except KeyError:
            f.close()
            raise CorruptRecordError("no 'fields' dataset: not a weather shard", path=str(path)) from None
        except BaseException:
            f.close()
            raise
        # The dataset object is kept too: looking "fields" up again costs ~1 ms per block.
        self.files[i] = _Shard(f, fields, fd, table if fd is not None else None)
        return self.files[i]

    def _table(self, i: int, fields, fd: int) -> np.ndarray | None:
        version = file_version(fd)
        kept = self.tables.get(i)
        if kept is None or kept[0] != version:
            kept = self.tables[i] = (version, chunk_table(fields))
        return kept[1]

    def pin(self, i: int, by: int) -> None:
        """Count reads in flight on shard ``i`` (``by`` +1 when one starts, -1 when it ends)."""
        self.pins[i] = self.pins.get(i, 0) + by

    def drop(self, i: int) -> None:
        """Close shard ``i`` and forget its check (it is about to be repaired or given up)."""
        opened = self.files.pop(i, None)
        if opened is not None:
            opened.file.close()
        self.checked.discard(i)

    def close(self) -> None:
        for shard in self.files.values():
            shard.file.close()
        self.files.clear()


def _file_descriptor(f) -> int | None:
    """HDF5's own descriptor of an open file (default ``sec2`` driver), so direct reads open nothing more."""
    try:
        fd = f.id.get_vfd_handle()
    except Exception:  # noqa: BLE001 - any other driver: no direct reads
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


class _ReadAhead:
    """Reads the next blocks of a plan in a background thread while the current one is consumed.

    The consuming thread opens and checks shards (with their repairs, events and counts);
    the thread only reads (``os.preadv`` and HDF5 both let other Python threads run), on
    shards pinned until the read is taken. A read that fails is not retried here:
    :meth:`take` returns None with :attr:`failed` set, and the caller reads the block again
    itself, where faults are repaired or reported.
    """

    def __init__(self, ds: "WeatherDataset", shards: _OpenShards, blocks: list[Block]):
        from concurrent.futures import ThreadPoolExecutor

        self.ds, self.shards, self.blocks = ds, shards, blocks
        self.pool = ThreadPoolExecutor(ds.readahead, thread_name_prefix="weather-readahead")
        self.started: dict[int, tuple[Any, float, int]] = {}  # block -> (future, open s, opens)
        self.failed = False

    def take(self, k: int, given_up: set[int]) -> tuple[np.ndarray, int, float, int] | None:
        """Block ``k``'s read ``(data, bytes, seconds, opens)``, starting the next ones; None: read it yourself."""
        for j in range(k, min(k + 1 + self.ds.readahead, len(self.blocks))):
            if j not in self.started and self.blocks[j].shard not in given_up:
                self._start(j)
        started = self.started.pop(k, None)
        if started is None:
            return None
        future, open_s, opens = started
        try:
            data, nbytes, calls, seconds = future.result()
        except REPAIRABLE:
            self.failed = True
            return None
        finally:
            self.shards.pin(self.blocks[k].shard, -1)
        self.ds.reads += calls
        return data, nbytes, open_s + seconds, opens

    def _start(self, j: int) -> None:
        block = self.blocks[j]
        opens, t0 = self.ds.access.opens, time.perf_counter()
        try:
            shard = self.shards.get(block.shard)
        except REPAIRABLE:
            return  # the consuming thread meets the fault again, and repairs or reports it
        self.shards.pin(block.shard, +1)
        self.started[j] = (self.pool.submit(self._read, shard, block), time.perf_counter() - t0,
                           self.ds.access.opens - opens)

    def _read(self, shard: _Shard, block: Block) -> tuple[np.ndarray, int, int, float]:
        t0 = time.perf_counter()
        data, nbytes, calls = self.ds._select(shard, block)
        return data, nbytes, calls, time.perf_counter() - t0

    def stop(self) -> None:
        """Wait for the reads in flight (their results are dropped) and end the thread."""
        self.pool.shutdown(wait=True, cancel_futures=True)
        for j in self.started:
            self.shards.pin(self.blocks[j].shard, -1)
        self.started.clear()


class WeatherDataset(ShardReader):
    """Forecasting pairs from the weather data set, read in blocks (see the module docstring).

    Args:
        path: the data set's folder (holding ``manifest.json``).
        rank, world_size: this process's data-parallel rank and the number of ranks.
        shuffle: shuffle the block order per epoch and the pairs inside each block.
        seed: the shuffling seed (the same on every rank).
        block_size: pairs per read (a read spans ``block_size + lead`` steps).
        lead: steps between input and target (1: ``(x_t, x_{t+1})``).
        channels: channel names (the manifest's ``extra.channels``) or indices to keep, in
            this order; ``None`` keeps all.
        lat, lon: crop and stride as a slice or ``(start, stop[, step])``, e.g.
            ``lat=(0, None, 2)`` keeps every second latitude; ``None`` keeps all.
        verify: ``"sha256"`` (hash a shard the first time a process opens it in an epoch),
            ``"size"`` or ``"none"``.
        repair_from: a pristine copy of the data set to repair shards from (default: the
            manifest's ``source``, which staging sets).
        allow_skip: when a shard cannot be repaired, log its unread pairs as lost (an event in
            :attr:`events`) instead of raising :class:`ShardError`.
        max_repairs: repair attempts per block read before giving up.
        events_path: the shared event log (default: a fresh temporary file).
        max_open_shards: shard files each reader process keeps open.
        direct: read a block's chunks straight from the file at the offsets HDF5's chunk index
            gives (one ``preadv``; only for unfiltered float32 chunks of one (step, channel)
            plane, as the generator writes them); ``False``, or any other layout: one HDF5
            hyperslab call per block.
        readahead: blocks read ahead by a background thread while the current block's pairs
            are consumed, so that ``readahead + 1`` reads are in flight (storage latency is
            paid in parallel; ``0``: one read at a time, in the consuming thread). After a
            fault the epoch goes on without reads ahead.
    """

    def __init__(self, path: str | os.PathLike, *, rank: int = 0, world_size: int = 1, shuffle: bool = True,
                 seed: int = 0, block_size: int = BLOCK_SIZE, lead: int = 1,
                 channels: Sequence[int | str] | None = None, lat: Axis = None, lon: Axis = None,
                 verify: Verify = "sha256", repair_from: str | os.PathLike | None = None, allow_skip: bool = False,
                 max_repairs: int = 2, events_path: str | os.PathLike | None = None,
                 max_open_shards: int = MAX_OPEN_SHARDS, direct: bool = True, readahead: int = READAHEAD):
        super().__init__()
        manifest, folder = load_manifest(path)
        where = str(folder / "manifest.json")
        if manifest.format != FORMAT:
            raise ManifestError(f"field 'format' is {manifest.format!r}, not {FORMAT!r}", path=where)
        if not 0 <= rank < world_size:
            raise DataError(f"rank {rank} is outside 0..{world_size - 1}")
        for name, value in (("block_size", block_size), ("lead", lead), ("max_open_shards", max_open_shards)):
            if not isinstance(value, int) or value < 1:
                raise DataError(f"{name}={value!r}; give an integer >= 1")
        if not isinstance(readahead, int) or readahead < 0:
            raise DataError(f"readahead={readahead!r}; give an integer >= 0 (0: no reads ahead)")
        grid = []
        for name in ("channels", "lat", "lon"):
            value = manifest.params.get(name)
            if not isinstance(value, int) or value < 1:
                raise ManifestError(f"field 'params.{name}' is {value!r}; the grid size is needed "
                                    f"(make the data set with data_prep/make_weather.py)", path=where)
            grid.append(value)
        self.grid = (grid[0], grid[1], grid[2])
        self.manifest, self.folder = manifest, folder
        self.rank, self.world_size = rank, world_size
        self.shuffle, self.seed, self.block_size, self.lead = shuffle, seed, block_size, lead
        self.allow_skip, self.max_repairs, self.max_open_shards = allow_skip, max_repairs, max_open_shards
        self.direct, self.readahead = direct, readahead
        self.channel_names = list(manifest.extra.get("channels") or [f"ch{c}" for c in range(self.grid[0])])
        self.channels = self._channel_indices(channels)
        self.lat, self.lon = _axis(lat, self.grid[1], "lat"), _axis(lon, self.grid[2], "lon")
        self.events = EventLog(events_path)
        self.access = ShardAccess(folder, manifest, verify=verify, repair_from=repair_from, events=self.events)
        # Data reads made by this process: preadv or HDF5 calls, one per block unless a direct
        # read had to skip a large gap (DataLoader workers count their own).
        self.reads = 0
        # Shared with DataLoader workers (inherited at fork, passed at spawn), so that
        # set_epoch reaches persistent workers too.
        self._epoch = multiprocessing.RawValue("q", 0)
        self._steps = [s.samples for s in manifest.shards]
        self._pairs = [max(0, n - lead) for n in self._steps]
        self._pair0 = np.concatenate([[0], np.cumsum(self._pairs)]).astype(int).tolist()
        self._step0 = np.concatenate([[0], np.cumsum(self._steps)]).astype(int).tolist()
        self._blocks = shard_blocks(self._pairs, block_size)
        repair_or_raise(self.access, self.manifest, self.folder)

    # -- public -----------------------------------------------------------------------
    @property
    def pairs(self) -> int:
        """Pairs in the whole data set (per epoch, over all ranks)."""
        return self._pair0[-1]

    @property
    def blocks(self) -> list[Block]:
        """Every block of the data set, in manifest order (before any epoch's shuffle and split)."""
        return list(self._blocks)

    @property
    def sample_shape(self) -> tuple[int, int, int]:
        """``(channels, lat, lon)`` of ``x`` and ``y`` after selection."""
        return len(self.channels), len(self.lat), len(self.lon)

    @property
    def order_label(self) -> str:
        """The order of an epoch's pairs, as a benchmark row states it: ``per-sample`` (``block_size=1``: every
        pair shuffled on its own), ``runs of K`` (blocks of K consecutive pairs shuffled as units, the pairs
        shuffled inside each) or ``none`` (``shuffle=False``)."""
        if not self.shuffle:
            return "none"
        return "per-sample" if self.block_size == 1 else f"runs of {self.block_size}"

    def __len__(self) -> int:
        """Pairs this rank reads per epoch (all its workers together)."""
        n = self.pairs
        return n * (self.rank + 1) // self.world_size - n * self.rank // self.world_size

    def plan(self, epoch: int | None = None, *, worker: int = 0, workers: int = 1) -> list[Block]:
        """The blocks (parts at slice ends) that ``worker`` of this rank reads in ``epoch``."""
        return epoch_blocks(self._blocks, consumers=self.world_size * workers, consumer=self.rank * workers + worker,
                            seed=self.seed, epoch=self.epoch if epoch is None else epoch, shuffle=self.shuffle)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        worker, workers, consumer = self._consumer()
        epoch = self.epoch
        blocks = self.plan(epoch, worker=worker, workers=workers)
        rng = random.Random(f"{self.seed}:{epoch}:{consumer}")
        where = {"rank": self.rank, "worker": worker, "epoch": epoch}
        shards = _OpenShards(self.access, self._steps, self.grid, self.max_open_shards, self.direct,
                             self.__dict__.setdefault("_chunk_tables", {}))
        ahead = _ReadAhead(self, shards, blocks) if self.readahead and len(blocks) > 1 else None
        given_up: set[int] = set()
        try:
            for k, block in enumerate(blocks):
                read = ahead.take(k, given_up) if ahead is not None else None
                if read is None:
                    if ahead is not None and ahead.failed:
                        ahead.stop()  # after a fault, one read at a time: repairs need the shard to themselves
                        ahead = None
                    read = self._read_block(block, shards, given_up, where)
                if read is None:
                    continue
                raw, nbytes, seconds, opens = read
                data = self._pick(raw)
                order = list(range(len(block)))
                if self.shuffle:
                    rng.shuffle(order)
                first = True
                for j in order:
                    pos = block.start + j
                    yield {"x": torch.from_numpy(data[j]), "y": torch.from_numpy(data[j + self.lead]),
                           "index": self._pair0[block.shard] + pos, "step": self._step0[block.shard] + pos,
                           "read_bytes": nbytes if first else 0, "read_s": seconds if first else 0.0,
                           "opens": opens if first else 0}
                    first = False
        finally:
            if ahead is not None:
                ahead.stop()
            shards.close()

    # -- internals ------------------------------------------------------------------------
    def _channel_indices(self, channels: Sequence[int | str] | None) -> list[int]:
        if channels is None:
            return list(range(self.grid[0]))
        if isinstance(channels, (str, int)):
            channels = [channels]
        out = []
        for c in channels:
            if isinstance(c, str):
                if c not in self.channel_names:
                    raise DataError(f"channel {c!r} is not in the data set; it has {self.channel_names}")
                c = self.channel_names.index(c)
            if not isinstance(c, (int, np.integer)) or not 0 <= c < self.grid[0]:
                raise DataError(f"channel {c!r} is outside 0..{self.grid[0] - 1}")
            out.append(int(c))
        if not out:
            raise DataError("channels=[] keeps nothing; give None for all channels")
        return out

    def _select(self, shard: _Shard, block: Block) -> tuple[np.ndarray, int, int]:
        """Steps ``block.start .. block.stop - 1 + lead``: one read (direct, or one HDF5 call).

        Safe in a background thread (of the dataset's state it touches only its thread-safe buffer pool).

        Returns:
            (the block over the covering channel range and latitude rows, bytes read from the
            file, read calls made).

        Raises:
            CorruptRecordError, OSError: the file is damaged (repairable).
        """
        t0, t1 = block.start, block.stop + self.lead
        c0, c1 = min(self.channels), max(self.channels) + 1
        y0, y1 = min(self.lat), max(self.lat) + 1
        where = shard.file.filename
        if shard.table is not None:
            # A reused buffer once the last block's pairs are let go (BufferPool: no page faults per block).
            shape = (t1 - t0, c1 - c0, *self.grid[1:])
            pool = self.__dict__.setdefault("_buffers", BufferPool())
            out = pool.array(int(np.prod(shape)) * 4).view(np.float32).reshape(shape)
            try:
                calls, nbytes = read_chunks(shard.fd, shard.table, slice(t0, t1), slice(c0, c1), out)
            except _NotDirect:
                pass  # a chunk never written reads as HDF5's fill value: let HDF5 do it
            except CorruptRecordError as exc:
                raise CorruptRecordError(str(exc), path=where) from None
            else:
                # Whole planes were read (one chunk each); the latitude crop is a view.
                return (out if (y0, y1) == (0, self.grid[1]) else out[:, :, y0:y1]), nbytes, calls
        try:
            data = shard.fields[t0:t1, c0:c1, y0:y1]
        except (KeyError, ValueError) as exc:
            raise CorruptRecordError(f"unreadable weather shard ({exc})", path=where) from None
        if data.shape[0] != t1 - t0:
            raise CorruptRecordError(f"read {data.shape[0]} steps at {t0}, expected {t1 - t0}", path=where)
        return data, data.nbytes, 1

    def _pick(self, data: np.ndarray) -> np.ndarray:
        """The channels, crops and strides asked for, out of a block read by :meth:`_select` (numpy)."""
        c0, y0 = min(self.channels), min(self.lat)
        picked = data
        if self.channels != list(range(c0, c0 + data.shape[1])):
            picked = picked[:, [c - c0 for c in self.channels]]
        if len(self.lat) != data.shape[2] or self.lat.step < 0:
            picked = picked[:, :, _local(self.lat, y0)]
        if len(self.lon) != self.grid[2] or self.lon.step < 0:
            picked = picked[:, :, :, _local(self.lon, 0)]
        # Contiguous pairs (a direct read's latitude crop is a view of whole planes).
        return np.ascontiguousarray(picked)

    def _read_block(self, block: Block, shards: _OpenShards, given_up: set[int],
                    where: dict[str, int]) -> tuple[np.ndarray, int, float, int] | None:
        """One block after the shard's check; repaired and retried, or given up (None, logged)."""
        path = str(self.access.path(block.shard))
        if block.shard in given_up:
            self.events.add("lost", shard=path, samples=len(block), reason="shard given up earlier", **where)
            return None
        repairs = 0
        while True:
            opens, t0 = self.access.opens, time.perf_counter()
            try:
                try:
                    data, nbytes, calls = self._select(shards.get(block.shard), block)
                except (KeyError, ValueError) as exc:
                    raise CorruptRecordError(f"unreadable weather shard ({exc})", path=path) from None
                self.reads += calls
                return data, nbytes, time.perf_counter() - t0, self.access.opens - opens
            except REPAIRABLE as exc:
                shards.drop(block.shard)
                reason = f"{type(exc).__name__}: {exc}"
                if repairs < self.max_repairs and self.access.repair(block.shard, reason, **where):
                    repairs += 1
                    continue
                if self.allow_skip:
                    given_up.add(block.shard)
                    self.events.add("lost", shard=path, samples=len(block), reason=reason, **where)
                    return None
                raise ShardError(f"shard is corrupt and could not be repaired ({reason}); {len(block)} pairs of "
                                 f"this block unread (pass allow_skip=True to count them as lost instead)",
                                 path=path, samples=len(block)) from None
