"""Worker side: one rank. ``python -m hpcbench rank SPEC.json`` under torchrun or srun.

Initialises the process group (gloo on CPU, NCCL on GPU), builds the config and
the topology, calls the entry point, and always writes the rank's records file,
except when the ranks never met (then nothing was measured, and the launcher may
retry on another port).

Under srun (``HPCBENCH_SRUN_RANKS=1``, :func:`hpcbench.dist.launcher.plan_slurm`) each
task takes its rank from SLURM's variables and the ranks meet at rank 0's TCP store,
which every rank must reach within ``HPCBENCH_RDZV_TIMEOUT_S``.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
import types
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

from hpcbench.dist.binding import apply_plan_for_this_rank, device_index, gpu_bound_by_slurm, record_binding
from hpcbench.dist.launcher import FAILURE_MARKER, PROGRESS_PREFIX, RENDEZVOUS_FAILURE, RENDEZVOUS_TIMEOUT_ENV
from hpcbench.dist.topology import SRUN_RANKS_ENV, Topology, ranks_from_srun
from hpcbench.core.results import RecordContext, RecordWriter


#: Modules a rank imports through its experiment's package (the package's summary, rules and report
#: modules, which the ranks never call) but rarely uses: each is loaded on its first attribute access.
#: pandas: about half a second of CPU and tens of MB per rank that never calls it, paid by every rank at
#: once when a 2 x 2 launch starts 4 ranks on 2 cores.
DEFERRED_IMPORTS = ("pandas",)


class _Deferred(types.ModuleType):
    """Stands in for a module in ``sys.modules`` until an attribute of it is read, then imports the real
    module and forwards to it (TensorFlow's ``LazyLoader`` pattern). :class:`importlib.util.LazyLoader`
    would not do on Python 3.11: the next ``import pandas`` reads the module's ``__spec__``, which loads it."""

    def __init__(self, spec: Any):
        super().__init__(spec.name)
        self.__spec__ = spec  # what the import system reads of a module already in sys.modules
        # what inspect.getmodule (torch's op registration calls it) reads of every module in sys.modules
        self.__file__ = spec.origin

    def __getattr__(self, attr: str) -> Any:  # only for attributes not set here: the first real use
        name = self.__spec__.name
        if sys.modules.get(name) is self:
            del sys.modules[name]
        module = importlib.import_module(name)
        self.__dict__.update(module.__dict__)  # from now on read directly, as from the module itself
        return getattr(module, attr)


def defer_imports(names: tuple[str, ...] = DEFERRED_IMPORTS) -> None:
    """Put each of ``names`` not imported yet into ``sys.modules`` as a stand-in (:class:`_Deferred`):
    ``import pandas as pd`` then binds it at no cost, and the first ``pd.X`` really imports pandas, so
    code that does use it works unchanged."""
    import importlib.util

    for name in names:
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)
        if spec is not None:  # absent: the first real import raises as it would have
            sys.modules[name] = _Deferred(spec)


def _resolve(qualname: str):
    module, _, attr = qualname.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def resolve_backend(requested: str, ranks_per_node: int) -> str:
    """``auto`` means NCCL when this rank has its GPU, else gloo: one bound to its task by SLURM, or one per
    local rank among those it sees (the same answer on every rank of a launch)."""
    import torch

    if requested != "auto":
        return requested
    if not torch.cuda.is_available():
        return "gloo"
    return "nccl" if gpu_bound_by_slurm() or torch.cuda.device_count() >= ranks_per_node else "gloo"


@dataclass(frozen=True)
class Rank:
    """What every distributed entry point starts from (the rank prologue, written once here)."""

    backend: str
    device: Any
    sync: Callable[[], None]
    """Waits for the device's queued work (a no-op on CPU): call it before reading a clock."""
    lead: bool
    """Rank 0: the one that writes per-run rows."""


def rank_setup(cfg: Any, topo: Topology) -> Rank:
    """Check the launch against the config's layout and pick this rank's device.

    Raises:
        RuntimeError: the launcher started another layout than ``cfg.nodes x cfg.ranks_per_node``.
    """
    import torch
    import torch.distributed as dist

    if topo.world_size != cfg.nodes * cfg.ranks_per_node:
        raise RuntimeError(f"launched {topo.describe()}, config asks for {cfg.nodes} x {cfg.ranks_per_node}")
    backend = dist.get_backend()
    cuda = backend == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    return Rank(backend=backend, device=device, sync=torch.cuda.synchronize if cuda else (lambda: None),
                lead=topo.rank == 0)


