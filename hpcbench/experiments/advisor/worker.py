"""The ``advisor`` experiment: the driver's link phases and what runs on every rank (C14).

:func:`launch_advisor` (the driver, in the notebook) runs the regimes in phases: it sets the link
rate of the phase (:func:`~hpcbench.cluster.link_phase.link_phase`), launches the ranks on
its regimes, and puts the link back. Consecutive regimes on the same rate share a phase (and one
start of the ranks); without the emulated cluster there is nothing to reshape, so all regimes run
in one launch and the records say why.

:func:`run_worker`, per regime, on a fresh copy of the same model each:

1. probes the link collectives-style (``time`` of all_reduce per size on the world, the
   intra-node and the inter-node groups), as the baseline's records the advisor fits;
2. times, interleaved step by step, the baseline (plain DDP, flat ring), the same step under
   the no-op hook (its compute), and the techniques: ``quant2bit`` (2-bit gradient compression,
   :mod:`hpcbench.parallel.compression`), ``hierarchical`` (the two-level hook,
   :mod:`hpcbench.parallel.modes`) and ``no_sync`` (4 micro-steps accumulated under
   ``no_sync()``, one synchronisation, :mod:`hpcbench.parallel.overlap`);
3. all-reduces the baseline's bucket layout alone (its total communication) and checks that
   every technique's ranks hold identical parameters.

Per step each series records its step time and its time per sample (step / samples per rank:
the no_sync step trains 4 micro-batches), the numbers the C14 rule compares.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any, Callable

from hpcbench.advise.recommend import OVERLAP_MICRO_STEPS
from hpcbench.core.results import RecordWriter
from hpcbench.dist.topology import Topology
from hpcbench.experiments.advisor.config import BASELINE, AdvisorConfig, RegimeSettings

#: The series of one regime, in the order they are timed; ``noop`` is the baseline without communication.
NOOP = "noop"


def phases(cfg: AdvisorConfig, shaped: bool) -> list[list[str]]:
    """The regimes grouped into launches: consecutive regimes on the same link rate share one (their ranks start
    once), and without a cluster to reshape all of them do."""
    if not shaped:
        return [list(cfg.regimes)]
    groups: list[list[str]] = []
    for regime in cfg.regimes:
        if groups and cfg.settings(groups[-1][-1]).link_rate == cfg.settings(regime).link_rate:
            groups[-1].append(regime)
        else:
            groups.append([regime])
    return groups


def launch_advisor(task: Any) -> list:
    """Every phase: the link set for its regimes, the ranks launched on them, the link put back.

    Returns:
        The launches' :class:`~hpcbench.dist.launcher.LaunchResult` s.
    """
    from hpcbench.cluster.locate import cluster_of
    from hpcbench.dist import launch
    from hpcbench.cluster.link_phase import link_phase

    cfg: AdvisorConfig = task.config
    res = task.experiment.resources(cfg)
    results = []
    for regimes in phases(cfg, shaped=cluster_of() is not None):
        tag = "advisor-" + "-".join(regimes)
        phase_cfg = type(cfg).from_dict({**cfg.to_dict(), "regimes": regimes})
        phase = None
        with task.writer(f"{tag}-link") as writer:
            try:
                with link_phase(regimes, cfg.settings(regimes[0]).link_rate) as phase:
                    results.append(launch(run_worker, phase_cfg, nodes=res.nodes, ranks_per_node=res.ranks_per_node,
                                          context=task.context, out_dir=task.out_dir, tag=tag, backend=cfg.backend))
            finally:
                if phase is not None:
                    _record_phase(writer, phase)
    return results


def _record_phase(writer: RecordWriter, phase) -> None:
    """Per regime of the phase, its link: the rate it ran on (when shaped), whether it was shaped and put back."""
    from hpcbench.cluster.network import parse_rate

    for regime in phase.names:
        labels = {"regime": regime}
        if phase.shaped:
            writer.add("link_rate_bps", parse_rate(phase.requested), "bit/s", labels=labels, text=phase.describe())
        else:
            writer.add("link_rate_bps", None, "bit/s", labels=labels, text=phase.describe())
        writer.add("link_shaped", 1.0 if phase.shaped else 0.0, "bool", labels=labels, text=phase.describe())
        if phase.restored is not None:
            writer.add("link_restored", 1.0 if phase.restored else 0.0, "bool", labels=labels,
                       text=f"the cluster's links back at {phase.original}: {'yes' if phase.restored else 'NO'}")


# -- on every rank ---------------------------------------------------------------------------

@dataclass
class _Series:
    """One way of training the regime's model: its DDP copy, optimizer and micro-batches per step."""

    name: str
    model: Any
    optimizer: Any
    micro: int
    no_sync: bool = False


