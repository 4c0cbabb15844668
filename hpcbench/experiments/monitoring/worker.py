"""What runs on every rank of ``monitoring``: training phases, each with one real fault on the last node (C6).

:func:`launch_monitoring` (the driver, in the notebook) makes a small weather data set in the
task's folder, then :func:`run_worker` runs on every rank. Per phase (``cfg.faults``, the
baseline ``none`` first):

1. local rank 0 of every node starts the sampler (:class:`hpcbench.monitor.sampler.Sampler`)
   with the labels ``fault`` and ``node``, fed the node's read latencies;
2. local rank 0 of the last node applies the fault (:mod:`hpcbench.fault.inject`, through its
   :func:`~hpcbench.fault.inject.record.apply_and_record`) to its node: the link's tbf, the
   ranks' blkio cgroup, busy processes on the ranks' CPUs. A fault that cannot be applied here
   is recorded ``fault_injected`` NaN with the reason;
3. every rank trains under DDP for ``phase_s`` (at least ``min_steps`` steps), each step
   reading its batch from the data set with the page cache dropped first, so every read
   reaches the disk; each read's time goes to the sampler's feed and to ``read_time``;
4. the fault is undone, the samplers stop, and each node's alerts (C6 thresholds, sustained
   ``sustain`` samples) become ``monitor_alert`` records.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

from hpcbench.core.results import RecordWriter
from hpcbench.dist.topology import Topology
from hpcbench.experiments.monitoring.config import NO_FAULT, MonitoringConfig
from hpcbench.experiments.monitoring.summary import RANK_UTILISATION
from hpcbench.fault.phases import launch_with_data, start_training, timed_steps


def launch_monitoring(task: Any):
    """Make the data set in the driver, then run :func:`run_worker` on the task's ranks."""
    return launch_with_data(task, run_worker, "monitoring")


#: Nice value of the sampler process where allowed (root): a monitoring agent must keep its 1 Hz on a
#: node whose CPUs the training (or a contention fault) saturates, or the fault it should show hides it.
SAMPLER_NICE = -5


@contextlib.contextmanager
def _node_sampler(cfg: MonitoringConfig, writer: RecordWriter, node: str, feed_path: Path, lead: bool,
                  windows: list[tuple[str, float, float]]) -> Iterator[None]:
    """The node's sampler for the whole task (local rank 0 only); afterwards, each phase's alerts as records.

    One sampler per node for all phases: its start (a Python process importing pandas) costs seconds
    on a loaded node, which a per-phase sampler would pay inside every phase.
    """
    if not lead:
        yield
        return
    from hpcbench.monitor.sampler import Sampler

    out = Path(writer.path).parent / f"monitor-{node}.parquet"
    sampler = Sampler(out, interval_s=cfg.interval_s, labels={"node": node}, feed=feed_path, context=writer.context)
    sampler.start(wait_ready=True)
    try:
        os.setpriority(os.PRIO_PROCESS, sampler.pid, SAMPLER_NICE)
        writer.add("sampler_nice", float(SAMPLER_NICE), "", labels={"node": node})
    except OSError as exc:
        writer.add("sampler_nice", None, "", labels={"node": node}, text=f"left at the default: {exc.strerror}")
    try:
        yield
    finally:
        sampler.stop()
    _record_alerts(cfg, writer, out, node, windows)


def _record_alerts(cfg: MonitoringConfig, writer: RecordWriter, samples: Path, node: str,
                   windows: list[tuple[str, float, float]]) -> None:
    from hpcbench.core.results import read_records
    from hpcbench.experiments.monitoring.summary import in_window
    from hpcbench.monitor.thresholds import C6_THRESHOLDS, alert_records, evaluate

    frame = read_records(samples)
    for fault, start, end in windows:
        rows = alert_records(evaluate(in_window(frame, start, end, cfg.interval_s), C6_THRESHOLDS,
                                      sustain=cfg.sustain))
        for row in rows:
            writer.add(**{**row, "labels": {**row["labels"], "fault": fault, "node": node}})
        writer.add("alerts", float(len(rows)), "", labels={"fault": fault, "node": node},
                   text="; ".join(r["text"] for r in rows) or "no C6 threshold broken for "
                                                               f"{cfg.sustain} samples in a row")


def run_worker(cfg: MonitoringConfig, topo: Topology, writer: RecordWriter) -> None:
    """Entry point on every rank (see :func:`hpcbench.dist.launch`)."""
    import torch
    import torch.distributed as dist

    from hpcbench.dist.worker import progress
    from hpcbench.fault.inject import node_fault_for_phase
    from hpcbench.monitor.sources.storage import ReadLatencyFeed

    run = start_training(cfg, topo, writer)
    rank, device, spec, model, opt, batches = run.rank, run.rank.device, run.spec, run.model, run.opt, run.batches
    target = run.site.node
    node = topo.node_name
    node_lead = topo.local_rank == 0
    feed = ReadLatencyFeed(Path(writer.path).parent.parent / f"monitor-{node}.feed")
    windows: list[tuple[str, float, float]] = []
    phase: dict[str, list] = {"read": []}

    def on_read(seconds: float, nbytes: int) -> None:
        feed.record_read(seconds)
        phase["read"].append((seconds, nbytes))

    def step() -> tuple[float, float]:
        """One timed step: (the whole step, its data read) in seconds."""
        t0 = time.perf_counter()
        x, y = batches.next(on_read)
        t1 = time.perf_counter()
        spec.loss(model(x.to(device)), y.to(device)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        rank.sync()
        return time.perf_counter() - t0, t1 - t0

    with _node_sampler(cfg, writer, node, feed.path, node_lead, windows):
        for fault in cfg.faults:
            labels = {"fault": fault, "node": node, "faulty_node": node == target}
            dist.barrier()
            with (node_fault_for_phase(fault, run.site, writer, {"fault": fault, "node": node}, baseline=NO_FAULT)
                  if node_lead and node == target else contextlib.nullcontext()):
                dist.barrier()
                window_start = time.time()
                for _ in range(cfg.warmup_steps):
                    x, y = batches.next(on_read)
                    spec.loss(model(x.to(device)), y.to(device)).backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                phase["read"].clear()
                started, cpu_start = time.perf_counter(), time.process_time()
                steps = timed_steps(step, cfg)
                busy = (time.process_time() - cpu_start) / ((time.perf_counter() - started) * torch.get_num_threads())
                dist.barrier()
                windows.append((fault, window_start, time.time()))
            if rank.lead:  # the phase's window: the sampler's rows inside it belong to this fault
                writer.add("phase", windows[-1][2] - window_start, "s", labels={"fault": fault},
                           text=json.dumps({"start": window_start, "end": windows[-1][2]}), when=window_start)
            # What `top` shows for the training process (the CPU analogue of a GPU's utilisation): its
            # CPU time over the phase's wall time x its intra-op threads; the host-wide figure would
            # count the emulated nodes' neighbours and any other load on the shared cores.
            writer.add(RANK_UTILISATION, busy, "fraction", labels=labels,
                       text="process CPU time / (wall time x intra-op threads) over the timed steps")
            for i, (step_s, data_s) in enumerate(steps):
                writer.add("step_time", step_s, "s", step=i, labels=labels)
                writer.add("data_time", data_s, "s", step=i, labels=labels)
            for i, (read_s, nbytes) in enumerate(phase["read"]):
                writer.add("read_time", read_s, "s", step=i, labels={**labels, "bytes": nbytes})
            progress(f"{fault}: {len(steps)} steps, step p50 "
                     f"{sorted(s for s, _ in steps)[len(steps) // 2] * 1e3:.0f} ms")
    feed.close()