def progress(message: str) -> None:
    """Print a progress line that the driver echoes (rank 0 only, to keep it readable)."""
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"{PROGRESS_PREFIX} {message}", flush=True)


#: The collectives' timeout (and the store's, once every rank has met).
COLLECTIVE_TIMEOUT = timedelta(seconds=300)


class RendezvousFailed(RuntimeError):
    """This rank could not create or reach rank 0's store: no rank has measured anything."""


def join_process_group(backend: str, topo: Topology, **extra: Any) -> None:
    """``init_process_group``; under srun, at rank 0's TCP store, waited for at most the rendezvous timeout.

    Raises:
        RendezvousFailed: the store could not be created (its port is taken) or reached in time.
    """
    import torch.distributed as dist

    if os.environ.get(SRUN_RANKS_ENV) != "1":
        dist.init_process_group(backend=backend, timeout=COLLECTIVE_TIMEOUT, **extra)
        return
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    wait = timedelta(seconds=int(os.environ.get(RENDEZVOUS_TIMEOUT_ENV, "60")))
    try:
        # Rank 0 binds the port and waits until every rank has connected; the others connect to it.
        store = dist.TCPStore(host, port, topo.world_size, is_master=topo.rank == 0, timeout=wait)
    except Exception as exc:  # noqa: BLE001 - torch raises DistNetworkError, DistStoreError or RuntimeError
        raise RendezvousFailed(f"store {host}:{port} ({'create' if topo.rank == 0 else 'reach'}, waited at most "
                               f"{wait.total_seconds():g} s): {exc}") from exc
    store.set_timeout(COLLECTIVE_TIMEOUT)  # a later collective setup may wait for a slower rank
    dist.init_process_group(backend=backend, store=store, rank=topo.rank, world_size=topo.world_size,
                            timeout=COLLECTIVE_TIMEOUT, **extra)


def main(argv: list[str]) -> int:
    """``hpcbench rank SPEC.json``: run one rank; return its exit code. Any failure prints a marked
    traceback."""
    if len(argv) != 1:
        print("usage: python -m hpcbench rank SPEC.json", file=sys.stderr)
        return 2
    spec_path = argv[0]
    if os.environ.get(SRUN_RANKS_ENV) == "1":
        os.environ.update(ranks_from_srun(os.environ))  # before anything reads RANK (torch, the binding)
    topo = Topology.from_env()
    writer = None
    defer_imports()
    try:
        spec = json.loads(Path(spec_path).read_text())
        mode = spec.get("bind", "none")
        # Before torch is imported: its thread pools size themselves from the affinity they start with.
        planned = apply_plan_for_this_rank() if mode == "plan" else None
        import torch
        import torch.distributed as dist

        config = _resolve(spec["config_class"]).from_dict(spec["config"])
        entry = _resolve(spec["entry"])
        backend = resolve_backend(spec["backend"], topo.ranks_per_node)
        context = RecordContext(**spec["context"]).for_rank(
            node=topo.node_name, rank=topo.rank, world_size=topo.world_size)
        path = Path(spec["records_dir"]) / f"{spec['tag']}-rank{topo.rank:05d}.parquet"
        writer = RecordWriter(path, context)
        writer.add("backend", None, "", text=backend)
        record_binding(writer, mode, planned)
        extra = {}
        if backend == "nccl":
            index = device_index(topo.local_rank)  # 0 where SLURM bound one GPU to this task
            torch.cuda.set_device(index)
            extra["device_id"] = torch.device("cuda", index)
        join_process_group(backend, topo, **extra)
        try:
            entry(config, topo, writer)
        finally:
            dist.destroy_process_group()
        return 0
    except RendezvousFailed as exc:
        writer = None  # the ranks never met: no records, so that the launcher may retry the launch
        print(f"{RENDEZVOUS_FAILURE} rank {topo.rank} on {topo.node_name}: {exc}", file=sys.stderr, flush=True)
        return 1
    except Exception:
        print(f"{FAILURE_MARKER} rank {topo.rank} on {topo.node_name}:\n{traceback.format_exc()}",
              file=sys.stderr, flush=True)
        return 1
    finally:
        if writer is not None:
            writer.close()

