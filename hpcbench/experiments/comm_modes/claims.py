"""C3 and C17 declared: the guide's words and figures, the comparisons and bands, the regime, the platform's reach.

Everything the ledger, ``hpcbench list``, the catalogue and the notebook know about C3 and C17 is here:

* **words and figures**: :data:`C3` and :data:`C17` (the guide's sentences, their figures quoted, their
  kinds, their arithmetic); :data:`GUIDE_C3_RESNET` and :data:`GUIDE_C3_GPT2`, the throughputs C3 states
  (:data:`C3_FIGURES` per model family);
* **the guide's consistency** (:func:`~hpcbench.experiments.comm_modes.prediction.guide_consistency`): in the guide's ResNet-50 regime the scale model
  gives the hierarchical reduction over NCCL's ring less than the band at one and at eight HDR NICs per
  node (:func:`~hpcbench.experiments.comm_modes.prediction.nic_gains_at_guide_regime`); the GPT-2 figure implies a step no cluster runs in
  (:data:`GPT2_SHARE`, :data:`GPT2_OUT_OF_REACH`);
* **the regime**: :data:`GUIDE_REGIME`, C3's, from the guide's own ResNet-50 DDP rate
  (:func:`guide_share_of_compute_rate`), calibrated on :data:`CALIBRATED_FAMILY`'s runs;
* **the comparisons and their bands**: C3, the two-level mode over plain DDP at DDP's default bucket,
  at least 80 % of the guide's gain; C17, a bucket of one IB MTU (:data:`IB_MTU_BUCKET_MB`) over DDP's
  default, at least :data:`C17_SHARE`;
* **where they apply** (:data:`APPLICABILITY`): C3 where an inter-node link is slower than the intra-node one
  (:data:`~hpcbench.judge.applicability.SLOW_LINK`), C17 only with NCCL over InfiniBand;
* **what the platform can show**: :func:`topology_reach` (Amdahl over the bytes a two-level reduction
  spares on one link per node, :func:`two_level_bytes_share`);
* **prediction at the guide's scale**: :func:`hpcbench.experiments.comm_modes.prediction.predict_c3`;
  **the rules**: :func:`hpcbench.experiments.comm_modes.rules.rule_c3` and
  :func:`hpcbench.experiments.comm_modes.rules.rule_c17`.
"""

from __future__ import annotations

from hpcbench.core.facts import DDP_DEFAULT_BUCKET_BYTES, IB_MTU_BYTES
from hpcbench.core.units import format_bytes
from hpcbench.guide.claims import FIGURE, S21, TECHNIQUE, Claim, gain_percent
from hpcbench.judge.applicability import INFINIBAND, NCCL, SLOW_LINK, requires
from hpcbench.judge.feasibility import Reach, partial_cap
from hpcbench.judge.verdict import GAIN_SHARE
from hpcbench.scale.regime import GuideRegime

#: C3, ResNet-50: DDP, Hybrid images/s, the stated gain in %.
GUIDE_C3_RESNET = (12_500, 18_700, 49.6)
#: C3, GPT-2: DDP, Hybrid tokens/s, the stated gain in %.
GUIDE_C3_GPT2 = (8_200, 11_500, 40.2)
#: The guide's figures per model family: (DDP, hybrid, stated gain %).
C3_FIGURES = {"resnet": GUIDE_C3_RESNET, "gpt2": GUIDE_C3_GPT2}
#: The model family whose regime a launch calibrates (the guide's GPT-2 regime is out of any cluster's reach).
CALIBRATED_FAMILY = "resnet"

#: One InfiniBand MTU (4 KiB) in DDP's bucket_cap_mb unit (MiB): the C17 sweep point.
IB_MTU_BUCKET_MB = IB_MTU_BYTES / (1 << 20)
#: C17: the MTU bucket must reach this share of DDP's default bucket's throughput ("match it").
C17_SHARE = 0.95


def guide_share_of_compute_rate(figures: tuple, workload) -> float:
    """The guide's DDP throughput over what its 32 A100s compute at the published rate (no communication).

    Args:
        figures: the guide's (DDP, hybrid, gain %) of the model.
        workload: :class:`hpcbench.scale.guide_scale.Workload` (per-GPU step and its compute time on A100).
    """
    from hpcbench.scale.guide_scale import GUIDE_JOB_TASKS, GUIDE_PLATFORM

    compute_s, _ = workload.compute(GUIDE_PLATFORM)
    return figures[0] / (GUIDE_JOB_TASKS * workload.per_step / compute_s)


