"""Which samples each reader process reads in an epoch: shuffled across shards, split exactly.

Pure core, no torch. An epoch orders the shards by a permutation drawn from
``(seed, epoch)`` (every rank draws the same one), lays their samples end to end, and
cuts that sequence into ``consumers = world_size x num_workers`` contiguous slices whose
lengths differ by at most one. Consumer ``c = rank x num_workers + worker`` reads slice
``c``. The slices partition the sequence, so every sample is read exactly once per epoch
by exactly one consumer, and each consumer reads a few runs of consecutive records
(sequential I/O, few file opens) rather than scattered ones. The readers mix samples
further with a shuffle buffer (:func:`buffer_shuffle`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Piece:
    """Samples ``start .. stop-1`` (positions inside shard ``shard``) for one consumer."""

    shard: int
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start


def shard_order(n_shards: int, *, seed: int, epoch: int, shuffle: bool) -> list[int]:
    order = list(range(n_shards))
    if shuffle:
        random.Random(f"{seed}:{epoch}").shuffle(order)
    return order


def consumer_slice(total: int, consumers: int, consumer: int) -> tuple[int, int]:
    """Positions ``[a, b)`` of ``consumer`` when ``total`` items are cut into near-equal slices."""
    if not 0 <= consumer < consumers:
        raise ValueError(f"consumer {consumer} is outside 0..{consumers - 1}")
    return total * consumer // consumers, total * (consumer + 1) // consumers


def epoch_pieces(shard_samples: Sequence[int], *, consumers: int, consumer: int, seed: int, epoch: int,
                 shuffle: bool) -> list[Piece]:
    """The pieces consumer ``consumer`` of ``consumers`` reads in ``epoch``.

    Args:
        shard_samples: samples per shard, in manifest order.
    """
    order = shard_order(len(shard_samples), seed=seed, epoch=epoch, shuffle=shuffle)
    a, b = consumer_slice(sum(shard_samples), consumers, consumer)
    pieces, pos = [], 0
    for shard in order:
        n = shard_samples[shard]
        lo, hi = max(a, pos), min(b, pos + n)
        if lo < hi:
            pieces.append(Piece(shard, lo - pos, hi - pos))
        pos += n
        if pos >= b:
            break
    return pieces


def buffer_shuffle(items: Iterable[T], size: int, rng: random.Random) -> Iterator[T]:
    """Yield ``items`` in a random order using a buffer of ``size`` (1 = no shuffling).

    Every item is yielded exactly once (the buffer is drained at the end).
    """
    if size <= 1:
        yield from items
        return
    buf: list[T] = []
    for item in items:
        if len(buf) < size:
            buf.append(item)
            continue
        j = rng.randrange(size)
        buf[j], item = item, buf[j]
        yield item
    rng.shuffle(buf)
    yield from buf


def cut_runs(n: int, run: int, rng: random.Random | None = None) -> list[tuple[int, int]]:
    """Positions ``0 .. n-1`` cut into runs ``[a, b)`` of at most ``run`` consecutive positions.

    With ``rng`` the first run's length is drawn from ``1 .. run`` (the rest are ``run`` long, the last may be
    shorter), so that run boundaries move from epoch to epoch and no two samples are bound to one run for good.
    """
    if run < 1:
        raise ValueError(f"run={run}; a run holds at least one sample")
    cuts = [0]
    first = rng.randint(1, run) if rng is not None else run
    cuts.extend(range(min(first, n), n, run))
    if cuts[-1] != n:
        cuts.append(n)
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]

