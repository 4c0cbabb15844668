"""Step time, communication share and busy share ("GPU utilisation") of data-parallel training.

``step = micro_steps x (compute + hook CPU work) + exposed communication``, with communication
the sum over gradient buckets of each bucket's stages (:mod:`hpcbench.scale.algorithms`) priced
per link level (:mod:`hpcbench.scale.platforms`). ``busy_share = micro_steps x compute / step``
is the guide's "GPU utilisation"; ``comm_share = exposed / step`` is C12's communication share.

**Overlap** (what of the communication the backward pass hides), one of two measured inputs:

* ``overlap_windows_s``, per bucket the backward compute still to run when the bucket is ready
  (measured with no communication at all: the no-op hook's call times in the no-op twin's
  steps). DDP reduces bucket after bucket while backward goes on; with ``d_i`` the predicted
  seconds of bucket ``i`` and the end of gradient compute at 0, bucket ``i`` is ready at
  ``-w_i`` and done at ``f_i = max(f_(i-1), -w_i) + d_i``; ``exposed = max(0, f_last)``
  (:func:`exposed_after_compute`). The last bucket is ready when compute ends (``w = 0``), so its
  own communication is always exposed; where communication is much longer than backward,
  ``exposed ~ comm - w_0`` (only the backward after the first bucket hides anything);
* or ``overlap_share``, a hidden share measured elsewhere (the overlap experiment) applied to
  the whole communication: ``exposed = comm x (1 - overlap_share)``.

**Hook CPU work** (``hook_cpu_s``): local work a comm hook does per synchronisation besides its
collectives (the 2-bit hook's chunking, quantising, packing and unpacking; a Python hook's
padding, copies and hand-offs to its background thread), as it shows up in a step: charged in
full on the critical path, because on a GPU the hook runs it inline in backward and on CPU ranks
it competes with backward for the same cores.

Assumptions, every one visible in :attr:`Prediction.inputs`: buckets are filled to the cap
(DDP's first bucket at 1 MiB) regardless of parameter boundaries; stages of a bucket run one
after another and buckets do not overlap each other; compute from FLOPs is ``6 x params x
tokens`` per GPU (Kaplan et al., "Scaling laws for neural language models", 2020, sec. 2.1) at
the platform's sustained rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from hpcbench.core.errors import ConfigError
from hpcbench.core.facts import DDP_DEFAULT_BUCKET_BYTES, DDP_FIRST_BUCKET_BYTES
from hpcbench.core.registry import Registry
from hpcbench.parallel.overlap import syncs_per_step
from hpcbench.scale import algorithms as alg
from hpcbench.scale.platforms import Platform, get_platform

LEVELS = ("intra", "inter", "world")
C1_THRESHOLD = 0.40
"""The guide's C1: "a 10B-parameter model ran at < 40 % GPU utilisation"."""
C1_PARAMS = 10e9
"""The guide's C1 model: 10 billion parameters."""
C1_NODES = 4
"""Nodes of the guide's job script (guide sec. 2.3: ``--ntasks=32 --gres=gpu:8``, 8 GPUs per node)."""
TRAINING_FLOPS_PER_PARAM_TOKEN = 6
"""Forward + backward FLOPs per parameter per token (Kaplan et al. 2020, sec. 2.1)."""


@dataclass(frozen=True)
class BucketContext:
    """What a mode needs to lay out one bucket's stages."""

    nodes: int
    ranks_per_node: int
    grad_bytes_per_param: int
    plain_fraction: float = 0.0
    chunk_size: int = 1024
    intra_via_allreduce: bool = False


@dataclass(frozen=True)
class ModeModel:
    """How one communication mode reduces a bucket of ``n`` gradient elements."""

    name: str
    description: str
    stages: Callable[[int, BucketContext], list]
    no_sync: bool = False
    """accumulates under ``no_sync()``: one synchronisation per ``micro_steps`` (C9)"""
    default_bucket_bytes: int = DDP_DEFAULT_BUCKET_BYTES


def _ring(n: int, c: BucketContext) -> list:
    return alg.ring_allreduce(n * c.grad_bytes_per_param, nodes=c.nodes, ranks_per_node=c.ranks_per_node)


