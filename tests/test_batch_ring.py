"""Worker batches in a ring of reused shared-memory buffers (``batch_ring``): every sample once with its
source's bytes, each batch's tensors views of its buffer, and a batch whose buffer came round detected."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from data_fixtures import SHARD_FORMATS, SPEC, image_sets, source_samples  # noqa: F401
from hpcbench.data.errors import DataError
from hpcbench.data.readers import batch_is_current, image_bytes, loader_options, open_dataset
from hpcbench.data.readers.base import _ring_batch_arrived as _REAL_ARRIVAL


@pytest.mark.parametrize("order", ["samples", "runs"])
@pytest.mark.parametrize("fmt", SHARD_FORMATS)
def test_ring_batches_deliver_every_sample_once_with_the_sources_bytes(image_sets, fmt, order):
    expected = source_samples(image_sets["files"])
    ds = open_dataset(image_sets[fmt], decode=False, verify="size", seed=2, batch_in_worker=4, order=order,
                      batch_ring=3)
    got: dict[int, tuple[bytes, int]] = {}
    loader = DataLoader(ds, num_workers=2, prefetch_factor=1, persistent_workers=True, **loader_options(ds, 4))
    for epoch in (0, 1):  # persistent workers: the second epoch writes the same buffers again
        ds.set_epoch(epoch)
        got.clear()
        for batch in loader:
            assert batch_is_current(batch)
            # one buffer per batch: the bytes and every small array share its storage
            base = batch["image"].untyped_storage().data_ptr()
            assert all(batch[k].untyped_storage().data_ptr() == base for k in ("label", "index", "nbytes", "opens"))
            for i, data, label in zip(batch["index"].tolist(), image_bytes(batch), batch["label"].tolist()):
                assert i not in got
                got[i] = (data, label)
        assert got == expected, f"epoch {epoch}: lost samples or wrong bytes"


def test_a_batch_kept_after_its_buffer_came_round_is_seen_as_overwritten(image_sets):
    # One worker, a ring of 2: holding every batch, the older ones are overwritten by the time the epoch ends
    # (their stamp moved on, and their bytes and indexes are a later batch's); a ring as long as the epoch keeps
    # them all.
    expected = {i: data for i, (data, _) in source_samples(image_sets["files"]).items()}

    def kept(ring: int) -> list[tuple[dict, list[int]]]:
        ds = open_dataset(image_sets["tar"], decode=False, verify="size", seed=1, batch_in_worker=4, batch_ring=ring)
        # each batch with the samples it held when it arrived
        return [(b, b["index"].tolist()) for b in DataLoader(ds, num_workers=1, prefetch_factor=1,
                                                              **loader_options(ds, 4))]

    def intact(batch: dict, delivered: list[int]) -> bool:
        return batch["index"].tolist() == delivered and image_bytes(batch) == [expected[i] for i in delivered]

    short = kept(2)
    assert len(short) == SPEC.count // 4
    assert sorted(i for _, delivered in short for i in delivered) == list(range(SPEC.count))
    # A buffer too small for a later batch is replaced, not written (the old batch keeps it): most of the older
    # batches, not always all, were overwritten, and the stamp says exactly which.
    assert all(batch_is_current(b) for b, _ in short[-2:])
    assert sum(not batch_is_current(b) for b, _ in short) >= len(short) // 2
    assert all(intact(b, delivered) == batch_is_current(b) for b, delivered in short)
    long = kept(SPEC.count // 4)
    assert all(batch_is_current(b) and intact(b, delivered) for b, delivered in long)


def test_in_the_readers_own_process_the_ring_is_not_used(image_sets):
    # Outside a DataLoader worker the batch buffers are pooled by reference count instead: always current.
    ds = open_dataset(image_sets["hdf5"], decode=False, shuffle=False, batch_in_worker=8, batch_ring=2)
    batches = list(ds)
    assert all(batch_is_current(b) and "ring_stamp" not in b for b in batches)
    assert [i for b in batches for i in b["index"].tolist()] == list(range(SPEC.count))


def test_the_ring_is_refused_where_it_cannot_apply(image_sets):
    with pytest.raises(DataError, match="batch_ring=-1"):
        open_dataset(image_sets["tar"], decode=False, batch_in_worker=4, batch_ring=-1)
    with pytest.raises(DataError, match="batch_ring=4 holds zero-copy batches.*decode=True"):
        open_dataset(image_sets["tar"], decode=True, batch_in_worker=4, batch_ring=4)


def test_measure_epoch_checks_every_batch_was_not_overwritten_during_its_step(image_sets):
    from hpcbench.experiments.io_formats.worker import CONSUMER_HOLDS, measure_epoch

    def epoch(ring: int):
        ds = open_dataset(image_sets["tfrecord"], decode=False, verify="size", seed=0, batch_in_worker=4,
                          order="runs", batch_ring=ring)
        return measure_epoch(ds, epoch=1, workers=2, prefetch_factor=2, batch_size=4, compute_s=0.02,
                             device_prefetch=True, evict_paths=None)

    r = epoch(2 + CONSUMER_HOLDS)  # what the experiment gives: the prefetch + what the consumer holds
    assert r.exact and r.samples == SPEC.count
    # A ring of 1: the worker writes its next batch into the buffer the step is still computing on.
    with pytest.raises(DataError, match="reused by its worker before its step ended"):
        epoch(1)


def _arrival_spy(key, whole, views, plain):
    """The consumer's side of a ring batch (``base._ring_batch_arrived``), noting whether it carried its buffer."""
    carried, arrived = _arrival_spy.seen
    (carried if whole is not None else arrived).append(key)
    return _REAL_ARRIVAL(key, whole, views, plain)


