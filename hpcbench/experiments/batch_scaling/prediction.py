"""C2 at the guide's scale: the scale model's per-GPU gain of a 4x batch by gradient accumulation.

The ledger's "predicted at the guide's scale" for this claim; the inputs it shares: :mod:`hpcbench.scale.guide_scale`.
"""

from __future__ import annotations

from hpcbench.core.errors import ConfigError
from hpcbench.experiments.batch_scaling.claims import GUIDE_C2_BATCH_FACTOR, GUIDE_C2_GAIN, guide_sync_share
from hpcbench.judge.feasibility import Consistency
from hpcbench.scale.guide_scale import (GPT2_124M, GUIDE_NODES, GUIDE_PLATFORM, RESNET50, GuidePrediction,
                                        MeasuredInputs, base_inputs, model_step, nic_counts, nics_text, per_nics,
                                        percent, platform_at, predictor, readable_count)
from hpcbench.scale.platforms import Platform


def predict_c2(platform: str | Platform = GUIDE_PLATFORM, *, nodes: int = GUIDE_NODES,
               nics_per_node: int | None = None, measured: MeasuredInputs | None = None,
               factor: int = GUIDE_C2_BATCH_FACTOR) -> GuidePrediction:
    """C2: per-GPU throughput of a ``factor``-x batch by accumulation (``no_sync`` k) over one micro-step.

    Args:
        factor: micro-steps accumulated under ``no_sync()`` before one all-reduce (the guide: > 4x).
        platform, nodes, nics_per_node, measured: as every prediction at the guide's scale
            (:func:`~hpcbench.scale.guide_scale.nic_counts`, :class:`~hpcbench.scale.guide_scale.MeasuredInputs`).

    Returns:
        :class:`GuidePrediction`; ``values`` ``<model>.gain@<nics>`` (per-GPU throughput gain) and
        ``<model>.gain`` at ``nics_per_node``.
    """
    if factor < 1:
        raise ConfigError(f"{factor} is out of range; allowed: >= 1", field="factor", config="predict_c2")
    measured = measured or MeasuredInputs()
    chosen, counts = nic_counts(platform, nics_per_node)
    inputs = base_inputs(platform, nodes, chosen, counts, measured)
    inputs["accumulation"] = f"{factor} micro-steps under no_sync, one fp32 ring all-reduce (DDP buckets)"
    values: dict[str, float] = {}
    parts, shares = [], []
    for work in (RESNET50, GPT2_124M):
        compute_s, basis = work.compute(platform)
        inputs[work.label] = f"{readable_count(work.params)} params, {basis} = {compute_s * 1e3:.1f} ms compute"
        for nics in counts:
            plat = platform_at(platform, nics, measured)
            one = model_step(work.params, plat, nodes, "ddp", compute_s, measured)
            acc = model_step(work.params, plat, nodes, f"no_sync {factor}", compute_s, measured)
            values[f"{work.name}.gain@{nics}"] = factor * one.step_s / acc.step_s - 1.0
            values[f"{work.name}.comm_share@{nics}"] = one.comm_share
        values[f"{work.name}.gain"] = values[f"{work.name}.gain@{chosen}"]
        parts.append(f"{work.label} " + per_nics(counts, lambda n, w=work: percent(values[f"{w.name}.gain@{n}"])))
        shares.append(f"{work.label} " + per_nics(
            counts, lambda n, w=work: "%.1f %%" % (values[f"{w.name}.comm_share@{n}"] * 100)))
    text = (f"per-GPU throughput of a {factor}x batch by accumulation over one micro-step: {'; '.join(parts)}, "
            f"against the guide's +{GUIDE_C2_GAIN * 100:.0f} %. Accumulation only amortises the all-reduce, "
            f"which is {'; '.join(shares)} of a one-micro-step DDP step here")
    return GuidePrediction("C2", text, inputs, values,
                           headline=f"{percent(values['resnet50.gain'])} ResNet-50, {nics_text(chosen)}/node")


def guide_consistency(gain: float = 1 + GUIDE_C2_GAIN, k: int = GUIDE_C2_BATCH_FACTOR) -> Consistency:
    """Whether the guide's +220 % (``gain`` from ``k``-fold accumulation) fits its stated platform, by the scale
    model: some guide workload must spend the share :func:`guide_sync_share` needs synchronising. No
    measurement is read."""
    needed = guide_sync_share(gain, k)
    values = predict_c2().values
    shares = {k.split(".comm_share@")[0] + f"@{k.rsplit('@', 1)[1]}": v for k, v in values.items() if ".comm_share@" in k}
    gains = {k: v for k, v in values.items() if ".gain@" in k}
    most = max(shares.values())
    shown = ", ".join(f"{name.replace('@', ' at ')} NIC(s) {v:.1%}" for name, v in sorted(shares.items()))
    return Consistency(
        holds=most >= needed,
        reason=f"needs {needed:.0%} synchronisation; the model gives {most:.0%}",
        arithmetic=f"{k} (c + m) / ({k} c + m) = {gain:.2f} needs "
                   f"the 1x step {needed:.0%} synchronisation; the scale model puts the guide's workloads on its "
                   f"platform at {shown} of a one-micro-step DDP step, where {GUIDE_C2_BATCH_FACTOR}x accumulation "
                   f"gains {min(gains.values()):+.1%} to {max(gains.values()):+.1%}")



PREDICTIONS = {"C2": predictor("C2", predict_c2)}
"""The SPEC's ``predictions``: C2 at the guide's scale, with the measured inputs of the evidence it is given."""