def _quant2bit(hierarchical: bool) -> Callable[[int, BucketContext], list]:
    def stages(n: int, c: BucketContext) -> list:
        plain = int(round(n * c.plain_fraction))
        return alg.quant2bit_allreduce(n - plain, nodes=c.nodes, ranks_per_node=c.ranks_per_node, plain_elems=plain,
                                       plain_elem_bytes=c.grad_bytes_per_param, chunk_size=c.chunk_size,
                                       hierarchical=hierarchical, intra_via_allreduce=c.intra_via_allreduce)
    return stages


MODE_MODELS: Registry[ModeModel] = Registry("scale-model mode")
MODE_MODELS.register("ddp", ModeModel("ddp", "DDP's ring all-reduce of each bucket", _ring))
MODE_MODELS.register("tree", ModeModel(
    "tree", "DDP with NCCL_ALGO=Tree (C10)",
    lambda n, c: alg.tree_allreduce(n * c.grad_bytes_per_param, nodes=c.nodes, ranks_per_node=c.ranks_per_node)))
MODE_MODELS.register("hierarchical", ModeModel(
    "hierarchical", "hooks.hierarchical_allreduce_hook: reduce-scatter, peer all-reduce, all-gather",
    lambda n, c: alg.hierarchical_allreduce(n, c.grad_bytes_per_param, nodes=c.nodes, ranks_per_node=c.ranks_per_node,
                                            intra_via_allreduce=c.intra_via_allreduce)))
MODE_MODELS.register("fp16", ModeModel(
    "fp16", "PyTorch fp16_compress_hook: ring all-reduce of 2-byte values",
    lambda n, c: alg.half_precision_allreduce(n, nodes=c.nodes, ranks_per_node=c.ranks_per_node)))
MODE_MODELS.register("bf16", ModeModel(
    "bf16", "PyTorch bf16_compress_hook: ring all-reduce of 2-byte values",
    lambda n, c: alg.half_precision_allreduce(n, nodes=c.nodes, ranks_per_node=c.ranks_per_node)))
MODE_MODELS.register("quant2bit", ModeModel(
    "quant2bit", "compression.quant2bit_hook: 2-bit all-to-all + all-gather, layer norms plain (C8)",
    _quant2bit(False), default_bucket_bytes=4 << 20))
MODE_MODELS.register("quant2bit_hierarchical", ModeModel(
    "quant2bit_hierarchical", "quant2bit composed with the hierarchical hook (only inter-node bytes 2-bit)",
    _quant2bit(True), default_bucket_bytes=4 << 20))
MODE_MODELS.register("no_sync", ModeModel(
    "no_sync", "DDP ring all-reduce once per micro_steps under no_sync() (C9)", _ring, no_sync=True))


def parse_mode(mode: str, micro_steps: int) -> tuple[ModeModel, int]:
    """``"no_sync 4"`` / ``"no_sync:4"`` -> (the no_sync model, 4); other names with ``micro_steps``."""
    name, _, k = mode.replace(":", " ").partition(" ")
    if k.strip():
        try:
            micro_steps = int(k)
        except ValueError:
            raise ConfigError(f"{mode!r}: {k.strip()!r} is not a number of micro-steps", field="mode") from None
    return MODE_MODELS.get(name), micro_steps


@dataclass(frozen=True)
class Prediction:
    """One predicted optimizer step."""

    step_s: float
    compute_s: float
    """compute of the whole step (all micro-steps)"""
    comm_s: Mapping[str, float]
    """seconds charged per level (``intra``, ``inter``, ``world`` for flat fits, ``latency`` for the per-call
    base) and ``total`` (levels of a stage pipelined, so ``total`` <= the sum of the levels)"""
    exposed_comm_s: float
    comm_share: float
    busy_share: float
    inputs: Mapping[str, Any] = field(default_factory=dict)
    hook_cpu_s: float = 0.0
    """the comm hook's own local work in the whole step, on the critical path (``step = compute + this + exposed``)"""
    timeline_comm_s: float | None = None
    """with overlap windows: the bucket timeline's communication (its buckets' durations summed over the
    step's synchronisations), of which ``exposed_comm_s`` is the part left after compute; each bucket pays
    its stages' per-call latency, so it can exceed ``comm_s["total"]``"""

    @property
    def hidden_share(self) -> float:
        """Share of the communication hidden behind compute (1 - exposed / total; 0 without communication).

        With overlap windows the total is the timeline's own (:attr:`timeline_comm_s`), so the share
        always lies in [0, 1]."""
        total = self.timeline_comm_s if self.timeline_comm_s is not None else self.comm_s.get("total", 0.0)
        return 1.0 - self.exposed_comm_s / total if total > 0 else 0.0


