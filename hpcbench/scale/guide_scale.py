"""The scale model at the guide's scale: what it predicts for C2, C3, C7, C8 and C9, with its inputs.

The guide's platform (C16) is :data:`~hpcbench.scale.platforms.PLATFORMS` ``a100_hdr``: 8 x A100
per node on NVLink, 200 Gb/s HDR InfiniBand; 4 nodes, the 32 tasks of its job script
(guide sec. 2.3, ``--ntasks=32 --gres=gpu:8``). The guide does not say how many NICs a node has:
every prediction takes ``nics_per_node`` (default: the platform's) and also shows 1 and 8.

Compute of one micro-step comes from a published single-GPU training throughput where one is
listed (:data:`~hpcbench.scale.platforms.PUBLISHED_THROUGHPUT`), else from FLOPs at the
platform's sustained rate; the inputs say which. The weather case (C7, C9) has no published
model size, so its gradient size is a parameter and its compute is the guide's own busy time.
Measured inputs enter when the predicting experiment's evidence has them
(:class:`MeasuredInputs`); without them the predictions stand on platform data alone.

Each ``predict_cN`` returns a :class:`GuidePrediction`; :data:`GUIDE_PREDICTORS` holds them by
claim id and :func:`predictor` turns one into the ``predictions`` entry of an experiment's SPEC
(:attr:`hpcbench.experiments.Experiment.predictions`).

Assumptions beyond :mod:`hpcbench.scale.predict`'s: throughput is proportional to 1 / step time
(the same samples per step in both modes compared); the 2-bit exchange's plain (layer-norm)
all-reduce is given as a range, from "overlapped by the exchange" (not charged) to "charged in
every bucket, in sequence" (the model's upper bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from hpcbench.core.errors import ConfigError
from hpcbench.core.facts import (GUIDE_C2_BATCH_FACTOR, GUIDE_C2_GAIN, GUIDE_C3_GPT2, GUIDE_C3_RESNET, GUIDE_C7_STEP_MS,
                                 GUIDE_C7_UTIL, GUIDE_C8_BUCKET_BYTES, GUIDE_C9_MICRO_STEPS, GUIDE_GPUS_PER_NODE)
from hpcbench.core.registry import Registry
from hpcbench.models.footprint import model_footprint
from hpcbench.models.gpt2_presets import GPT2_PRESETS
from hpcbench.models.weather_presets import WEATHER_PRESETS, parameter_count
from hpcbench.scale.platforms import LinkModel, Platform, get_platform, published_throughput
from hpcbench.scale.predict import Prediction, predict_step

if TYPE_CHECKING:  # the ledger imports pandas; the predictors only read the evidence's summaries
    from hpcbench.guide.claims import Claim
    from hpcbench.judge.evidence import Evidence

GUIDE_PLATFORM = "a100_hdr"
GUIDE_JOB_TASKS = 32
"""Tasks of the guide's job script (guide sec. 2.3: ``--ntasks=32 --gres=gpu:8``)."""
GUIDE_NODES = GUIDE_JOB_TASKS // GUIDE_GPUS_PER_NODE
"""4 nodes of 8 GPUs."""
NIC_COUNTS = (1, 8)
"""NICs per node every prediction is shown at: the guide does not say (DGX A100 has 8 compute NICs)."""
IMAGE_PIXELS = 224 * 224
"""Footprint items of one ImageNet image at 224 x 224 (:mod:`hpcbench.models.footprint` counts per pixel)."""


def layer_norm_params(layers: int, width: int) -> int:
    """LayerNorm weights and biases of a pre-norm transformer: 2 per block and a final one, ``2 width`` each.

    GPT-2 (:class:`~hpcbench.models.gpt2_presets.GPT2Config`) and the weather ViT
    (:func:`~hpcbench.models.weather_presets.parameter_count`: ``(9 + r) d`` per block holds its 4 d)
    share this layout; quant2bit sends these gradients uncompressed (C8: "layer_norm skipped").
    """
    return (4 * layers + 2) * width


# -- workloads ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    """One model's training step at the guide's scale: its gradients and its work per micro-step."""

    name: str
    """hpcbench model name where registered (it keys :data:`~hpcbench.scale.platforms.PUBLISHED_THROUGHPUT`)"""
    label: str
    params: int
    """gradient elements reduced per synchronisation"""
    flops_per_unit: float
    """forward + backward FLOPs per image or token (3 x forward: 6 per multiply-accumulate)"""
    per_step: int
    """images or tokens per GPU per micro-step"""
    unit: str
    """``"images"`` or ``"tokens"``"""
    plain_fraction: float
    """share of the gradients in layer norms (sent plain by quant2bit)"""
    basis: str
    """where ``per_step`` (and the shape) come from"""

    def compute(self, platform: str | Platform) -> tuple[float, str]:
        """Seconds of one micro-step's forward + backward on one GPU of ``platform``, and how they were obtained.

        Raises:
            ConfigError: no published throughput and no peak FLOP/s for the platform's device.
        """
        plat = get_platform(platform)
        published = published_throughput(plat, self.name)
        if published is not None:
            return (self.per_step / published.items_per_s,
                    f"{self.per_step:,} {self.unit}/GPU/step at {published.items_per_s:,.0f} {self.unit}/s "
                    f"({published.cite or published.source})")
        rate = plat.sustained_flops
        if rate is None:
            raise ConfigError(f"no published {self.label} throughput and no peak FLOP/s for {plat.device_name!r}",
                              field="platform", config="guide_scale")
        return (self.flops_per_unit * self.per_step / rate,
                f"{self.per_step:,} {self.unit}/GPU/step x {self.flops_per_unit:.3g} FLOP at {plat.mfu:g} x peak "
                f"(no published figure for {plat.name}: FLOPs at the sustained rate)")


