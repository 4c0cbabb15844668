"""What runs in ``scaling``: stages of 1, 2, 4 nodes, the gate checked before each step out (C12, C13).

:func:`run_scaling` (the driver, in the notebook) runs the configured stages in order. Each
stage is one launch of :func:`run_worker` on the first ``k`` nodes of the task's allocation
(:func:`hpcbench.dist.launch` with ``nodes=k``: ``srun`` inside a SLURM job that holds them, an
emulated split of local ranks elsewhere). On every rank the model trains under DDP; each timed
step is interleaved with the same step under a no-op communication hook, and every rank
records both step times and their difference (``comm_time``): what the gate's step-time
spread and communication share read (:mod:`hpcbench.practice.gates`). The model trains on
synthetic batches made on the device, so the gate's read P99 is absent, with the reason.

Before the timed steps of every stage whose gate decides a step out (each but the last), every
rank times ``calibration_steps`` healthy steps of their own and records their spread
(``healthy_step_cv``, std / mean): C12's regime (:mod:`hpcbench.practice.regime`), calibrated
as ``practice`` calibrates it before its phases. At the end the driver records the launch's
regime fact ``regime.healthy_step_cv``: per stage the median over ranks, the largest over the
stages that gated a step out (:func:`~hpcbench.experiments.scaling.summary.launch_spread`). The
C13 rule reads only the gates of launches in the regime.

After each stage the driver evaluates the gate on that stage's records and writes it
(``stage_gate``, ``stage_gate_check``). Before the next stage the gate must pass; otherwise
the run stops there and ``scaling_outcome`` says after which stage and which check failed, with
its value and limit. With ``continue_past_gate`` the stages go on and the record says the
procedure would have stopped (the counterfactual the C13 rule reads).
"""

from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass
from typing import Any

import pandas as pd

from hpcbench.core.results import RecordWriter, read_records
from hpcbench.dist.topology import Topology
from hpcbench.experiments.scaling.config import ScalingConfig
from hpcbench.experiments.scaling.rules import HOST_CPUS_FACT
from hpcbench.experiments.scaling.summary import HEALTHY_CV, OUTCOME, launch_spread, stage_gate, stage_spread
from hpcbench.practice.gates import GateResult
from hpcbench.practice.regime import FACT_HEALTHY_CV, FACT_HEALTHY_STEPS, GATE_REGIME

#: Driver records: the gate per stage and each of its checks (how the run ended: ``OUTCOME``).
STAGE_GATE, STAGE_GATE_CHECK = "stage_gate", "stage_gate_check"


def stage_tag(nodes: int) -> str:
    """The launch tag (file names) of the stage on ``nodes`` nodes."""
    return f"scaling-n{nodes}"


# -- every rank ------------------------------------------------------------------------------------

