"""Platforms as data: link latencies and bandwidths per level, GPUs and NICs per node, sustained compute.

Each figure carries its source in ``sources`` (and in a comment). Peak dense bf16 FLOP/s come
from :data:`hpcbench.core.metrics.PEAK_DENSE_BF16_FLOPS` through the device name, never from
here. Where no published sustained figure could be checked, the peak is used and the source
says so: the predicted communication is then a lower bound, and a utilisation below a
threshold is, if anything, understated.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from hpcbench.core.errors import ConfigError
from hpcbench.core.facts import GB, LINK_PEAKS_GBPS
from hpcbench.core.metrics import peak_dense_bf16_flops
from hpcbench.core.registry import Registry
from hpcbench.scale.alpha_beta import LinkFit

US = 1e-6


@dataclass(frozen=True)
class LinkModel:
    """``t = alpha * steps + beta * bytes`` for one link level."""

    alpha_s: float
    """seconds per latency step"""
    beta_s_per_byte: float
    """seconds per byte (per rank for intra, per node for inter)"""
    source: str

    @classmethod
    def from_fit(cls, fit: LinkFit) -> "LinkModel":
        return cls(fit.alpha_s, fit.beta_s_per_byte,
                   f"fitted from collectives records: {fit.op} on {fit.level} ({fit.n} sizes, r2={fit.r2:.3f})")


@dataclass(frozen=True)
class Platform:
    """One machine type; ``link(level, op)`` gives the alpha-beta model a stage is charged with."""

    name: str
    device_name: str
    """as ``torch.cuda.get_device_name()`` prints it; looks up the peak FLOP/s"""
    gpus_per_node: int
    intra: LinkModel
    """per GPU, per direction (sustained where a source gives it)"""
    nic: LinkModel
    """one NIC, per direction; the node's inter-node link is ``nics_per_node`` of them"""
    nics_per_node: int
    mfu: float
    """sustained share of the dense bf16 peak while computing (an assumption; see sources)"""
    base_latency_s: float = 0.0
    """fixed cost per collective call (NCCL's baseLat)"""
    sources: Mapping[str, str] = field(default_factory=dict)
    """figure name -> where it comes from"""
    by_op: Mapping[tuple[str, str], LinkModel] = field(default_factory=dict)
    """(level, op) -> a fitted model overriding the level's default for that op; level ``world``
    holds flat fits charged directly on a stage's ``world_bytes``"""

    def __post_init__(self) -> None:
        if self.nics_per_node < 1:
            raise ConfigError(f"{self.nics_per_node} is out of range; allowed: >= 1", field="nics_per_node",
                              config=self.name)
        if not 0 < self.mfu <= 1:
            raise ConfigError(f"{self.mfu} is out of range; allowed: 0 < mfu <= 1", field="mfu", config=self.name)

    def link(self, level: str, op: str = "all_reduce") -> LinkModel:
        """The model of ``level`` (``intra`` or ``inter``, the latter per node) for collective ``op``."""
        fitted = self.by_op.get((level, op)) or self.by_op.get((level, "all_reduce"))
        if fitted is not None:
            return fitted
        if level == "intra":
            return self.intra
        if level == "inter":
            return LinkModel(self.nic.alpha_s, self.nic.beta_s_per_byte / self.nics_per_node,
                             f"{self.nics_per_node} x ({self.nic.source})")
        raise ConfigError(f"unknown link level {level!r}; valid: ['inter', 'intra']", field="level", config=self.name)

    def world_link(self, op: str) -> LinkModel | None:
        """A flat fit of ``op`` on the world group, if measured (exact op only)."""
        return self.by_op.get(("world", op))

    @property
    def peak_flops(self) -> float | None:
        """Dense bf16 peak FLOP/s of one GPU (hpcbench.core.metrics), None where not listed."""
        return peak_dense_bf16_flops(self.device_name)

    @property
    def sustained_flops(self) -> float | None:
        peak = self.peak_flops
        return None if peak is None else peak * self.mfu

    def with_(self, **changes) -> "Platform":
        """A copy with some fields changed (e.g. ``nics_per_node=2``, ``mfu=0.4``)."""
        return replace(self, **changes)


PLATFORMS: Registry[Platform] = Registry("platform")