def _resnet50() -> Workload:
    fp = model_footprint("resnet50")  # torchvision ResNet-50: 25.6 M parameters, 4.09 G MACs forward at 224 x 224
    # NVIDIA DeepLearningExamples ConvNets/configs.yml: resnet50, DGXA100, AMP: batch_size 256 per GPU.
    return Workload("resnet50", "ResNet-50", fp.parameters, 6 * fp.macs_per_item * IMAGE_PIXELS, 256, "images",
                    0.0, "batch 256/GPU (NVIDIA DeepLearningExamples configs.yml, DGXA100 AMP); no layer norms")


def _gpt2_124m() -> Workload:
    fp, shape = model_footprint("gpt2_124M"), GPT2_PRESETS["124M"]
    # karpathy/llm.c scripts/run_gpt2_124M.sh: -b 64 -t 1024 per GPU (6 x params FLOPs per token, Kaplan 2020).
    return Workload("gpt2_124M", "GPT-2 124M", fp.parameters, 6.0 * fp.parameters, 64 * 1024, "tokens",
                    layer_norm_params(shape.n_layer, shape.n_embd) / fp.parameters,
                    "64 x 1024 tokens/GPU/step (llm.c run_gpt2_124M.sh)")


RESNET50 = _resnet50()
"""C3's ResNet-50 at NVIDIA's A100 batch."""
GPT2_124M = _gpt2_124m()
"""C3's and C8's GPT-2 (124M) at llm.c's A100 micro-batch."""

#: C1's 10B model (guide sec. 1). Shape assumed, the guide gives none: 40 blocks of width 4,608
#: (12 L d^2 = 10.2 B, between GPT-3's 6.7B at 32 x 4096 and 13B at 40 x 5140, Brown et al. 2020 Table 2.1);
#: it only sets the layer-norm share. Tokens per GPU per step: 8,192 (4 sequences of 2,048), an assumption
#: inside C1's sweep (hpcbench.scale.predict.predict_c1).
GPT_10B = Workload("gpt_10b", "10B GPT", 10_000_000_000, 6.0 * 10e9, 8192, "tokens",
                   layer_norm_params(40, 4608) / 10e9,
                   "C1's 10B parameters; shape 40 x 4,608 and 8,192 tokens/GPU/step assumed")

#: The weather case's gradient size when none is given: hpcbench's 0.25 degree weather ViT, the preset
#: that "fills a data-centre GPU at a few samples per step, as the guide's case does". The guide does
#: not give its model's size: C7 and C9 take it as a parameter and show the sensitivity.
WEATHER_PRESET = "025deg"
WEATHER_SIZES = (26_000_000, 1_000_000_000, 10_000_000_000)
"""Other gradient sizes C7 shows the ratio at (26 M: the 1 degree preset's order)."""


def weather_params() -> int:
    return parameter_count(WEATHER_PRESETS[WEATHER_PRESET])


def weather_plain_fraction() -> float:
    cfg = WEATHER_PRESETS[WEATHER_PRESET]
    return layer_norm_params(cfg.depth, cfg.width) / parameter_count(cfg)


# -- measured inputs ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class MeasuredInputs:
    """Figures measured here that a prediction at the guide's scale uses in place of its defaults."""

    link_efficiency: float | None = None
    """median share of a link's rated bandwidth reached (summaries column ``link_efficiency``); scales the NICs"""
    overlap_share: float | None = None
    """median share of the communication hidden behind compute (summaries column ``overlap_share``)"""
    launches: int = 0
    """launches the medians come from"""

    def __post_init__(self) -> None:
        eff = self.link_efficiency
        if eff is not None and not (math.isfinite(eff) and eff > 0):
            raise ConfigError(f"{eff!r} is out of range; allowed: > 0", field="link_efficiency",
                              config="MeasuredInputs")
        ov = self.overlap_share
        if ov is not None and not 0.0 <= ov <= 1.0:
            raise ConfigError(f"{ov!r} is out of range; allowed: 0..1", field="overlap_share", config="MeasuredInputs")

    @classmethod
    def from_evidence(cls, evidence: "Evidence | None") -> "MeasuredInputs":
        """The medians of the evidence's summaries columns named like the fields; none when absent.

        A measured overlapped share outside 0..1 (noise around "none" or "all") is clipped to it.
        """
        import pandas as pd

        summaries = getattr(evidence, "summaries", None)
        if summaries is None or len(summaries) == 0:
            return cls()
        medians: dict[str, float] = {}
        for column in ("link_efficiency", "overlap_share"):
            if column in summaries.columns:
                values = pd.to_numeric(summaries[column], errors="coerce").dropna()
                if len(values):
                    medians[column] = float(values.median())
        if "overlap_share" in medians:
            medians["overlap_share"] = min(1.0, max(0.0, medians["overlap_share"]))
        keys = [k for k in ("run_id", "task_id") if k in summaries.columns]
        launches = len(summaries[keys].drop_duplicates()) if keys else len(summaries)
        return cls(**medians, launches=launches if medians else 0)

    @property
    def overlap(self) -> float:
        return 0.0 if self.overlap_share is None else self.overlap_share

    def inputs(self) -> dict[str, str]:
        """How each measured input entered, for :attr:`GuidePrediction.inputs`."""
        where = f"measured, median of {self.launches} launch(es)"
        return {
            "link efficiency": (f"{self.link_efficiency:.3g} ({where})" if self.link_efficiency is not None
                                else "1 (rated link peak; none measured)"),
            "overlapped share": (f"{self.overlap_share:.3g} ({where})" if self.overlap_share is not None
                        else "0 (none measured: all communication exposed)"),
        }