def run_worker(cfg: ScalingConfig, topo: Topology, writer: RecordWriter) -> None:
    """Entry point on every rank of one stage (see :func:`hpcbench.dist.launch`)."""
    import torch
    import torch.distributed as dist

    from hpcbench.diag.step_breakdown import jitter
    from hpcbench.dist.worker import progress
    from hpcbench.models import MODELS
    from hpcbench.parallel.modes import parallelize

    if topo.nodes not in cfg.stages or topo.ranks_per_node != cfg.ranks_per_node:
        raise RuntimeError(f"launched {topo.describe()}; the config's stages are {cfg.stages} x "
                           f"{cfg.ranks_per_node} rank(s)")
    cuda = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    spec = MODELS.get(cfg.model)
    torch.manual_seed(cfg.seed)
    base = spec.build().to(device)
    model = parallelize(copy.deepcopy(base), "ddp", topo, device=device)
    twin = parallelize(copy.deepcopy(base), "ddp", topo, device=device, comm="noop")
    x, y = spec.synthetic_batch(cfg.batch_size, device=device, seed=cfg.seed * 100003 + topo.rank,
                                seq_len=cfg.seq_len)
    runs = {"mode": (model, torch.optim.SGD(model.parameters(), lr=1e-4)),
            "noop": (twin, torch.optim.SGD(twin.parameters(), lr=1e-4))}
    times: dict[str, list[float]] = {"mode": [], "noop": []}

    def train_step(comm: str) -> float:
        m, opt = runs[comm]
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        spec.loss(m(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        return time.perf_counter() - t0

    labels = {"model": cfg.model, "nodes": topo.nodes, "ranks_per_node": topo.ranks_per_node}
    for _ in range(cfg.warmup_steps):
        for comm in runs:
            train_step(comm)
    if topo.nodes != cfg.stages[-1]:  # C12's regime: healthy steps of their own before a gate that decides
        healthy = [train_step("mode") for _ in range(cfg.calibration_steps)]
        writer.add(HEALTHY_CV, jitter(healthy), "fraction", labels={**labels, "phase": "calibration"},
                   text=f"std / mean of {len(healthy)} healthy steps before the stage's timed steps (C12's regime)")
    for _ in range(cfg.steps):
        for comm in runs:  # interleaved: both see the same machine state
            times[comm].append(train_step(comm))
    # A step lasts as long as its slowest rank: the throughput counts that one.
    slow = torch.tensor(times["mode"], dtype=torch.float64, device=device)
    dist.all_reduce(slow, op=dist.ReduceOp.MAX)
    for step, (t, t0) in enumerate(zip(times["mode"], times["noop"])):
        writer.add("step_time", t, "s", step=step, labels={**labels, "comm": "mode"})
        writer.add("step_time", t0, "s", step=step, labels={**labels, "comm": "noop"})
        writer.add("comm_time", t - t0, "s", step=step, labels=labels)
    if topo.rank == 0:
        items = topo.world_size * cfg.batch_size * spec.items_per_sample(seq_len=cfg.seq_len)
        for step, t in enumerate(slow.cpu().tolist()):
            writer.add("throughput", items / t, spec.throughput_unit, step=step, labels=labels)
        writer.add("topology", None, "", labels=labels, text=topo.describe())
    ordered = sorted(times["mode"])
    progress(f"{topo.nodes} node(s): step p50 {ordered[len(ordered) // 2] * 1e3:.1f} ms")


# -- the driver ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StageRun:
    """One stage as the driver saw it."""

    nodes: int
    gate: GateResult
    wall_s: float


@dataclass(frozen=True)
class ScalingRun:
    """The stages that ran, and how the run ended."""

    stages: tuple[StageRun, ...]
    stopped_after: int | None
    """nodes of the stage after which the gate stopped the run; None when every stage ran"""
    outcome: str


def _write_gate(writer: RecordWriter, index: int, nodes: int, gate: GateResult) -> None:
    labels = {"stage": index, "nodes": nodes}
    value = None if gate.passed is None else float(gate.passed)
    writer.add(STAGE_GATE, value, "", labels=labels, text=gate.explain())
    for check in gate.checks:
        state = {True: "pass", False: "fail", None: "absent"}[check.passed]
        writer.add(STAGE_GATE_CHECK, check.value, check.unit, text=f"{state}: {check.detail}",
                   labels={**labels, "check": check.name, "limit": check.limit})


def _write_regime(writer: RecordWriter, spreads: list[float | None], cfg: ScalingConfig) -> None:
    """The launch's regime facts, C12's (:mod:`hpcbench.practice.regime`): the largest healthy calibration spread
    of the stages that gated a step out; none where a stage gated without one (the launch's gates are then not
    known to have run in the regime)."""
    from hpcbench.system.facts import write_facts

    spread = launch_spread(spreads)
    if spread is not None:
        write_facts(writer, {FACT_HEALTHY_CV: spread, FACT_HEALTHY_STEPS: float(cfg.calibration_steps)})


def run_scaling(task: Any, *, echo: Any = print) -> ScalingRun:
    """Run the stages of ``task`` (a :class:`hpcbench.run.task.Task` of ``scaling``) in order.

    Args:
        task: the notebook's task; its config is a :class:`ScalingConfig`.
        echo: where progress lines go.
    Returns:
        What ran and how it ended (also recorded: ``stage_gate``, ``stage_gate_check``,
        ``scaling_outcome``).
    """
    from hpcbench.dist import launch

    cfg: ScalingConfig = task.config
    thresholds = cfg.thresholds()
    with task.writer("host") as writer:
        # Emulated nodes share this host: the C13 rule needs its CPUs to tell CPU sharing from scaling.
        writer.add(HOST_CPUS_FACT, float(os.cpu_count() or 1), "")
    done: list[StageRun] = []
    stopped, outcome = None, f"ran every stage ({', '.join(map(str, cfg.stages))} node(s))"
    would_stop: list[str] = []
    spreads: list[float | None] = []  # the healthy calibration of each stage whose gate decided a step out
    for index, nodes in enumerate(cfg.stages, start=1):
        result = launch(run_worker, cfg, nodes=nodes, ranks_per_node=cfg.ranks_per_node, context=task.context,
                        out_dir=task.out_dir, tag=stage_tag(nodes), backend=cfg.backend, echo=echo)
        records = pd.concat([read_records(p) for p in result.records], ignore_index=True)
        gate = stage_gate(records, nodes, thresholds)
        done.append(StageRun(nodes, gate, result.wall_s))
        last = index == len(cfg.stages)
        if not last:
            spreads.append(stage_spread(records, nodes))
            if echo:
                echo(f"stage {index} ({nodes} node(s)): healthy calibration spread "
                     + (f"{spreads[-1]:.1%} ({GATE_REGIME.status(spreads[-1])}: C12's < {GATE_REGIME.max_cv:.1%})"
                        if spreads[-1] is not None else "not recorded"))
        with task.writer(f"stage-n{nodes}") as writer:
            _write_gate(writer, index, nodes, gate)
            if gate.passed is not True and not last:
                why = f"after stage {index} ({nodes} node(s)): gate {gate.explain()}"
                if not cfg.continue_past_gate:
                    stopped, outcome = nodes, f"stopped {why}"
                else:
                    would_stop.append(why)
            if stopped is not None or last:
                if would_stop:
                    outcome += "; would have stopped " + would_stop[0]
                writer.add(OUTCOME, float(nodes), "nodes", labels={"stopped": stopped is not None}, text=outcome)
                _write_regime(writer, spreads, cfg)
        if echo:
            echo(f"stage {index} ({nodes} node(s)): gate {gate.explain()}")
        if stopped is not None:
            break
    if echo:
        echo(outcome)
    return ScalingRun(tuple(done), stopped, outcome)
