"""Communication modes of data-parallel training, and their measurement (T-comm: C3, C17).

:func:`parallelize` applies one mode of :data:`MODES` to a model (models themselves
import no parallelism, see :mod:`hpcbench.models`):

* ``ddp``: plain ``DistributedDataParallel`` over the world group (one flat ring);
* ``hybrid_dp_ddp``: the guide's literal recipe, ``nn.DataParallel`` over the GPUs a
  process sees, inside DDP across processes. It is tried for real where a process sees
  several GPUs; elsewhere :class:`ModeNotApplicable` carries the exact reason;
* ``hierarchical``: DDP with :func:`~hpcbench.comm_hooks.hierarchical_allreduce_hook`
  (reduce-scatter in the node, all-reduce across nodes, all-gather in the node);
* ``hierarchical_leader``: DDP with :func:`~hpcbench.comm_hooks.leader_allreduce_hook`
  (reduce to local rank 0, all-reduce among leaders, broadcast).

:func:`run_worker` is the ``comm_modes`` experiment on one rank: per model, mode and
bucket size it checks that one step's gradients equal plain DDP's, then times training
steps with the mode's communication and, side by side (interleaved), the same step with
a no-op communication hook: communication share = 1 - t(no-op) / t(mode).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any, Callable

from hpcbench.collectives import expand_labels
from hpcbench.comm_hooks import BucketLog, HierarchicalState, hierarchical_allreduce_hook, leader_allreduce_hook, noop_hook
from hpcbench.config import Config, param
from hpcbench.dist.topology import Topology
from hpcbench.errors import ConfigError, HpcbenchError
from hpcbench.models import MODEL_NAMES, MODELS, ModelSpec
from hpcbench.registry import Registry
from hpcbench.results import RecordWriter
from hpcbench.sanity import Verification

#: One InfiniBand MTU (4 KiB) in DDP's bucket_cap_mb unit (MiB): the C17 sweep point.
IB_MTU_BUCKET_MB = 4096 / (1 << 20)
#: Gradient agreement with plain DDP (fp32; only the summation order differs).
GRAD_RTOL, GRAD_ATOL = 1e-5, 1e-6


class ModeNotApplicable(HpcbenchError):
    """A mode cannot run in this process; ``reason`` says exactly why (it goes into the records)."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class ModeContext:
    """What a mode needs to wrap a model on one rank."""

    topology: Topology
    device: Any
    bucket_cap_mb: float | None
    state: HierarchicalState | None


@dataclass(frozen=True)
class CommMode:
    """One way of reducing gradients across ranks."""

    name: str
    description: str
    wrap: Callable[[Any, ModeContext], Any]
    """(model on the device, context) -> DDP module with the mode's reduction."""
    layout_problem: Callable[[int, int], str | None] = lambda nodes, per_node: None
    """(nodes, ranks_per_node) -> why the mode cannot use that layout, or None."""
    uses_groups: bool = False
    """needs the intra/inter-node process groups of :class:`HierarchicalState`"""


MODES: Registry[CommMode] = Registry("communication mode")


def _ddp(model: Any, ctx: ModeContext, **kwargs: Any) -> Any:
    from torch.nn.parallel import DistributedDataParallel as DDP

    device_ids = [ctx.device] if getattr(ctx.device, "type", "cpu") == "cuda" else None
    return DDP(model, device_ids=device_ids, bucket_cap_mb=ctx.bucket_cap_mb, **kwargs)


def _wrap_ddp(model: Any, ctx: ModeContext) -> Any:
    return _ddp(model, ctx)


def _needs_two_levels(nodes: int, per_node: int) -> str | None:
    if nodes < 2 or per_node < 2:
        return (f"needs at least 2 nodes and 2 ranks per node for a two-level reduction; "
                f"the layout is {nodes} node(s) x {per_node} rank(s)")
    return None


def _wrap_hook(hook: Callable) -> Callable[[Any, ModeContext], Any]:
    def wrap(model: Any, ctx: ModeContext) -> Any:
        if ctx.state is None:
            raise ConfigError("the mode needs the process groups of HierarchicalState.from_topology", field="state")
        ddp = _ddp(model, ctx)
        ddp.register_comm_hook(ctx.state, hook)
        return ddp

    return wrap