def exposed_after_compute(windows_s: Sequence[float], durations_s: Sequence[float]) -> float:
    """Seconds of bucket communication left after the gradient compute ends (the module docstring's timeline).

    Buckets are reduced one after another in order (DDP launches bucket ``i + 1`` after ``i``; the
    hierarchical and 2-bit hooks run on one ordered thread). Bucket ``i`` is ready ``windows_s[i]``
    seconds before the end of gradient compute and takes ``durations_s[i]``.

    Args:
        windows_s: per bucket, in reduction order, the backward compute left when it is ready (>= 0).
        durations_s: per bucket, its communication in seconds.

    Returns:
        ``max(0, f_last)`` with ``f_i = max(f_(i-1), -windows_s[i]) + durations_s[i]``.

    Raises:
        ConfigError: the sequences differ in length or a window is negative or not finite.
    """
    if len(windows_s) != len(durations_s):
        raise ConfigError(f"{len(windows_s)} overlap windows for {len(durations_s)} buckets",
                          field="overlap_windows_s", config="predict_step")
    done = -math.inf
    for w, d in zip(windows_s, durations_s):
        if not (math.isfinite(w) and w >= 0):
            raise ConfigError(f"{w!r} is out of range; allowed: finite seconds >= 0", field="overlap_windows_s",
                              config="predict_step")
        done = max(done, -float(w)) + float(d)
    return max(0.0, done) if math.isfinite(done) else 0.0


def stage_time(stage: alg.Stage, platform: Platform) -> dict[str, float]:
    """Seconds of one stage, per level and in total (levels' byte terms pipelined: max)."""
    out = {level: 0.0 for level in LEVELS}
    out["latency"] = platform.base_latency_s
    world = platform.world_link(stage.op) if stage.group == "world" else None
    if world is not None:
        out["world"] = world.alpha_s * stage.steps + world.beta_s_per_byte * stage.world_bytes
        out["total"] = out["world"] + out["latency"]
        return out
    intra, inter = platform.link("intra", stage.op), platform.link("inter", stage.op)
    lat_i, lat_e = intra.alpha_s * stage.intra_steps, inter.alpha_s * stage.inter_steps
    bw_i, bw_e = intra.beta_s_per_byte * stage.intra_bytes, inter.beta_s_per_byte * stage.inter_bytes
    out["intra"], out["inter"] = lat_i + bw_i, lat_e + bw_e
    out["total"] = lat_i + lat_e + max(bw_i, bw_e) + out["latency"]
    return out


def bucket_sizes(n_params: int, bucket_elems: int, first_elems: int) -> dict[int, int]:
    """``{elements per bucket: count}`` for ``n_params`` gradients: a first bucket, then full ones, then the rest."""
    if n_params <= 0:
        return {}
    first = min(first_elems, n_params) if first_elems > 0 else min(bucket_elems, n_params)
    rest = n_params - first
    full, tail = divmod(rest, bucket_elems)
    out: dict[int, int] = {first: 1}
    if full:
        out[bucket_elems] = out.get(bucket_elems, 0) + full
    if tail:
        out[tail] = out.get(tail, 0) + 1
    return out