# -- the prediction ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GuidePrediction:
    """What the scale model predicts for one claim at the guide's scale."""

    claim_id: str
    text: str
    """the prediction in one or two sentences, compared with the guide's figures"""
    inputs: Mapping[str, Any]
    """what went in, readable (``platform`` first)"""
    values: Mapping[str, float]
    """the numbers behind the text, e.g. ``"resnet50.gain@8"``; ``@k`` is at k NICs per node"""
    headline: str = ""
    """one number and its main assumption, for the ledger's one-line summary (e.g. ``+4.1 % ResNet-50,
    8 NICs/node``); the text and the inputs hold the rest"""

    def describe(self) -> str:
        """``Model (platform, inputs: ...): text``, the ledger's predicted column."""
        shown = "; ".join(f"{k}: {_fmt(v)}" for k, v in self.inputs.items() if k != "platform")
        return f"Model ({self.inputs.get('platform', '?')}, inputs: {shown}): {self.text}"


@dataclass(frozen=True)
class ModelText:
    """A prediction already written as text, with its summary ``headline`` (a predictor may return one)."""

    text: str
    headline: str = ""

    def describe(self) -> str:
        return self.text


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.3g}"


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def _count(n: float) -> str:
    """Parameters, readable: ``25.6 M``, ``10 B``."""
    return f"{n / 1e9:.3g} B" if n >= 1e9 else f"{n / 1e6:.3g} M"


def _nics(n: int) -> str:
    return f"{n} NIC{'s' if n != 1 else ''}"


def _per_nics(counts: Sequence[int], text: Callable[[int], str]) -> str:
    return ", ".join(f"{text(n)} ({_nics(n)})" for n in counts)


def _nic_counts(platform: str | Platform, nics_per_node: int | None) -> tuple[int, list[int]]:
    """(the NICs per node used, every count shown: that one, 1 and 8)."""
    chosen = get_platform(platform).nics_per_node if nics_per_node is None else int(nics_per_node)
    if chosen < 1:
        raise ConfigError(f"{chosen} is out of range; allowed: >= 1", field="nics_per_node", config="guide_scale")
    return chosen, sorted({chosen, *NIC_COUNTS})


def _platform(platform: str | Platform, nics: int, measured: MeasuredInputs) -> Platform:
    """The platform at ``nics`` NICs per node, its NICs scaled by the measured link efficiency if any."""
    plat = get_platform(platform).with_(nics_per_node=nics)
    eff = measured.link_efficiency
    if eff is None:
        return plat
    nic = plat.nic
    return plat.with_(nic=LinkModel(nic.alpha_s, nic.beta_s_per_byte / eff, f"{eff:.3g} x ({nic.source})"))


def _base_inputs(platform: str | Platform, nodes: int, chosen: int, counts: Sequence[int],
                 measured: MeasuredInputs) -> dict[str, Any]:
    plat = get_platform(platform)
    if nodes < 1:
        raise ConfigError(f"{nodes} is out of range; allowed: >= 1", field="nodes", config="guide_scale")
    return {"platform": plat.name,
            "layout": f"{nodes} nodes x {plat.gpus_per_node} x {plat.device_name}"
                      + (" (the guide's 32-task job)" if nodes * plat.gpus_per_node == GUIDE_JOB_TASKS else ""),
            "NICs per node": f"{chosen} (the guide does not say; shown at {', '.join(map(str, counts))})",
            **measured.inputs()}


def _step(params: float, plat: Platform, nodes: int, mode: str, compute_s: float, measured: MeasuredInputs,
          **kwargs: Any) -> Prediction:
    return predict_step(params, platform=plat, nodes=nodes, mode=mode, compute_s=compute_s,
                        overlap_share=measured.overlap, **kwargs)


