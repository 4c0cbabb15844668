"""Worker batches in a ring of reused shared-memory buffers (``batch_ring``): every sample once with its
source's bytes, each batch's tensors views of its buffer, and a batch whose buffer came round detected."""

from __future__ import annotations

import pytest
from torch.utils.data import DataLoader

from data_fixtures import SHARD_FORMATS, SPEC, image_sets, source_samples  # noqa: F401
from hpcbench.data.errors import DataError
from hpcbench.data.readers import batch_is_current, image_bytes, loader_options, open_dataset


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