def hybrid_not_applicable_reason(gpus_visible: int, ranks_per_node: int) -> str | None:
    """Why ``nn.DataParallel`` inside DDP cannot run in this process, or None when it can be tried."""
    if gpus_visible == 0:
        return ("nn.DataParallel splits a batch over the GPUs one process sees; this process sees no GPU "
                "(CPU ranks with gloo), so there is no data parallelism inside the process to measure")
    per_rank = gpus_visible // ranks_per_node
    if per_rank < 2:
        return (f"nn.DataParallel needs at least 2 GPUs per process; this node shows {gpus_visible} GPU(s) to "
                f"{ranks_per_node} rank(s), {per_rank} each (run it with ranks_per_node=1 on a multi-GPU node)")
    return None


def _wrap_hybrid(model: Any, ctx: ModeContext) -> Any:
    import torch
    from torch import nn

    topo = ctx.topology
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    reason = hybrid_not_applicable_reason(gpus, topo.ranks_per_node)
    if reason:
        raise ModeNotApplicable(reason)
    per_rank = gpus // topo.ranks_per_node
    mine = list(range(topo.local_rank * per_rank, (topo.local_rank + 1) * per_rank))
    from torch.nn.parallel import DistributedDataParallel as DDP

    try:
        dp = nn.DataParallel(model.to(f"cuda:{mine[0]}"), device_ids=mine)
        return DDP(dp, device_ids=None, bucket_cap_mb=ctx.bucket_cap_mb)
    except Exception as exc:  # noqa: BLE001 - PyTorch's own refusal is the finding
        raise ModeNotApplicable(f"PyTorch refused DistributedDataParallel(nn.DataParallel(model, "
                                f"device_ids={mine})): {type(exc).__name__}: {exc}") from None


MODES.register("ddp", CommMode("ddp", "plain DDP over the world group (flat ring all-reduce)", _wrap_ddp))
MODES.register("hybrid_dp_ddp", CommMode(
    "hybrid_dp_ddp", "nn.DataParallel over a process's GPUs inside DDP across processes (the guide's recipe)",
    _wrap_hybrid))
MODES.register("hierarchical", CommMode(
    "hierarchical", "DDP hook: reduce-scatter in the node, all-reduce across nodes, all-gather in the node",
    _wrap_hook(hierarchical_allreduce_hook), _needs_two_levels, uses_groups=True))
MODES.register("hierarchical_leader", CommMode(
    "hierarchical_leader", "DDP hook: reduce to local rank 0, all-reduce among node leaders, broadcast",
    _wrap_hook(leader_allreduce_hook), _needs_two_levels, uses_groups=True))
MODE_NAMES = tuple(MODES.names())


def check_layout(mode: str, topo: Topology, world_size: int) -> CommMode:
    """The registered mode, after checking that it can use ``topo`` in a world of ``world_size`` ranks.

    Raises:
        RegistryError: unknown mode (the message lists the registered ones).
        ConfigError: the topology does not describe the world, or the mode cannot use it.
    """
    spec = MODES.get(mode)
    if topo.world_size != world_size:
        raise ConfigError(f"{topo.nodes} node(s) x {topo.ranks_per_node} rank(s) = {topo.world_size} ranks, "
                          f"but the world has {world_size} ranks", field="topology", config=mode)
    problem = spec.layout_problem(topo.nodes, topo.ranks_per_node)
    if problem:
        raise ConfigError(problem, field="topology", config=mode)
    return spec


def parallelize(model: Any, mode: str, topo: Topology, *, bucket_cap_mb: float | None = None,
                device: Any = None, state: HierarchicalState | None = None, comm: str = "mode",
                bucket_log: BucketLog | None = None) -> Any:
    """Wrap ``model`` for data-parallel training with communication mode ``mode``.

    Args:
        model: an ``nn.Module`` (on ``device``).
        mode: a name of :data:`MODES`.
        topo: this rank's topology; it must describe the initialised world.
        bucket_cap_mb: DDP's gradient bucket size in MiB (None: DDP's default, 25 MiB with a
            1 MiB first bucket).
        device: the rank's device (default: the model's).
        state: the process groups of the two-level modes (built from ``topo`` when None;
            creating them is collective, so pass one state to many calls).
        comm: ``"mode"``, or ``"noop"`` for the same wrapping with gradient communication
            replaced by :func:`~hpcbench.comm_hooks.noop_hook` (a timing baseline).
        bucket_log: with ``comm="noop"``, where the no-op hook notes the bucket sizes.

    Returns:
        The DDP-wrapped module.

    Raises:
        ConfigError / RegistryError: before any collective, for a bad mode, layout or bucket.
        ModeNotApplicable: the mode cannot run in this process (the reason is exact).
    """
    import torch.distributed as dist

    spec = check_layout(mode, topo, dist.get_world_size())
    if bucket_cap_mb is not None and not bucket_cap_mb > 0:
        raise ConfigError(f"{bucket_cap_mb} is out of range; allowed: > 0", field="bucket_cap_mb")
    if comm not in ("mode", "noop"):
        raise ConfigError(f"{comm!r} is not one of ['mode', 'noop']", field="comm")
    if device is None:
        device = next(model.parameters()).device
    if spec.uses_groups and state is None and comm == "mode":
        state = HierarchicalState.from_topology(topo)
    ctx = ModeContext(topology=topo, device=device, bucket_cap_mb=bucket_cap_mb, state=state)
    if comm == "noop":
        wrapped = _wrap_hybrid(model, ctx) if mode == "hybrid_dp_ddp" else _ddp(model, ctx)
        wrapped.register_comm_hook(bucket_log, noop_hook)
        return wrapped
    return spec.wrap(model, ctx)