def _two_bit_range(params: float, plain_fraction: float, plat: Platform, nodes: int, compute_s: float,
                   measured: MeasuredInputs, mode: str = "quant2bit") -> tuple[Prediction, Prediction]:
    """(optimistic, pessimistic) 2-bit steps: the plain layer-norm all-reduce overlapped, or charged per bucket."""
    common = dict(bucket_bytes=GUIDE_C8_BUCKET_BYTES)
    low = _step(params, plat, nodes, mode, compute_s, measured, plain_fraction=0.0, **common)
    high = _step(params, plat, nodes, mode, compute_s, measured, plain_fraction=plain_fraction, **common)
    return low, high


def _range(a: float, b: float, fmt: Callable[[float], str]) -> str:
    lo, hi = sorted((a, b))
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}..{fmt(hi)}"


# -- C3: hierarchical vs DDP --------------------------------------------------------------------------

def predict_c3(platform: str | Platform = GUIDE_PLATFORM, *, nodes: int = GUIDE_NODES,
               nics_per_node: int | None = None, measured: MeasuredInputs | None = None) -> GuidePrediction:
    """C3: throughput gain of the hierarchical all-reduce (hook) over DDP's ring, ResNet-50 and GPT-2 124M.

    Args:
        platform: a registered platform name or a :class:`~hpcbench.scale.platforms.Platform`.
        nodes: nodes in the job (the guide's job script: 4).
        nics_per_node: NICs per node (default the platform's); the result is also shown at 1 and 8.
        measured: measured inputs (link efficiency, overlapped share); default none.

    Returns:
        :class:`GuidePrediction` with ``values`` ``<model>.gain@<nics>``, ``<model>.ddp_comm_share@<nics>``,
        the step times, ``<model>.compute_s`` and ``<model>.gain`` at ``nics_per_node``.
    """
    measured = measured or MeasuredInputs()
    chosen, counts = _nic_counts(platform, nics_per_node)
    inputs = _base_inputs(platform, nodes, chosen, counts, measured)
    values: dict[str, float] = {}
    guide = {"resnet50": GUIDE_C3_RESNET, "gpt2_124M": GUIDE_C3_GPT2}
    parts, shares, needs, guide_gains = [], [], [], []
    for work in (RESNET50, GPT2_124M):
        compute_s, basis = work.compute(platform)
        inputs[work.label] = f"{_count(work.params)} params, {basis} = {compute_s * 1e3:.1f} ms compute"
        values[f"{work.name}.compute_s"] = compute_s
        for nics in counts:
            plat = _platform(platform, nics, measured)
            ddp = _step(work.params, plat, nodes, "ddp", compute_s, measured)
            hier = _step(work.params, plat, nodes, "hierarchical", compute_s, measured)
            values[f"{work.name}.gain@{nics}"] = ddp.step_s / hier.step_s - 1.0
            values[f"{work.name}.ddp_comm_share@{nics}"] = ddp.comm_share
            values[f"{work.name}.ddp_step_s@{nics}"] = ddp.step_s
            values[f"{work.name}.hierarchical_step_s@{nics}"] = hier.step_s
        values[f"{work.name}.gain"] = values[f"{work.name}.gain@{chosen}"]
        base, new, stated = guide[work.name]
        gain = new / base - 1.0
        guide_gains.append(f"+{stated:.1f} %")
        # A gain g from cheaper communication alone needs DDP to spend at least g / (1 + g) of its step
        # communicating (the hierarchical step can be no shorter than the compute).
        needs.append(f"{gain / (1 + gain) * 100:.0f} %")
        parts.append(f"{work.label} " + _per_nics(counts, lambda n, w=work: _pct(values[f"{w.name}.gain@{n}"])))
        shares.append(f"{work.label} " + _per_nics(
            counts, lambda n, w=work: "%.1f %%" % (values[f"{w.name}.ddp_comm_share@{n}"] * 100)))
        values[f"{work.name}.guide_gain"] = gain
        # The guide's DDP rate against what its 32 GPUs would do at this compute alone: far below 1 means
        # its DDP step was mostly something other than this model's compute.
        values[f"{work.name}.guide_ddp_share_of_compute_rate"] = base / (GUIDE_JOB_TASKS * work.per_step / compute_s)
    rates = " and ".join(f"{values[f'{w}.guide_ddp_share_of_compute_rate'] * 100:.2g} %" for w in guide)
    text = (f"hierarchical over DDP throughput: {'; '.join(parts)}, against the guide's "
            f"{' and '.join(guide_gains)}. DDP's exposed communication share of its step: {'; '.join(shares)}; "
            f"the guide's gains need at least {' and '.join(needs)} even if the hierarchical reduction cost nothing. "
            f"The guide's DDP rates are {rates} of what its {GUIDE_JOB_TASKS} GPUs compute at the inputs' rates")
    inputs["gradients"] = "fp32, DDP buckets 25 MiB (first 1 MiB); hierarchical: reduce-scatter, peer all-reduce, " \
                          "all-gather"
    return GuidePrediction("C3", text, inputs, values,
                           headline=f"{_pct(values['resnet50.gain'])} ResNet-50, {_nics(chosen)}/node")


