"""Readers: one torch ``IterableDataset`` per storage format, all decoding JPEG the same way.

:data:`READERS` maps a format name (``files``, ``hdf5``, ``tfrecord``, ``tar``) to its
dataset class; :func:`open_dataset` picks the class from the data set's manifest::

    ds = open_dataset("data/images-tfrecord", rank=0, world_size=1, seed=0)
    loader = DataLoader(ds, batch_size=32, num_workers=4, pin_memory=True, prefetch_factor=1,
                        collate_fn=collate_samples)
    for epoch in range(3):
        ds.set_epoch(epoch)
        for batch in loader: ...   # batch["image"], batch["label"], batch["index"], ...

Decoded and resized (``image_size``), a JPEG is decoded at the smallest DCT scale that still covers the size
(``jpeg_decode="scaled"``, the default) or at full size (``jpeg_decode="full"``), then resized: :func:`decode_jpeg`.

Batches built inside the workers (one shared-memory tensor per batch of raw bytes)::

    ds = open_dataset("data/images-tfrecord", decode=False, batch_in_worker=32)
    loader = DataLoader(ds, num_workers=4, **loader_options(ds, 32))   # batch_size=None
    for batch in loader: ...   # batch["image"] (uint8), batch["image_offsets"]; image_bytes(batch)

Runs of up to 32 neighbouring samples shuffled as units, each run one read (the warm-cache storage path)::

    ds = open_dataset("data/images-tar", decode=False, batch_in_worker=128, order="runs", run_samples=32)
    for batch in DataLoader(ds, num_workers=2, **loader_options(ds, 128)): ...   # batch["image_spans"]

Worker batches in a ring of reused shared-memory buffers (a batch is overwritten 6 batches of its worker later;
each buffer crosses to the consumer once, later batches of it as its key: ``RingBatch``)::

    ds = open_dataset("data/images-tar", decode=False, batch_in_worker=128, order="runs", batch_ring=6)
    for batch in DataLoader(ds, num_workers=2, prefetch_factor=2, **loader_options(ds, 128)):
        ...; assert batch_is_current(batch)   # done with it before its worker's buffer comes round again

The weather data set (gridded fields, not images) has its own reader, outside :data:`READERS`::

    ds = WeatherDataset("data/weather", rank=0, world_size=1, seed=0, block_size=16)
    for batch in DataLoader(ds, batch_size=8, num_workers=2): ...   # batch["x"], batch["y"]; block_reads(batch)
"""

from hpcbench.data.readers.base import (JPEG_DECODES, READERS, ShardedImageDataset, batch_is_current, collate_samples,
                                        decode_jpeg, image_bytes, loader_options, open_dataset)
from hpcbench.data.readers import files, hdf5, tar, tfrecord  # noqa: F401  (registers the readers)
from hpcbench.data.readers.weather import WeatherDataset, block_reads

__all__ = ["JPEG_DECODES", "READERS", "ShardedImageDataset", "WeatherDataset", "batch_is_current", "block_reads",
           "collate_samples", "decode_jpeg", "image_bytes", "loader_options", "open_dataset"]