# -- the experiment -------------------------------------------------------------------

@dataclass
class CommModesConfig(Config):
    """Parameters of ``02_comm_modes``; the notebook's parameters cell mirrors them."""

    models: list[str] = param(["gpt2_tiny", "resnet_tiny"], "models to train (resnet50 and gpt2_124M are the "
                              "guide's; *_tiny keep CPU runs short)", choices=MODEL_NAMES)
    modes: list[str] = param(["ddp", "hybrid_dp_ddp", "hierarchical", "hierarchical_leader"],
                             "communication modes to compare", choices=MODE_NAMES)
    bucket_cap_mb: list[float] = param([25.0], "DDP gradient bucket sizes in MiB (25 is DDP's default; "
                                       "0.00390625 = one 4 KiB IB MTU, the C17 point)")
    batch_size: int = param(8, "samples per rank per step (images, or sequences of seq_len tokens)", min=1)
    image_size: int = param(32, "side of the synthetic images (224 for ImageNet-sized ResNet steps)",
                            min=32, max=1024)
    seq_len: int = param(64, "tokens per synthetic sequence (1024 for GPT-2 124M)", min=2, max=1024)
    warmup_steps: int = param(2, "untimed steps per run; the first ones rebuild DDP's buckets", min=0, max=1000)
    steps: int = param(8, "timed steps per run; each one is kept as a sample", min=1, max=100000)
    measure_noop: bool = param(True, "also time each step with a no-op comm hook, interleaved, for the "
                                     "communication share")
    check: bool = param(True, "compare one step's gradients with plain DDP's before timing")
    seed: int = param(0, "seed of the initial weights and the synthetic batches", min=0)
    nodes: int = param(2, "nodes; on one machine more than 1 is an emulated split of the local ranks",
                       min=1, max=4096)
    ranks_per_node: int = param(2, "ranks (GPUs, or CPU processes) per node", min=1, max=64)
    backend: str = param("auto", "auto: NCCL with a GPU per rank, else gloo", choices=("auto", "gloo", "nccl"))

    def validate(self) -> None:
        if not self.models:
            raise self._error("models", f"is empty; allowed: {list(MODEL_NAMES)}")
        if not self.modes:
            raise self._error("modes", f"is empty; allowed: {list(MODE_NAMES)}")
        if not self.bucket_cap_mb:
            raise self._error("bucket_cap_mb", "is empty; give at least one bucket size in MiB")
        for b in self.bucket_cap_mb:
            if not b > 0:
                raise self._error("bucket_cap_mb", f"{b} is out of range; allowed: > 0 (MiB)")
        if self.nodes * self.ranks_per_node < 2:
            raise self._error("ranks_per_node", "data parallelism needs at least 2 ranks in all "
                                                "(nodes x ranks_per_node)")
        for mode in self.modes:
            problem = MODES.get(mode).layout_problem(self.nodes, self.ranks_per_node)
            if problem:
                raise self._error("modes", f"{mode!r} {problem}")
        for name in self.models:
            spec = MODELS.get(name)
            if spec.kind == "text" and self.seq_len > spec.max_seq_len:
                raise self._error("seq_len", f"{self.seq_len} exceeds {name}'s block size {spec.max_seq_len}")


def _sync(device: Any) -> Callable[[], None]:
    import torch

    return torch.cuda.synchronize if getattr(device, "type", "cpu") == "cuda" else (lambda: None)


