"""What runs on every rank of ``practice``: one training phase per fault on the last node, the gate's records (C12).

:func:`launch_practice` (the driver, in the notebook) makes a small weather data set in the
task's folder, then :func:`run_worker` runs on every rank. First a healthy calibration of
``calibration_s``: its step-time spread is C12's regime fact (:func:`calibrate_spread`,
:mod:`hpcbench.experiments.practice.regime`). Then per phase (``cfg.faults``, the baseline
``none`` first):

1. the fault goes on (:mod:`hpcbench.experiments.practice.faults`, made by
   :mod:`hpcbench.fault.inject` and applied with its
   :func:`~hpcbench.fault.inject.record.apply_and_record`): local rank 0 of the last node
   applies its node part (a link's tbf or flaps, a blkio or cpu cgroup, busy or thread-hungry
   processes), every rank of that node its rank part (its own threads). A part that cannot be
   applied here is recorded (``fault_injected`` / ``fault_rank_part`` without a value) with the
   reason;
2. every rank trains under DDP for ``phase_s`` (at least ``min_steps`` steps), each step
   reading its batch from the data set with the page cache dropped first, so every read
   reaches the disk; each step is split by :class:`~hpcbench.diag.step_breakdown.StepTimer`;
3. the fault is undone and the phase's rows are written, labelled ``fault``: ``step_time``
   (the whole step, data read included), ``comm_time`` (the step's exposed communication wait:
   DDP's wait for its buckets after the last gradient, a slower rank's lateness included),
   ``data_time`` and every ``read_time``: what :func:`hpcbench.practice.gates.evaluate_gate`
   reads. The labels are the same on every rank, so the gate sees one series per phase.
"""

from __future__ import annotations

import statistics
from contextlib import nullcontext
from typing import Any

from hpcbench.core.results import RecordWriter
from hpcbench.dist.topology import Topology
from hpcbench.experiments.practice.config import NO_FAULT, PracticeConfig
from hpcbench.fault.phases import launch_with_data, start_training, timed_steps


def launch_practice(task: Any):
    """Make the data set in the driver, then run :func:`run_worker` on the task's ranks."""
    return launch_with_data(task, run_worker, "practice")


def run_worker(cfg: PracticeConfig, topo: Topology, writer: RecordWriter) -> None:
    """Entry point on every rank (see :func:`hpcbench.dist.launch`)."""
    import torch.distributed as dist

    from hpcbench.diag.step_breakdown import STEP, StepTimer
    from hpcbench.dist.worker import progress
    from hpcbench.fault.inject import node_fault_for_phase, rank_part_for_phase

    run = start_training(cfg, topo, writer)
    rank, device, spec, model, opt, batches = run.rank, run.rank.device, run.spec, run.model, run.opt, run.batches
    site, target = run.site, run.site.node
    node = topo.node_name
    injector = node == target and topo.local_rank == 0
    timer = StepTimer(device, annotate=False)
    reads: list[float] = []

    def step() -> dict[str, float]:
        with timer.phase("data_wait"):
            x, y = batches.next(lambda seconds, nbytes: reads.append(seconds))
        with timer.phase("forward"):
            loss = spec.loss(model(x.to(device)), y.to(device))
        timer.backward(loss)
        with timer.phase("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        rank.sync()
        return timer.end_step()

    # C12's regime (practice/regime.py): the healthy step-time spread, in steps of its own before the phases
    dist.barrier()
    for _ in range(cfg.warmup_steps):
        step()
    calibrate_spread([s[STEP] for s in timed_steps(step, cfg, seconds=cfg.calibration_s)], topo, writer)
    reads.clear()

    for fault in cfg.faults:
        labels = {"fault": fault}
        dist.barrier()
        on = {"fault": fault, "node": target}
        node_part = node_fault_for_phase(fault, site, writer, on, baseline=NO_FAULT) if injector else nullcontext()
        rank_part = (rank_part_for_phase(fault, cfg, writer, on, baseline=NO_FAULT) if node == target
                     else nullcontext())
        with node_part, rank_part:
            dist.barrier()
            for _ in range(cfg.warmup_steps):
                step()
            reads.clear()
            steps = timed_steps(step, cfg)
            dist.barrier()
        for i, s in enumerate(steps):
            writer.add("step_time", s[STEP], "s", step=i, labels=labels)
            writer.add("comm_time", s.get("comm_wait", 0.0), "s", step=i, labels=labels)
            writer.add("data_time", s.get("data_wait", 0.0), "s", step=i, labels=labels)
        for i, seconds in enumerate(reads):
            writer.add("read_time", seconds, "s", step=i, labels=labels)
        times = sorted(s[STEP] for s in steps)
        progress(f"{fault}: {len(steps)} steps, step p50 {times[len(times) // 2] * 1e3:.0f} ms")


def calibrate_spread(step_times: list[float], topo: Topology, writer: RecordWriter) -> None:
    """Record the healthy steps' spread as the gate computes it: std / mean per rank (``healthy_step_cv``), and
    on rank 0 the median over ranks as the launch's regime facts. A collective call."""
    import torch
    import torch.distributed as dist

    from hpcbench.diag.step_breakdown import jitter
    from hpcbench.dist.worker import progress
    from hpcbench.experiments.practice.regime import FACT_HEALTHY_CV, FACT_HEALTHY_STEPS, GATE_REGIME
    from hpcbench.system.facts import write_facts

    mine = jitter(step_times)
    writer.add("healthy_step_cv", mine, "fraction", labels={"phase": "calibration"},
               text=f"std / mean of {len(step_times)} healthy steps before the phases (C12's regime)")
    every = [torch.zeros(1, dtype=torch.float64) for _ in range(topo.world_size)]
    dist.all_gather(every, torch.tensor([mine], dtype=torch.float64))
    median = statistics.median(float(t.item()) for t in every)
    if topo.rank == 0:
        write_facts(writer, {FACT_HEALTHY_CV: median, FACT_HEALTHY_STEPS: float(len(step_times))})
        progress(f"calibration: healthy step-time spread {median:.1%} over {len(step_times)} steps "
                 f"({GATE_REGIME.status(median)}: the guide's < {GATE_REGIME.max_cv:.1%})")
