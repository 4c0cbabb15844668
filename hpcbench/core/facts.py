"""Constants of the world, each once, each with where it comes from.

Two kinds: limits and defaults of the software we drive (NCCL, PyTorch DDP), and link rates of
the hardware the guide names (vendor data sheets). Code that needs one of these imports it from
here; a literal 4096 elsewhere is a bug waiting to disagree.

No figure of the guide lives here: a claim's figures, bands and regime are declared in the
``claims.py`` of the experiment that rules on it; what the guide states about its platform and its
tuning case is :mod:`hpcbench.guide.statements`; a setting the guide recommends for a technique is
that technique's default (the monitor's alert thresholds, the gate's limits, the micro-steps under
``no_sync()``, the 2-bit code's bucket). ``tests/test_guide.py`` holds this.
"""

from __future__ import annotations

GB = 1e9  # decimal gigabyte, as nccl-tests and link data sheets use

# -- InfiniBand, NCCL, PyTorch ------------------------------------------------------------
#: Largest InfiniBand MTU (IBTA spec vol. 1: 256 B .. 4096 B).
IB_MTU_BYTES = 4096
#: NCCL environment docs: NCCL_BUFFSIZE defaults to 4 MiB.
NCCL_DEFAULT_BUFFSIZE = 4 << 20
#: NCCL environment docs: NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD must not exceed 64.
NCCL_SOCKET_THREADS_LIMIT = 64
#: torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=25).
DDP_DEFAULT_BUCKET_BYTES = 25 << 20
#: torch.distributed._DEFAULT_FIRST_BUCKET_BYTES: DDP caps its first bucket at 1 MiB.
DDP_FIRST_BUCKET_BYTES = 1 << 20

# -- where a launch ran: the values of its ``fact.cluster`` record ----------------------------
# Written by hpcbench.system.facts, read by the rules (hpcbench.judge.rulekit): both sides spell them once, here.
EMULATED_CLUSTER = "emulated cluster, shaped link"
EMULATED_NODES = "emulated nodes, one loopback"
ONE_MACHINE = "one machine"

# -- link peaks, GB/s per direction (vendor data sheets) -------------------------------------
LINK_PEAKS_GBPS = {
    "HDR InfiniBand (200 Gb/s)": 200e9 / 8 / GB,   # the guide's fabric (C16)
    "NDR InfiniBand (400 Gb/s)": 400e9 / 8 / GB,
    "NVLink 3 (A100, per GPU)": 300.0,             # 600 GB/s bidirectional
    "NVLink 4 (H100/H200, per GPU)": 450.0,        # 900 GB/s bidirectional (H100, H200 data sheets)
}