def communication(model_params: int, mode: ModeModel, ctx: BucketContext, platform: Platform, *,
                  bucket_bytes: int, first_bucket_bytes: int,
                  layout: Mapping[int, int] | None = None) -> dict[str, float]:
    """Seconds of one gradient synchronisation, per level and in total.

    ``layout`` (``{elements per bucket: count}``) replaces the buckets the caps would make.
    """
    if layout is None:
        bucket_elems = max(1, bucket_bytes // ctx.grad_bytes_per_param)
        first_elems = max(1, first_bucket_bytes // ctx.grad_bytes_per_param) if first_bucket_bytes else 0
        layout = bucket_sizes(int(model_params), bucket_elems, first_elems)
    total = {level: 0.0 for level in (*LEVELS, "latency", "total")}
    for elems, count in layout.items():
        for stage in mode.stages(elems, ctx):
            for key, seconds in stage_time(stage, platform).items():
                total[key] += count * seconds
    return total


def predict_step(model_params: float, *, platform: str | Platform, nodes: int, mode: str = "ddp",
                 compute_s: float | None = None, flops: float | None = None, ranks_per_node: int | None = None,
                 overlap_share: float = 0.0, bucket_bytes: int | None = None,
                 first_bucket_bytes: int = DDP_FIRST_BUCKET_BYTES, grad_bytes_per_param: int = 4,
                 micro_steps: int = 1, plain_fraction: float = 0.0, chunk_size: int = 1024,
                 intra_via_allreduce: bool = False, nics_per_node: int | None = None,
                 mfu: float | None = None, bucket_elems: Sequence[int] | None = None,
                 overlap_windows_s: Sequence[float] | None = None, hook_cpu_s: float = 0.0) -> Prediction:
    """Predict one optimizer step of data-parallel training.

    Args:
        model_params: gradient elements reduced per synchronisation.
        platform: a registered name (``a100_hdr``, ``h100_ndr``, ``h200_ndr``) or a
            :class:`Platform` (e.g. :func:`~hpcbench.scale.platforms.emulated_cluster`).
        nodes: nodes in the job.
        mode: a name of :data:`MODE_MODELS`; ``"no_sync 4"`` sets ``micro_steps``.
        compute_s: measured compute (forward + backward) of one micro-step; or
        flops: FLOPs of one micro-step per GPU, run at the platform's peak x mfu.
        ranks_per_node: default the platform's GPUs per node.
        overlap_share: share of the communication hidden behind compute (measured by the
            overlap experiment); 0 = none hidden.
        bucket_bytes: gradient bucket cap (default: the mode's, DDP's 25 MiB or quant2bit's 4 MiB).
        first_bucket_bytes: DDP's first-bucket cap (1 MiB); 0 for none.
        grad_bytes_per_param: bytes per gradient element in the bucket (4 fp32, 2 bf16).
        micro_steps: micro-steps per optimizer step (gradient accumulation); without no_sync
            every micro-step synchronises (:func:`hpcbench.parallel.overlap.syncs_per_step`).
        plain_fraction: quant2bit: share of gradients sent uncompressed (layer norms).
        chunk_size: quant2bit elements per scale.
        intra_via_allreduce: the hierarchical hook's CPU path (intra stages as all-reduces).
        nics_per_node, mfu: override the platform's.
        bucket_elems: the buckets as measured (gradient elements per bucket, e.g. from
            :meth:`hpcbench.parallel.hooks.BucketLog.layout` / element size); replaces the layout
            ``bucket_bytes`` and ``first_bucket_bytes`` would make, and must sum to ``model_params``.
        overlap_windows_s: per bucket of ``bucket_elems`` (same order), the backward compute left
            when it is ready, measured without communication; the exposed communication then comes
            from the bucket timeline (:func:`exposed_after_compute`) instead of ``overlap_share``.
        hook_cpu_s: the comm hook's own local work per synchronisation (coding, packing), measured
            in a step; charged on the critical path.

    Returns:
        :class:`Prediction`.

    Raises:
        ConfigError: neither or both of ``compute_s`` / ``flops``, no peak for ``flops``, or a
            value out of range (each names its field).
    """
    plat = get_platform(platform)
    changes = {k: v for k, v in (("nics_per_node", nics_per_node), ("mfu", mfu)) if v is not None}
    if changes:
        plat = plat.with_(**changes)
    model, micro_steps = parse_mode(mode, micro_steps)
    per_node = plat.gpus_per_node if ranks_per_node is None else ranks_per_node
    if (compute_s is None) == (flops is None):
        raise ConfigError("give exactly one of compute_s (measured) and flops (with the platform's peak)",
                          field="compute_s", config="predict_step")
    if flops is not None:
        rate = plat.sustained_flops
        if rate is None:
            raise ConfigError(f"platform {plat.name!r} has no peak FLOP/s for {plat.device_name!r}; give compute_s",
                              field="flops", config="predict_step")
        compute_s = flops / rate
    if not compute_s > 0:
        raise ConfigError(f"{compute_s!r} is out of range; allowed: > 0", field="compute_s", config="predict_step")
    if not 0.0 <= overlap_share <= 1.0:
        raise ConfigError(f"{overlap_share} is out of range; allowed: 0..1", field="overlap_share",
                          config="predict_step")
    if not (math.isfinite(hook_cpu_s) and hook_cpu_s >= 0.0):
        raise ConfigError(f"{hook_cpu_s!r} is out of range; allowed: finite seconds >= 0", field="hook_cpu_s",
                          config="predict_step")
    if overlap_windows_s is not None and (bucket_elems is None or overlap_share != 0.0):
        raise ConfigError("overlap windows need the measured bucket_elems (one window per bucket) and replace "
                          "overlap_share (leave it 0)", field="overlap_windows_s", config="predict_step")
    if not 0.0 <= plain_fraction <= 1.0:
        raise ConfigError(f"{plain_fraction} is out of range; allowed: 0..1", field="plain_fraction",
                          config="predict_step")
    if model_params <= 0:
        raise ConfigError(f"{model_params} is out of range; allowed: > 0", field="model_params", config="predict_step")
    bucket = model.default_bucket_bytes if bucket_bytes is None else int(bucket_bytes)
    if bucket < 1:
        raise ConfigError(f"{bucket} is out of range; allowed: >= 1", field="bucket_bytes", config="predict_step")
    layout = None
    if bucket_elems is not None:
        sizes = [int(b) for b in bucket_elems]
        if not sizes or min(sizes) < 1 or sum(sizes) != int(model_params):
            raise ConfigError(f"{sizes} must be positive bucket sizes summing to model_params={int(model_params)}",
                              field="bucket_elems", config="predict_step")
        layout = {}
        for b in sizes:
            layout[b] = layout.get(b, 0) + 1
    ctx = BucketContext(nodes=nodes, ranks_per_node=per_node, grad_bytes_per_param=grad_bytes_per_param,
                        plain_fraction=plain_fraction, chunk_size=chunk_size,
                        intra_via_allreduce=intra_via_allreduce)
    one_sync = communication(int(model_params), model, ctx, plat, bucket_bytes=bucket,
                             first_bucket_bytes=first_bucket_bytes, layout=layout)
    syncs = syncs_per_step(micro_steps, model.no_sync)
    comm = {k: v * syncs for k, v in one_sync.items()}
    step_compute = micro_steps * compute_s
    timeline = None
    if overlap_windows_s is not None:
        durations = [sum(stage_time(stage, plat)["total"] for stage in model.stages(int(b), ctx)) for b in sizes]
        exposed = syncs * exposed_after_compute([float(w) for w in overlap_windows_s], durations)
        timeline = syncs * sum(durations)
    else:
        exposed = comm["total"] * (1.0 - overlap_share)
    step = step_compute + micro_steps * hook_cpu_s + exposed
    inputs = {"model_params": model_params, "platform": plat.name, "mode": model.name, "nodes": nodes,
              "ranks_per_node": per_node, "nics_per_node": plat.nics_per_node, "mfu": plat.mfu,
              "compute_s_per_micro_step": compute_s, "flops": flops, "overlap_share": overlap_share,
              "bucket_bytes": bucket, "first_bucket_bytes": first_bucket_bytes,
              "grad_bytes_per_param": grad_bytes_per_param, "micro_steps": micro_steps, "syncs_per_step": syncs,
              "plain_fraction": plain_fraction, "chunk_size": chunk_size,
              "intra_via_allreduce": intra_via_allreduce,
              "bucket_elems": None if layout is None else [int(b) for b in bucket_elems],
              "overlap_windows_s": None if overlap_windows_s is None else [float(w) for w in overlap_windows_s],
              "hook_cpu_s": hook_cpu_s}
    return Prediction(step_s=step, compute_s=step_compute, comm_s=comm, exposed_comm_s=exposed,
                      comm_share=exposed / step, busy_share=step_compute / step, inputs=inputs,
                      hook_cpu_s=micro_steps * hook_cpu_s, timeline_comm_s=timeline)


def training_flops(params: float, tokens: float) -> float:
    """``6 x params x tokens``: forward + backward FLOPs of a dense transformer (Kaplan et al. 2020)."""
    return TRAINING_FLOPS_PER_PARAM_TOKEN * params * tokens


def predict_c1(params: float = C1_PARAMS, platform: str | Platform = "a100_hdr", *,
               tokens_per_step: Sequence[int] = (512, 1024, 2048, 4096, 8192, 16384),
               nics_per_node: Sequence[int] = (1, 2, 4, 8), grad_bytes_per_param: Sequence[int] = (4, 2),
               nodes: Sequence[int] = (C1_NODES,), modes: Sequence[str] = ("ddp",), overlap_share: float = 0.0,
               mfu: float | None = None, threshold: float = C1_THRESHOLD, **kwargs: Any):
    """C1's sweep: busy share of a ``params`` model on ``platform`` across tokens per GPU per step,
    NICs per node, gradient precision, node counts and modes.

    Defaults: 4 nodes x 8 GPUs, the 32 tasks of the guide's job script (guide sec. 2.3,
    ``--ntasks=32 --gres=gpu:8``); tokens per GPU per step from one 512-token sequence to 16k.

    Returns:
        A tidy frame, one row per point: the inputs, ``compute_s``, ``comm_s``, ``exposed_comm_s``,
        ``step_s``, ``busy_share``, ``comm_share`` and ``below_threshold`` (busy share < ``threshold``).
    """
    import pandas as pd

    plat = get_platform(platform)
    rows = []
    for n in nodes:
        for mode in modes:
            for nics in nics_per_node:
                for gb in grad_bytes_per_param:
                    for tokens in tokens_per_step:
                        p = predict_step(params, platform=plat, nodes=n, mode=mode,
                                         flops=training_flops(params, tokens), overlap_share=overlap_share,
                                         grad_bytes_per_param=gb, nics_per_node=nics, mfu=mfu, **kwargs)
                        rows.append({"platform": plat.name, "params": params, "nodes": n,
                                     "ranks_per_node": p.inputs["ranks_per_node"], "mode": p.inputs["mode"],
                                     "nics_per_node": nics, "grad_bytes_per_param": gb, "tokens_per_gpu": tokens,
                                     "overlap_share": overlap_share, "mfu": p.inputs["mfu"],
                                     "compute_s": p.compute_s, "comm_s": p.comm_s["total"],
                                     "exposed_comm_s": p.exposed_comm_s, "step_s": p.step_s,
                                     "busy_share": p.busy_share, "comm_share": p.comm_share,
                                     "below_threshold": p.busy_share < threshold})
    return pd.DataFrame(rows)


def residuals(predicted: Iterable[float] | Mapping[Any, float], measured: Iterable[float] | Mapping[Any, float]):
    """Relative errors ``(predicted - measured) / measured``, pointwise.

    Mappings are matched by key (a key missing on either side raises ConfigError naming it);
    sequences by position. Returns a dict for mappings, else a list.
    """
    if isinstance(predicted, Mapping) or isinstance(measured, Mapping):
        if not (isinstance(predicted, Mapping) and isinstance(measured, Mapping)):
            raise ConfigError("give two mappings or two sequences", field="measured", config="residuals")
        missing = sorted(set(predicted) ^ set(measured), key=str)
        if missing:
            raise ConfigError(f"keys not on both sides: {missing}", field="measured", config="residuals")
        return {k: _rel(predicted[k], measured[k], k) for k in predicted}
    pred, meas = list(predicted), list(measured)
    if len(pred) != len(meas):
        raise ConfigError(f"{len(pred)} predictions for {len(meas)} measurements", field="measured",
                          config="residuals")
    return [_rel(p, m, i) for i, (p, m) in enumerate(zip(pred, meas))]


def _rel(p: float, m: float, where: Any) -> float:
    if not (m > 0 and math.isfinite(m)):
        raise ConfigError(f"measured value {m!r} at {where!r} is not a positive time", field="measured",
                          config="residuals")
    return (p - m) / m


def within(errors: Iterable[float] | Mapping[Any, float], tolerance: float = 0.10) -> bool:
    """Whether every relative error is within ``+-tolerance`` (the scale model's validation uses 10 %)."""
    values = errors.values() if isinstance(errors, Mapping) else errors
    values = list(values)
    return bool(values) and all(abs(e) <= tolerance for e in values)


__all__ = ["C1_NODES", "C1_PARAMS", "C1_THRESHOLD", "MODE_MODELS", "ModeModel", "Prediction", "bucket_sizes",
           "communication", "exposed_after_compute", "parse_mode", "predict_c1", "predict_step", "residuals",
           "stage_time", "training_flops", "within"]