# -- C2: a 4x batch by gradient accumulation ------------------------------------------------------------

def predict_c2(platform: str | Platform = GUIDE_PLATFORM, *, nodes: int = GUIDE_NODES,
               nics_per_node: int | None = None, measured: MeasuredInputs | None = None,
               factor: int = GUIDE_C2_BATCH_FACTOR) -> GuidePrediction:
    """C2: per-GPU throughput of a ``factor``-x batch by accumulation (``no_sync`` k) over one micro-step.

    Args:
        factor: micro-steps accumulated under ``no_sync()`` before one all-reduce (the guide: > 4x).
        platform, nodes, nics_per_node, measured: as :func:`predict_c3`.

    Returns:
        :class:`GuidePrediction`; ``values`` ``<model>.gain@<nics>`` (per-GPU throughput gain) and
        ``<model>.gain`` at ``nics_per_node``.
    """
    if factor < 1:
        raise ConfigError(f"{factor} is out of range; allowed: >= 1", field="factor", config="predict_c2")
    measured = measured or MeasuredInputs()
    chosen, counts = _nic_counts(platform, nics_per_node)
    inputs = _base_inputs(platform, nodes, chosen, counts, measured)
    inputs["accumulation"] = f"{factor} micro-steps under no_sync, one fp32 ring all-reduce (DDP buckets)"
    values: dict[str, float] = {}
    parts, shares = [], []
    for work in (RESNET50, GPT2_124M):
        compute_s, basis = work.compute(platform)
        inputs[work.label] = f"{_count(work.params)} params, {basis} = {compute_s * 1e3:.1f} ms compute"
        for nics in counts:
            plat = _platform(platform, nics, measured)
            one = _step(work.params, plat, nodes, "ddp", compute_s, measured)
            acc = _step(work.params, plat, nodes, f"no_sync {factor}", compute_s, measured)
            values[f"{work.name}.gain@{nics}"] = factor * one.step_s / acc.step_s - 1.0
            values[f"{work.name}.comm_share@{nics}"] = one.comm_share
        values[f"{work.name}.gain"] = values[f"{work.name}.gain@{chosen}"]
        parts.append(f"{work.label} " + _per_nics(counts, lambda n, w=work: _pct(values[f"{w.name}.gain@{n}"])))
        shares.append(f"{work.label} " + _per_nics(
            counts, lambda n, w=work: "%.1f %%" % (values[f"{w.name}.comm_share@{n}"] * 100)))
    text = (f"per-GPU throughput of a {factor}x batch by accumulation over one micro-step: {'; '.join(parts)}, "
            f"against the guide's +{GUIDE_C2_GAIN * 100:.0f} %. Accumulation only amortises the all-reduce, "
            f"which is {'; '.join(shares)} of a one-micro-step DDP step here")
    return GuidePrediction("C2", text, inputs, values,
                           headline=f"{_pct(values['resnet50.gain'])} ResNet-50, {_nics(chosen)}/node")


# -- C8: 2-bit compression vs the fp32 ring -------------------------------------------------------------

def predict_c8(platform: str | Platform = GUIDE_PLATFORM, *, nodes: int = GUIDE_NODES,
               nics_per_node: int | None = None, measured: MeasuredInputs | None = None,
               workloads: Sequence[Workload] | None = None) -> GuidePrediction:
    """C8: 2-bit quant2bit (4 MiB buckets, layer norms plain) over DDP's fp32 ring: communication and step.

    Args:
        workloads: default GPT-2 124M (published compute) and :data:`GPT_10B` (FLOPs at the sustained rate).
        platform, nodes, nics_per_node, measured: as :func:`predict_c3`.

    Returns:
        :class:`GuidePrediction`; ``values`` ``<model>.comm_ratio_low@<nics>`` / ``..._high@<nics>``
        (2-bit / fp32 communication time, layer norms overlapped / charged per bucket) and
        ``<model>.gain_low@<nics>`` / ``..._high@<nics>`` (step-time gain, worst / best).
    """
    measured = measured or MeasuredInputs()
    chosen, counts = _nic_counts(platform, nics_per_node)
    inputs = _base_inputs(platform, nodes, chosen, counts, measured)
    inputs["2-bit"] = ("quant2bit (2-bit all-to-all + all-gather), 4 MiB buckets; layer norms plain: overlapped "
                       "(low) .. one plain ring all-reduce per bucket in sequence (high)")
    values: dict[str, float] = {}
    ratios, gains = [], []
    for work in workloads or (GPT2_124M, GPT_10B):
        compute_s, basis = work.compute(platform)
        inputs[work.label] = (f"{_count(work.params)} params ({work.plain_fraction * 100:.3f} % in layer norms), "
                              f"{basis} = {compute_s * 1e3:.1f} ms compute")
        for nics in counts:
            plat = _platform(platform, nics, measured)
            fp32 = _step(work.params, plat, nodes, "ddp", compute_s, measured)
            low, high = _two_bit_range(work.params, work.plain_fraction, plat, nodes, compute_s, measured)
            values[f"{work.name}.comm_ratio_low@{nics}"] = low.comm_s["total"] / fp32.comm_s["total"]
            values[f"{work.name}.comm_ratio_high@{nics}"] = high.comm_s["total"] / fp32.comm_s["total"]
            values[f"{work.name}.gain_low@{nics}"] = fp32.step_s / high.step_s - 1.0
            values[f"{work.name}.gain_high@{nics}"] = fp32.step_s / low.step_s - 1.0
            values[f"{work.name}.fp32_comm_share@{nics}"] = fp32.comm_share
        ratios.append(f"{work.label} " + _per_nics(counts, lambda n, w=work.name: _range(
            values[f"{w}.comm_ratio_low@{n}"], values[f"{w}.comm_ratio_high@{n}"], lambda x: f"{x:.2f}x")))
        gains.append(f"{work.label} " + _per_nics(counts, lambda n, w=work.name: _range(
            values[f"{w}.gain_low@{n}"], values[f"{w}.gain_high@{n}"], _pct)))
    text = (f"2-bit over fp32 ring communication time: {'; '.join(ratios)}; step gain: {'; '.join(gains)}. "
            f"The bytes shrink ~16x, but each 4 MiB bucket pays its own latency (a ring all-gather over every "
            f"rank), which dominates where the links are fast")
    first = (workloads or (GPT2_124M,))[0]
    gain = _range(values[f"{first.name}.gain_low@{chosen}"], values[f"{first.name}.gain_high@{chosen}"], _pct)
    return GuidePrediction("C8", text, inputs, values, headline=f"{gain} {first.label}, {_nics(chosen)}/node")


