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

import os
import time
from contextlib import nullcontext
from typing import Any

from hpcbench.core.results import RecordWriter
from hpcbench.data.readers.cold_batches import ColdWeatherBatches, data_folder_of, prepare_weather_data
from hpcbench.dist.topology import Topology, gather_node_pids
from hpcbench.experiments.practice.config import NO_FAULT, PracticeConfig


def prepare_data(cfg: PracticeConfig, out_dir: str | os.PathLike) -> str:
    """The task's weather data set (``out_dir/data``), made once, flushed to the disk."""
    from hpcbench.models import MODELS

    spec = MODELS.get(cfg.model)
    return prepare_weather_data(out_dir, channels=spec.channels, grid=spec.grid, seed=cfg.seed,
                                command="hpcbench practice (generated for the task)")


def launch_practice(task: Any):
    """Make the data set in the driver, then run :func:`run_worker` on the task's ranks."""
    prepare_data(task.config, task.out_dir)
    return task.launch(run_worker)


def run_worker(cfg: PracticeConfig, topo: Topology, writer: RecordWriter) -> None:
    """Entry point on every rank (see :func:`hpcbench.dist.launch`)."""
    import torch
    import torch.distributed as dist

    from hpcbench.diag.step_breakdown import STEP, StepTimer
    from hpcbench.dist.worker import progress, rank_setup
    from hpcbench.fault.inject import FaultSite, node_fault_for_phase, rank_part_for_phase
    from hpcbench.models import MODELS
    from hpcbench.parallel.modes import parallelize

    rank = rank_setup(cfg, topo)
    device = rank.device
    ranks = gather_node_pids(topo)
    target = ranks[-1][0]                                   # the last node gets the faults
    node = topo.node_name
    site = FaultSite(target, [pid for n, pid in ranks if n == target], data_folder_of(writer.path), cfg)
    injector = node == target and topo.local_rank == 0
    if rank.lead:
        writer.add("topology", None, "", text=topo.describe(),
                   labels={"nodes": topo.nodes, "ranks_per_node": topo.ranks_per_node, "emulated": topo.emulated})
        writer.add("faulty_node", None, "", text=target)
    spec = MODELS.get(cfg.model)
    torch.manual_seed(cfg.seed)
    model = parallelize(spec.build().to(device), "ddp", topo, device=device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    batches = ColdWeatherBatches(site.data, rank=topo.rank, world_size=topo.world_size, seed=cfg.seed,
                                 batch_size=cfg.batch_size)
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
            steps, started = [], time.perf_counter()
            go = torch.ones(1)
            while True:
                steps.append(step())
                # rank 0's clock ends the phase for everyone, so every rank runs the same steps
                go[0] = float(time.perf_counter() - started < cfg.phase_s or len(steps) < cfg.min_steps)
                dist.broadcast(go, src=0)
                if go[0] == 0:
                    break
            dist.barrier()
        for i, s in enumerate(steps):
            writer.add("step_time", s[STEP], "s", step=i, labels=labels)
            writer.add("comm_time", s.get("comm_wait", 0.0), "s", step=i, labels=labels)
            writer.add("data_time", s.get("data_wait", 0.0), "s", step=i, labels=labels)
        for i, seconds in enumerate(reads):
            writer.add("read_time", seconds, "s", step=i, labels=labels)
        times = sorted(s[STEP] for s in steps)
        progress(f"{fault}: {len(steps)} steps, step p50 {times[len(times) // 2] * 1e3:.0f} ms")
