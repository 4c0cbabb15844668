"""The link a series ran on, as the scale model's :class:`~hpcbench.scale.platforms.Platform`, and its two terms.

Two ways to get it, in this order:

1. **fitted** — the series has collectives-style probe rows (``time`` per op, size and group):
   :func:`~hpcbench.scale.alpha_beta.fit_from_collectives` fits alpha and beta per group and
   :func:`~hpcbench.scale.platforms.emulated_cluster` turns the fits into a platform;
2. **inferred** — the series ran on a shaped link of known rate (``link_rate_bps``): beta is
   8 / rate seconds per byte per node, and alpha is what the measured communication of one
   synchronisation leaves after the byte term, spread over the latency steps of its buckets'
   ring all-reduces (:func:`hpcbench.scale.algorithms.ring_allreduce`). The intra-node link
   is then taken to cost latency only (loopback or NVLink is not the bottleneck): the
   topology-aware prediction is optimistic by what its intra-node bytes cost.

The split of one synchronisation into a latency term (alpha x steps) and a byte term
(beta x bytes) is :func:`terms`: the scale model's own stage prices
(:func:`hpcbench.scale.predict.stage_time`) on copies of the platform with the other
coefficient set to zero.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hpcbench.advise.figures import GRAD_ELEM_BYTES, AdviceError, Figure, Measured, describe_series, probe_rows
from hpcbench.core.errors import ConfigError
from hpcbench.scale.alpha_beta import fit_from_collectives
from hpcbench.scale.platforms import LinkModel, Platform, emulated_cluster
from hpcbench.scale.predict import MODE_MODELS, BucketContext, stage_time

BITS_PER_BYTE = 8
#: The mode whose buckets the split prices: the baseline's flat ring all-reduce (DDP's default).
BASELINE_MODE = "ddp"


@dataclass(frozen=True)
class LinkEstimate:
    """A series' link as a platform, how it was obtained, and the figures shown for it."""

    platform: Platform
    how: str
    """``fitted`` (probe rows) or ``inferred`` (shaped rate + measured communication)"""
    figures: tuple[Figure, ...]


def bucket_context(measured: Measured) -> BucketContext:
    """What the scale model needs to lay out the series' buckets (gloo: the two-level hook's intra all-reduces)."""
    return BucketContext(nodes=measured.nodes, ranks_per_node=measured.ranks_per_node,
                         grad_bytes_per_param=GRAD_ELEM_BYTES, intra_via_allreduce=measured.backend != "nccl")


