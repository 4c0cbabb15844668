"""The field guide's claims C1-C17: wording, figures and the arithmetic its figures predict.

Each :class:`Claim` holds the guide's own wording and figures (checked against the
Chinese original; our digest is ``hpcbench/guide/README.md``) and what the guide's
numbers predict where its arithmetic can be checked. Nothing here judges a
measurement: the experiment packages own the rules (their SPEC names the claim ids
they rule on), and :mod:`hpcbench.report.ledger` puts rules and claims together.
The guide's figures themselves live in :mod:`hpcbench.core.facts`.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.core.errors import HpcbenchError
from hpcbench.core.facts import (DDP_DEFAULT_BUCKET_BYTES, GUIDE_C2_BATCH_FACTOR, GUIDE_C2_GAIN, GUIDE_C3_GPT2,
                                 GUIDE_C3_RESNET, GUIDE_C7_SPEEDUP, GUIDE_C7_STEP_MS, GUIDE_C7_UTIL, GUIDE_C8_BITS,
                                 GUIDE_C8_BUCKET_BYTES, GUIDE_C10_NCCL_SETTINGS, IB_MTU_BYTES, LINK_PEAKS_GBPS,
                                 NCCL_DEFAULT_BUFFSIZE, NCCL_SOCKET_THREADS_LIMIT)
from hpcbench.core.units import format_bytes, format_gbps


class ClaimError(HpcbenchError, KeyError):
    """An unknown claim id; the message lists the valid ones."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


#: The three kinds of statement the guide makes; a verdict is read in its kind's words.
FIGURE = "figure"
TECHNIQUE = "technique"
ANECDOTE = "anecdote"
KINDS = {
    FIGURE: "a figure the guide measured (a gain, a share, a step time): judged against the figure, in the "
            "guide's regime",
    TECHNIQUE: "a technique the guide recommends: judged on whether it works as described, by a test that can "
               "fail",
    ANECDOTE: "an anecdote or context: checked for consistency with the scale model, every assumption stated",
}


@dataclass(frozen=True)
class Claim:
    """One claim of the guide, as the guide states it."""

    id: str
    """``"C1"`` .. ``"C17"``, as the guide's claims are numbered (hpcbench/guide/README.md)."""
    kind: str
    """One of :data:`KINDS`: what sort of statement it is decides what a verdict on it can say."""
    section: str
    """The guide's section, e.g. ``"2.1 Wrong communication mode"``."""
    wording: str
    """The claim in one English sentence, faithful to the original."""
    figures: tuple[tuple[str, str], ...]
    """(what, the guide's figure) pairs, quoted exactly."""
    predicted: str
    """What the guide's figures predict (checked arithmetic), or ``""``."""
    title: str = ""
    """The claim in at most six words, for the ledger's one-line summary."""
    headline: str = ""
    """The guide's main figure in at most six words (the summary's "guide" column)."""

    def __post_init__(self) -> None:
        assert self.kind in KINDS, f"{self.id}: kind {self.kind!r} not in {list(KINDS)}"
        # The summary row has a word budget (30 words): the short forms must stay short.
        assert len(self.title.split()) <= 6 and len(self.headline.split()) <= 6, f"{self.id}: title/headline too long"

    def claimed(self) -> str:
        """The figures as one readable line."""
        return "; ".join(f"{what}: {figure}" for what, figure in self.figures)


# -- formatting ---------------------------------------------------------------------

def gain_percent(base: float, new: float) -> float:
    """Relative gain of ``new`` over ``base`` in percent."""
    return (new / base - 1.0) * 100.0


def _check_gain(base: float, new: float, stated: float) -> str:
    """The gain computed from the guide's own numbers, compared with what it states."""
    gain = gain_percent(base, new)
    verdict = ("matches the guide" if round(gain, 1) == stated
               else f"the guide states +{stated:.1f} %, which its own numbers do not give")
    return f"{new:,.0f}/{base:,.0f} = {new / base:.3f} -> +{gain:.1f} % ({verdict})"


def _link_peak(fragment: str) -> tuple[str, float]:
    """The (name, GB/s) entry of LINK_PEAKS_GBPS whose name contains ``fragment``."""
    for name, peak in LINK_PEAKS_GBPS.items():
        if fragment in name:
            return name, peak
    raise KeyError(f"no link containing {fragment!r} in LINK_PEAKS_GBPS: {list(LINK_PEAKS_GBPS)}")