# -- shared figures -------------------------------------------------------------------------------
# NCCL src/graph/tuning.cc (NVIDIA/nccl, ncclTopoTuneModel tables hwLat/baseLat, Simple protocol,
# ring; the 2.8-era tables, later versions retune them): per-hop latency 3.4 us on NVLink, 9.6 us
# on the network, 8.4 us base latency per call. Large gradient buckets run the Simple protocol.
_NCCL_SRC = "NCCL src/graph/tuning.cc hwLat/baseLat, ring Simple (NVIDIA/nccl 2.8-era tables)"
_ALPHA_NVLINK_S = 3.4 * US
_ALPHA_NET_S = 9.6 * US
_BASE_LAT_S = 8.4 * US
# NCCL tuning.cc: `if (compCap80) busBw = std::min(busBw, 235.0f)`: NCCL's own ceiling for an
# A100 (sm80) node's bus bandwidth, GB/s; the peak is 300 GB/s per direction (600 bidirectional).
_A100_NVLINK_SUSTAINED_GBPS = 235.0
# NVLink 4 (H100 / H200 SXM): 900 GB/s total per GPU, 450 per direction (facts.LINK_PEAKS_GBPS).
NVLINK4_PER_DIRECTION_GBPS = LINK_PEAKS_GBPS["NVLink 4 (H100/H200, per GPU)"]
# Sustained share of peak while computing: Narayanan et al., "Efficient large-scale language
# model training on GPU clusters using Megatron-LM", SC'21: 163 TFLOP/s per A100 = 52 % of the
# 312 TFLOP/s peak for a 1T-parameter GPT on 3072 GPUs (that figure includes their
# communication, so 0.5 for compute alone is conservative). Unverified for H100/H200.
DEFAULT_MFU = 0.5
_MFU_SRC = "assumption 0.5: Megatron-LM (Narayanan et al., SC'21) sustained 52 % of A100 peak (163 TFLOP/s)"

_HDR = LINK_PEAKS_GBPS["HDR InfiniBand (200 Gb/s)"]
_NDR = LINK_PEAKS_GBPS["NDR InfiniBand (400 Gb/s)"]
_NIC_SRC_PEAK = ("link peak used as sustained (no checked sustained figure): the prediction's "
                 "communication is a lower bound")

PLATFORMS.register("a100_hdr", Platform(
    name="a100_hdr",
    device_name="NVIDIA A100-SXM4-80GB",  # the guide's 8 x A100 per node (guide sec. 1, C16)
    gpus_per_node=8,
    intra=LinkModel(_ALPHA_NVLINK_S, 1.0 / (_A100_NVLINK_SUSTAINED_GBPS * GB),
                    "NVLink 3: 235 GB/s per GPU per direction, NCCL tuning.cc sm80 ceiling "
                    "(peak 300 = 600 GB/s bidirectional, NVIDIA A100 datasheet); alpha " + _NCCL_SRC),
    nic=LinkModel(_ALPHA_NET_S, 1.0 / (_HDR * GB),
                  "HDR InfiniBand 200 Gb/s = 25 GB/s per direction per NIC (guide C16; facts.LINK_PEAKS_GBPS); "
                  + _NIC_SRC_PEAK + "; alpha " + _NCCL_SRC),
    # The guide does not say how many NICs; DGX A100 has 8 single-port ConnectX-6 HDR NICs for
    # the compute fabric, one per GPU (NVIDIA DGX A100 datasheet). A parameter: with_(nics_per_node=k).
    nics_per_node=8,
    mfu=DEFAULT_MFU,
    base_latency_s=_BASE_LAT_S,
    sources={
        "device": "guide sec. 1 (8 x A100 per node); peak: hpcbench.core.metrics (NVIDIA A100 datasheet)",
        "gpus_per_node": "guide sec. 1, C16: 8 x A100 per node",
        "intra_bandwidth": "NCCL tuning.cc: busBw <= 235 GB/s on sm80; NVIDIA A100 datasheet: NVLink 600 GB/s",
        "intra_latency": _NCCL_SRC,
        "nic_bandwidth": "guide C16: 200 Gb/s HDR InfiniBand; " + _NIC_SRC_PEAK,
        "nic_latency": _NCCL_SRC,
        "nics_per_node": "assumption 8 (NVIDIA DGX A100 datasheet: 8 x ConnectX-6 HDR); the guide does not say",
        "mfu": _MFU_SRC,
        "base_latency": _NCCL_SRC,
    }))


