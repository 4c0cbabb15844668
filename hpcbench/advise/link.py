"""The link a series ran on, as the scale model's :class:`~hpcbench.scale.platforms.Platform`, and its two terms.

Three ways to get it, in this order:

1. **fitted** — the series has collectives-style probe rows (``time`` per op, size and group):
   :func:`~hpcbench.scale.alpha_beta.fit_from_collectives` fits alpha and beta per group and
   :func:`~hpcbench.scale.platforms.emulated_cluster` turns the fits into a platform;
2. **inferred** — the series ran on a shaped link of known rate (``link_rate_bps``): beta is
   8 / rate seconds per byte per node, and alpha is what the measured communication of one
   synchronisation leaves after the byte term, spread over the latency steps of its buckets'
   ring all-reduces (:func:`hpcbench.scale.algorithms.ring_allreduce`). The intra-node link
   is then taken to cost latency only (loopback or NVLink is not the bottleneck): the
   topology-aware prediction is optimistic by what its intra-node bytes cost;
3. **fitted** from another task of the same run (:class:`ProbeSet`, :func:`probe_sets`): a task that
   measured collectives and nothing the advisor advises on, on the same nodes x ranks per node
   and backend as the series (a suite that runs ``collectives`` beside its training tasks, as the
   demo does). The layout must match: a world group's fit holds its world size, and an inter-node
   fit the number of ranks sharing each node's link.

The split of one synchronisation into a latency term (alpha x steps) and a byte term
(beta x bytes) is :func:`terms`: the scale model's own stage prices
(:func:`hpcbench.scale.predict.stage_time`) on copies of the platform with the other
coefficient set to zero.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from hpcbench.advise.figures import (GRAD_ELEM_BYTES, AdviceError, Figure, Measured, backend_of, find_series,
                                     probe_rows, ranks_of)
from hpcbench.core.errors import ConfigError
from hpcbench.core.results import json_object
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


@dataclass(frozen=True)
class ProbeSet:
    """Collectives-style probe rows that tasks of a run measured apart from any series, and where they ran."""

    name: str
    """the tasks' experiment and variant (repetitions of one variant are pooled)"""
    tasks: tuple[str, ...]
    nodes: int
    ranks_per_node: int
    backend: str
    rows: Any
    """the ``time`` rows with op, size_bytes, group and group_ranks labels"""

    @property
    def layout(self) -> str:
        return f"{self.nodes} x {self.ranks_per_node} {self.backend}"

    def describe(self) -> str:
        return f"{self.name} ({self.layout}; task{'s' if len(self.tasks) > 1 else ''} {', '.join(self.tasks)})"


def probe_sets(records_by_task: Mapping[str, Any]) -> list[ProbeSet]:
    """The run's probe rows that belong to no series, one :class:`ProbeSet` per experiment and variant.

    A task with a series of its own keeps its probe rows to itself: they were measured on that
    series' link (the ``advisor`` experiment's phases each shape a different one).

    Args:
        records_by_task: task id -> that task's records (every task of one run).
    """
    import pandas as pd

    grouped: dict[tuple[str, str], list[tuple[str, Any, Any]]] = {}
    for task_id, records in sorted(records_by_task.items()):
        if records is None or records.empty or find_series(records):
            continue
        rows = probe_rows(records, {})
        if rows.empty:
            continue
        key = (str(records["experiment"].iloc[0]), str(records["variant"].iloc[0]))
        grouped.setdefault(key, []).append((task_id, records, rows))
    out = []
    for (experiment, variant), tasks in sorted(grouped.items()):
        by_layout: dict[tuple[int, int, str], list[tuple[str, Any]]] = {}
        for task_id, records, rows in tasks:
            nodes, per_node, _ = ranks_of(records, {})
            by_layout.setdefault((nodes, per_node, backend_of(records)), []).append((task_id, rows))
        for (nodes, per_node, backend), members in sorted(by_layout.items()):
            out.append(ProbeSet(f"{experiment}.{variant}", tuple(t for t, _ in members), nodes, per_node, backend,
                                pd.concat([r for _, r in members], ignore_index=True)))
    return out


