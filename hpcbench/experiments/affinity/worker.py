"""The ``affinity`` experiment on every rank (T-affinity, guide sec. 2.3): each common mistake against the right way.

:func:`run_worker` reads this node's topology, makes the binding plan
(:func:`hpcbench.affinity.plan.plan_binding`) and records it as the job script would carry it
(plan table, ``srun`` arguments, ``numactl`` lines, sbatch text). Then, per mistake of the
config, it times the mistake and the right way as one pair, **interleaved step by step** in
this one task (step i of both settings back to back, their order alternating), so both see
the same machine load:

* ``oversubscription`` (every rank): DDP training steps with ``mistake_threads`` intra-op
  threads per rank (default: every core, torch's choice without ``OMP_NUM_THREADS``) against
  cores / ranks threads;
* ``binding`` (every rank): the same steps with the plan's binding applied
  (:func:`hpcbench.affinity.applied.apply_binding`) against the rank left on every core it was
  started with; what each rank really got (:func:`~hpcbench.affinity.applied.observed_binding`)
  is recorded in both settings, so a plan that was not applied shows;
* ``loader`` (rank 0): one rank + one DataLoader worker that decodes and blurs every image;
  the worker pinned to the rank's own cores against the plan's ``loader_cpus``;
* ``hugepages`` (rank 0): random 8-byte reads over an anonymous buffer advised
  ``MADV_NOHUGEPAGE`` against one advised ``MADV_HUGEPAGE`` (this process only; no global
  setting changes); ``AnonHugePages`` of ``/proc/self/smaps`` says whether huge pages were
  really used;
* ``numa`` (rank 0): the same reads over memory bound to a remote NUMA node against the local
  one; on a node with one NUMA node nothing is timed and the record says why.

Every timed setting is checked against what the process really got (threads, CPUs, the
worker's CPUs, huge pages, pages per NUMA node); the summary takes a pair whose check failed
out of every verdict. Other ranks wait at a barrier while rank 0 times a single-rank pair.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Callable

from hpcbench.affinity.applied import cpus_allowed_list
from hpcbench.core.errors import ConfigError
from hpcbench.core.results import RecordWriter
from hpcbench.dist.topology import Topology
from hpcbench.experiments.affinity.config import SINGLE_RANK, AffinityConfig
from hpcbench.models import MODELS

MISTAKE, RIGHT = "mistake", "right"
#: x86-64 and aarch64 (4 KiB base pages) transparent huge page size.
HUGE_PAGE = 2 << 20
#: A DataLoader sample is decoded at this multiple of image_size, blurred, then pooled down (decode + resize).
DECODE_SCALE = 4
#: The share of the huge-page buffer that must sit in AnonHugePages for the pair to count.
MIN_HUGE_SHARE = 0.5
#: The share of a NUMA buffer's pages that must sit on the intended node for the pair to count.
MIN_NODE_SHARE = 0.9
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
THP_DEFRAG = "/sys/kernel/mm/transparent_hugepage/defrag"


@dataclass
class Pair:
    """What every pair's runner gets: the config, this rank, the node and its plan, where to write."""

    cfg: AffinityConfig
    topo: Topology
    writer: RecordWriter
    node: Any
    plan: Any
    start_cpus: frozenset[int]
    """The CPUs this rank was started with: what an unbound rank may run on."""
    plan_error: str = ""
    """Why there is no plan for the config's ranks (``plan`` is None then)."""

    @property
    def lead(self) -> bool:
        return self.topo.rank == 0

    def labels(self, mistake: str, setting: str, what: str) -> dict[str, Any]:
        return {"mistake": mistake, "setting": setting, "what": what}

    def not_applicable(self, mistake: str, why: str) -> None:
        if self.lead:
            self.writer.add("not_applicable", None, "", labels={"mistake": mistake}, text=why)


# -- what a process really runs on ------------------------------------------------------

def pin_threads(pid: int, cpus: Any) -> None:
    """Every thread of process ``pid`` onto ``cpus``.

    ``sched_setaffinity`` moves one thread; threads made before it (OpenMP's pool, gloo's
    I/O threads, a DataLoader worker's) keep their old mask unless moved one by one.
    """
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), set(cpus))
        except (ProcessLookupError, FileNotFoundError):
            pass  # the thread ended meanwhile


