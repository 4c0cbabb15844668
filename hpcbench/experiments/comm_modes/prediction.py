"""C3 at the guide's scale: the scale model's throughput gain of the hierarchical all-reduce over DDP.

The ledger's "predicted at the guide's scale" for this claim; the inputs it shares: :mod:`hpcbench.scale.guide_scale`.
"""

from __future__ import annotations

from hpcbench.experiments.comm_modes.claims import GPT2_SHARE, GUIDE_C3_GPT2, GUIDE_C3_RESNET, GUIDE_REGIME
from hpcbench.judge.feasibility import Consistency
from hpcbench.judge.verdict import GAIN_SHARE
from hpcbench.scale.guide_scale import (GPT2_124M, GUIDE_JOB_TASKS, GUIDE_NODES, GUIDE_PLATFORM, NIC_COUNTS, RESNET50,
                                        GuidePrediction, MeasuredInputs, base_inputs, model_step, nic_counts,
                                        nics_text, per_nics, percent, platform_at, predictor, readable_count)
from hpcbench.scale.platforms import Platform


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
    chosen, counts = nic_counts(platform, nics_per_node)
    inputs = base_inputs(platform, nodes, chosen, counts, measured)
    values: dict[str, float] = {}
    guide = {"resnet50": GUIDE_C3_RESNET, "gpt2_124M": GUIDE_C3_GPT2}
    parts, shares, needs, guide_gains = [], [], [], []
    for work in (RESNET50, GPT2_124M):
        compute_s, basis = work.compute(platform)
        inputs[work.label] = f"{readable_count(work.params)} params, {basis} = {compute_s * 1e3:.1f} ms compute"
        values[f"{work.name}.compute_s"] = compute_s
        for nics in counts:
            plat = platform_at(platform, nics, measured)
            ddp = model_step(work.params, plat, nodes, "ddp", compute_s, measured)
            hier = model_step(work.params, plat, nodes, "hierarchical", compute_s, measured)
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
        parts.append(f"{work.label} " + per_nics(counts, lambda n, w=work: percent(values[f"{w.name}.gain@{n}"])))
        shares.append(f"{work.label} " + per_nics(
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
                           headline=f"{percent(values['resnet50.gain'])} ResNet-50, {nics_text(chosen)}/node")


def nic_gains_at_guide_regime(busy: float | None = None) -> dict[int, float]:
    """Hierarchical over DDP for ResNet-50 in the guide's regime, per NICs per node (1 and 8), from the scale model.

    The scale model's communication of each (step - compute at the guide's platform) sets their ratio
    ``r``; in a regime where DDP is ``busy`` busy, DDP's step is ``1 / busy`` computes and the gain
    ``(1 / busy) / (1 + (1 / busy - 1) r)``.
    """
    busy = GUIDE_REGIME.target_busy if busy is None else busy
    values = predict_c3().values
    compute = values["resnet50.compute_s"]
    gains = {}
    for nics in NIC_COUNTS:
        ratio = (values[f"resnet50.hierarchical_step_s@{nics}"] - compute) / (values[f"resnet50.ddp_step_s@{nics}"]
                                                                          - compute)
        gains[nics] = (1 / busy) / (1 + (1 / busy - 1) * ratio)
    return gains




def guide_consistency() -> Consistency:
    """Whether the guide's +49.6 % fits its stated platform (4 nodes of 8 A100s, "200 Gbps HDR") by the scale model.

    Read literally, the platform line gives one HDR port per node; a DGX A100 has 8 (the stated
    alternative). In the guide's ResNet-50 regime the scale model gives the hierarchical reduction over
    NCCL's ring (:func:`nic_gains_at_guide_regime`) less than the band at either count. The GPT-2 figure
    implies a step 99.9 % idle.
    """
    gains = nic_gains_at_guide_regime()
    band = 1 + GAIN_SHARE * (GUIDE_C3_RESNET[1] / GUIDE_C3_RESNET[0] - 1)
    literal = gains[min(gains)]
    shown = " and ".join(f"{g:.2f}x at {n} NIC{'s' if n > 1 else ''} per node" for n, g in sorted(gains.items()))
    return Consistency(
        holds=max(gains.values()) >= band,
        reason=f"model gives {literal:.2f}x at one HDR/node",
        arithmetic=f"in the guide's ResNet-50 regime (ddp {GUIDE_REGIME.target_busy:.0%} busy) the scale model gives "
                   f"hierarchical over DDP {shown} (one HDR per node is the platform line read literally; 8 is a "
                   f"DGX A100), against the band's {band:.2f}x; the GPT-2 figure implies DDP at {GPT2_SHARE:.2%} of "
                   f"its compute-bound rate, a step no cluster runs in")


#: The guide's platform line, "connected by 200 Gbps HDR", read literally: one HDR port per node; the
#: prediction also shows a DGX A100's 8 NICs per node, the stated alternative.
GUIDE_LITERAL_NICS = 1

PREDICTIONS = {"C3": predictor("C3", predict_c3, nics_per_node=GUIDE_LITERAL_NICS)}
"""The SPEC's ``predictions``: C3 at the guide's scale, with the measured inputs of the evidence it is given."""