def _c2_predicted() -> str:
    # Model: step time = B*c + o, with o a per-step cost (all-reduce, input stalls)
    # independent of the batch B. Scaling B by k multiplies per-GPU throughput by
    # k / (k(1-f) + f), f = o's share of the baseline step; it is at most 1/(1-f).
    gain = 1 + GUIDE_C2_GAIN
    k = GUIDE_C2_BATCH_FACTOR
    f_any = 1 - 1 / gain
    f_exact = k * (1 - 1 / gain) / (k - 1)
    return (f"+220 % is x{gain:.1f} per GPU; with step = batch x per-sample time + a per-step "
            f"cost the batch amortises, that needs the per-step cost to be >= {f_any * 100:.0f} % of the "
            f"baseline step (>= {f_exact * 100:.0f} % if the batch is exactly {k}x)")


def _c7_predicted() -> str:
    orig, comm, full = GUIDE_C7_STEP_MS
    busy = [ms * u for ms, u in zip(GUIDE_C7_STEP_MS, GUIDE_C7_UTIL)]
    return (f"{orig}/{full} = {orig / full:.2f}x (the guide rounds to {GUIDE_C7_SPEEDUP}x); "
            f"communication tuning alone {orig}/{comm} = {orig / comm:.2f}x; reading utilisation "
            f"as busy share, busy time per step is {busy[0]:.1f} -> {busy[1]:.1f} -> {busy[2]:.1f} ms, "
            f"so the last stage also cut compute by {busy[1] / busy[2]:.2f}x: the 3.2x is not "
            f"communication savings alone")


def _c8_predicted() -> str:
    elements = GUIDE_C8_BUCKET_BYTES // 4
    sent = elements * GUIDE_C8_BITS // 8
    return (f"{32 // GUIDE_C8_BITS}x less gradient traffic for compressed buckets: a "
            f"{format_bytes(GUIDE_C8_BUCKET_BYTES)} fp32 bucket ({elements:,} elements) sends "
            f"{format_bytes(sent)} plus its scale(s); layer-norm gradients travel uncompressed")


def _c10_predicted() -> str:
    threads = int(GUIDE_C10_NCCL_SETTINGS["NCCL_SOCKET_NTHREADS"]) * int(GUIDE_C10_NCCL_SETTINGS["NCCL_NSOCKS_PERTHREAD"])
    default = ("is NCCL's default, so it changes nothing"
               if int(GUIDE_C10_NCCL_SETTINGS["NCCL_BUFFSIZE"]) == NCCL_DEFAULT_BUFFSIZE
               else "differs from NCCL's default")
    return (f"NCCL_BUFFSIZE=4194304 ({format_bytes(NCCL_DEFAULT_BUFFSIZE)}) {default}; the two socket "
            f"settings ({threads} socket threads, within NCCL's limit of {NCCL_SOCKET_THREADS_LIMIT}) "
            f"only affect NCCL's TCP socket transport, not IB verbs; NCCL_ALGO=Tree overrides NCCL's "
            f"own choice, which usually prefers ring for large messages on few nodes: expect equal "
            f"or lower busbw for large all_reduce there, and gains, if any, on many nodes or small messages")


def _c16_predicted() -> str:
    hdr_name, hdr = _link_peak("HDR")
    nvl_name, nvl = _link_peak("NVLink")
    return (f"{hdr_name}: {hdr * 8:.0f} Gb/s = {format_gbps(hdr)} per direction per link; a ring "
            f"all_reduce's busbw is bounded by its slowest link, so at the guide's scale inter-node "
            f"busbw <= {format_gbps(hdr)} per node NIC (the guide does not say how many NICs a node "
            f"has), while inside a node {nvl_name} allows up to {format_gbps(nvl)}")


def _c17_predicted() -> str:
    return (f"the IB MTU is {format_bytes(IB_MTU_BYTES)} while DDP's default bucket is "
            f"{format_bytes(DDP_DEFAULT_BUCKET_BYTES)} = {DDP_DEFAULT_BUCKET_BYTES // IB_MTU_BYTES:,} MTU "
            f"packets; the transport already splits buckets into MTU packets, and MTU-sized buckets would "
            f"pay one collective's latency per 4 KiB, so the optimum is expected at MiB-sized buckets, "
            f"not at the MTU")


S1 = "1 AI parallel-computing architecture on supercomputers"
S11 = "1.1 Typical supercomputer architecture"
S21 = "2.1 Wrong communication mode"
S22 = "2.2 Storage I/O bottleneck"
S24 = "2.4 Wrong monitoring metrics"
S25 = "2.5 Too little fault tolerance"
S3 = "3 Tuning case: weather-forecast model, 3.2x faster"
S4 = "4 Recommended tool chain"
S6 = "6 Best practices"

