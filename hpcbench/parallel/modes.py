"""Communication modes of data-parallel training (T-comm): how gradients travel between ranks.

:func:`parallelize` applies one mode of :data:`MODES` to a model (models themselves
import no parallelism, see :mod:`hpcbench.models`):

* ``ddp``: plain ``DistributedDataParallel`` over the world group (one flat ring);
* ``hybrid_dp_ddp``: the guide's literal recipe, ``nn.DataParallel`` over the GPUs a
  process sees, inside DDP across processes. It is tried for real where a process sees
  several GPUs; elsewhere :class:`ModeNotApplicable` carries the exact reason;
* ``hierarchical``: DDP with :func:`~hpcbench.parallel.hooks.hierarchical_allreduce_hook`
  (reduce-scatter in the node, all-reduce across nodes, all-gather in the node);
* ``hierarchical_leader``: DDP with :func:`~hpcbench.parallel.hooks.leader_allreduce_hook`
  (reduce to local rank 0, all-reduce among leaders, broadcast).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from hpcbench.core.errors import ConfigError, HpcbenchError
from hpcbench.core.registry import Registry
from hpcbench.dist.topology import Topology
from hpcbench.parallel.hooks import (BucketLog, HierarchicalState, hierarchical_allreduce_hook, leader_allreduce_hook,
                                     noop_hook)


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


def modes_layout_problem(modes: Sequence[str], nodes: int, ranks_per_node: int) -> tuple[str, str] | None:
    """Why data parallelism in each of ``modes`` cannot run on ``nodes`` x ``ranks_per_node``, for a config's error.

    Returns:
        (the config field to blame, why): fewer than 2 ranks in all (``ranks_per_node``), or the first
        mode that cannot use the layout (``modes``); None when every mode can.
    """
    if nodes * ranks_per_node < 2:
        return "ranks_per_node", "data parallelism needs at least 2 ranks in all (nodes x ranks_per_node)"
    for mode in modes:
        problem = MODES.get(mode).layout_problem(nodes, ranks_per_node)
        if problem:
            return "modes", f"{mode!r} {problem}"
    return None


#: Modes a gradient compression can be combined with: plain DDP (compress over the world) and the
#: two-level reduction (compress only the inter-node exchange); the others already own DDP's one hook
#: in a way compression cannot share (leader broadcast, nn.DataParallel inside the process).
COMPRESSIBLE_MODES = ("ddp", "hierarchical")


def parallelize(model: Any, mode: str, topo: Topology, *, bucket_cap_mb: float | None = None,
                device: Any = None, state: HierarchicalState | None = None, comm: str = "mode",
                bucket_log: BucketLog | None = None, compression: str = "none",
                compression_options: dict[str, Any] | None = None) -> Any:
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
            replaced by :func:`~hpcbench.parallel.hooks.noop_hook` (a timing baseline).
        bucket_log: with ``comm="noop"``, where the no-op hook notes the bucket sizes.
        compression: a name of :data:`hpcbench.parallel.compression.COMPRESSIONS` (``none``,
            ``fp16``, ``bf16``, ``powersgd``, ``quant2bit``), with ``ddp`` or ``hierarchical``
            (there ``quant2bit`` compresses only the inter-node exchange). With ``bucket_cap_mb``
            None the compression's own bucket size applies (``quant2bit``: the guide's 4 MiB).
            The hook's byte counts are on ``wrapped.compression_state.stats``.
        compression_options: the compression's options (``quant2bit``: ``Quant2BitConfig``'s fields).

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
    options = dict(compression_options or {})
    compressed = compression != "none" or bool(options)
    if compressed:
        from hpcbench.parallel.compression import COMPRESSIONS, bucket_cap_mb_for, check_options

        COMPRESSIONS.get(compression)
        if mode not in COMPRESSIBLE_MODES:
            raise ConfigError(f"compression {compression!r} cannot be combined with mode {mode!r}; "
                              f"allowed modes: {list(COMPRESSIBLE_MODES)}", field="compression", config=mode)
        check_options(compression, options)
        bucket_cap_mb = bucket_cap_mb_for(compression, bucket_cap_mb, **options)
    if device is None:
        device = next(model.parameters()).device
    if spec.uses_groups and state is None and comm == "mode":
        state = HierarchicalState.from_topology(topo)
    ctx = ModeContext(topology=topo, device=device, bucket_cap_mb=bucket_cap_mb, state=state)
    if comm == "noop":
        wrapped = _wrap_hybrid(model, ctx) if mode == "hybrid_dp_ddp" else _ddp(model, ctx)
        wrapped.register_comm_hook(bucket_log, noop_hook)
        return wrapped
    if not compressed:
        return spec.wrap(model, ctx)
    from hpcbench.parallel.compression import apply_compression

    # DDP takes one comm hook: the compression's replaces the mode's, and with the two-level mode it
    # gets the mode's process groups so that only the inter-node exchange is compressed.
    wrapped = _ddp(model, ctx)
    wrapped.compression_state = apply_compression(wrapped, compression,
                                                  hierarchical=state if mode == "hierarchical" else None, **options)
    return wrapped