# -- C7: the weather case ----------------------------------------------------------------------------

def _guide_split() -> tuple[float, float]:
    """(busy, exposed) seconds of the guide's original weather step: 420 ms at 61 % busy."""
    step = GUIDE_C7_STEP_MS[0] / 1e3
    busy = step * GUIDE_C7_UTIL[0]
    return busy, step - busy


def params_for_comm(comm_s: float, plat: Platform, nodes: int, *, mode: str = "ddp",
                    lo: float = 1e5, hi: float = 1e13) -> float | None:
    """Gradient elements whose one synchronisation in ``mode`` takes ``comm_s`` on ``plat``; None if out of range.

    Bisection on a log scale: communication grows with the gradient size (more and fuller buckets).
    """
    def comm(p: float) -> float:
        return predict_step(p, platform=plat, nodes=nodes, mode=mode, compute_s=1.0).comm_s["total"]

    if not comm(lo) <= comm_s <= comm(hi):
        return None
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if comm(mid) < comm_s else (lo, mid)
    return math.sqrt(lo * hi)


def predict_c7(platform: str | Platform = GUIDE_PLATFORM, *, nodes: int = GUIDE_NODES,
               nics_per_node: int | None = None, measured: MeasuredInputs | None = None,
               params: float | None = None, sizes: Iterable[float] = WEATHER_SIZES,
               micro_steps: int = GUIDE_C9_MICRO_STEPS) -> GuidePrediction:
    """C7: the weather case's 420 ms step after topology-aware 2-bit reduction, then with no_sync overlap.

    From the guide's own figures, 420 ms at 61 % busy is 256 ms of compute and 164 ms exposed
    (taken as communication). The model's ratio ``r`` of communication costs, 2-bit over the
    hierarchical hook (``quant2bit_hierarchical``) to DDP's fp32 ring, for a weather model of
    ``params`` gradients, gives ``256 + 164 r`` ms after communication tuning (the guide: 310)
    and ``256 + 164 r (1 - overlap) / micro_steps`` ms per micro-step with no_sync (the guide: 132).

    Args:
        params: gradient elements of the weather model (default: hpcbench's 0.25 degree ViT, 320 M);
            the guide gives none.
        sizes: other gradient sizes the ratio is shown at (sensitivity).
        micro_steps: micro-steps under no_sync in the full optimisation (C9: 4).
        platform, nodes, nics_per_node, measured: as :func:`predict_c3`.

    Returns:
        :class:`GuidePrediction`; ``values`` ``ratio_low@<nics>`` / ``ratio_high@<nics>``,
        ``tuned_ms_*@<nics>``, ``full_ms_*@<nics>``; for each size ``ratio_*[<params>]@<nics>`` and the
        model's own ``ring_ms[<params>]@<nics>`` / ``tuned_comm_ms_*[<params>]@<nics>``; and
        ``implied_params@<nics>`` (the gradient size whose fp32 ring takes the guide's 164 ms).
    """
    if micro_steps < 1:
        raise ConfigError(f"{micro_steps} is out of range; allowed: >= 1", field="micro_steps", config="predict_c7")
    measured = measured or MeasuredInputs()
    params = float(weather_params() if params is None else params)
    if not params > 0:
        raise ConfigError(f"{params} is out of range; allowed: > 0", field="params", config="predict_c7")
    chosen, counts = _nic_counts(platform, nics_per_node)
    busy, exposed = _guide_split()
    plain = weather_plain_fraction()
    inputs = _base_inputs(platform, nodes, chosen, counts, measured)
    inputs["guide's step"] = (f"{GUIDE_C7_STEP_MS[0]} ms at {GUIDE_C7_UTIL[0]:.0%} busy = {busy * 1e3:.0f} ms compute "
                              f"+ {exposed * 1e3:.0f} ms exposed, taken as communication")
    inputs["weather gradients"] = (f"{_count(params)} fp32 (hpcbench's {WEATHER_PRESET} ViT unless given; the guide "
                                   f"gives none), {plain * 100:.3f} % layer norms")
    inputs["tuning"] = (f"2-bit over the hierarchical hook (quant2bit_hierarchical, 4 MiB buckets) vs DDP's fp32 "
                        f"ring; then no_sync over {micro_steps} micro-steps")
    values: dict[str, float] = {}
    all_sizes = sorted({params, *map(float, sizes)})
    for nics in counts:
        plat = _platform(platform, nics, measured)
        for p in all_sizes:
            ring = _step(p, plat, nodes, "ddp", busy, measured).comm_s["total"]
            low, high = _two_bit_range(p, plain, plat, nodes, busy, measured, mode="quant2bit_hierarchical")
            values[f"ring_ms[{p:.0f}]@{nics}"] = ring * 1e3
            values[f"tuned_comm_ms_low[{p:.0f}]@{nics}"] = low.comm_s["total"] * 1e3
            values[f"tuned_comm_ms_high[{p:.0f}]@{nics}"] = high.comm_s["total"] * 1e3
            values[f"ratio_low[{p:.0f}]@{nics}"] = low.comm_s["total"] / ring
            values[f"ratio_high[{p:.0f}]@{nics}"] = high.comm_s["total"] / ring
        for bound in ("low", "high"):
            r = values[f"ratio_{bound}[{params:.0f}]@{nics}"]
            values[f"ratio_{bound}@{nics}"] = r
            values[f"tuned_ms_{bound}@{nics}"] = (busy + exposed * r) * 1e3
            values[f"full_ms_{bound}@{nics}"] = (busy + exposed * r * (1.0 - measured.overlap) / micro_steps) * 1e3
        implied = params_for_comm(exposed, plat, nodes)
        if implied is not None:
            values[f"implied_params@{nics}"] = implied

    def ms(prefix: str) -> str:
        return _per_nics(counts, lambda n: _range(values[f"{prefix}_low@{n}"], values[f"{prefix}_high@{n}"],
                                                  lambda x: f"{x:.0f} ms"))

    ratio = _per_nics(counts, lambda n: _range(values[f"ratio_low@{n}"], values[f"ratio_high@{n}"],
                                               lambda x: f"{x:.2f}x"))
    sensitivity = "; ".join(
        f"{_count(p)} " + ", ".join(f"{values[f'ratio_low[{p:.0f}]@{n}']:.2f}x" for n in counts)
        for p in all_sizes)
    implied = ", ".join(f"{_count(values[f'implied_params@{n}'])} ({_nics(n)})" for n in counts
                        if f"implied_params@{n}" in values)
    busy_full = GUIDE_C7_STEP_MS[2] * GUIDE_C7_UTIL[2]
    text = (f"communication cost ratio r (tuned / fp32 ring) for {_count(params)} gradients: {ratio}; so "
            f"{GUIDE_C7_STEP_MS[0]} ms becomes {ms('tuned_ms')} after communication tuning (the guide: "
            f"{GUIDE_C7_STEP_MS[1]} ms) and {ms('full_ms')} per micro-step with no_sync over {micro_steps} (the "
            f"guide: {GUIDE_C7_STEP_MS[2]} ms, whose {busy_full:.0f} ms busy time is below the original's "
            f"{busy * 1e3:.0f} ms: compute got faster too). r (overlapped layer norms) by gradient size, at "
            f"{', '.join(_nics(n) for n in counts)}: {sensitivity}."
            + (f" The fp32 ring takes the guide's {exposed * 1e3:.0f} ms for {implied} gradients" if implied else ""))
    speed_up = _range(GUIDE_C7_STEP_MS[0] / values[f"full_ms_high@{chosen}"],
                      GUIDE_C7_STEP_MS[0] / values[f"full_ms_low@{chosen}"], lambda x: f"{x:.1f}x")
    return GuidePrediction("C7", text, inputs, values, headline=f"{speed_up}, {_nics(chosen)}/node")


