"""Synthetic data sets, one module per kind: ``images`` (ImageNet-like JPEG folder),
``weather`` (gridded fields in chunked HDF5), ``tokens`` (a GPT-2 token stream).

Each generator is deterministic in its seed and writes a manifest
(:mod:`hpcbench.data.manifest`) next to what it made.
"""