def _probe(cfg: AdvisorConfig, topo: Topology, hier: Any, device: Any, sync: Callable[[], None]
           ) -> list[tuple[str, int, int, list[float]]]:
    """(group kind, group ranks, bytes, seconds per iteration: the slowest rank's) of all_reduce per size.

    All groups of a kind run at once, each rank in its own, as DDP's two-level stages do; the
    inter-node groups share each node's link (hpcbench.scale.alpha_beta charges them per node).
    """
    import torch
    import torch.distributed as dist

    groups = [("world", None, topo.world_size)]
    if topo.ranks_per_node > 1:
        groups.append(("intra_node", hier.intra_group, topo.ranks_per_node))
    if topo.nodes > 1:
        groups.append(("inter_node", hier.inter_group, topo.nodes))
    out = []
    for kind, group, n in groups:
        for size in sorted(set(cfg.probe_sizes)):
            elems = max(n, size // 4 // n * n)
            buf = torch.ones(elems, dtype=torch.float32, device=device)
            dist.barrier()
            dist.all_reduce(buf, group=group)  # warm-up: connections, buffers
            sync()
            times = []
            for _ in range(cfg.probe_iters):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(buf, group=group)
                sync()
                times.append(time.perf_counter() - t0)
            out.append((kind, n, elems * 4, times))
    flat = torch.tensor([t for *_, ts in out for t in ts], dtype=torch.float64, device=device)
    dist.all_reduce(flat, op=dist.ReduceOp.MAX)
    flat = flat.cpu().tolist()
    per = cfg.probe_iters
    return [(kind, n, nbytes, flat[i * per:(i + 1) * per]) for i, (kind, n, nbytes, _) in enumerate(out)]


def _plain_fraction(model: Any) -> float:
    """Share of gradient elements quant2bit leaves uncompressed (names matching its skip list): the model's."""
    from hpcbench.parallel.compression import DEFAULT_SKIP, is_skipped

    total = plain = 0
    for mod_name, mod in model.named_modules():
        for p_name, p in mod.named_parameters(recurse=False):
            total += p.numel()
            if is_skipped(f"{mod_name}.{p_name}" if mod_name else p_name, DEFAULT_SKIP, type(mod).__name__):
                plain += p.numel()
    return plain / total if total else 0.0


def _build(base: Any, s: RegimeSettings, topo: Topology, device: Any, hier: Any, lr: float):
    """The baseline, its no-op twin (with the log of DDP's buckets) and the techniques, on copies of ``base``."""
    import torch

    from hpcbench.parallel.hooks import BucketLog
    from hpcbench.parallel.modes import parallelize

    common = dict(bucket_cap_mb=s.bucket_cap_mb, device=device)
    log = BucketLog()
    models = {
        BASELINE: (parallelize(copy.deepcopy(base), "ddp", topo, **common), 1, False),
        NOOP: (parallelize(copy.deepcopy(base), "ddp", topo, comm="noop", bucket_log=log, **common), 1, False),
        "quant2bit": (parallelize(copy.deepcopy(base), "ddp", topo, compression="quant2bit", **common), 1, False),
        "hierarchical": (parallelize(copy.deepcopy(base), "hierarchical", topo, state=hier, **common), 1, False),
        # the advisor's k (the guide's C9 4): what it predicts for accumulation is what runs here
        "no_sync": (parallelize(copy.deepcopy(base), "ddp", topo, **common), OVERLAP_MICRO_STEPS, True),
    }
    series = [_Series(name, m, torch.optim.SGD(m.parameters(), lr=lr), micro, no_sync)
              for name, (m, micro, no_sync) in models.items()]
    return series, log


def _labels(s: RegimeSettings, technique: str, **extra: Any) -> dict[str, Any]:
    return {"regime": s.name, "technique": technique, "model": s.model, "batch_size": s.batch_size,
            "bucket_cap_mb": s.bucket_cap_mb, **extra}


def run_worker(cfg: AdvisorConfig, topo: Topology, writer: RecordWriter) -> None:
    """Entry point on every rank (see :func:`hpcbench.dist.launch`)."""
    import torch

    from hpcbench.dist.worker import progress, rank_setup
    from hpcbench.models import MODELS
    from hpcbench.parallel.hooks import HierarchicalState
    from hpcbench.parallel.overlap import accumulation_step, interleaved_step_times, ranks_agree, time_bucket_allreduces

    rank = rank_setup(cfg, topo)
    device, lead = rank.device, rank.lead
    if lead:
        writer.add("topology", None, "", text=topo.describe(),
                   labels={"nodes": topo.nodes, "ranks_per_node": topo.ranks_per_node, "emulated": topo.emulated})
    hier = HierarchicalState.from_topology(topo)
    for regime in cfg.regimes:
        s = cfg.settings(regime)
        spec = MODELS.get(s.model)
        torch.manual_seed(cfg.seed)  # the same initial weights on every rank
        base = spec.build().to(device)
        micro = [spec.synthetic_batch(s.batch_size, device=device, seed=cfg.seed * 100003 + topo.rank * 1009 + k)
                 for k in range(OVERLAP_MICRO_STEPS)]
        base_labels = _labels(s, BASELINE)
        probe = _probe(cfg, topo, hier, device, rank.sync)
        series, log = _build(base, s, topo, device, hier, cfg.lr)

        def step_of(x: _Series) -> Callable[[], None]:
            return lambda: accumulation_step(x.model, micro[:x.micro], spec.loss, x.optimizer, no_sync=x.no_sync)

        times = interleaved_step_times({x.name: step_of(x) for x in series}, device=device, steps=cfg.steps,
                                       warmup=cfg.warmup_steps, sync=rank.sync)
        layout = log.layout()
        dtype = next(base.parameters()).dtype
        alone = time_bucket_allreduces(layout, device=device, dtype=dtype, repeats=cfg.layout_repeats, sync=rank.sync)
        agree = {x.name: ranks_agree(x.model) for x in series if x.name != NOOP}
        progress(f"{regime}: " + ", ".join(f"{x.name} {sorted(times[x.name])[len(times[x.name]) // 2] * 1e3:.1f} ms"
                                           for x in series))
        if not lead:
            continue
        for kind, n, nbytes, ts in probe:
            labels = {**base_labels, "op": "all_reduce", "size_bytes": nbytes, "group": kind, "group_ranks": n}
            for i, t in enumerate(ts):
                writer.add("time", t, "s", step=i, labels=labels)
        writer.add("bucket_count", len(layout), "", labels=base_labels,
                   text="bucket bytes in reduction order: " + ",".join(map(str, layout)))
        writer.add("gradient_bytes", sum(p.numel() * p.element_size() for p in base.parameters()), "B",
                   labels=base_labels)
        writer.add("plain_fraction", _plain_fraction(base), "fraction", labels=base_labels,
                   text="share of gradient elements whose names quant2bit leaves uncompressed (a model property)")
        for i, t in enumerate(alone):
            writer.add("sync_alone_time", t, "s", step=i, labels=base_labels)
        for x in series:
            technique = BASELINE if x.name == NOOP else x.name
            comm = NOOP if x.name == NOOP else "mode"
            labels = _labels(s, technique, comm=comm)
            samples = x.micro * s.batch_size  # per rank per step
            for i, t in enumerate(times[x.name]):
                writer.add("step_time", t, "s", step=i, labels=labels)
                writer.add("time_per_sample", t / samples, "s", step=i, labels=labels)
            if x.name in agree:
                writer.add("params_agree", 1.0 if agree[x.name] else 0.0, "bool", labels=_labels(s, technique),
                           text="every rank's parameters bit-identical after the timed steps")
        del series, base
