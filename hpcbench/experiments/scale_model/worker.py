"""What runs for ``scale_model``: per link rate a phase, in each phase the collectives and the modes' steps.

The driver (:func:`launch_scale_model`, in the notebook) runs one phase per rate of
``cfg.link_rates``. On the emulated cluster it reshapes every node link to the phase's rate
first (:func:`hpcbench.cluster.emulated.reshape_links`) and always puts the cluster's own
rate back afterwards; elsewhere there is no link to shape, and one phase runs at whatever the
ranks share, recorded as ``unshaped`` with the reason. Each phase is one launch in which every
rank (:func:`run_worker`):

1. times each collective of ``cfg.ops`` at every size of ``cfg.sizes()`` on the world, the
   intra-node and the inter-node groups, writing the rows
   :func:`hpcbench.scale.alpha_beta.fit_from_collectives` reads (metric ``time``, unit s,
   labels ``op``, ``size_bytes``, ``group``, ``group_ranks``; one row per iteration, the
   slowest rank's time, written by each group's first rank);
2. trains the model for each mode of ``cfg.modes``, every step interleaved with the same step
   under a no-op comm hook (:func:`hpcbench.parallel.overlap.interleaved_step_times`): the
   mode's ``step_time`` and the no-op ``step_time`` (the compute), both the slowest rank's;
   plus what the prediction needs and may not guess: the bucket layout DDP settled on (from
   the no-op twin, built with the mode's bucket cap), the gradient elements, the share the
   2-bit hook sent uncompressed, whether the hierarchical stages ran as all-reduces; and
   whether every rank holds the same parameters afterwards; for the 2-bit modes the hook's
   coding of one step's buckets timed alone (``codec_time``, no communication).
3. two inputs of the prediction measured apart from the mode's own steps, with no communication:
   the **overlap windows** (``overlap_window``, one per bucket: the backward compute left when the
   no-op hook saw the bucket, i.e. when DDP would launch its reduction; median over the no-op
   twin's timed steps, mean over ranks), and for the modes with a Python comm hook (hierarchical,
   2-bit: :attr:`RunMode.python_hook`) the **hook's own work in a step** (``hook_cpu_time``): a third twin
   runs the mode's real hook with its collectives replaced by local copies of the same buffers
   (:func:`local_collectives`), interleaved with the others (``step_time`` with ``comm`` =
   ``local``); per step its time minus the no-op step's, median over the steps, is what the hook's
   own coding, padding, copies and thread hand-offs add to a step, contention with backward included.

Every row carries the labels ``phase`` and ``link_rate``.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import time
from typing import Any, Callable, Iterator

from hpcbench.core.errors import HpcbenchError
from hpcbench.core.registry import Registry
from hpcbench.core.results import RecordWriter
from hpcbench.dist.topology import GROUP_KINDS, Topology
from hpcbench.experiments.scale_model.config import RUN_MODES, UNSHAPED, ScaleModelConfig

#: The driver tells a phase's ranks which phase they run (index and link rate) through this variable.
PHASE_ENV = "HPCBENCH_SCALE_MODEL_PHASE"
#: Why a run outside the emulated cluster has one unshaped phase.
NO_CLUSTER = ("no emulated cluster (SLURM_CONF's folder holds no cluster.json): no node link to shape; one "
              "phase runs on the link the ranks share (an emulated split of one machine: its loopback)")
FLOAT32_BYTES = 4


# -- the driver --------------------------------------------------------------------------------

def _phase_env(index: int, rate: str) -> str:
    return json.dumps({"phase": index, "link_rate": rate})


def _launch_phase(task: Any, index: int, rate: str) -> Any:
    """One launch of :func:`run_worker`, its ranks told the phase through :data:`PHASE_ENV`."""
    saved = os.environ.get(PHASE_ENV)
    os.environ[PHASE_ENV] = _phase_env(index, rate)  # the launcher hands the driver's environment on
    try:
        return task.launch(run_worker, tag=f"scale_model-p{index}")
    finally:
        if saved is None:
            os.environ.pop(PHASE_ENV, None)
        else:
            os.environ[PHASE_ENV] = saved


def launch_scale_model(task: Any) -> list[Any]:
    """Every phase of the task: reshape (on the emulated cluster), launch, and the link put back.

    Records (the driver's, ``phases-driver.parquet``): per phase ``link_rate_bps`` (the shaped
    rate, or NaN with why none), and on the cluster ``link_rate_original`` and ``link_restored``
    (1 when cluster.json reads the original rate again afterwards).

    Returns:
        The phases' :class:`~hpcbench.dist.launcher.LaunchResult` s.
    """
    from hpcbench.cluster.network import parse_rate
    from hpcbench.cluster.link_phase import reshape_from_host
    from hpcbench.cluster.locate import cluster_of

    cfg: ScaleModelConfig = task.config
    cluster = cluster_of()
    results = []
    with task.writer("phases") as writer:
        if cluster is None:
            writer.add("link_rate_bps", None, "bit/s", labels={"phase": 0, "link_rate": UNSHAPED}, text=NO_CLUSTER)
            results.append(_launch_phase(task, 0, UNSHAPED))
            return results
        original = cluster.spec.link_rate
        writer.add("link_rate_original", float(original), "bit/s", text=str(original))
        try:
            for index, rate in enumerate(cfg.link_rates):
                reshape_from_host(cluster, rate)
                now = cluster_of()
                shown = str(now.spec.link_rate) if now is not None else "?"
                writer.add("link_rate_bps", parse_rate(rate), "bit/s", labels={"phase": index, "link_rate": rate},
                           text=f"every node link reshaped to {rate} on both veth ends (cluster.json: {shown})")
                results.append(_launch_phase(task, index, rate))
        finally:
            # Always back at the cluster's own rate: the next task on this cluster must find it as it was.
            try:
                reshape_from_host(cluster, original)
                now = cluster_of()
                back = now.spec.link_rate if now is not None else None
                writer.add("link_restored", float(back == original), "bool",
                           text=f"links back at {back} (the cluster's rate before the task: {original})")
            except HpcbenchError as exc:
                writer.add("link_restored", 0.0, "bool", text=str(exc))
                raise
    return results


# -- the ranks: collectives ---------------------------------------------------------------------

def current_phase(env: dict[str, str] | None = None) -> dict[str, Any]:
    """This launch's phase (``phase``, ``link_rate``) as the driver set it; one unshaped phase without it."""
    env = os.environ if env is None else env
    try:
        phase = json.loads(env.get(PHASE_ENV) or "{}")
    except ValueError:
        phase = {}
    return {"phase": int(phase.get("phase", 0)), "link_rate": str(phase.get("link_rate", UNSHAPED))}