def _hopper(name: str, device: str, datasheet: str) -> Platform:
    return Platform(
        name=name, device_name=device, gpus_per_node=8,
        intra=LinkModel(_ALPHA_NVLINK_S, 1.0 / (NVLINK4_PER_DIRECTION_GBPS * GB),
                        f"NVLink 4: 900 GB/s total = 450 per direction ({datasheet}); " + _NIC_SRC_PEAK
                        + "; alpha " + _NCCL_SRC + " (unverified for Hopper)"),
        nic=LinkModel(_ALPHA_NET_S, 1.0 / (_NDR * GB),
                      "NDR InfiniBand 400 Gb/s = 50 GB/s per direction per NIC (facts.LINK_PEAKS_GBPS); "
                      + _NIC_SRC_PEAK + "; alpha " + _NCCL_SRC + " (unverified for NDR)"),
        nics_per_node=8,  # DGX H100 / HGX H200: 8 x ConnectX-7 400 Gb/s, one per GPU (NVIDIA DGX H100 datasheet)
        mfu=DEFAULT_MFU, base_latency_s=_BASE_LAT_S,
        sources={
            "device": f"{datasheet}; peak: hpcbench.core.metrics",
            "gpus_per_node": "8 GPUs per HGX/DGX board (NVIDIA DGX H100 datasheet)",
            "intra_bandwidth": f"{datasheet}: NVLink 900 GB/s; peak used as sustained (unverified)",
            "intra_latency": _NCCL_SRC + " (unverified for Hopper)",
            "nic_bandwidth": "NDR InfiniBand 400 Gb/s (NVIDIA ConnectX-7 datasheet); " + _NIC_SRC_PEAK,
            "nic_latency": _NCCL_SRC + " (unverified for NDR)",
            "nics_per_node": "assumption 8 (NVIDIA DGX H100 datasheet: 8 x ConnectX-7); a parameter",
            "mfu": _MFU_SRC + " (unverified for Hopper)",
            "base_latency": _NCCL_SRC,
        })


PLATFORMS.register("h100_ndr", _hopper("h100_ndr", "NVIDIA H100 80GB HBM3", "NVIDIA H100 datasheet"))
PLATFORMS.register("h200_ndr", _hopper("h200_ndr", "NVIDIA H200", "NVIDIA H200 datasheet"))


@dataclass(frozen=True)
class PublishedThroughput:
    """A published training throughput of one GPU of a platform: what one micro-step's compute costs there.

    Used in place of FLOPs at the sustained rate where a checkable figure exists; the figure
    comes from a run that may include some intra-node communication, so the compute it
    implies is an upper bound (the predicted communication share, if anything, a lower one).
    """

    model: str
    """hpcbench model name (:func:`hpcbench.models.footprint.model_footprint`)"""
    items_per_s: float
    """images/s or tokens/s of one GPU"""
    unit: str
    """``"images"`` or ``"tokens"``"""
    items_per_step: int
    """per GPU per micro-step, as the source ran it"""
    precision: str
    source: str
    cite: str = ""
    """a short citation for tables and the ledger (``source`` holds the full one)"""

    @property
    def step_s(self) -> float:
        """Seconds of one micro-step's compute (forward + backward) at the source's batch."""
        return self.items_per_step / self.items_per_s


