"""The scale model at the guide's scale: the guide's platform and job, its workloads, the inputs measured here.

What every prediction at the guide's scale shares; each claim's own predictor (``predict_cN``) lives
in the experiment that rules on the claim (``hpcbench/experiments/<name>/prediction.py``), which
lists it in its SPEC's ``predictions`` through :func:`predictor`.

The guide's platform (C16) is :data:`~hpcbench.scale.platforms.PLATFORMS` ``a100_hdr``: 8 x A100
per node on NVLink, 200 Gb/s HDR InfiniBand; 4 nodes, the 32 tasks of its job script
(guide sec. 2.3, ``--ntasks=32 --gres=gpu:8``). The guide does not say how many NICs a node has:
every prediction takes ``nics_per_node`` (default: the platform's) and also shows 1 and 8
(:func:`nic_counts`).

Compute of one micro-step comes from a published single-GPU training throughput where one is
listed (:data:`~hpcbench.scale.platforms.PUBLISHED_THROUGHPUT`), else from FLOPs at the
platform's sustained rate; the inputs say which (:meth:`Workload.compute`). The guide's weather
case has no published model size, so its gradient size is a parameter (:func:`weather_params`)
and its compute is the guide's own busy time (:func:`guide_weather_split`). Measured inputs enter
when the evidence a predictor is given has them (:class:`MeasuredInputs`: link efficiency and
overlapped share, from the scale model's launches; the SPEC's ``prediction_inputs`` names whose
launches measure them, and the ledger passes their evidence); without them the predictions stand on
platform data alone.

Assumptions beyond :mod:`hpcbench.scale.predict`'s: throughput is proportional to 1 / step time
(the same samples per step in both modes compared); the 2-bit exchange's plain (layer-norm)
all-reduce is given as a range, from "overlapped by the exchange" (not charged) to "charged in
every bucket, in sequence" (the model's upper bound, :func:`two_bit_range`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from hpcbench.core.errors import ConfigError
from hpcbench.guide.claims import check_claim_id
from hpcbench.guide.statements import GPUS_PER_NODE, WEATHER_ORIGINAL_STEP_MS, WEATHER_ORIGINAL_UTIL
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
GUIDE_NODES = GUIDE_JOB_TASKS // GPUS_PER_NODE
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


def weather_params() -> int:
    """Gradient elements of the weather model (:data:`WEATHER_PRESET`: 320 M)."""
    return parameter_count(WEATHER_PRESETS[WEATHER_PRESET])


def weather_plain_fraction() -> float:
    """Share of the weather model's gradients in layer norms (sent plain by quant2bit)."""
    cfg = WEATHER_PRESETS[WEATHER_PRESET]
    return layer_norm_params(cfg.depth, cfg.width) / parameter_count(cfg)


def guide_weather_split() -> tuple[float, float]:
    """(busy, exposed) seconds of the guide's original weather step: 420 ms at 61 % busy (C7's first row).

    The compute of a weather micro-step at the guide's scale, and the communication it waited on,
    for every prediction of the weather case (the guide's C7 table, and C9's micro-steps).
    """
    step = WEATHER_ORIGINAL_STEP_MS / 1e3
    busy = step * WEATHER_ORIGINAL_UTIL
    return busy, step - busy


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


# -- what the predictors share (hpcbench/experiments/<name>/prediction.py) ----------------------------------

def _fmt(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.3g}"


def percent(x: float) -> str:
    """A signed share in percent: ``+4.1 %``."""
    return f"{x * 100:+.1f} %"


def readable_count(n: float) -> str:
    """Parameters, readable: ``25.6 M``, ``10 B``."""
    return f"{n / 1e9:.3g} B" if n >= 1e9 else f"{n / 1e6:.3g} M"


def nics_text(n: int) -> str:
    """``1 NIC``, ``8 NICs``."""
    return f"{n} NIC{'s' if n != 1 else ''}"


def per_nics(counts: Sequence[int], text: Callable[[int], str]) -> str:
    """``text(n) (n NICs)`` for each NIC count, joined: ``+9.8 % (1 NIC), +4.1 % (8 NICs)``."""
    return ", ".join(f"{text(n)} ({nics_text(n)})" for n in counts)


def nic_counts(platform: str | Platform, nics_per_node: int | None) -> tuple[int, list[int]]:
    """(the NICs per node used, every count shown: that one, 1 and 8)."""
    chosen = get_platform(platform).nics_per_node if nics_per_node is None else int(nics_per_node)
    if chosen < 1:
        raise ConfigError(f"{chosen} is out of range; allowed: >= 1", field="nics_per_node", config="guide_scale")
    return chosen, sorted({chosen, *NIC_COUNTS})