def _grads(model: Any) -> list[Any]:
    return [p.grad.detach().clone() if p.grad is not None else None for p in model.parameters()]


def _one_step_gradients(model: Any, spec: ModelSpec, batch: tuple[Any, Any]) -> list[Any]:
    x, y = batch
    model.zero_grad(set_to_none=True)
    spec.loss(model(x), y).backward()
    grads = _grads(model)
    model.zero_grad(set_to_none=True)
    return grads


def compare_gradients(got: list[Any], want: list[Any]) -> tuple[float, bool]:
    """(largest absolute difference, all close within GRAD_RTOL/GRAD_ATOL) of two gradient lists."""
    import torch

    worst, ok = 0.0, len(got) == len(want)
    for g, w in zip(got, want):
        if g is None or w is None:
            ok = ok and g is None and w is None
            continue
        g = g.to(w.device)
        worst = max(worst, float((g - w).abs().max()))
        ok = ok and bool(torch.allclose(g, w, rtol=GRAD_RTOL, atol=GRAD_ATOL))
    return worst, ok


def _timed_step(model: Any, opt: Any, spec: ModelSpec, batch: tuple[Any, Any], sync: Callable[[], None]) -> float:
    x, y = batch
    sync()
    t0 = time.perf_counter()
    loss = spec.loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    sync()
    return time.perf_counter() - t0


def run_worker(cfg: CommModesConfig, topo: Topology, writer: RecordWriter) -> None:
    """Entry point on every rank (see :func:`hpcbench.dist.launch`)."""
    import torch
    import torch.distributed as dist

    from hpcbench.dist.worker import progress

    if topo.world_size != cfg.nodes * cfg.ranks_per_node:
        raise RuntimeError(f"launched {topo.describe()}, config asks for {cfg.nodes} x {cfg.ranks_per_node}")
    backend = dist.get_backend()
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    sync = _sync(device)
    lead = topo.rank == 0
    if lead:
        writer.add("topology", None, "", text=topo.describe(),
                   labels={"nodes": topo.nodes, "ranks_per_node": topo.ranks_per_node, "emulated": topo.emulated})
    state = None
    if any(MODES.get(m).uses_groups for m in cfg.modes):
        state = HierarchicalState.from_topology(topo)

    for model_name in cfg.models:
        spec = MODELS.get(model_name)
        torch.manual_seed(cfg.seed)
        base = spec.build().to(device)
        batch = spec.synthetic_batch(cfg.batch_size, device=device, seed=cfg.seed * 100003 + topo.rank,
                                     image_size=cfg.image_size, seq_len=cfg.seq_len)
        items = cfg.batch_size * spec.items_per_sample(seq_len=cfg.seq_len)
        reference = None
        if cfg.check:
            reference = _one_step_gradients(parallelize(copy.deepcopy(base), "ddp", topo), spec, batch)
        for mode in cfg.modes:
            for bucket in cfg.bucket_cap_mb:
                labels = {"model": model_name, "mode": mode, "bucket_cap_mb": bucket, "device": device.type,
                          "emulated": topo.emulated, "nodes": topo.nodes, "ranks_per_node": topo.ranks_per_node}
                try:
                    model = parallelize(copy.deepcopy(base), mode, topo, bucket_cap_mb=bucket, device=device,
                                        state=state)
                except ModeNotApplicable as exc:
                    if lead:
                        for metric, unit in (("throughput", spec.throughput_unit), ("step_time", "s"),
                                             ("comm_share", "fraction"), ("grad_match", "bool")):
                            writer.add(metric, None, unit, labels=labels, text=f"not applicable: {exc.reason}")
                    progress(f"{model_name} / {mode}: not applicable")
                    continue
                runs = [("mode", model)]
                buckets = BucketLog()
                if cfg.measure_noop:
                    runs.append(("noop", parallelize(copy.deepcopy(base), mode, topo, bucket_cap_mb=bucket,
                                                     device=device, state=state, comm="noop",
                                                     bucket_log=buckets)))
                if reference is not None:
                    diff, ok = compare_gradients(_one_step_gradients(model, spec, batch), reference)
                    verdict = torch.tensor([diff, 1.0 if ok else 0.0], dtype=torch.float64, device=device)
                    dist.all_reduce(verdict[:1], op=dist.ReduceOp.MAX)
                    dist.all_reduce(verdict[1:], op=dist.ReduceOp.MIN)
                    if lead:
                        writer.add("grad_max_abs_diff", float(verdict[0]), "", labels=labels)
                        writer.add("grad_match", float(verdict[1]), "bool", labels=labels,
                                   text=f"rtol={GRAD_RTOL}, atol={GRAD_ATOL} against plain DDP")
                opts = {kind: torch.optim.SGD(m.parameters(), lr=1e-4) for kind, m in runs}
                times: dict[str, list[float]] = {kind: [] for kind, _ in runs}
                for i in range(cfg.warmup_steps + cfg.steps):
                    for kind, m in runs:  # interleaved: both see the same machine state
                        dist.barrier()
                        t = _timed_step(m, opts[kind], spec, batch, sync)
                        if i >= cfg.warmup_steps:
                            times[kind].append(t)
                layout = buckets.layout()
                # A step lasts as long as its slowest rank: one reduction after the loop.
                flat = torch.tensor([t for kind, _ in runs for t in times[kind]], dtype=torch.float64, device=device)
                dist.all_reduce(flat, op=dist.ReduceOp.MAX)
                flat = flat.cpu().tolist()
                slow = {kind: flat[j * cfg.steps:(j + 1) * cfg.steps] for j, (kind, _) in enumerate(runs)}
                progress(f"{model_name} / {mode} / bucket {bucket:g} MiB: step p50 "
                         f"{sorted(slow['mode'])[len(slow['mode']) // 2] * 1e3:.1f} ms")
                if not lead:
                    continue
                if layout:
                    writer.add("bucket_count", len(layout), "", labels=labels,
                               text="bucket bytes in reduction order: " + ",".join(map(str, layout)))
                    writer.add("first_bucket_bytes", layout[0], "B", labels=labels)
                for step in range(cfg.steps):
                    t_mode = slow["mode"][step]
                    writer.add("step_time", t_mode, "s", step=step, labels={**labels, "comm": "mode"})
                    writer.add("throughput", items / t_mode, spec.throughput_unit, step=step,
                               labels={**labels, "scope": "rank"})
                    writer.add("throughput", topo.world_size * items / t_mode, spec.throughput_unit, step=step,
                               labels={**labels, "scope": "total"})
                    if "noop" in slow:
                        t_noop = slow["noop"][step]
                        writer.add("step_time", t_noop, "s", step=step, labels={**labels, "comm": "noop"})
                        writer.add("comm_time", t_mode - t_noop, "s", step=step, labels=labels)
                        writer.add("comm_share", 1.0 - t_noop / t_mode, "fraction", step=step, labels=labels)
                del runs, model, opts
        del base


