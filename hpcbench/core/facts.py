"""Constants of the world, each once, each with where it comes from.

Three kinds: limits and defaults of the software we drive (NCCL, PyTorch DDP), link
rates of the hardware the guide names (vendor data sheets), and the guide's own figures
(digested in hpcbench/guide/README.md, checked against the Chinese original). Code that needs one of these
imports it from here; a literal 4096 or 3.2 elsewhere is a bug waiting to disagree.

Of the guide's figures, only those a lower layer reads live here: the guide's own arithmetic
(:mod:`hpcbench.guide.claims`), a technique's thresholds or defaults (the monitor's C6 alerts, the
practice gate's C12 limits, the advisor's C9 micro-steps, the scale model's weather step). A figure
only one experiment reads lives in that experiment's package, beside the rules that judge its claim
(C4's idle share in ``io_formats``, C11's intervals and C15's tries in ``fault_tolerance``).
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
#: GPUs per node on the guide's platform (C16: "8 x A100").
GUIDE_GPUS_PER_NODE = 8

# -- the guide's figures a lower layer reads (hpcbench/guide/README.md) -------------------------------
GUIDE_C3_RESNET = (12_500, 18_700, 49.6)   # DDP, Hybrid images/s, stated gain %
GUIDE_C3_GPT2 = (8_200, 11_500, 40.2)      # DDP, Hybrid tokens/s, stated gain %
GUIDE_C7_STEP_MS = (420, 310, 132)         # original, comm-tuned, full optimisation
GUIDE_C7_UTIL = (0.61, 0.75, 0.92)
GUIDE_C7_SPEEDUP = 3.2                     # "3.2x faster"
GUIDE_C2_GAIN = 2.20                       # "+220 %" per-GPU throughput, i.e. 3.2x
GUIDE_C2_BATCH_FACTOR = 4                  # "batch > 4x the cloud batch"
GUIDE_C8_BITS, GUIDE_C8_BUCKET_BYTES = 2, 4 << 20
GUIDE_C9_MICRO_STEPS = 4                   # "4 micro-steps" under no_sync(), then one synchronisation
GUIDE_C10_NCCL_SETTINGS = {"NCCL_ALGO": "Tree", "NCCL_NSOCKS_PERTHREAD": "4",
                           "NCCL_SOCKET_NTHREADS": "8", "NCCL_BUFFSIZE": "4194304"}
# C6 (guide sec. 2.4, "Wrong monitoring metrics"): the guide's four alert thresholds.
GUIDE_C6_SM_EFFICIENCY_MIN = 0.80          # "GPU SM efficiency (DCGM) > 80 %"
GUIDE_C6_IB_RETRANS_MAX = 0.001            # "IB retransmission rate (IB counters) < 0.1 %"
GUIDE_C6_STORAGE_P99_MAX_S = 0.050         # "storage latency P99 (Lustre stats) < 50 ms"
GUIDE_C6_CACHE_HIT_MIN = 0.90              # "CPU cache hit rate (perf) > 90 %"
# C12 (guide sec. 6, "Gate before scaling out"): the guide's three gate limits, each a strict "<".
GUIDE_C12_STEP_TIME_CV_MAX = 0.05          # "step-time standard deviation < 5 %" (of the mean step time)
GUIDE_C12_COMM_SHARE_MAX = 0.30            # "communication share < 30 %"
GUIDE_C12_READ_P99_MAX_S = 0.100           # "storage read latency P99 < 100 ms"
