"""Fault tolerance (guide sec. 2.5, T-fault): checkpoints, resumable training, and the job wrapper.

* :mod:`hpcbench.fault.state` — what a full and a light checkpoint hold; capture and restore.
* :mod:`hpcbench.fault.checkpoint` — the two-tier policy (C11), zstd, manifests with sha256,
  atomic writes, retention, finding the newest valid checkpoint.
* :mod:`hpcbench.fault.sharded` — ``torch.distributed.checkpoint`` saves, for comparison.
* :mod:`hpcbench.fault.async_save` — snapshot to CPU memory, write in a background thread.
* :mod:`hpcbench.fault.train` — a small resumable training driver (``python -m`` / torchrun).
* :mod:`hpcbench.fault.retry` — the job wrapper's retries and repair (C15).
* :mod:`hpcbench.fault.inject` — breaking things on purpose: every fault the tests and the
  experiments inject (links, storage, CPUs, processes, nodes, shards, disks), one module per
  kind, and the one helper that applies, records and always undoes them.
* :mod:`hpcbench.fault.phases` — a training task with one injected fault per phase on its last
  node: the config, start, timed loop and checks of the experiments that run it.

Importing this package imports nothing else (no torch), so the job wrapper stays cheap.
"""