# -- C9: no_sync accumulation -----------------------------------------------------------------------------

def predict_c9(platform: str | Platform = GUIDE_PLATFORM, *, nodes: int = GUIDE_NODES,
               nics_per_node: int | None = None, measured: MeasuredInputs | None = None,
               params: float | None = None, micro_steps: int = GUIDE_C9_MICRO_STEPS,
               compute_s: float | None = None) -> GuidePrediction:
    """C9: ``micro_steps`` micro-steps under no_sync (one all-reduce) over synchronising every micro-step.

    Args:
        params: gradient elements (default: the weather case's, as :func:`predict_c7`).
        micro_steps: micro-steps per optimizer step (the guide: 4).
        compute_s: compute of one micro-step (default: the guide's weather-case busy time, 256 ms).
        platform, nodes, nics_per_node, measured: as :func:`predict_c3`.

    Returns:
        :class:`GuidePrediction`; ``values`` ``gain@<nics>`` (time per sample, every-sync over no_sync),
        ``gain`` at ``nics_per_node`` and ``guide_split_gain`` (with the guide's 164 ms as the sync).
    """
    if micro_steps < 1:
        raise ConfigError(f"{micro_steps} is out of range; allowed: >= 1", field="micro_steps", config="predict_c9")
    measured = measured or MeasuredInputs()
    params = float(weather_params() if params is None else params)
    busy, exposed = _guide_split()
    source = "the guide's weather step: 420 ms x 61 % busy" if compute_s is None else "given"
    compute_s = busy if compute_s is None else float(compute_s)
    chosen, counts = _nic_counts(platform, nics_per_node)
    inputs = _base_inputs(platform, nodes, chosen, counts, measured)
    inputs["gradients"] = f"{_count(params)} fp32 (the weather case's; the guide gives none), DDP buckets"
    inputs["compute"] = f"{compute_s * 1e3:.0f} ms per micro-step ({source})"
    values: dict[str, float] = {}
    for nics in counts:
        plat = _platform(platform, nics, measured)
        every = _step(params, plat, nodes, "ddp", compute_s, measured, micro_steps=micro_steps)
        once = _step(params, plat, nodes, f"no_sync {micro_steps}", compute_s, measured)
        values[f"gain@{nics}"] = every.step_s / once.step_s - 1.0
        values[f"sync_ms@{nics}"] = once.comm_s["total"] * 1e3
    values["gain"] = values[f"gain@{chosen}"]
    exposed_left = exposed * (1.0 - measured.overlap)
    values["guide_split_gain"] = (busy + exposed_left) / (busy + exposed_left / micro_steps) - 1.0
    text = (f"no_sync over {micro_steps} micro-steps vs a sync every micro-step: "
            f"{_per_nics(counts, lambda n: _pct(values[f'gain@{n}']))} (one fp32 ring all-reduce "
            f"{_per_nics(counts, lambda n: '%.0f ms' % values[f'sync_ms@{n}'])}); with the guide's own "
            f"{exposed * 1e3:.0f} ms of communication per micro-step: {_pct(values['guide_split_gain'])}")
    return GuidePrediction("C9", text, inputs, values, headline=f"{_pct(values['gain'])}, {_nics(chosen)}/node")