def platform_at(platform: str | Platform, nics: int, measured: MeasuredInputs) -> Platform:
    """The platform at ``nics`` NICs per node, its NICs scaled by the measured link efficiency if any."""
    plat = get_platform(platform).with_(nics_per_node=nics)
    eff = measured.link_efficiency
    if eff is None:
        return plat
    nic = plat.nic
    return plat.with_(nic=LinkModel(nic.alpha_s, nic.beta_s_per_byte / eff, f"{eff:.3g} x ({nic.source})"))


def base_inputs(platform: str | Platform, nodes: int, chosen: int, counts: Sequence[int],
                measured: MeasuredInputs) -> dict[str, Any]:
    """The inputs every prediction shows first: platform, layout, NICs per node and the measured inputs.

    Raises:
        ConfigError: ``nodes`` < 1.
    """
    plat = get_platform(platform)
    if nodes < 1:
        raise ConfigError(f"{nodes} is out of range; allowed: >= 1", field="nodes", config="guide_scale")
    return {"platform": plat.name,
            "layout": f"{nodes} nodes x {plat.gpus_per_node} x {plat.device_name}"
                      + (" (the guide's 32-task job)" if nodes * plat.gpus_per_node == GUIDE_JOB_TASKS else ""),
            "NICs per node": f"{chosen} (the guide does not say; shown at {', '.join(map(str, counts))})",
            **measured.inputs()}


def model_step(params: float, plat: Platform, nodes: int, mode: str, compute_s: float, measured: MeasuredInputs,
               **kwargs: Any) -> Prediction:
    """:func:`~hpcbench.scale.predict.predict_step` with the measured overlapped share (``kwargs`` passed on)."""
    return predict_step(params, platform=plat, nodes=nodes, mode=mode, compute_s=compute_s,
                        overlap_share=measured.overlap, **kwargs)


def two_bit_range(params: float, plain_fraction: float, plat: Platform, nodes: int, compute_s: float,
                  measured: MeasuredInputs, *, bucket_bytes: int,
                  mode: str = "quant2bit") -> tuple[Prediction, Prediction]:
    """(optimistic, pessimistic) 2-bit steps: the plain layer-norm all-reduce overlapped, or charged per bucket.

    Args:
        bucket_bytes: the 2-bit hook's bucket (the guide's: 4 MiB, C8).
        mode: ``quant2bit`` or ``quant2bit_hierarchical``.
    """
    common = dict(bucket_bytes=bucket_bytes)
    low = model_step(params, plat, nodes, mode, compute_s, measured, plain_fraction=0.0, **common)
    high = model_step(params, plat, nodes, mode, compute_s, measured, plain_fraction=plain_fraction, **common)
    return low, high


def value_range(a: float, b: float, fmt: Callable[[float], str]) -> str:
    """``fmt(low)..fmt(high)``, or one value when both read the same."""
    lo, hi = sorted((a, b))
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}..{fmt(hi)}"



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


# -- the SPEC adapter ---------------------------------------------------------------------------------------

def predictor(claim_id: str, predict: Callable[..., GuidePrediction],
              **kwargs: Any) -> Callable[["Claim", "Evidence"], GuidePrediction]:
    """A SPEC's ``predictions`` entry: ``ClaimSet(predictions={"C3": predictor("C3", predict_c3)})``.

    Args:
        claim_id: the claim ``predict`` speaks to (one of the guide's C1-C17).
        predict: a ``predict_cN(*, measured: MeasuredInputs, ...) -> GuidePrediction`` function.
        kwargs: passed to ``predict`` (e.g. ``nics_per_node=1``).

    Returns:
        ``predict(claim, evidence) -> GuidePrediction`` with the evidence's measured inputs
        (:meth:`MeasuredInputs.from_evidence`; the ledger shows its :meth:`~GuidePrediction.describe`
        and its ``headline``).

    Raises:
        ClaimError: ``claim_id`` is not a claim of the guide (raised here, when the SPEC is built).
    """
    check_claim_id(claim_id)

    def at_guide_scale(claim: "Claim", evidence: "Evidence | None") -> GuidePrediction:
        if claim.id != claim_id:
            raise ConfigError(f"the {claim_id} predictor was asked for {claim.id}", field="claim",
                              config="guide_scale")
        return predict(measured=MeasuredInputs.from_evidence(evidence), **kwargs)

    at_guide_scale.__name__ = at_guide_scale.__qualname__ = f"predict_{claim_id.lower()}_at_guide_scale"
    return at_guide_scale


__all__ = ["GPT2_124M", "GPT_10B", "GUIDE_JOB_TASKS", "GUIDE_NODES", "GUIDE_PLATFORM", "GuidePrediction",
           "MeasuredInputs", "ModelText", "NIC_COUNTS", "RESNET50", "WEATHER_PRESET", "Workload", "base_inputs",
           "guide_weather_split", "layer_norm_params", "model_step", "nic_counts", "nics_text", "params_for_comm",
           "per_nics", "percent", "platform_at", "predictor", "readable_count", "two_bit_range", "value_range",
           "weather_params", "weather_plain_fraction"]