CLAIMS: tuple[Claim, ...] = (
    Claim("C1", ANECDOTE, S1,
          "Misestimating AllReduce communication cost kept a 10-billion-parameter model's GPU "
          "utilisation below 40 % for a long time.",
          (("model", "10B parameters"), ("GPU utilisation", "< 40 %"),
           ("cause", "AllReduce overhead misestimated")),
          "GPU utilisation < 40 % means communication and other stalls take > 60 % of each step",
          title="AllReduce misestimate kept GPUs idle", headline="GPU utilisation < 40 %"),
    Claim("C2", FIGURE, S11,
          "A batch larger than 4x the usual cloud batch, with gradient accumulation, raised per-GPU "
          "throughput by 220 %, provided the data pipeline was rebuilt to avoid a PCIe bandwidth "
          "bottleneck.",
          (("batch", "> 4x the usual cloud batch, with gradient accumulation"),
           ("per-GPU throughput", "+220 %"), ("precondition", "data pipeline rebuilt, no PCIe bottleneck")),
          _c2_predicted(),
          title="4x batch with accumulation", headline="+220 % per GPU"),
    Claim("C3", FIGURE, S21,
          "Hybrid parallelism (data parallel inside the node, DDP across nodes) beats plain DDP "
          "across nodes by 49.6 % on ResNet-50 and 40.2 % on GPT-2.",
          (("DDP ResNet-50", "12,500 images/s"), ("Hybrid ResNet-50", "18,700 images/s (+49.6 %)"),
           ("DDP GPT-2", "8,200 tokens/s"), ("Hybrid GPT-2", "11,500 tokens/s (+40.2 %)")),
          f"ResNet-50 {_check_gain(*GUIDE_C3_RESNET)}; GPT-2 {_check_gain(*GUIDE_C3_GPT2)}",
          title="Hybrid parallelism beats plain DDP", headline="+49.6 % / +40.2 %"),
    Claim("C4", FIGURE, S22,
          "Reading many small files from Lustre overloads its metadata server; training ImageNet "
          "this way left the GPUs idle 65 % of the time.",
          (("GPU idle time", "65 %"), ("cause", "Lustre metadata-server overload from small files")),
          "GPU busy <= 35 %; removing the I/O stall could speed training up to 1/0.35 = 2.86x",
          title="Small files starve the GPUs", headline="65 % GPU idle"),
    Claim("C5", TECHNIQUE, S22,
          "Container formats (TFRecord/HDF5), prefetching with buffer = num_workers x batch_size, "
          "and a node-local NVMe cache (BeeOND) fix the storage bottleneck.",
          (("formats", "TFRecord / HDF5"), ("prefetch buffer", "num_workers x batch_size"),
           ("cache", "node-local NVMe via BeeOND")),
          "a buffer of num_workers x batch_size samples keeps one batch per worker in flight "
          "(PyTorch DataLoader: prefetch_factor=1 batch per worker)",
          title="Formats, prefetch, NVMe cache fix I/O", headline="fixes the storage bottleneck"),
    Claim("C6", TECHNIQUE, S24,
          "GPU utilisation alone hides the real bottleneck; monitor SM efficiency, IB retransmission "
          "rate, storage latency P99 and CPU cache hit rate against alert thresholds.",
          (("GPU SM efficiency (DCGM)", "> 80 %"), ("IB retransmission rate (ibmonitor)", "< 0.1 %"),
           ("storage latency P99 (Lustre monitoring)", "< 50 ms"), ("CPU cache hit rate (perf)", "> 90 %")),
          "a healthy run meets all four thresholds; a run with low SM efficiency but high "
          "'GPU utilisation' shows why utilisation alone misleads",
          title="Monitor four metrics, not utilisation", headline="4 alert thresholds"),
    Claim("C7", FIGURE, S3,
          "Topology-aware communication, gradient compression and compute/communication overlap "
          "made a weather-forecast model's training step 3.2x faster.",
          (("original", "420 ms/step, 61 % GPU utilisation"),
           ("after communication tuning", "310 ms/step, 75 %"),
           ("full optimisation", "132 ms/step, 92 %"), ("speed-up", "3.2x")),
          _c7_predicted(),
          title="Weather model step 3.2x faster", headline="3.2x (420 -> 132 ms)"),
    Claim("C8", TECHNIQUE, S3,
          "Gradient compression to 2 bits in 4 MB buckets, leaving layer_norm parameters "
          "uncompressed, is one of the case's communication optimisations.",
          (("bits", "2"), ("bucket size", "4 MB"), ("skipped", "layer_norm")),
          _c8_predicted(),
          title="2-bit gradient compression", headline="2 bits, 4 MB buckets"),
    Claim("C9", TECHNIQUE, S3,
          "Overlapping computation and communication by accumulating gradients locally under "
          "no_sync() for 4 micro-steps, then synchronising once, is one of the case's optimisations.",
          (("micro-steps under no_sync()", "4"), ("global synchronisations", "1 per 4 micro-steps")),
          "4x fewer gradient all-reduces per sample (one per 4 micro-steps)",
          title="Local accumulation under no_sync()", headline="1 sync per 4 micro-steps"),
    Claim("C10", TECHNIQUE, S4,
          "The recommended NCCL tuning is NCCL_ALGO=Tree, NCCL_NSOCKS_PERTHREAD=4, "
          "NCCL_SOCKET_NTHREADS=8 and NCCL_BUFFSIZE=4194304 (with NCCL 2.18).",
          tuple((k, v) for k, v in GUIDE_C10_NCCL_SETTINGS.items()) + (("NCCL version", "2.18"),),
          _c10_predicted(),
          title="Recommended NCCL settings", headline="Tree, 4 sockets x 8 threads"),
    Claim("C11", TECHNIQUE, S6,
          "Save the full training state every hour and a light checkpoint every 10 minutes, "
          "compressed with Zstandard.",
          (("full checkpoint", "every hour"), ("light checkpoint", "every 10 minutes"),
           ("compression", "Zstandard")),
          "at most 10 minutes of work lost per failure; each light checkpoint must write in well "
          "under 600 s to keep its overhead small",
          title="Two-tier checkpoints", headline="<= 10 min of work lost"),
    Claim("C12", FIGURE, S6,
          "Before scaling out, check that the step-time standard deviation is below 5 %, the "
          "communication share below 30 % and the storage read latency P99 below 100 ms; this "
          "avoids 90 % of common problems.",
          (("step-time standard deviation", "< 5 %"), ("communication share", "< 30 %"),
           ("storage read latency P99", "< 100 ms"), ("problems avoided", "90 %")),
          "",
          title="Gate before scaling out", headline="sd < 5%, comm < 30%"),
    Claim("C13", TECHNIQUE, S6,
          "Scale progressively: tune on one node with 8 GPUs, then extend to 2-4 nodes, then run "
          "at full scale.",
          (("stage 1", "1 node, 8 GPUs"), ("stage 2", "2-4 nodes"), ("stage 3", "full scale")),
          "",
          title="Scale out progressively", headline="1 node -> 2-4 -> all"),
    Claim("C14", TECHNIQUE, S6,
          "Communication optimisation priority: if bandwidth-bound use gradient compression, else "
          "if latency-sensitive use topology optimisation, else overlap computation and communication.",
          (("bandwidth-bound", "gradient compression"), ("latency-sensitive", "topology optimisation"),
           ("otherwise", "compute/communication overlap")),
          "",
          title="Communication optimisation priority", headline="compression, topology, then overlap"),
    Claim("C15", TECHNIQUE, S25,
          "Three-level fault tolerance: checkpoints named by host and SLURM job id, a dataset that "
          "repairs a shard and retries, and a job wrapper that reruns srun up to 3 times.",
          (("checkpoint", "epoch + model + optimizer state, named by hostname and SLURM job id"),
           ("dataset", "on IOError/checksum error repair shard idx // 1000, retry"),
           ("job wrapper", "srun --mpi=pmi2 rerun up to 3 times, repair_storage between tries")),
          "with retry starting at 0, the job survives 2 failures (3 runs in all); if runs fail "
          "independently with probability p, the job fails with p^3",
          title="Three-level fault tolerance", headline="srun retried up to 3 times"),
    Claim("C16", ANECDOTE, S11,
          "The guide's platform has fat nodes with 8 A100 GPUs each, connected by 200 Gb/s HDR "
          "InfiniBand.",
          (("GPUs per node", "8 x A100"), ("inter-node fabric", "200 Gb/s HDR InfiniBand")),
          _c16_predicted(),
          title="The guide's platform", headline="8 x A100, 200 Gb/s HDR"),
    Claim("C17", TECHNIQUE, S21,
          "Build process groups from the GPU topology, use RDMA for AllReduce, and match the "
          "gradient bucket size to the IB MTU.",
          (("gradient bucket size", "matched to the IB MTU"), ("AllReduce transport", "RDMA (IB verbs)"),
           ("process groups", "from the GPU topology")),
          _c17_predicted(),
          title="Topology groups, RDMA, MTU buckets", headline="bucket size = IB MTU"),
)

_CLAIMS_BY_ID = {claim.id: claim for claim in CLAIMS}


def get_claim(claim_id: str) -> Claim:
    """The claim with id ``claim_id`` (e.g. ``"C3"``).

    Raises:
        ClaimError: listing the valid ids when ``claim_id`` is unknown.
    """
    try:
        return _CLAIMS_BY_ID[claim_id]
    except KeyError:
        raise ClaimError(f"unknown claim {claim_id!r}; valid: {', '.join(_CLAIMS_BY_ID)}") from None


# -- reading records ----------------------------------------------------------------


# -- verdict rules ------------------------------------------------------------------


# -- storage I/O (C4, C5) ------------------------------------------------------------


# -- communication modes, bucket size, batch scaling (C2, C3, C17) ---------------------


# -- the ledger -----------------------------------------------------------------------