# -- the registry and the SPEC adapter ----------------------------------------------------------------------

GUIDE_PREDICTORS: Registry[Callable[..., GuidePrediction]] = Registry("guide-scale predictor")
GUIDE_PREDICTORS.register("C2", predict_c2)
GUIDE_PREDICTORS.register("C3", predict_c3)
GUIDE_PREDICTORS.register("C7", predict_c7)
GUIDE_PREDICTORS.register("C8", predict_c8)
GUIDE_PREDICTORS.register("C9", predict_c9)


def predict_claim(claim_id: str, evidence: "Evidence | None" = None, **kwargs: Any) -> GuidePrediction:
    """The prediction for ``claim_id``, with the measured inputs ``evidence`` carries (none without).

    Raises:
        RegistryError: no predictor for ``claim_id`` (the message lists those registered).
    """
    return GUIDE_PREDICTORS.get(claim_id)(measured=MeasuredInputs.from_evidence(evidence), **kwargs)


def predictor(claim_id: str, **kwargs: Any) -> Callable[["Claim", "Evidence"], GuidePrediction]:
    """A SPEC's ``predictions`` entry: ``predictions={cid: predictor(cid) for cid in GUIDE_PREDICTORS}``.

    Args:
        claim_id: one of :data:`GUIDE_PREDICTORS`.
        kwargs: passed to the ``predict_cN`` function (e.g. ``nics_per_node=1``).

    Returns:
        ``predict(claim, evidence) -> GuidePrediction`` with the evidence's measured inputs (the ledger
        shows its :meth:`~GuidePrediction.describe` and its ``headline``).

    Raises:
        RegistryError: no predictor for ``claim_id`` (raised here, when the SPEC is built).
    """
    GUIDE_PREDICTORS.get(claim_id)

    def predict(claim: "Claim", evidence: "Evidence") -> GuidePrediction:
        if claim.id != claim_id:
            raise ConfigError(f"the {claim_id} predictor was asked for {claim.id}", field="claim",
                              config="guide_scale")
        return predict_claim(claim_id, evidence, **kwargs)

    predict.__name__ = predict.__qualname__ = f"predict_{claim_id.lower()}_at_guide_scale"
    return predict


__all__ = ["GPT2_124M", "GPT_10B", "GUIDE_JOB_TASKS", "GUIDE_NODES", "GUIDE_PLATFORM", "GUIDE_PREDICTORS",
           "GuidePrediction", "MeasuredInputs", "ModelText", "NIC_COUNTS", "RESNET50", "Workload", "layer_norm_params",
           "params_for_comm", "predict_c2", "predict_c3", "predict_c7", "predict_c8", "predict_c9", "predict_claim",
           "predictor", "weather_params"]