def _dist():
    import torch.distributed as dist

    return dist


def _all_gather(inp: Any, out: Any, group: Any) -> None:
    from hpcbench.parallel.hooks import all_gather_async

    all_gather_async(out, inp, group).wait()


def _reduce_scatter(inp: Any, out: Any, group: Any) -> None:
    from hpcbench.parallel.hooks import reduce_scatter_async

    reduce_scatter_async(out, inp, group).wait()


#: op -> (input elements, output elements) of a buffer of e elements (nccl-tests' S) over n ranks, and how
#: it runs. S is the whole vector of all_reduce, the output of all_gather, the input of reduce_scatter and
#: the send buffer of all_to_all (S / n to every rank), as hpcbench.scale.algorithms counts them.
COLLECTIVES: Registry[tuple[Callable[[int, int], tuple[int, int]], Callable[[Any, Any, Any], None]]] = \
    Registry("collective")
COLLECTIVES.register("all_reduce", (lambda e, n: (e, e), lambda i, o, g: _dist().all_reduce(i, group=g)))
COLLECTIVES.register("all_gather", (lambda e, n: (e // n, e), _all_gather))
COLLECTIVES.register("reduce_scatter", (lambda e, n: (e, e // n), _reduce_scatter))
COLLECTIVES.register("all_to_all", (lambda e, n: (e, e), lambda i, o, g: _dist().all_to_all_single(o, i, group=g)))


def aligned_size(size_bytes: int, nranks: int, elem_bytes: int = FLOAT32_BYTES) -> int:
    """``size_bytes`` rounded down to a multiple of ``nranks x elem_bytes`` (at least one element per rank)."""
    unit = nranks * elem_bytes
    return max(unit, (size_bytes // unit) * unit)


def time_collective(op: str, size_bytes: int, *, group: Any, n: int, device: Any, warmup: int, iters: int,
                    sync: Callable[[], None]) -> list[float]:
    """This rank's seconds for ``iters`` calls of ``op`` on ``size_bytes`` (float32) over ``group``, one each."""
    import torch

    shape, run = COLLECTIVES.get(op)
    n_in, n_out = shape(size_bytes // FLOAT32_BYTES, n)
    inp = torch.ones(n_in, dtype=torch.float32, device=device)
    out = inp if op == "all_reduce" else torch.empty(n_out, dtype=torch.float32, device=device)
    for _ in range(warmup):
        run(inp, out, group)
    sync()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        run(inp, out, group)
        sync()
        times.append(time.perf_counter() - t0)
    return times


def time_collectives(cfg: ScaleModelConfig, topo: Topology, rank: Any, writer: RecordWriter,
                     phase: dict[str, Any]) -> None:
    """Every op of ``cfg.ops`` at every size on every group kind; the group's first rank writes the rows."""
    import torch

    from hpcbench.dist.worker import progress

    dist = _dist()
    for kind in GROUP_KINDS:
        layouts = topo.groups(kind)
        n = len(layouts[0])
        if kind == "world":
            group, members = None, layouts[0]
        else:
            group, _ = dist.new_subgroups_by_enumeration(layouts)
            members = next(g for g in layouts if topo.rank in g)
        measured: list[tuple[str, int, list[float]]] = []
        for op in cfg.ops:
            for size in cfg.sizes():
                s = aligned_size(size, n)
                dist.barrier(group=group)
                measured.append((op, s, time_collective(op, s, group=group, n=n, device=rank.device,
                                                        warmup=cfg.warmup_iters, iters=cfg.iters, sync=rank.sync)))
        # A collective lasts as long as its slowest rank; reduced once, after the timed loops.
        flat = torch.tensor([t for *_, ts in measured for t in ts], dtype=torch.float64, device=rank.device)
        dist.all_reduce(flat, op=dist.ReduceOp.MAX, group=group)
        slowest = flat.cpu().tolist()
        progress(f"phase {phase['phase']} ({phase['link_rate']}): {kind} collectives timed (group of {n})")
        if members.index(topo.rank) != 0:
            continue
        pos = 0
        for op, s, times in measured:
            labels = {"op": op, "size_bytes": s, "group": kind, "group_index": layouts.index(members),
                      "group_ranks": n, "dtype": "float32", **phase}
            for i in range(len(times)):
                writer.add("time", slowest[pos + i], "s", step=i, labels=labels)
            pos += len(times)


# -- the ranks: training ------------------------------------------------------------------------

def codec_seconds(compressed: int, group_size: int, *, chunk_size: int, device: Any) -> float:
    """Seconds of the 2-bit hook's local work on one bucket, without its two collectives.

    :func:`hpcbench.parallel.compression.compressed_allreduce` step by step: quantise the
    ``group_size`` parts with error feedback and encode them, decode the group's messages and sum
    them, re-quantise this rank's part (server feedback) and encode it, decode the gathered
    messages. The collectives themselves are what the scale model prices; this is the coding
    they leave on the CPU (or GPU), which it does not.
    """
    import torch
    import torch.nn.functional as F

    from hpcbench.parallel.compression import decode_message, encode_message, quantize_with_feedback
    from hpcbench.parallel.hooks import padded_length

    part = padded_length(-(-compressed // group_size), 4)
    x = torch.randn(compressed, device=device)
    t0 = time.perf_counter()
    work = F.pad(x, (0, group_size * part - compressed)).reshape(group_size, part)
    codes, scales, _ = quantize_with_feedback(work, torch.zeros_like(work), chunk_size)
    msg = encode_message(codes, scales)
    mine = decode_message(msg, part, chunk_size).sum(0)
    s_codes, s_scales, _ = quantize_with_feedback(mine.unsqueeze(0), torch.zeros_like(mine).unsqueeze(0), chunk_size)
    gathered = encode_message(s_codes, s_scales).expand(group_size, -1).contiguous()
    decode_message(gathered, part, chunk_size).reshape(-1)[:compressed].sum()
    return time.perf_counter() - t0


def codec_step_seconds(layout_elems: list[int], plain_fraction: float, topo: Topology, *, hierarchical: bool,
                       chunk_size: int, repeats: int, device: Any) -> float:
    """Median over ``repeats`` of the 2-bit coding of one step's buckets (:func:`codec_seconds` per bucket).

    Flat: each bucket's compressed part over the world. Hierarchical: this rank's shard of it
    (padded to a multiple of ranks_per_node) over the node peers.
    """
    from hpcbench.parallel.hooks import padded_length

    jobs = []
    for elems in layout_elems:
        m = elems - int(round(elems * plain_fraction))
        if m <= 0:
            continue
        if hierarchical:
            jobs.append((padded_length(m, topo.ranks_per_node) // topo.ranks_per_node, topo.nodes))
        else:
            jobs.append((m, topo.world_size))
    totals = sorted(sum(codec_seconds(m, n, chunk_size=chunk_size, device=device) for m, n in jobs)
                    for _ in range(repeats))
    return totals[len(totals) // 2]


class ReadyTimes(dict):
    """``BucketLog.sizes`` that also notes when the no-op hook was handed each bucket (``perf_counter``).

    DDP calls the hook of bucket ``i`` once buckets ``0..i`` are all ready, i.e. when it would
    launch bucket ``i``'s reduction; the last bucket's call marks the end of the gradient compute.
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[int, float]] = []

    def __setitem__(self, key: int, value: int) -> None:
        self.calls.append((int(key), time.perf_counter()))
        super().__setitem__(key, value)

    def windows(self, last_steps: int) -> list[float]:
        """Per bucket, the median over the last ``last_steps`` complete steps of (last bucket's call - its call)."""
        n = len(self)
        steps: list[dict[int, float]] = []
        for index, t in self.calls:
            if index == 0:
                steps.append({})
            if steps:
                steps[-1][index] = t
        complete = [st for st in steps if sorted(st) == list(range(n))][-last_steps:]
        if not complete:
            return []
        out = []
        for i in range(n):
            gaps = sorted(st[n - 1] - st[i] for st in complete)
            out.append(gaps[len(gaps) // 2])
        return out


class _Done:
    """A finished ``Work``: what the local stand-ins of :func:`local_collectives` return."""

    def wait(self) -> bool:
        return True


class _LocalDist:
    """``torch.distributed`` as the comm hooks call it, their collectives replaced by local copies (no traffic)."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)  # group sizes and ranks: the real ones, so the work is the same

    def all_to_all_single(self, output: Any, input: Any, group: Any = None, async_op: bool = False) -> _Done:
        output.copy_(input)
        return _Done()

    def all_reduce(self, tensor: Any, op: Any = None, group: Any = None, async_op: bool = False) -> _Done:
        return _Done()

    def all_gather_into_tensor(self, output: Any, input: Any, group: Any = None, async_op: bool = False) -> _Done:
        output.view(-1, input.numel()).copy_(input.reshape(1, -1).expand(output.numel() // input.numel(), -1))
        return _Done()

    def reduce_scatter_tensor(self, output: Any, input: Any, op: Any = None, group: Any = None,
                              async_op: bool = False) -> _Done:
        output.copy_(input.reshape(-1)[:output.numel()])
        return _Done()

    # the names hooks.all_gather_async / reduce_scatter_async prefer where torch has them
    all_gather_single = all_gather_into_tensor
    reduce_scatter_single = reduce_scatter_tensor


#: Modules whose comm hooks reach torch.distributed through their own ``_dist()`` (the hierarchical hook, the
#: 2-bit hook and the helpers they share).
HOOK_MODULES = ("hpcbench.parallel.hooks", "hpcbench.parallel.compression")


@contextlib.contextmanager
def local_collectives() -> Iterator[None]:
    """Inside: the collectives of :data:`HOOK_MODULES` are local copies of the same buffers.

    Measures a Python comm hook's own work in a real step (its background thread, its pads,
    gathers, coding, residuals and copies, contention with backward) without any of its
    communication. Collective calls outside those modules (barriers, the timing's all-reduces,
    DDP's own) are untouched.
    """
    import importlib

    modules = [importlib.import_module(name) for name in HOOK_MODULES]
    saved = [module._dist for module in modules]
    local = _LocalDist(saved[0]())
    for module in modules:
        module._dist = lambda: local
    try:
        yield
    finally:
        for module, original in zip(modules, saved):
            module._dist = original


def _mean_over_ranks(values: list[float], device: Any) -> list[float]:
    import torch
    import torch.distributed as dist

    if not values:
        return []
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return (t / dist.get_world_size()).cpu().tolist()


def _plain_fraction(model: Any) -> float:
    """The share of gradient elements the 2-bit hook sent uncompressed (0 without a compression state)."""
    stats = getattr(getattr(model, "compression_state", None), "stats", None)
    if stats is None:
        return 0.0
    total = stats.plain_elements + stats.compressed_elements
    return stats.plain_elements / total if total else 0.0


def train_modes(cfg: ScaleModelConfig, topo: Topology, rank: Any, writer: RecordWriter,
                phase: dict[str, Any]) -> None:
    """Every mode's steps interleaved with its no-op twin's; the lead rank writes what the prediction needs."""
    import torch

    from hpcbench.dist.worker import progress
    from hpcbench.models import MODELS
    from hpcbench.parallel.hooks import BucketLog, HierarchicalState
    from hpcbench.parallel.modes import MODES, parallelize
    from hpcbench.parallel.overlap import accumulation_step, interleaved_step_times, ranks_agree

    device = rank.device
    spec = MODELS.get(cfg.model)
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank
    base = spec.build().to(device)
    grad_elems = sum(p.numel() for p in base.parameters() if p.requires_grad)
    batch = spec.synthetic_batch(cfg.batch_size, device=device, seed=cfg.seed * 100003 + topo.rank,
                                 seq_len=cfg.seq_len)
    # Process groups are made collectively, once, and shared by every two-level mode.
    needs_groups = any(MODES.get(RUN_MODES.get(m).comm).uses_groups for m in cfg.modes)
    state = HierarchicalState.from_topology(topo) if needs_groups else None
    models, logs, runs = {}, {}, {}
    for name in cfg.modes:
        mode = RUN_MODES.get(name)
        model = parallelize(copy.deepcopy(base), mode.comm, topo, device=device, state=state,
                            compression=mode.compression)
        # the no-op twin is built with the mode's bucket cap, so its log shows the mode's layout (and when each
        # bucket is ready: the overlap windows)
        logs[name] = BucketLog(sizes=ReadyTimes())
        noop = parallelize(copy.deepcopy(base), mode.comm, topo, device=device, comm="noop", bucket_log=logs[name],
                           compression=mode.compression)
        models[name] = model
        opt, noop_opt = torch.optim.SGD(model.parameters(), lr=1e-3), torch.optim.SGD(noop.parameters(), lr=1e-3)
        runs[f"{name}/mode"] = lambda m=model, o=opt: accumulation_step(m, [batch], spec.loss, o)
        runs[f"{name}/noop"] = lambda m=noop, o=noop_opt: accumulation_step(m, [batch], spec.loss, o)
        if mode.python_hook:
            # the mode's real hook, its collectives local copies: the hook's own work as a step shows it
            twin = parallelize(copy.deepcopy(base), mode.comm, topo, device=device, state=state,
                               compression=mode.compression)
            twin_opt = torch.optim.SGD(twin.parameters(), lr=1e-3)

            def local_step(m=twin, o=twin_opt):
                with local_collectives():
                    return accumulation_step(m, [batch], spec.loss, o)

            runs[f"{name}/local"] = local_step
    times = interleaved_step_times(runs, device=device, steps=cfg.steps, warmup=cfg.warmup_steps, sync=rank.sync)
    agree = {name: ranks_agree(model) for name, model in models.items()}  # collective: every rank
    windows = {name: _mean_over_ranks(logs[name].sizes.windows(cfg.steps), device) for name in cfg.modes}
    # the hook's own work: per step, the twin with local collectives minus the no-op twin timed next to it
    hook_cpu = {name: _median([a - b for a, b in zip(times[f"{name}/local"], times[f"{name}/noop"])])
                for name in cfg.modes if f"{name}/local" in times}
    codec = {}
    for name in cfg.modes:
        mode = RUN_MODES.get(name)
        if mode.compression != "quant2bit":
            continue
        elems = [b // FLOAT32_BYTES for b in logs[name].layout()]
        state_cfg = models[name].compression_state.config
        mine = codec_step_seconds(elems, _plain_fraction(models[name]), topo, hierarchical=mode.comm != "ddp",
                                  chunk_size=state_cfg.chunk_size, repeats=cfg.codec_repeats, device=device)
        slowest = torch.tensor([mine], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(slowest, op=torch.distributed.ReduceOp.MAX)  # the slowest rank sets the step
        codec[name] = float(slowest.item())
    if not rank.lead:
        return
    writer.add("gradient_elements", float(grad_elems), "", labels=phase)
    for name in cfg.modes:
        labels = {"mode": name, **phase}
        layout = logs[name].layout()
        for comm in ("mode", "noop", "local"):
            for i, t in enumerate(times.get(f"{name}/{comm}", [])):
                writer.add("step_time", t, "s", step=i, labels={**labels, "comm": comm})
        if name in hook_cpu:
            writer.add("hook_cpu_time", hook_cpu[name], "s", labels=labels,
                       text="the comm hook's own work in a step: per step, the step with the real hook and its "
                            "collectives replaced by local copies minus the no-op step timed next to it (median over "
                            f"{cfg.steps} steps, slowest ranks; below 0: noise)")
        for i, w in enumerate(windows[name]):
            writer.add("overlap_window", w, "s", step=i, labels=labels,
                       text=None if i else "per bucket in reduction order, the backward compute left when DDP "
                                           "launches it (no-op twin, median over its timed steps, mean over ranks)")
        writer.add("bucket_count", float(len(layout)), "", labels=labels,
                   text="bucket bytes in reduction order: " + ",".join(map(str, layout)))
        for i, nbytes in enumerate(layout):
            writer.add("bucket_bytes", float(nbytes), "B", step=i, labels=labels)
        writer.add("plain_fraction", _plain_fraction(models[name]), "fraction", labels=labels,
                   text="share of gradient elements the hook sent uncompressed (layer norms; 0: no compression)")
        # hooks.hierarchical_allreduce_ and the 2-bit hook's intra-node stages are all-reduces on CPU tensors
        two_level = MODES.get(RUN_MODES.get(name).comm).uses_groups
        via = two_level and (state.intra_via_allreduce if state.intra_via_allreduce is not None
                             else device.type != "cuda")
        writer.add("intra_via_allreduce", float(via), "bool", labels=labels)
        if name in codec:
            writer.add("codec_time", codec[name], "s", labels=labels,
                       text="the 2-bit hook's coding of one step's buckets without its collectives (median over "
                            f"{cfg.codec_repeats}, slowest rank)")
        writer.add("params_agree", float(agree[name]), "bool", labels=labels,
                   text="parameter checksums equal on every rank after the timed steps")
        steps = sorted(times[f"{name}/mode"])
        progress(f"phase {phase['phase']} ({phase['link_rate']}): {name} step p50 {steps[len(steps) // 2] * 1e3:.1f} "
                 f"ms, no-op p50 {sorted(times[f'{name}/noop'])[len(steps) // 2] * 1e3:.1f} ms")


def _median(values: list[float]) -> float:
    vals = sorted(values)
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def run_worker(cfg: ScaleModelConfig, topo: Topology, writer: RecordWriter) -> None:
    """Entry point on every rank (see :func:`hpcbench.dist.launch`)."""
    from hpcbench.dist.worker import rank_setup

    rank = rank_setup(cfg, topo)
    phase = current_phase()
    if rank.lead:
        writer.add("topology", None, "", text=topo.describe(),
                   labels={"nodes": topo.nodes, "ranks_per_node": topo.ranks_per_node, "emulated": topo.emulated,
                           **phase})
    time_collectives(cfg, topo, rank, writer, phase)
    train_modes(cfg, topo, rank, writer, phase)