#: (platform name, model) -> a published single-GPU training throughput on that platform's GPU.
#: Platforms or models not listed fall back to FLOPs at the sustained rate (mfu x peak).
PUBLISHED_THROUGHPUT: Mapping[tuple[str, str], PublishedThroughput] = {
    # NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md, "Training
    # performance: NVIDIA DGX A100 (8x A100 80GB)" (pytorch-21.03 NGC container): 1 GPU, mixed
    # precision, 2470 img/s (8 GPUs: 16621 img/s); batch 256 per GPU (ConvNets/configs.yml,
    # resnet50 DGXA100 AMP, NHWC). 2470 x 24.5 GFLOP per image = 61 TFLOP/s, 19 % of the bf16 peak.
    ("a100_hdr", "resnet50"): PublishedThroughput(
        "resnet50", 2470.0, "images", 256, "AMP (fp16), NHWC",
        "NVIDIA DeepLearningExamples ResNet-50 v1.5 PyTorch README, DGX A100 80GB, 1 GPU AMP: 2470 img/s "
        "at batch 256 (configs.yml DGXA100 AMP)",
        "NVIDIA DeepLearningExamples, 1 x A100 80GB AMP"),
    # karpathy/llm.c scripts/run_gpt2_124M.sh: "524,288 tokens/step, on 8X A100 80GB SXM steps in
    # ~300ms/iter" with -b 64 -t 1024 on 8 GPUs (one micro-step of 65,536 tokens per GPU), i.e.
    # 218k tokens/s per GPU, bf16, ZeRO-1 (-z 1) with its NVLink reduce inside the 300 ms.
    # 6 x 124.4 M x 218k = 163 TFLOP/s, 52 % of the bf16 peak (llm.c says "up to ~60 % MFU").
    ("a100_hdr", "gpt2_124M"): PublishedThroughput(
        "gpt2_124M", 64 * 1024 / 0.300, "tokens", 64 * 1024, "bf16",
        "karpathy/llm.c scripts/run_gpt2_124M.sh: 524,288 tokens/step in ~300 ms on 8X A100 80GB SXM "
        "(-b 64 -t 1024: 65,536 tokens per GPU per step; in-node reduce included)",
        "llm.c run_gpt2_124M.sh, 8 x A100 80GB SXM"),
}


def published_throughput(platform: str | Platform, model: str) -> PublishedThroughput | None:
    """The published throughput of ``model`` on ``platform``'s GPU, or None (then use FLOPs)."""
    name = platform.name if isinstance(platform, Platform) else platform
    return PUBLISHED_THROUGHPUT.get((name, model))


def get_platform(platform: str | Platform) -> Platform:
    """A registered platform by name (the error lists the registered ones), or ``platform`` itself."""
    return platform if isinstance(platform, Platform) else PLATFORMS.get(platform)


def emulated_cluster(fits: Mapping[tuple[str, str], LinkFit], *, ranks_per_node: int,
                     name: str = "emulated_cluster", mfu: float = 1.0) -> Platform:
    """A platform built from measured fits (:func:`hpcbench.scale.alpha_beta.fit_from_collectives`).

    ``intra`` / ``inter`` default to the ``all_reduce`` fits of the ``intra_node`` /
    ``inter_node`` groups; every fitted op is kept in ``by_op`` (``world`` fits too, charged
    directly on flat stages). The inter fit is already per node: ``nics_per_node`` is 1. No
    peak FLOP/s: give the prediction a measured ``compute_s``.

    Raises:
        ConfigError: no inter-node fit (field ``fits``); a model across nodes needs one.
    """
    level_of = {"intra_node": "intra", "inter_node": "inter", "world": "world"}
    by_op = {(level_of[g], op): LinkModel.from_fit(f) for (op, g), f in fits.items() if g in level_of}
    inter = by_op.get(("inter", "all_reduce")) or next((m for (lv, _), m in by_op.items() if lv == "inter"), None)
    if inter is None:
        raise ConfigError(f"holds no inter_node fit (has {sorted(fits)}); measure the inter_node groups",
                          field="fits", config=name)
    intra = by_op.get(("intra", "all_reduce")) or next((m for (lv, _), m in by_op.items() if lv == "intra"), None)
    if intra is None:
        intra = LinkModel(0.0, 0.0, "no intra-node group measured (1 rank per node): no byte crosses it")
    return Platform(name=name, device_name="cpu (emulated cluster)", gpus_per_node=ranks_per_node, intra=intra,
                    nic=inter, nics_per_node=1, mfu=mfu, base_latency_s=0.0,
                    sources={"links": "fitted from this run's collectives records (see each LinkModel.source)",
                             "compute": "measured single-rank step time (compute_s), no peak FLOP/s"},
                    by_op=by_op)


__all__ = ["DEFAULT_MFU", "LinkModel", "NVLINK4_PER_DIRECTION_GBPS", "PLATFORMS", "PUBLISHED_THROUGHPUT", "Platform",
           "PublishedThroughput", "emulated_cluster", "get_platform", "published_throughput"]
