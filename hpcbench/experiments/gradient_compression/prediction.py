"""C8 at the guide's scale: the scale model's 2-bit compression against DDP's fp32 ring.

The ledger's "predicted at the guide's scale" for this claim; the inputs it shares: :mod:`hpcbench.scale.guide_scale`.
"""

from __future__ import annotations

from typing import Sequence

from hpcbench.parallel.compression import GUIDE_BUCKET_BYTES
from hpcbench.scale.guide_scale import (GPT2_124M, GPT_10B, GUIDE_NODES, GUIDE_PLATFORM, GuidePrediction,
                                        MeasuredInputs, Workload, base_inputs, model_step, nic_counts, nics_text,
                                        per_nics, percent, platform_at, predictor, readable_count, two_bit_range,
                                        value_range)
from hpcbench.scale.platforms import Platform


def predict_c8(platform: str | Platform = GUIDE_PLATFORM, *, nodes: int = GUIDE_NODES,
               nics_per_node: int | None = None, measured: MeasuredInputs | None = None,
               workloads: Sequence[Workload] | None = None) -> GuidePrediction:
    """C8: 2-bit quant2bit (4 MiB buckets, layer norms plain) over DDP's fp32 ring: communication and step.

    Args:
        workloads: default GPT-2 124M (published compute) and :data:`GPT_10B` (FLOPs at the sustained rate).
        platform, nodes, nics_per_node, measured: as every prediction at the guide's scale
            (:func:`~hpcbench.scale.guide_scale.nic_counts`, :class:`~hpcbench.scale.guide_scale.MeasuredInputs`).

    Returns:
        :class:`GuidePrediction`; ``values`` ``<model>.comm_ratio_low@<nics>`` / ``..._high@<nics>``
        (2-bit / fp32 communication time, layer norms overlapped / charged per bucket) and
        ``<model>.gain_low@<nics>`` / ``..._high@<nics>`` (step-time gain, worst / best).
    """
    measured = measured or MeasuredInputs()
    chosen, counts = nic_counts(platform, nics_per_node)
    inputs = base_inputs(platform, nodes, chosen, counts, measured)
    inputs["2-bit"] = ("quant2bit (2-bit all-to-all + all-gather), 4 MiB buckets; layer norms plain: overlapped "
                       "(low) .. one plain ring all-reduce per bucket in sequence (high)")
    values: dict[str, float] = {}
    ratios, gains = [], []
    for work in workloads or (GPT2_124M, GPT_10B):
        compute_s, basis = work.compute(platform)
        inputs[work.label] = (f"{readable_count(work.params)} params ({work.plain_fraction * 100:.3f} % in layer "
                              f"norms), {basis} = {compute_s * 1e3:.1f} ms compute")
        for nics in counts:
            plat = platform_at(platform, nics, measured)
            fp32 = model_step(work.params, plat, nodes, "ddp", compute_s, measured)
            low, high = two_bit_range(work.params, work.plain_fraction, plat, nodes, compute_s, measured,
                                      bucket_bytes=GUIDE_BUCKET_BYTES)
            values[f"{work.name}.comm_ratio_low@{nics}"] = low.comm_s["total"] / fp32.comm_s["total"]
            values[f"{work.name}.comm_ratio_high@{nics}"] = high.comm_s["total"] / fp32.comm_s["total"]
            values[f"{work.name}.gain_low@{nics}"] = fp32.step_s / high.step_s - 1.0
            values[f"{work.name}.gain_high@{nics}"] = fp32.step_s / low.step_s - 1.0
            values[f"{work.name}.fp32_comm_share@{nics}"] = fp32.comm_share
        ratios.append(f"{work.label} " + per_nics(counts, lambda n, w=work.name: value_range(
            values[f"{w}.comm_ratio_low@{n}"], values[f"{w}.comm_ratio_high@{n}"], lambda x: f"{x:.2f}x")))
        gains.append(f"{work.label} " + per_nics(counts, lambda n, w=work.name: value_range(
            values[f"{w}.gain_low@{n}"], values[f"{w}.gain_high@{n}"], percent)))
    text = (f"2-bit over fp32 ring communication time: {'; '.join(ratios)}; step gain: {'; '.join(gains)}. "
            f"The bytes shrink ~16x, but each 4 MiB bucket pays its own latency (a ring all-gather over every "
            f"rank), which dominates where the links are fast")
    first = (workloads or (GPT2_124M,))[0]
    gain = value_range(values[f"{first.name}.gain_low@{chosen}"], values[f"{first.name}.gain_high@{chosen}"], percent)
    return GuidePrediction("C8", text, inputs, values, headline=f"{gain} {first.label}, {nics_text(chosen)}/node")


PREDICTIONS = {"C8": predictor("C8", predict_c8)}
"""The SPEC's ``predictions``: C8 at the guide's scale, with the measured inputs of the evidence it is given."""
