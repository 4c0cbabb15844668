"""What runs on every rank of ``practice``: one training phase per fault on the last node, the gate's records (C12).

:func:`launch_practice` (the driver, in the notebook) makes a small weather data set in the
task's folder, then :func:`run_worker` runs on every rank. Per phase (``cfg.faults``, the
baseline ``none`` first):

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
