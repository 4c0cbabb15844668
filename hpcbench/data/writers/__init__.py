"""Converters from an image folder (``files`` data set) to shard formats, one file per format.

:data:`WRITERS` maps a format name to its :class:`~hpcbench.data.writers.base.ShardWriter`
class; :func:`convert` is the one entry point::

    convert("data/images", "data/images-tfrecord", "tfrecord", shard_bytes=32 << 20)
"""

from hpcbench.data.writers.base import WRITERS, ShardWriter, convert, iter_source
from hpcbench.data.writers import hdf5, tar, tfrecord  # noqa: F401  (registers the formats)

__all__ = ["WRITERS", "ShardWriter", "convert", "iter_source"]