# -- reading the records back -----------------------------------------------------------

SUMMARY_KEYS = ["model", "mode", "bucket_cap_mb"]


def summarize(records: Any) -> Any:
    """One row per (model, mode, bucket): throughput p50 (total and per rank), step time p50/p99,
    no-op step p50, communication share p50, gradient check, bucket count; ``note`` holds the
    reason of a combination that could not run."""
    import pandas as pd

    rows = records[records["experiment"] == "comm_modes"]
    rows = rows[rows["metric"].isin(["throughput", "step_time", "comm_share", "comm_time", "grad_match",
                                     "bucket_count", "first_bucket_bytes"])]
    if rows.empty:
        return pd.DataFrame(columns=SUMMARY_KEYS + ["throughput_total_p50"])
    wide = expand_labels(rows)
    out = []
    for key, g in wide.groupby(SUMMARY_KEYS, sort=True):
        measured = g[g["value"].notna()]
        notes = sorted({t for t in g["text"].dropna() if str(t).startswith("not applicable")})

        def pick(metric: str, **where: str):
            sel = measured[measured["metric"] == metric]
            for col, val in where.items():
                sel = sel[sel[col] == val] if col in sel.columns else sel.iloc[0:0]
            return sel["value"]

        tput = pick("throughput", scope="total")
        step = pick("step_time", comm="mode")
        noop = pick("step_time", comm="noop")
        grad = pick("grad_match")
        buckets = pick("bucket_count")
        unit = g[g["metric"] == "throughput"]["unit"].iloc[0] if (g["metric"] == "throughput").any() else ""
        out.append({
            **dict(zip(SUMMARY_KEYS, key)),
            "unit": unit,
            "throughput_total_p50": tput.median() if len(tput) else float("nan"),
            "throughput_rank_p50": pick("throughput", scope="rank").median() if len(tput) else float("nan"),
            "step_p50_ms": step.median() * 1e3 if len(step) else float("nan"),
            "step_p99_ms": step.quantile(0.99) * 1e3 if len(step) else float("nan"),
            "noop_step_p50_ms": noop.median() * 1e3 if len(noop) else float("nan"),
            "comm_time_p50_ms": pick("comm_time").median() * 1e3 if len(noop) else float("nan"),
            "comm_share_p50": pick("comm_share").median() if len(noop) else float("nan"),
            "grad_match": bool(grad.min() == 1.0) if len(grad) else None,
            "buckets": int(buckets.iloc[0]) if len(buckets) else None,
            "first_bucket_bytes": int(pick("first_bucket_bytes").iloc[0]) if len(pick("first_bucket_bytes")) else None,
            "steps": len(step),
            "note": notes[0] if notes else "",
        })
    return pd.DataFrame(out)