def _regimes() -> tuple[GuideRegime, float]:
    from hpcbench.scale.guide_scale import GPT2_124M, RESNET50

    resnet = guide_share_of_compute_rate(GUIDE_C3_RESNET, RESNET50)
    gpt2 = guide_share_of_compute_rate(GUIDE_C3_GPT2, GPT2_124M)
    return GuideRegime(
        claim="C3", target_busy=resnet, baseline="ddp",
        arithmetic=f"the guide's ResNet-50 DDP: {GUIDE_C3_RESNET[0]:,} images/s on 32 A100s, against 32 x 256 "
                   f"images per step at NVIDIA's published A100 rate with no communication: {resnet:.1%} of the "
                   f"compute-bound rate, i.e. DDP's step {resnet:.0%} busy"), gpt2


GUIDE_REGIME, GPT2_SHARE = _regimes()
"""The guide's regime for C3, from the DDP arm's absolute throughput against the A100's published rate.

It is read from the baseline's 12,500 images/s, not from the +49.6 % being judged: at 16 % busy any
gain from none up to 6.25x (all communication gone) stays possible, so the regime decides nothing by
itself (unlike a regime solved from the gain, which would make any working technique reproduce it).

ResNet-50: the guide's DDP ran 12,500 images/s on 32 A100s. At NVIDIA's published A100 rate
(DeepLearningExamples, batch 256 per GPU, AMP) the 32 GPUs compute 32 x 256 images per ~0.1 s
step with nothing else to do; 12,500 is 15.8 % of that, so DDP's step was ~16 % busy, 84 %
waiting on something other than this model's compute. GPT-2 124M: 8,200 tokens/s against 32 x
65,536 tokens per ~0.3 s step: 0.12 % of the compute-bound rate. No cluster runs a GPT-2 step
99.9 % idle, so the GPT-2 figure is "inconclusive: the guide's figures imply a regime ..." and
never judged; the ResNet-50 figure is judged where the ``ddp`` step reached ~16 % busy.

**NICs per node** (the intra/inter-node bandwidth ratio, which the guide never gives). In the
guide's regime DDP's step is 6.25 c (c = compute), 5.25 c of it communication. The guide's +49.6 %
needs the hierarchical step at 6.25 c / 1.496 = 4.18 c: its communication cut to 3.18 / 5.25 = 0.61
of DDP's. The scale model (:func:`.prediction.predict_c3`: NCCL's ring against the
hook's three stages on 4 nodes of 8 A100s) puts the hierarchical communication at 0.82 of DDP's
with 1 NIC per node (1:96 intra/inter per GPU) and 0.96 with 8 NICs (1:12): in the guide's regime,
gains of 1.18x and 1.04x (:func:`~hpcbench.experiments.comm_modes.prediction.nic_gains_at_guide_regime`). So the guide's figure needs the 1-NIC
end or beyond — an inter-node link even scarcer next to NVLink than one HDR NIC per node — and
even the 1-NIC end falls short of it. The emulated cluster (one link per node, loopback inside)
sits beyond the 1-NIC end: on 2 nodes x 2 ranks the hook sends S across against the ring's 1.5 S,
at most 0.67 of the bytes, a gain of at most 6.25 / (1 + 5.25 x 0.67) = 1.39x in the guide's
regime, just under the band's 1.40x. A verdict here speaks for a platform with fewer NICs than the
guide's most likely had (a DGX A100 has 8).
"""

#: Why the GPT-2 comparison is never judged (from the guide's figures alone, whatever was measured).
GPT2_OUT_OF_REACH = (f"inconclusive: the guide's figures imply a regime where GPT-2 DDP runs at {GPT2_SHARE:.2%} of "
                     f"its compute-bound rate (8,200 tokens/s on 32 A100s), a step {1 - GPT2_SHARE:.2%} idle that no "
                     f"cluster runs in; not judged")


def two_level_bytes_share(nodes: int, ranks_per_node: int) -> float:
    """Bytes a two-level reduction sends over a node's one link, as a share of a flat ring's.

    A ring all-reduce over ``N = nodes x ranks_per_node`` ranks ordered by node sends ``2 (N - 1) / N`` of
    the gradient ``S`` over every ring edge, the node boundary's included; reducing inside the node first
    leaves ``2 (n - 1) / n S`` to cross (an all-reduce among the ``n`` nodes). 2 x 2: 1 S against 1.5 S, 2/3.
    """
    n, total = int(nodes), int(nodes) * int(ranks_per_node)
    if n < 2 or total < 2:
        return 1.0
    return (2 * (n - 1) / n) / (2 * (total - 1) / total)