def _thp_setting(path: str) -> str:
    """The bracketed choice of a THP sysfs file (``always [madvise] never`` -> ``madvise``)."""
    try:
        text = open(path).read()
    except OSError:
        return "absent"
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else text.strip()


class AnonBuffer:
    """An anonymous private mapping of ``nbytes``, 2 MiB aligned, advised and touched before use."""

    def __init__(self, nbytes: int, advice: int | None):
        import numpy as np

        self.nbytes = nbytes
        self._map = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        view = ctypes.c_char.from_buffer(self._map)
        base = ctypes.addressof(view)
        del view  # an exported buffer would keep the mapping from closing
        offset = (-base) % HUGE_PAGE  # khugepaged and the fault path only use 2 MiB-aligned ranges
        self.address = base + offset
        if advice is not None:
            self._map.madvise(advice, offset, nbytes)
        self.array = np.frombuffer(self._map, dtype=np.uint64, count=nbytes // 8, offset=offset)
        self.array[:] = 1  # first touch: the fault decides the page size (and, under a mempolicy, the node)

    def smaps_field(self, field: str) -> int:
        """Bytes of ``field`` (e.g. ``AnonHugePages``) in the mappings overlapping this buffer."""
        total, inside = 0, False
        end = self.address + self.nbytes
        with open("/proc/self/smaps") as fh:
            for line in fh:
                head = line.split(None, 1)[0]
                if "-" in head and ":" not in head:
                    lo, hi = (int(x, 16) for x in head.split("-"))
                    inside = lo < end and hi > self.address
                elif inside and line.startswith(field + ":"):
                    total += int(line.split()[1]) * 1024
        return total

    def pages_per_node(self) -> dict[int, int]:
        """Pages of this buffer per NUMA node, from ``/proc/self/numa_maps``."""
        counts: dict[int, int] = {}
        end = self.address + self.nbytes
        with open("/proc/self/numa_maps") as fh:
            for line in fh:
                parts = line.split()
                start = int(parts[0], 16)
                if not (self.address - HUGE_PAGE <= start < end):
                    continue
                for part in parts[1:]:
                    if part.startswith("N") and "=" in part:
                        node, pages = part[1:].split("=")
                        counts[int(node)] = counts.get(int(node), 0) + int(pages)
        return counts

    def close(self) -> None:
        del self.array
        self._map.close()


# -- timing ------------------------------------------------------------------------------

def interleaved(settings: dict[str, tuple[Callable[[], None], Callable[[], None]]], warmup: int, steps: int,
                barrier: Callable[[], None] = lambda: None) -> dict[str, list[float]]:
    """Seconds per timed step of every setting, the settings taking turns step by step.

    Args:
        settings: name -> (prepare, step); ``prepare`` switches to the setting (untimed),
            ``step`` is timed.
        barrier: called before every timed step (every rank starts it together).
    """
    names = list(settings)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(warmup + steps):
        for name in (names if i % 2 == 0 else names[::-1]):  # neither setting always goes first
            prepare, step = settings[name]
            prepare()
            barrier()
            start = time.perf_counter()
            step()
            elapsed = time.perf_counter() - start
            if i >= warmup:
                times[name].append(elapsed)
    return times


def _record_times(pair: Pair, mistake: str, times: dict[str, list[float]], whats: dict[str, str]) -> None:
    if not pair.lead:
        return
    for setting, values in times.items():
        for step, t in enumerate(values):
            pair.writer.add("step_time", t, "s", step=step, labels=pair.labels(mistake, setting, whats[setting]))


def _record_applied(pair: Pair, mistake: str, setting: str, ok: bool, text: str, observed: Any = None) -> None:
    """Every rank records whether it really ran the setting, and what it got."""
    labels = {"mistake": mistake, "setting": setting, "local_rank": pair.topo.local_rank}
    pair.writer.add("setting_applied", float(ok), "bool", labels=labels, text=text)
    if observed is not None:
        pair.writer.add("observed_binding", None, "", labels=labels, text=json.dumps(observed, default=str))


def _training(pair: Pair, ddp: bool):
    """(model, step function) of the config's model on one synthetic batch; DDP across the ranks when ``ddp``."""
    import torch

    spec = MODELS.get(pair.cfg.model)
    torch.manual_seed(pair.cfg.seed)
    model = spec.build()
    if ddp:
        from hpcbench.parallel.modes import parallelize

        model = parallelize(model, "ddp", pair.topo, device=torch.device("cpu"))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = spec.synthetic_batch(pair.cfg.batch_size, device="cpu", seed=pair.cfg.seed * 1009 + pair.topo.rank,
                                image_size=pair.cfg.image_size)

    def train_on(inputs: Any, targets: Any) -> None:
        opt.zero_grad(set_to_none=True)
        spec.loss(model(inputs), targets).backward()
        opt.step()

    return train_on, (x, y)


# -- the pairs ------------------------------------------------------------------------------

def right_threads(pair: Pair) -> int:
    """Intra-op threads per rank that fill the node's usable cores once: cores / ranks (at least 1)."""
    return max(1, len(pair.start_cpus) // pair.topo.ranks_per_node)


def time_oversubscription(pair: Pair) -> None:
    import torch
    import torch.distributed as dist

    ranks, cores = pair.topo.ranks_per_node, len(pair.start_cpus)
    wrong, right = pair.cfg.mistake_threads or cores, right_threads(pair)
    if ranks * wrong <= cores:
        pair.not_applicable("oversubscription", f"{ranks} ranks x {wrong} threads = {ranks * wrong} do not exceed "
                                                f"the {cores} usable cores: nothing is oversubscribed")
    train_on, batch = _training(pair, ddp=True)
    seen: set[str] = set()

    def use(setting: str, threads: int) -> None:
        torch.set_num_threads(threads)
        if setting not in seen:
            seen.add(setting)
            got = torch.get_num_threads()
            _record_applied(pair, "oversubscription", setting, got == threads,
                            f"{got} intra-op threads, {threads} intended")

    whats = {MISTAKE: f"{ranks} ranks x {wrong} threads on {cores} cores",
             RIGHT: f"{ranks} ranks x {right} thread(s) on {cores} cores"}
    times = interleaved({MISTAKE: (partial(use, MISTAKE, wrong), partial(train_on, *batch)),
                         RIGHT: (partial(use, RIGHT, right), partial(train_on, *batch))},
                        pair.cfg.warmup_steps, pair.cfg.steps, dist.barrier)
    torch.set_num_threads(right)
    _record_times(pair, "oversubscription", times, whats)


def time_binding(pair: Pair) -> None:
    import torch
    import torch.distributed as dist

    from hpcbench.affinity.applied import apply_binding, binding_mismatches, observed_binding, set_memory_policy
    from hpcbench.affinity.topology import format_cpulist

    if pair.plan is None:
        pair.not_applicable("binding", f"no plan: {pair.plan_error}")
        return
    binding = pair.plan.bindings[pair.topo.local_rank]
    threads = right_threads(pair)
    torch.set_num_threads(threads)
    train_on, batch = _training(pair, ddp=True)
    seen: set[str] = set()

    def bound() -> None:
        apply_binding(binding)  # the whole plan: CPUs, memory, threads, device and NIC variables
        pin_threads(os.getpid(), binding.cpus)  # also the threads that existed before (gloo's, OpenMP's)
        if RIGHT not in seen:
            seen.add(RIGHT)
            observed = observed_binding()
            wrong = binding_mismatches(binding, observed)
            _record_applied(pair, "binding", RIGHT, not wrong,
                            "; ".join(wrong) or f"bound to CPUs {format_cpulist(binding.cpus)} as planned", observed)

    def unbound() -> None:
        pin_threads(os.getpid(), pair.start_cpus)
        if len(pair.node.numa) > 1:
            set_memory_policy("default", ())  # apply_binding bound memory to the rank's node
        if MISTAKE not in seen:
            seen.add(MISTAKE)
            observed = observed_binding()
            got = cpus_allowed_list(os.getpid())
            free = got == format_cpulist(pair.start_cpus)
            _record_applied(pair, "binding", MISTAKE, free,
                            f"Cpus_allowed_list {got}" + ("" if free else f", expected every start CPU "
                                                                         f"{format_cpulist(pair.start_cpus)}"),
                            observed)

    ranks = pair.topo.ranks_per_node
    whats = {MISTAKE: f"{ranks} ranks unbound (each may run on CPUs {format_cpulist(pair.start_cpus)})",
             RIGHT: f"{ranks} ranks bound as planned (rank {pair.topo.local_rank}: CPUs "
                    f"{format_cpulist(binding.cpus)})"}
    times = interleaved({MISTAKE: (unbound, partial(train_on, *batch)), RIGHT: (bound, partial(train_on, *batch))},
                        pair.cfg.warmup_steps, pair.cfg.steps, dist.barrier)
    pin_threads(os.getpid(), pair.start_cpus)
    _record_times(pair, "binding", times, whats)


class DecodedImages:
    """A map-style dataset whose every item costs CPU as decoding and augmenting would: a seeded image at
    DECODE_SCALE x the size, ``work`` 3x3 blur passes, pooled down to ``image_size`` and normalised."""

    def __init__(self, spec: Any, image_size: int, work: int, seed: int, length: int):
        self.spec, self.image_size, self.work, self.seed, self.length = spec, image_size, work, seed, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[Any, Any]:
        import torch
        import torch.nn.functional as F

        x, y = self.spec.synthetic_batch(1, device="cpu", seed=self.seed + i,
                                         image_size=self.image_size * DECODE_SCALE)
        kernel = torch.full((3, 3, 3, 3), 1.0 / 27)
        for _ in range(self.work):
            x = F.conv2d(x, kernel, padding=1)
        x = F.avg_pool2d(x, DECODE_SCALE)[0]
        # normalised as a real pipeline does; blurring shrinks the values towards denormals, which would make
        # the training step, not the worker's placement, the thing measured
        return (x - x.mean()) / (x.std() + 1e-6), y[0]


def _send_pid(queue: Any, worker_id: int) -> None:
    queue.put(os.getpid())


def time_loader(pair: Pair) -> None:
    import multiprocessing

    from torch.utils.data import DataLoader

    from hpcbench.affinity.applied import apply_binding
    from hpcbench.affinity.plan import plan_binding
    from hpcbench.affinity.topology import format_cpulist

    try:
        plan = plan_binding(pair.node, 1, loader_workers_per_rank=1)
    except ConfigError as exc:
        pair.not_applicable("loader", f"no plan for 1 rank + 1 DataLoader worker: {exc}")
        return
    binding, loader_cpus = plan.bindings[0], tuple(plan.loader_cpus[0]) if plan.loader_cpus else ()
    if not loader_cpus or set(loader_cpus) & set(binding.cpus):
        pair.not_applicable("loader", f"the plan for 1 rank + 1 DataLoader worker keeps no cores apart for the "
                                      f"worker (rank CPUs {format_cpulist(binding.cpus)}, loader CPUs "
                                      f"{format_cpulist(loader_cpus) or 'none'}): "
                                      + "; ".join(getattr(plan, "notes", ()) or ()))
        return
    apply_binding(binding, device_env=False)  # the rank on its compute cores, with their thread count
    pin_threads(os.getpid(), binding.cpus)
    cfg = pair.cfg
    train_on, _ = _training(pair, ddp=False)
    batches = (cfg.warmup_steps + cfg.steps) * 2 * cfg.loader_batches + 4
    context = multiprocessing.get_context("fork")  # DataLoader's own default on Linux; the queue must match
    pids = context.SimpleQueue()
    loader = DataLoader(DecodedImages(MODELS.get(cfg.model), cfg.image_size, cfg.sample_work, cfg.seed,
                                      batches * cfg.batch_size),
                        batch_size=cfg.batch_size, num_workers=1, prefetch_factor=1, persistent_workers=True,
                        worker_init_fn=partial(_send_pid, pids), multiprocessing_context=context)
    batches_iter = iter(loader)
    worker = pids.get()
    seen: set[str] = set()

    def place(setting: str, cpus: tuple[int, ...]) -> None:
        pin_threads(worker, cpus)
        if setting not in seen:
            seen.add(setting)
            got = cpus_allowed_list(worker)
            _record_applied(pair, "loader", setting, got == format_cpulist(cpus),
                            f"worker Cpus_allowed_list {got}, intended {format_cpulist(cpus)}; rank "
                            f"{cpus_allowed_list(os.getpid())}")

    def step() -> None:
        for _ in range(cfg.loader_batches):
            train_on(*next(batches_iter))

    whats = {MISTAKE: f"worker on the rank's CPUs {format_cpulist(binding.cpus)}",
             RIGHT: f"worker on the plan's loader CPUs {format_cpulist(loader_cpus)}"}
    try:
        times = interleaved({MISTAKE: (partial(place, MISTAKE, binding.cpus), step),
                             RIGHT: (partial(place, RIGHT, loader_cpus), step)},
                            cfg.warmup_steps, cfg.steps)
    finally:
        batches_iter = loader = None  # the last references: the persistent worker ends with its iterator
        pin_threads(os.getpid(), pair.start_cpus)
    _record_times(pair, "loader", times, whats)
    pair.writer.add("plan.table", None, "", labels={"plan": "loader"}, text=_plan_text(plan)["table"])


def _random_reads(pair: Pair):
    import numpy as np

    n = pair.cfg.buffer_bytes // 8
    index = np.random.default_rng(pair.cfg.seed).integers(0, n, pair.cfg.reads_per_step, dtype=np.int64)

    def reads(buffer: AnonBuffer) -> None:
        buffer.array[index].sum()

    return reads


def time_hugepages(pair: Pair) -> None:
    mode, defrag = _thp_setting(THP_ENABLED), _thp_setting(THP_DEFRAG)
    if mode in ("never", "absent"):
        pair.not_applicable("hugepages", f"transparent huge pages are {mode} on this node ({THP_ENABLED}): "
                                         f"MADV_HUGEPAGE cannot give any")
        return
    nbytes = pair.cfg.buffer_bytes
    buffers = {MISTAKE: AnonBuffer(nbytes, mmap.MADV_NOHUGEPAGE), RIGHT: AnonBuffer(nbytes, mmap.MADV_HUGEPAGE)}
    try:
        shares = {s: b.smaps_field("AnonHugePages") / nbytes for s, b in buffers.items()}
        for setting, share in shares.items():
            pair.writer.add("huge_page_share", share, "", labels={"mistake": "hugepages", "setting": setting})
        ok = shares[RIGHT] >= MIN_HUGE_SHARE
        _record_applied(pair, "hugepages", RIGHT, ok,
                        f"{shares[RIGHT]:.0%} of the MADV_HUGEPAGE buffer in AnonHugePages (/proc/self/smaps)"
                        + ("" if ok else f": huge pages were not really used (THP enabled={mode}, defrag={defrag}; "
                                         f"fragmented memory or a kernel without THP for this mapping)"))
        _record_applied(pair, "hugepages", MISTAKE, shares[MISTAKE] == 0.0,
                        f"{shares[MISTAKE]:.0%} of the MADV_NOHUGEPAGE buffer in AnonHugePages")
        reads = _random_reads(pair)
        size = f"{nbytes >> 20} MiB, {pair.cfg.reads_per_step:,} random reads"
        whats = {MISTAKE: f"4 KiB pages (MADV_NOHUGEPAGE), {size}", RIGHT: f"2 MiB pages (MADV_HUGEPAGE), {size}"}
        times = interleaved({s: (lambda: None, partial(reads, b)) for s, b in buffers.items()},
                            pair.cfg.warmup_steps, pair.cfg.steps)
    finally:
        for b in buffers.values():
            b.close()
    _record_times(pair, "hugepages", times, whats)


def time_numa(pair: Pair) -> None:
    from hpcbench.affinity.applied import apply_binding, observed_binding, set_memory_policy

    nodes = [n for n in pair.node.numa if n.cpus]
    if len(pair.node.numa) < 2:
        pair.not_applicable("numa", f"{len(pair.node.numa)} NUMA node (read from the topology): every byte "
                                    f"of memory is local, there is no remote node")
        return
    if pair.plan is None:
        pair.not_applicable("numa", f"no plan: {pair.plan_error}")
        return
    binding = pair.plan.bindings[pair.topo.local_rank]
    local = binding.mem_node
    remote = next((n.id for n in pair.node.numa if n.id != local and (n.memory_bytes or 0) > 0), None)
    if local is None or remote is None:
        pair.not_applicable("numa", f"{len(nodes)} NUMA nodes with CPUs, but no remote node with memory for "
                                    f"rank 0 (its memory node: {local})")
        return
    buffers = {}
    try:
        for setting, node in ((MISTAKE, remote), (RIGHT, local)):
            apply_binding(replace(binding, mem_node=node), device_env=False)  # the first touch lands under this policy
            buffers[setting] = AnonBuffer(pair.cfg.buffer_bytes, None)
            pages = buffers[setting].pages_per_node()
            share = pages.get(node, 0) / max(1, sum(pages.values()))
            _record_applied(pair, "numa", setting, share >= MIN_NODE_SHARE,
                            f"{share:.0%} of the buffer's pages on node {node} (/proc/self/numa_maps: {pages})",
                            observed_binding())
        apply_binding(binding, device_env=False)  # the CPUs stay on the local node for both settings
        reads = _random_reads(pair)
        size = f"{pair.cfg.buffer_bytes >> 20} MiB, {pair.cfg.reads_per_step:,} random reads"
        whats = {MISTAKE: f"memory on remote node {remote}, CPUs on node {local}, {size}",
                 RIGHT: f"memory on local node {local}, {size}"}
        times = interleaved({s: (lambda: None, partial(reads, b)) for s, b in buffers.items()},
                            pair.cfg.warmup_steps, pair.cfg.steps)
    finally:
        for b in buffers.values():
            b.close()
        set_memory_policy("default", ())
        pin_threads(os.getpid(), pair.start_cpus)
    _record_times(pair, "numa", times, whats)


#: Mistake -> its pair's runner (a registry, not an if/elif ladder).
PAIRS: dict[str, Callable[[Pair], None]] = {
    "oversubscription": time_oversubscription,
    "binding": time_binding,
    "loader": time_loader,
    "hugepages": time_hugepages,
    "numa": time_numa,
}


# -- the plan, as the job script carries it -----------------------------------------------------

def _plan_text(plan: Any) -> dict[str, str]:
    from hpcbench.affinity import emit

    table = "\n".join(", ".join(f"{k} {v}" for k, v in row.items() if v not in (None, ""))
                      for row in emit.plan_table(plan))
    return {"table": table, "srun": " ".join(map(str, emit.srun_args(plan)))}


def record_plan(pair: Pair) -> None:
    """The plan next to what not following it costs: table, srun arguments, numactl and env per rank, sbatch."""
    from hpcbench.affinity import emit
    from hpcbench.affinity.topology import format_cpulist

    w, plan, labels = pair.writer, pair.plan, {"plan": "ranks"}
    w.add("fact.numa_nodes", float(len(pair.node.numa)), "")
    w.add("fact.usable_cpus", float(len(pair.start_cpus)), "")
    w.add("fact.thp_mode", None, "", text=_thp_setting(THP_ENABLED))
    if plan is None:
        w.add("plan.notes", None, "", labels=labels, text=f"no plan: {pair.plan_error}")
        return
    text = _plan_text(plan)
    w.add("plan.table", None, "", labels=labels, text=text["table"])
    w.add("plan.srun", None, "", labels=labels, text=text["srun"])
    w.add("plan.sbatch", None, "", labels=labels,
          text=emit.sbatch_script(plan, nodes=1, command="python -m hpcbench rank SPEC.json"))
    notes = list(getattr(plan, "notes", ()) or ())
    if notes:
        w.add("plan.notes", None, "", labels=labels, text="\n".join(map(str, notes)))
    for b in plan.bindings:
        env = " ".join(f"{k}={v}" for k, v in emit.rank_env(b).items())
        w.add("plan.rank", None, "", labels={**labels, "local_rank": b.local_rank},
              text=f"CPUs {format_cpulist(b.cpus)}, memory node {b.mem_node}: {env} "
                   f"{' '.join(map(str, emit.numactl_argv(b)))}")


def run_worker(cfg: AffinityConfig, topo: Topology, writer: RecordWriter) -> None:
    """Entry point on every rank (see :func:`hpcbench.dist.launch`)."""
    import torch.distributed as dist

    from hpcbench.affinity.plan import plan_binding
    from hpcbench.affinity.topology import read_topology
    from hpcbench.dist.worker import progress, rank_setup

    rank_setup(cfg, topo)
    node = read_topology()
    try:
        plan, plan_error = plan_binding(node, topo.ranks_per_node), ""
    except ConfigError as exc:  # more ranks than whole cores: the oversubscription pair still runs
        plan, plan_error = None, str(exc)
    pair = Pair(cfg, topo, writer, node, plan, frozenset(os.sched_getaffinity(0)), plan_error)
    if pair.lead:
        writer.add("topology", None, "", text=topo.describe(), labels={"nodes": topo.nodes,
                                                                       "ranks_per_node": topo.ranks_per_node})
        record_plan(pair)
    for mistake in cfg.mistakes:
        dist.barrier()
        if mistake not in SINGLE_RANK or pair.lead:
            started = time.perf_counter()
            PAIRS[mistake](pair)
            progress(f"{mistake}: timed in {time.perf_counter() - started:.1f} s")
    dist.barrier()