def mode_gains(summary: Any, baseline: str = "ddp") -> Any:
    """Throughput of every mode relative to ``baseline`` at the same model and bucket size."""
    import pandas as pd

    if summary.empty:
        return pd.DataFrame(columns=["model", "bucket_cap_mb", "mode", "ratio_vs_ddp"])
    base = summary[summary["mode"] == baseline].set_index(["model", "bucket_cap_mb"])["throughput_total_p50"]
    rows = []
    for r in summary.itertuples(index=False):
        b = base.get((r.model, r.bucket_cap_mb), float("nan"))
        rows.append({"model": r.model, "bucket_cap_mb": r.bucket_cap_mb, "mode": r.mode,
                     "throughput_total_p50": r.throughput_total_p50, "ratio_vs_ddp": r.throughput_total_p50 / b,
                     "comm_time_p50_ms": r.comm_time_p50_ms, "note": r.note})
    return pd.DataFrame(rows)


def bucket_findings(summary: Any) -> list[str]:
    """Sentences on the bucket sweep (C17): where the optimum lies, and the MTU-sized bucket."""
    import torch.distributed as dist

    lines = []
    for (model, mode), g in summary[summary["throughput_total_p50"].notna()].groupby(["model", "mode"]):
        if g["bucket_cap_mb"].nunique() < 2:
            continue
        best = g.loc[g["throughput_total_p50"].idxmax()]
        text = (f"{model} / {mode}: best throughput at bucket_cap_mb={best['bucket_cap_mb']:g} "
                f"({best['throughput_total_p50']:.4g} {best['unit']}, {best['buckets']:.0f} buckets)")
        mtu = g[(g["bucket_cap_mb"] - IB_MTU_BUCKET_MB).abs() < 1e-12]
        if len(mtu):
            m = mtu.iloc[0]
            text += (f"; the 4 KiB (IB MTU) bucket reaches {m['throughput_total_p50'] / best['throughput_total_p50']:.0%} "
                     f"of it with {m['buckets']:.0f} buckets (a 4 KiB cap closes a bucket at nearly every "
                     f"parameter tensor, so each pays a collective's latency)")
        lines.append(text)
    first = getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", None)
    if first:
        lines.append(f"PyTorch's first bucket: DDP caps the first bucket (the last layers' gradients, ready "
                     f"first) at dist._DEFAULT_FIRST_BUCKET_BYTES = {first:,} B when bucket_cap_mb is left at "
                     f"its default; in this torch version an explicit bucket_cap_mb sets the first bucket too "
                     f"(first_bucket_bytes in the records shows the layout each run really had).")
    return lines


_PASSED = ("every mode that ran gave plain DDP's gradients, and every model x mode x bucket "
           "was measured or recorded as not applicable with its reason")


def verify_records(records: Any, cfg: CommModesConfig) -> Verification:
    """Gradients matched plain DDP wherever a mode ran, and every combination is measured or explained."""
    problems = []
    summary = summarize(records)
    seen = {(r.model, r.mode, float(r.bucket_cap_mb)): r for r in summary.itertuples(index=False)}
    for model in cfg.models:
        for mode in cfg.modes:
            for bucket in cfg.bucket_cap_mb:
                r = seen.get((model, mode, float(bucket)))
                if r is None:
                    problems.append(f"{model} / {mode} / {bucket:g} MiB has no records")
                elif r.note:
                    continue
                elif r.steps != cfg.steps:
                    problems.append(f"{model} / {mode} / {bucket:g} MiB: {r.steps} timed steps, expected {cfg.steps}")
                elif cfg.check and r.grad_match is not True:
                    problems.append(f"{model} / {mode} / {bucket:g} MiB: gradients differ from plain DDP's")
    return Verification(problems, passed=_PASSED)
