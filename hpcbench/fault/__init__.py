"""Fault tolerance (guide sec. 2.5, T-fault): checkpoints, resumable training, and the job wrapper.

* :mod:`hpcbench.fault.state` — what a full and a light checkpoint hold; capture and restore.
* :mod:`hpcbench.fault.checkpoint` — the two-tier policy (C11), zstd, manifests with sha256,
  atomic writes, retention, finding the newest valid checkpoint.
* :mod:`hpcbench.fault.sharded` — ``torch.distributed.checkpoint`` saves, for comparison.
* :mod:`hpcbench.fault.async_save` — snapshot to CPU memory, write in a background thread.
* :mod:`hpcbench.fault.train` — a small resumable training driver (``python -m`` / torchrun).
* :mod:`hpcbench.fault.retry` and :mod:`hpcbench.fault.inject` — the job wrapper's retries and
  repair (C15), and the faults the tests and the experiment inject.

Importing this package imports nothing else (no torch), so the job wrapper stays cheap.
"""
