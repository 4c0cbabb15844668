"""Data I/O: synthetic data sets, shard formats, readers, prefetching, staging, resilience.

Roles, one subpackage or module each (DLIO's layout):

| module | role |
|---|---|
| ``manifest`` | the manifest every data set carries (samples, bytes, shards with sha256) |
| ``generators/`` | synthetic data sets: ``images`` (JPEG folder), ``weather`` (HDF5 grids), ``tokens`` (GPT-2 ids) |
| ``writers/`` | converters from the image folder to ``hdf5``, ``tfrecord``, ``tar`` shards (one file per format) |
| ``readers/`` | torch Datasets for ``files``, ``hdf5``, ``tfrecord``, ``tar`` (one file per format), and ``weather`` (the HDF5 grids read in blocks of time steps) |
| ``plan`` | which samples each rank and worker reads in an epoch (exactly once) |
| ``resilience`` | shard checks against the manifest, repair from a source copy, the event log |
| ``prefetch`` | DataLoader prefetch depth and the device prefetcher (CUDA side stream / CPU thread) |
| ``staging`` | copying a data set to node-local storage, verified |
| ``page_cache`` | evicting a data set's files from the page cache, and checking it worked |

This package imports no torch at import time; ``readers`` and ``prefetch`` do.
"""