def test_each_ring_buffer_crosses_to_the_consumer_once_then_batches_name_it(image_sets, monkeypatch):
    # torch sends a shared tensor as a file descriptor fetched from the worker in a round trip per batch; a ring
    # buffer goes once, with the first batch in it, and every later batch of it travels as its key.
    from hpcbench.data.readers import base

    carried, arrived = [], []
    # The workers pickle the function by name: a module-level one, which the consumer's unpickling calls.
    monkeypatch.setattr(base, "_ring_batch_arrived", _arrival_spy)
    monkeypatch.setattr(_arrival_spy, "seen", (carried, arrived), raising=False)
    expected = source_samples(image_sets["files"])
    ds = open_dataset(image_sets["hdf5"], decode=False, verify="size", seed=3, batch_in_worker=4, order="runs",
                      batch_ring=3)
    loader = DataLoader(ds, num_workers=2, prefetch_factor=1, persistent_workers=True, **loader_options(ds, 4))
    batches = 0
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        got = {}
        for batch in loader:
            batches += 1
            assert batch_is_current(batch) and type(batch) is dict
            got.update(zip(batch["index"].tolist(), zip(image_bytes(batch), batch["label"].tolist())))
        assert got == expected
    pids = {w.pid for w in loader._iterator._workers}
    assert len(carried) == len(set(carried))  # each buffer once (one that grew for a larger batch is a new one)
    assert {key[0] for key in carried} == pids
    assert set(arrived) <= set(carried)  # the later batches named buffers already received
    assert len(arrived) > len(carried)
    assert len(carried) + len(arrived) == batches


def test_a_ring_batch_naming_a_buffer_never_received_is_refused_clearly():
    import copy
    import pickle

    from hpcbench.data.readers import base

    # A ring made in this process: pickling here is its worker's side, unpickling the consumer's.
    ring = base.BatchRing(2)
    slot = ring.take(16, 64)
    slot.image.copy_(torch.arange(16, dtype=torch.uint8))
    batch = slot.batch({"index": np.arange(2)}, image=slot.image)
    kept = copy.deepcopy(batch)  # its own memory, and not the buffer's crossing
    assert type(kept) is dict and kept["image"].data_ptr() != batch["image"].data_ptr() and not ring.sent
    first, later = pickle.dumps(batch), pickle.dumps(batch)
    assert len(later) < len(first)  # the buffer itself went with the first only
    try:
        got = pickle.loads(first)
        assert got["image"].tolist() == list(range(16)) and got["index"].tolist() == [0, 1]
        assert pickle.loads(later)["index"].untyped_storage().data_ptr() == got["image"].untyped_storage().data_ptr()
    finally:
        base._RECEIVED.pop(slot.key, None)
    with pytest.raises(DataError, match="never received that buffer"):
        pickle.loads(later)


def test_buffers_of_exited_workers_are_let_go_when_new_ones_arrive(image_sets):
    from hpcbench.data.readers import base

    def epoch_of_new_workers() -> set[int]:
        ds = open_dataset(image_sets["tar"], decode=False, verify="size", seed=0, batch_in_worker=4, batch_ring=2)
        loader = DataLoader(ds, num_workers=2, prefetch_factor=1, persistent_workers=True, **loader_options(ds, 4))
        assert sum(len(b["index"]) for b in loader) == SPEC.count
        pids = {w.pid for w in loader._iterator._workers}
        del loader  # its workers exit
        return pids

    first = epoch_of_new_workers()
    assert first & {key[0] for key in base._RECEIVED}
    second = epoch_of_new_workers()
    held = {key[0] for key in base._RECEIVED}
    assert not first & held and second & held
