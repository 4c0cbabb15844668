"""C7 at the guide's scale: the scale model's weather step after communication tuning and no_sync.

The ledger's "predicted at the guide's scale" for this claim; the inputs it shares: :mod:`hpcbench.scale.guide_scale`.
"""

from __future__ import annotations

from typing import Iterable

from hpcbench.core.errors import ConfigError
from hpcbench.experiments.weather_case.claims import GUIDE_C7_STEP_MS, GUIDE_C7_UTIL
from hpcbench.parallel.compression import GUIDE_BUCKET_BYTES
from hpcbench.parallel.overlap import GUIDE_MICRO_STEPS
from hpcbench.scale.guide_scale import (GUIDE_NODES, GUIDE_PLATFORM, WEATHER_PRESET, GuidePrediction, MeasuredInputs,
                                        base_inputs, guide_weather_split, model_step, nic_counts, nics_text,
                                        params_for_comm, per_nics, platform_at, predictor, readable_count,
                                        two_bit_range, value_range, weather_params, weather_plain_fraction)
from hpcbench.scale.platforms import Platform

WEATHER_SIZES = (26_000_000, 1_000_000_000, 10_000_000_000)
"""Other gradient sizes C7 shows the ratio at (26 M: the 1 degree preset's order); the guide gives none."""


def predict_c7(platform: str | Platform = GUIDE_PLATFORM, *, nodes: int = GUIDE_NODES,
               nics_per_node: int | None = None, measured: MeasuredInputs | None = None,
               params: float | None = None, sizes: Iterable[float] = WEATHER_SIZES,
               micro_steps: int = GUIDE_MICRO_STEPS) -> GuidePrediction:
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
        platform, nodes, nics_per_node, measured: as every prediction at the guide's scale
            (:func:`~hpcbench.scale.guide_scale.nic_counts`, :class:`~hpcbench.scale.guide_scale.MeasuredInputs`).

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
    chosen, counts = nic_counts(platform, nics_per_node)
    busy, exposed = guide_weather_split()
    plain = weather_plain_fraction()
    inputs = base_inputs(platform, nodes, chosen, counts, measured)
    inputs["guide's step"] = (f"{GUIDE_C7_STEP_MS[0]} ms at {GUIDE_C7_UTIL[0]:.0%} busy = {busy * 1e3:.0f} ms compute "
                              f"+ {exposed * 1e3:.0f} ms exposed, taken as communication")
    inputs["weather gradients"] = (f"{readable_count(params)} fp32 (hpcbench's {WEATHER_PRESET} ViT unless given; "
                                   f"the guide gives none), {plain * 100:.3f} % layer norms")
    inputs["tuning"] = (f"2-bit over the hierarchical hook (quant2bit_hierarchical, 4 MiB buckets) vs DDP's fp32 "
                        f"ring; then no_sync over {micro_steps} micro-steps")
    values: dict[str, float] = {}
    all_sizes = sorted({params, *map(float, sizes)})
    for nics in counts:
        plat = platform_at(platform, nics, measured)
        for p in all_sizes:
            ring = model_step(p, plat, nodes, "ddp", busy, measured).comm_s["total"]
            low, high = two_bit_range(p, plain, plat, nodes, busy, measured, bucket_bytes=GUIDE_BUCKET_BYTES,
                                      mode="quant2bit_hierarchical")
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
        return per_nics(counts, lambda n: value_range(values[f"{prefix}_low@{n}"], values[f"{prefix}_high@{n}"],
                                                      lambda x: f"{x:.0f} ms"))

    ratio = per_nics(counts, lambda n: value_range(values[f"ratio_low@{n}"], values[f"ratio_high@{n}"],
                                                   lambda x: f"{x:.2f}x"))
    sensitivity = "; ".join(
        f"{readable_count(p)} " + ", ".join(f"{values[f'ratio_low[{p:.0f}]@{n}']:.2f}x" for n in counts)
        for p in all_sizes)
    implied = ", ".join(f"{readable_count(values[f'implied_params@{n}'])} ({nics_text(n)})" for n in counts
                        if f"implied_params@{n}" in values)
    busy_full = GUIDE_C7_STEP_MS[2] * GUIDE_C7_UTIL[2]
    text = (f"communication cost ratio r (tuned / fp32 ring) for {readable_count(params)} gradients: {ratio}; so "
            f"{GUIDE_C7_STEP_MS[0]} ms becomes {ms('tuned_ms')} after communication tuning (the guide: "
            f"{GUIDE_C7_STEP_MS[1]} ms) and {ms('full_ms')} per micro-step with no_sync over {micro_steps} (the "
            f"guide: {GUIDE_C7_STEP_MS[2]} ms, whose {busy_full:.0f} ms busy time is below the original's "
            f"{busy * 1e3:.0f} ms: compute got faster too). r (overlapped layer norms) by gradient size, at "
            f"{', '.join(nics_text(n) for n in counts)}: {sensitivity}."
            + (f" The fp32 ring takes the guide's {exposed * 1e3:.0f} ms for {implied} gradients" if implied else ""))
    speed_up = value_range(GUIDE_C7_STEP_MS[0] / values[f"full_ms_high@{chosen}"],
                           GUIDE_C7_STEP_MS[0] / values[f"full_ms_low@{chosen}"], lambda x: f"{x:.1f}x")
    return GuidePrediction("C7", text, inputs, values, headline=f"{speed_up}, {nics_text(chosen)}/node")


PREDICTIONS = {"C7": predictor("C7", predict_c7)}
"""The SPEC's ``predictions``: C7 at the guide's scale, with the measured inputs of the evidence it is given."""