def _stages(measured: Measured) -> list:
    mode, ctx = MODE_MODELS.get(BASELINE_MODE), bucket_context(measured)
    return [stage for size in measured.layout for stage in mode.stages(max(1, size // GRAD_ELEM_BYTES), ctx)]


def _only(platform: Platform, keep: str) -> Platform:
    """``platform`` with every link's other coefficient zeroed: ``keep="alpha"`` prices latency only."""
    def one(link: LinkModel) -> LinkModel:
        if keep == "alpha":
            return replace(link, beta_s_per_byte=0.0)
        return replace(link, alpha_s=0.0)

    return replace(platform, intra=one(platform.intra), nic=one(platform.nic),
                   by_op={k: one(v) for k, v in platform.by_op.items()},
                   base_latency_s=platform.base_latency_s if keep == "alpha" else 0.0)


def _non_negative(link: LinkModel) -> LinkModel:
    """A fitted link whose alpha or beta came out below 0 (noise around a small value), with it taken as 0."""
    if link.alpha_s >= 0 and link.beta_s_per_byte >= 0:
        return link
    return LinkModel(max(0.0, link.alpha_s), max(0.0, link.beta_s_per_byte),
                     link.source + f"; fitted alpha {link.alpha_s:.3g} s, beta {link.beta_s_per_byte:.3g} s/B: a value "
                                   f"below 0 (noise around a small one) taken as 0")


def non_negative(platform: Platform) -> Platform:
    """``platform`` with every link's negative coefficient taken as 0 (a time cannot shrink with bytes or steps)."""
    return replace(platform, intra=_non_negative(platform.intra), nic=_non_negative(platform.nic),
                   by_op={k: _non_negative(v) for k, v in platform.by_op.items()})


def terms(measured: Measured, platform: Platform) -> tuple[float, float]:
    """(latency term, byte term) of one synchronisation of the series' buckets on ``platform``, seconds."""
    latency = byte = 0.0
    alpha_only, beta_only = _only(platform, "alpha"), _only(platform, "beta")
    for stage in _stages(measured):
        latency += stage_time(stage, alpha_only)["total"]
        byte += stage_time(stage, beta_only)["total"]
    return latency, byte


def link_of(records, measured: Measured, *, where: str = "the records") -> LinkEstimate:
    """The series' link: fitted from its probe rows, else inferred from its shaped rate (module docstring).

    Raises:
        AdviceError: neither probe rows that fit an inter-node link nor a link rate; the message
            names ``where``, the series and what would do.
    """
    name = f"{where} (series {describe_series(measured.series)})"
    why_not_fitted = "it has no collectives-style 'time' rows (op, size_bytes, group, group_ranks)"
    probes = probe_rows(records, measured.series)
    if len(probes):
        try:
            fits = fit_from_collectives(probes)
            platform = non_negative(emulated_cluster(fits, ranks_per_node=measured.ranks_per_node,
                                                     name="this run's link"))
        except ConfigError as exc:
            why_not_fitted = f"its probe rows give no inter-node fit ({exc})"
        else:
            # the fit the baseline's flat ring is priced with (a world fit), else the inter-node one
            shown = (fits.get(("all_reduce", "world")) or fits.get(("all_reduce", "inter_node"))
                     or next(iter(fits.values())))
            figures = (Figure("alpha (latency per step)", max(0.0, shown.alpha_s), "s",
                              f"fitted: {shown.op} on the {shown.level} group, {shown.n} sizes, "
                              f"{shown.alpha_s:.3g} +- {shown.alpha_err:.2g} s, r2 {shown.r2:.3f} "
                              f"(below 0: taken as 0)"),
                       Figure("link bandwidth", shown.bandwidth_Bps, "B/s",
                              f"fitted: 1 / beta, {shown.op} on the {shown.level} group (beta <= 0: no limit seen)"))
            return LinkEstimate(platform, "fitted", figures)
    if measured.link_rate_bps:
        beta = BITS_PER_BYTE / measured.link_rate_bps
        bytes_only = Platform(name="shaped link", device_name="cpu (emulated cluster)",
                              gpus_per_node=measured.ranks_per_node, intra=LinkModel(0.0, 0.0, "latency only"),
                              nic=LinkModel(0.0, beta, "8 / link rate"), nics_per_node=1, mfu=1.0)
        _, byte = terms(measured, bytes_only)
        steps = sum(stage.steps for stage in _stages(measured))
        alpha = max(0.0, measured.comm_per_sync_s - byte) / steps if steps else 0.0
        source = (f"inferred: (one synchronisation {measured.comm_per_sync_s:.4g} s - byte term {byte:.4g} s) / "
                  f"{steps} ring steps of its buckets")
        platform = replace(bytes_only, intra=LinkModel(alpha, 0.0, source + "; intra-node bytes taken as free"),
                           nic=LinkModel(alpha, beta, source + "; beta = 8 / the shaped link rate"))
        figures = (Figure("alpha (latency per step)", alpha, "s", source),
                   Figure("link bandwidth", measured.link_rate_bps / BITS_PER_BYTE, "B/s",
                          f"the shaped rate ({measured.sources['link_rate']})"))
        return LinkEstimate(platform, "inferred", figures)
    raise AdviceError(f"{name}: cannot tell the byte term from the latency term: {why_not_fitted}, and no link rate "
                      f"was recorded ('link_rate_bps' or 'fact.link_rate_bps'); run it on the emulated cluster or "
                      f"with a collectives-style probe")


__all__ = ["BASELINE_MODE", "LinkEstimate", "bucket_context", "link_of", "non_negative", "terms"]
