"""C9 at the guide's scale: the scale model's gain of no_sync accumulation over a sync every micro-step.

The ledger's "predicted at the guide's scale" for this claim; the inputs it shares: :mod:`hpcbench.scale.guide_scale`.
"""

from __future__ import annotations

from hpcbench.core.errors import ConfigError
from hpcbench.parallel.overlap import GUIDE_MICRO_STEPS
from hpcbench.scale.guide_scale import (GUIDE_NODES, GUIDE_PLATFORM, GuidePrediction, MeasuredInputs, base_inputs,
                                        guide_weather_split, model_step, nic_counts, nics_text, per_nics, percent,
                                        platform_at, predictor, readable_count, weather_params)
from hpcbench.scale.platforms import Platform


def predict_c9(platform: str | Platform = GUIDE_PLATFORM, *, nodes: int = GUIDE_NODES,
               nics_per_node: int | None = None, measured: MeasuredInputs | None = None,
               params: float | None = None, micro_steps: int = GUIDE_MICRO_STEPS,
               compute_s: float | None = None) -> GuidePrediction:
    """C9: ``micro_steps`` micro-steps under no_sync (one all-reduce) over synchronising every micro-step.

    Args:
        params: gradient elements (default: the weather model's, :func:`~hpcbench.scale.guide_scale.weather_params`).
        micro_steps: micro-steps per optimizer step (the guide: 4).
        compute_s: compute of one micro-step (default: the guide's weather-case busy time, 256 ms).
        platform, nodes, nics_per_node, measured: as every prediction at the guide's scale
            (:func:`~hpcbench.scale.guide_scale.nic_counts`, :class:`~hpcbench.scale.guide_scale.MeasuredInputs`).

    Returns:
        :class:`GuidePrediction`; ``values`` ``gain@<nics>`` (time per sample, every-sync over no_sync),
        ``gain`` at ``nics_per_node`` and ``guide_split_gain`` (with the guide's 164 ms as the sync).
    """
    if micro_steps < 1:
        raise ConfigError(f"{micro_steps} is out of range; allowed: >= 1", field="micro_steps", config="predict_c9")
    measured = measured or MeasuredInputs()
    params = float(weather_params() if params is None else params)
    busy, exposed = guide_weather_split()
    source = "the guide's weather step: 420 ms x 61 % busy" if compute_s is None else "given"
    compute_s = busy if compute_s is None else float(compute_s)
    chosen, counts = nic_counts(platform, nics_per_node)
    inputs = base_inputs(platform, nodes, chosen, counts, measured)
    inputs["gradients"] = f"{readable_count(params)} fp32 (the weather case's; the guide gives none), DDP buckets"
    inputs["compute"] = f"{compute_s * 1e3:.0f} ms per micro-step ({source})"
    values: dict[str, float] = {}
    for nics in counts:
        plat = platform_at(platform, nics, measured)
        every = model_step(params, plat, nodes, "ddp", compute_s, measured, micro_steps=micro_steps)
        once = model_step(params, plat, nodes, f"no_sync {micro_steps}", compute_s, measured)
        values[f"gain@{nics}"] = every.step_s / once.step_s - 1.0
        values[f"sync_ms@{nics}"] = once.comm_s["total"] * 1e3
    values["gain"] = values[f"gain@{chosen}"]
    exposed_left = exposed * (1.0 - measured.overlap)
    values["guide_split_gain"] = (busy + exposed_left) / (busy + exposed_left / micro_steps) - 1.0
    text = (f"no_sync over {micro_steps} micro-steps vs a sync every micro-step: "
            f"{per_nics(counts, lambda n: percent(values[f'gain@{n}']))} (one fp32 ring all-reduce "
            f"{per_nics(counts, lambda n: '%.0f ms' % values[f'sync_ms@{n}'])}); with the guide's own "
            f"{exposed * 1e3:.0f} ms of communication per micro-step: {percent(values['guide_split_gain'])}")
    return GuidePrediction("C9", text, inputs, values, headline=f"{percent(values['gain'])}, {nics_text(chosen)}/node")


PREDICTIONS = {"C9": predictor("C9", predict_c9)}
"""The SPEC's ``predictions``: C9 at the guide's scale, with the measured inputs of the evidence it is given."""