def topology_reach(params: dict, busy: float | None) -> Reach | None:
    """What a launch's topology lets the two-level mode show over DDP in the regime it reached.

    One link per node (the emulated cluster; a real cluster with one NIC per node): the two-level mode can
    at best cut the waiting share of DDP's step to :func:`two_level_bytes_share` of itself (Amdahl).
    """
    if busy is None:
        return None
    nodes, rpn = int(params.get("nodes", 1)), int(params.get("ranks_per_node", 1))
    kept = two_level_bytes_share(nodes, rpn)
    cap = partial_cap(busy, kept)
    band = 1 + GAIN_SHARE * (GUIDE_C3_RESNET[1] / GUIDE_C3_RESNET[0] - 1)
    # The fewest bytes a one-link node can keep (kept -> 1 / 2 as ranks per node grow at 2 nodes) sets what
    # a larger topology would need; say which ranks per node would reach the band, if any does.
    needs = next((f"{nodes} nodes x {r} ranks per node" for r in (4, 8, 16, 32)
                  if partial_cap(busy, two_level_bytes_share(nodes, r)) >= band), "more nodes' worth of links")
    return Reach(cap, f"{nodes} x {rpn} ranks on one link per node: the two-level mode sends {kept:.2f} of DDP's "
                      f"bytes across, at ddp {busy:.0%} busy", needs=needs)


def _check_gain(base: float, new: float, stated: float) -> str:
    """The gain computed from the guide's own numbers, compared with what it states."""
    gain = gain_percent(base, new)
    verdict = ("matches the guide" if round(gain, 1) == stated
               else f"the guide states +{stated:.1f} %, which its own numbers do not give")
    return f"{new:,.0f}/{base:,.0f} = {new / base:.3f} -> +{gain:.1f} % ({verdict})"


def _c3_predicted() -> str:
    return f"ResNet-50 {_check_gain(*GUIDE_C3_RESNET)}; GPT-2 {_check_gain(*GUIDE_C3_GPT2)}"


def _c17_predicted() -> str:
    return (f"the IB MTU is {format_bytes(IB_MTU_BYTES)} while DDP's default bucket is "
            f"{format_bytes(DDP_DEFAULT_BUCKET_BYTES)} = {DDP_DEFAULT_BUCKET_BYTES // IB_MTU_BYTES:,} MTU "
            f"packets; the transport already splits buckets into MTU packets, and MTU-sized buckets would "
            f"pay one collective's latency per 4 KiB, so the optimum is expected at MiB-sized buckets, "
            f"not at the MTU")


C3 = Claim("C3", FIGURE, S21,
           "Hybrid parallelism (data parallel inside the node, DDP across nodes) beats plain DDP "
           "across nodes by 49.6 % on ResNet-50 and 40.2 % on GPT-2.",
           (("DDP ResNet-50", "12,500 images/s"), ("Hybrid ResNet-50", "18,700 images/s (+49.6 %)"),
            ("DDP GPT-2", "8,200 tokens/s"), ("Hybrid GPT-2", "11,500 tokens/s (+40.2 %)")),
           _c3_predicted(),
           title="Hybrid parallelism beats plain DDP", headline="+49.6 % / +40.2 %")
C17 = Claim("C17", TECHNIQUE, S21,
            "Build process groups from the GPU topology, use RDMA for AllReduce, and match the "
            "gradient bucket size to the IB MTU.",
            (("gradient bucket size", "matched to the IB MTU"), ("AllReduce transport", "RDMA (IB verbs)"),
             ("process groups", "from the GPU topology")),
            _c17_predicted(),
            title="Topology groups, RDMA, MTU buckets", headline="bucket size = IB MTU")
#: The claims this experiment declares (its SPEC's ``ClaimSet.declared``).
CLAIMS = (C3, C17)
#: C3: a two-level reduction spares bytes on the inter-node link, so it shows only where that link is slower.
C3_APPLIES = SLOW_LINK
#: C17's advice is about the InfiniBand MTU: it applies only where NCCL carries the reduction over IB verbs.
C17_APPLIES = requires(INFINIBAND.because(", so there is no IB MTU to match"),
                       NCCL.because(", not NCCL over IB verbs"))
#: What each claim needs of the platform (its SPEC's ``ClaimSet.applicability``; ``hpcbench doctor`` reads it).
APPLICABILITY = {"C3": C3_APPLIES, "C17": C17_APPLIES}