def _sizes(probe: ProbeSet) -> int:
    return probe.rows["labels"].map(lambda t: json_object(t).get("size_bytes")).nunique()


def _fitted(probes: Any, measured: Measured, source: str) -> LinkEstimate:
    """The platform fitted from ``probes`` and its figures; ConfigError when they give no inter-node fit."""
    fits = fit_from_collectives(probes)
    platform = non_negative(emulated_cluster(fits, ranks_per_node=measured.ranks_per_node, name="this run's link"))
    # the fit the baseline's flat ring is priced with (a world fit), else the inter-node one
    shown = (fits.get(("all_reduce", "world")) or fits.get(("all_reduce", "inter_node"))
             or next(iter(fits.values())))
    figures = (Figure("alpha (latency per step)", max(0.0, shown.alpha_s), "s",
                      f"fitted{source}: {shown.op} on the {shown.level} group, {shown.n} sizes, "
                      f"{shown.alpha_s:.3g} +- {shown.alpha_err:.2g} s, r2 {shown.r2:.3f} (below 0: taken as 0)"),
               Figure("link bandwidth", shown.bandwidth_Bps, "B/s",
                      f"fitted{source}: 1 / beta, {shown.op} on the {shown.level} group (beta <= 0: no limit seen)"))
    return LinkEstimate(platform, "fitted", figures)


def _from_the_run(measured: Measured, run_probes: Sequence[ProbeSet]) -> tuple[LinkEstimate | None, str]:
    """The link fitted from the run's probe set on the series' layout (the one with most sizes), or why none."""
    want = (measured.nodes, measured.ranks_per_node, measured.backend)
    same = sorted((p for p in run_probes if (p.nodes, p.ranks_per_node, p.backend) == want),
                  key=lambda p: (-_sizes(p), -len(p.rows), p.name))
    why = []
    for probe in same:
        try:
            return _fitted(probe.rows, measured, f" from the run's {probe.describe()}"), ""
        except ConfigError as exc:
            why.append(f"{probe.name} gives no inter-node fit ({exc})")
    layout = f"{measured.nodes} x {measured.ranks_per_node} {measured.backend}"
    if why:
        return None, "the run's collectives-style tasks on its layout give no fit: " + "; ".join(why)
    if run_probes:
        others = ", ".join(sorted({f"{p.name} {p.layout}" for p in run_probes}))
        return None, f"no collectives-style task of the run ran on its layout, {layout} (they ran: {others})"
    return None, "the run holds no collectives-style task either"


def link_of(records, measured: Measured, *, where: str = "the records",
            run_probes: Sequence[ProbeSet] = ()) -> LinkEstimate:
    """The series' link: fitted from its probe rows, else inferred from its shaped rate, else fitted from the
    run's probe tasks on its layout (module docstring).

    Args:
        records: the series' launch.
        measured: the series' figures.
        where: names the records in errors.
        run_probes: the run's probe rows that belong to no series (:func:`probe_sets`).

    Raises:
        AdviceError: none of the three; the reason names what each lacked and what would do, worded
            the same for every series of one layout, so a run's refusals group.
    """
    why_not_fitted = "it has no collectives-style 'time' rows (op, size_bytes, group, group_ranks)"
    probes = probe_rows(records, measured.series)
    if len(probes):
        try:
            return _fitted(probes, measured, "")
        except ConfigError as exc:
            why_not_fitted = f"its probe rows give no inter-node fit ({exc})"
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
    found, why_not_run = _from_the_run(measured, run_probes)
    if found is not None:
        return found
    raise AdviceError(where, f"cannot tell the byte term from the latency term: {why_not_fitted}, no link rate was "
                             f"recorded ('link_rate_bps' or 'fact.link_rate_bps'), and {why_not_run}; run a "
                             f"collectives task on the same nodes x ranks per node in the same suite, or run it on "
                             f"the emulated cluster", measured.series)


__all__ = ["BASELINE_MODE", "LinkEstimate", "ProbeSet", "bucket_context", "link_of", "non_negative", "probe_sets",
           "terms"]
