"""The field guide's techniques T-*: what each recommends, which code lines are pseudo-code, and where it lives here.

The guide ("Designing AI parallel-computing architecture on supercomputers: five fatal
mistakes", a practitioner's field guide in Chinese) names its techniques by section. Each
:class:`Technique` is our English digest of one: what the guide recommends, the lines of the
original that are pseudo-code (not real APIs) and the real mechanism hpcbench implements for
them, the claims (:mod:`hpcbench.guide.claims`) that rest on it, and the hpcbench packages and
experiments where it lives. :mod:`hpcbench.guide.digest` renders these and the claims as
``hpcbench/guide/README.md``, the guide inside this repository.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Technique:
    """One technique of the guide, as the guide recommends it and as hpcbench implements it."""

    id: str
    """``"T-comm"`` .. ``"T-practice"``, as the guide's sections are tagged."""
    section: str
    """The guide's section, e.g. ``"2.1 Wrong communication mode"``."""
    recommends: str
    """What the guide recommends, in our words."""
    pseudo: tuple[tuple[str, str], ...]
    """(the original's pseudo-code, the real mechanism hpcbench implements for it)."""
    claims: tuple[str, ...]
    """Claim ids that rest on this technique."""
    where: tuple[str, ...]
    """Repository paths (packages, modules, scripts) where it lives."""


TECHNIQUES: tuple[Technique, ...] = (
    Technique(
        "T-comm", "2.1 Wrong communication mode",
        "Plain DDP across nodes wastes the fast links inside a node. Reduce gradients in two levels "
        "(inside the node, then across nodes among one rank per node or per local-rank peer group), build "
        "process groups from the GPU and node topology, use RDMA (InfiniBand verbs) for the all-reduce, and "
        "match the gradient bucket size to the InfiniBand MTU.",
        (("nn.DataParallel(model), then DistributedDataParallel(model)",
          "DDP accepts single-device modules only; the real mechanism is a two-level reduction: a DDP comm "
          "hook that reduce-scatters inside the node, all-reduces across nodes and all-gathers back"),),
        ("C3", "C16", "C17"),
        ("hpcbench/parallel/hooks.py", "hpcbench/parallel/modes.py", "hpcbench/experiments/comm_modes",
         "hpcbench/experiments/collectives"),
    ),
    Technique(
        "T-io", "2.2 Storage I/O bottleneck",
        "Many small files overload a parallel file system's metadata server. Pack samples into container "
        "formats (TFRecord, HDF5), prefetch with a buffer of num_workers x batch_size samples, and stage the "
        "data set on node-local NVMe (BeeOND: a temporary BeeGFS over the nodes' NVMe).",
        (("dataset.prefetch(buffer_size=num_workers * batch_size)",
          "TensorFlow's call in a PyTorch job; implemented as PyTorch's DataLoader with prefetch_factor batches "
          "per worker (a buffer of num_workers x batch_size samples at prefetch_factor 1) and a device "
          "prefetcher"),),
        ("C4", "C5"),
        ("hpcbench/data", "data_prep", "hpcbench/experiments/io_formats"),
    ),
    Technique(
        "T-affinity", "2.3 Resource allocation under SLURM",
        "Bind every GPU's rank to dedicated cores on its own NUMA node, bind its memory to the local "
        "channel, set OMP_NUM_THREADS to the cores it owns, disable hyper-threads for the ranks "
        "(--hint=nomultithread) and do not ignore huge pages.",
        (),
        (),
        ("hpcbench/affinity", "hpcbench/experiments/affinity"),
    ),
    Technique(
        "T-monitor", "2.4 Wrong monitoring metrics",
        "GPU utilisation alone hides the bottleneck. Watch SM efficiency (DCGM, > 80 %), the InfiniBand "
        "retransmission rate (< 0.1 %), the storage latency P99 (< 50 ms) and the CPU cache hit rate "
        "(perf, > 90 %) against alert thresholds.",
        (),
        ("C6",),
        ("hpcbench/monitor", "hpcbench/experiments/monitoring"),
    ),
    Technique(
        "T-fault", "2.5 Too little fault tolerance",
        "Three levels: checkpoints holding epoch, model and optimizer state, named by host and SLURM job id; "
        "a data set that repairs a shard (index // 1000) on an IOError or checksum error and retries the "
        "item; a job wrapper that reruns srun up to 3 times, repairing storage between tries. Save the full "
        "state every hour and a light checkpoint every 10 minutes, compressed with Zstandard.",
        (),
        ("C11", "C15"),
        ("hpcbench/fault", "hpcbench/data/resilience.py", "slurm/run_with_retries.sh",
         "hpcbench/experiments/fault_tolerance"),
    ),
    Technique(
        "T-case", "3 Tuning case: weather-forecast model, 3.2x faster",
        "Topology-aware communication, 2-bit gradient compression in 4 MB buckets with layer-norm "
        "parameters uncompressed, and compute/communication overlap by accumulating 4 micro-steps under "
        "no_sync() before one synchronisation.",
        (("init_process_group(topology=topology_detect())",
          "detect the node and network hierarchy and build intra- and inter-node process groups from it"),
         ("GradientCompression(model, bits=2, bucket_size=4MB, skip_compression=['layer_norm'])",
          "a DDP comm hook that quantises each 4 MiB bucket to 2 bits with per-chunk scales and error "
          "feedback, and sends layer-norm gradients uncompressed")),
        ("C7", "C8", "C9"),
        ("hpcbench/parallel/compression.py", "hpcbench/parallel/overlap.py", "hpcbench/models/weather.py",
         "hpcbench/experiments/weather_case", "hpcbench/experiments/gradient_compression",
         "hpcbench/experiments/overlap"),
    ),
    Technique(
        "T-tools", "4 Recommended tool chain",
        "NCCL 2.18, OpenMPI 4.1.5, DCGM 3.2, Grafana 9.5, Nsight Systems 2023.3, DALI 1.28, RAPIDS 23.08, "
        "Horovod 0.28, CephFS; NCCL_ALGO=Tree, NCCL_NSOCKS_PERTHREAD=4, NCCL_SOCKET_NTHREADS=8, "
        "NCCL_BUFFSIZE=4194304.",
        (),
        ("C10",),
        ("hpcbench/system/inventory.py", "hpcbench/experiments/collectives", "hpcbench/experiments/environment"),
    ),
    Technique(
        "T-diag", "5 Troubleshooting",
        "When GPU utilisation swings, look at the gaps between kernels, the communication waits and the "
        "data-loading latency; when multi-node training diverges, clip gradients, seed every rank alike and "
        "keep floating point consistent (TF32 off); when storage slows down, release client caches, check "
        "the balance of the storage targets and restripe.",
        (),
        (),
        ("hpcbench/diag",),
    ),
    Technique(
        "T-practice", "6 Best practices",
        "Scale progressively (one node of 8 GPUs, then 2-4 nodes, then full scale) behind a gate (step-time "
        "spread < 5 %, communication share < 30 %, storage read P99 < 100 ms); pick the communication "
        "optimisation by what bounds the job (bandwidth: compression; latency: topology; else overlap); bind "
        "GPUs to dedicated cores; tier the checkpoints.",
        (),
        ("C11", "C12", "C13", "C14"),
        ("hpcbench/practice", "hpcbench/advise", "hpcbench/experiments/practice", "hpcbench/experiments/scaling",
         "hpcbench/experiments/advisor"),
    ),
)
