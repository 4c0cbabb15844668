"""Plan which cores, memory node, GPU and NIC each rank of a node gets.

Rules (guide section 2.3: every GPU gets dedicated CPU cores, memory bound to the local
channel):

1. A rank with a GPU goes to that GPU's NUMA node (GPU i for local rank i).
2. Ranks without a placed GPU spread evenly over the NUMA nodes that have CPUs.
3. Each rank gets whole physical cores of its NUMA node, disjoint from every other
   rank's; one hardware thread per core unless ``use_smt`` (then every thread counts).
4. Every rank gets the same number of cores (``srun --cpus-per-task`` is one number).
5. DataLoader workers get cores of their own next to their rank's, never its compute cores.
6. The NIC is one on the rank's NUMA node (round robin if several); InfiniBand HCAs are
   preferred over Ethernet when both exist.
7. ``threads`` (OMP_NUM_THREADS, torch intra-op threads) = compute CPUs given.

Whatever the planner had to assume is written into ``notes``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.affinity.topology import NodeTopology, PciDevice, format_cpulist
from hpcbench.core.errors import ConfigError


@dataclass(frozen=True)
class RankBinding:
    """What one local rank is bound to."""

    local_rank: int
    cpus: tuple[int, ...]  # compute CPUs (the rank's affinity mask)
    mem_node: int | None  # NUMA node its memory is bound to
    gpu: int | None  # GPU index (PCI bus order) or None without GPUs
    nic: str | None  # RDMA device (mlx5_0) or netdev (eth0); None without a NIC
    threads: int  # OMP_NUM_THREADS / torch.set_num_threads
    nic_link: str | None = None  # "infiniband" | "ethernet": which NCCL variable names the NIC
    loader_cpus: tuple[int, ...] = ()  # CPUs kept for this rank's DataLoader workers


@dataclass(frozen=True)
class BindingPlan:
    """Every local rank's binding on one node, with what the planner assumed."""

    topology: NodeTopology
    ranks_per_node: int
    bindings: tuple[RankBinding, ...]
    use_smt: bool
    loader_cpus: tuple[tuple[int, ...], ...]  # per rank: CPUs reserved for DataLoader workers
    notes: tuple[str, ...]

    @property
    def cpus_per_rank(self) -> int:
        """CPUs a rank needs allocated: compute plus its loader workers' (``--cpus-per-task``)."""
        return len(self.bindings[0].cpus) + len(self.loader_cpus[0])

    @property
    def numa_nodes(self) -> int:
        """NUMA nodes of the node (1: memory binding is trivially local)."""
        return len(self.topology.numa)


def _units_of_node(topo: NodeTopology, node_id: int, use_smt: bool) -> list[tuple[int, ...]]:
    """Allocation units of a NUMA node: a core's first thread, or every thread with SMT."""
    cores = topo.cores_of_node(node_id)
    if use_smt:
        return [(cpu,) for core in cores for cpu in core]
    return [(core[0],) for core in cores]


def _place(topo: NodeTopology, ranks: int, units: dict[int, int], notes: list[str]) -> list[int]:
    """The NUMA node of each rank: its GPU's, else spread over the nodes with CPUs."""
    nodes = [n for n in units if units[n] > 0]
    placed: list[int | None] = [None] * ranks
    for rank in range(min(ranks, len(topo.gpus))):
        gpu = topo.gpus[rank]
        if gpu.numa_node is None and len(nodes) == 1:
            placed[rank] = nodes[0]  # one node with CPUs: an unknown numa_node (-1) can only mean this one
        elif gpu.numa_node is None:
            notes.append(f"{gpu.name} ({gpu.pci}): the kernel reports no NUMA node (numa_node -1); "
                         f"its rank is placed by spreading")
        elif units.get(gpu.numa_node, 0) == 0:
            notes.append(f"{gpu.name} ({gpu.pci}) sits on NUMA node {gpu.numa_node}, which has no CPU; "
                         f"its rank is placed by spreading")
        else:
            placed[rank] = gpu.numa_node
    if all(p is None for p in placed):
        # Block order, as srun --distribution=block numbers ranks: 2 ranks on 8 nodes -> 0 and 4.
        return [nodes[r * len(nodes) // ranks] for r in range(ranks)]
    load = {n: sum(1 for p in placed if p == n) for n in nodes}
    for rank in range(ranks):
        if placed[rank] is None:
            node = min(nodes, key=lambda n: (load[n] / units[n], n))
            placed[rank] = node
            load[node] += 1
    return [p for p in placed if p is not None]


def _compute_units(ranks: int, placement: list[int], units: dict[int, int], loaders: int) -> int:
    """Units per rank for compute (same for all ranks); < 1 means the ranks do not fit."""
    per_node = {n: placement.count(n) for n in set(placement)}
    return min(units[n] // k for n, k in per_node.items()) - loaders


def _fits(topo: NodeTopology, ranks: int, use_smt: bool, loaders: int) -> bool:
    if topo.gpus and ranks > len(topo.gpus):
        return False
    units = {n.id: len(_units_of_node(topo, n.id, use_smt)) for n in topo.numa}
    if not any(units.values()):
        return False
    return _compute_units(ranks, _place(topo, ranks, units, []), units, loaders) >= 1


def max_ranks(topo: NodeTopology, *, use_smt: bool = False, loader_workers_per_rank: int = 0) -> int:
    """The most ranks per node a plan can give whole cores (0: not even one)."""
    limit = len(topo.gpus) if topo.gpus else len(topo.cpus)
    return max((r for r in range(1, limit + 1) if _fits(topo, r, use_smt, loader_workers_per_rank)), default=0)


def _nic_candidates(topo: NodeTopology) -> tuple[PciDevice, ...]:
    ib = tuple(n for n in topo.nics if n.link == "infiniband")
    return ib or topo.nics  # NCCL's IB transport when there is one; sockets over Ethernet otherwise


def _choose_nics(topo: NodeTopology, placement: list[int], notes: list[str]) -> list[PciDevice | None]:
    nics = _nic_candidates(topo)
    if not nics:
        return [None] * len(placement)
    chosen: list[PciDevice | None] = []
    used_on_node: dict[int, int] = {}
    unplaced = 0
    for rank, node in enumerate(placement):
        # One NUMA node: a NIC whose numa_node is unknown (-1) is local all the same.
        local = [n for n in nics if n.numa_node == node or (n.numa_node is None and len(topo.numa) == 1)]
        if local:
            k = used_on_node.get(node, 0)
            chosen.append(local[k % len(local)])
            used_on_node[node] = k + 1
        else:
            nic = nics[unplaced % len(nics)]
            unplaced += 1
            chosen.append(nic)
            where = "has no known NUMA node" if nic.numa_node is None else f"is on NUMA node {nic.numa_node}"
            notes.append(f"local rank {rank}: no NIC on NUMA node {node}; {nic.name} ({nic.link}) {where}")
    return chosen


def plan_binding(topo: NodeTopology, ranks_per_node: int, *, use_smt: bool = False,
                 loader_workers_per_rank: int = 0) -> BindingPlan:
    """Plan every local rank's cores, memory node, GPU and NIC on a node.

    Args:
        topo: the node (from :func:`hpcbench.affinity.topology.read_topology` or a fixture).
        ranks_per_node: processes on the node; with GPUs, at most one per GPU.
        use_smt: give ranks every hardware thread of their cores (threads = CPUs); by default
            one thread per core, the guide's ``--hint=nomultithread``.
        loader_workers_per_rank: DataLoader workers per rank; each gets a core of its own
            (one thread of it, or every thread with ``use_smt``) beside its rank's compute cores.

    Returns:
        The :class:`BindingPlan`; ``notes`` says what was assumed.

    Raises:
        ConfigError: naming ``ranks_per_node`` (more ranks than GPUs, or than whole cores fit,
            saying how many fit) or ``loader_workers_per_rank``.
    """
    if isinstance(ranks_per_node, bool) or not isinstance(ranks_per_node, int) or ranks_per_node < 1:
        raise ConfigError(f"{ranks_per_node!r} is out of range; allowed: an integer >= 1", field="ranks_per_node")
    if (isinstance(loader_workers_per_rank, bool) or not isinstance(loader_workers_per_rank, int)
            or loader_workers_per_rank < 0):
        raise ConfigError(f"{loader_workers_per_rank!r} is out of range; allowed: an integer >= 0",
                          field="loader_workers_per_rank")
    if topo.gpus and ranks_per_node > len(topo.gpus):
        raise ConfigError(f"{ranks_per_node} ranks but the node has {len(topo.gpus)} GPU(s); one GPU per rank: "
                          f"at most {len(topo.gpus)} ranks fit", field="ranks_per_node")
    notes: list[str] = []
    units = {n.id: len(_units_of_node(topo, n.id, use_smt)) for n in topo.numa}
    placement = _place(topo, ranks_per_node, units, notes)
    per_rank = _compute_units(ranks_per_node, placement, units, loader_workers_per_rank)
    if per_rank < 1:
        fit = max_ranks(topo, use_smt=use_smt, loader_workers_per_rank=loader_workers_per_rank)
        unit = "hardware threads" if use_smt else "physical cores (one thread each)"
        why = f"with {loader_workers_per_rank} loader core(s) per rank, " if loader_workers_per_rank else ""
        hint = ""
        if not use_smt and topo.smt():
            smt_fit = max_ranks(topo, use_smt=True, loader_workers_per_rank=loader_workers_per_rank)
            hint = f"; with use_smt=True {smt_fit} fit"
        raise ConfigError(f"{ranks_per_node} ranks do not fit: {why}the node's {unit} per NUMA node give "
                          f"at most {fit} ranks whole cores of their own{hint}", field="ranks_per_node")

    nics = _choose_nics(topo, placement, notes)
    bindings = []
    loader_cpus = []
    taken: dict[int, int] = {}
    for rank, node in enumerate(placement):
        node_units = _units_of_node(topo, node, use_smt)
        start = taken.get(node, 0)
        block = node_units[start:start + per_rank + loader_workers_per_rank]
        taken[node] = start + len(block)
        compute = tuple(sorted(c for u in block[:per_rank] for c in u))
        loaders = tuple(sorted(c for u in block[per_rank:] for c in u))
        gpu = rank if rank < len(topo.gpus) else None
        nic = nics[rank]
        bindings.append(RankBinding(local_rank=rank, cpus=compute, mem_node=node, gpu=gpu,
                                    nic=nic.name if nic else None, threads=len(compute),
                                    nic_link=nic.link if nic else None, loader_cpus=loaders))
        loader_cpus.append(loaders)

    if len(topo.numa) == 1:
        notes.append("one NUMA node: memory binding is trivially local")
    if topo.gpus and ranks_per_node < len(topo.gpus):
        notes.append(f"{len(topo.gpus) - ranks_per_node} of {len(topo.gpus)} GPUs get no rank")
    if not topo.gpus:
        notes.append("no GPU: ranks spread evenly over the NUMA nodes with CPUs")
    if not topo.nics:
        notes.append("no NIC with a PCI device: no NIC binding")
    if use_smt and not topo.smt():
        notes.append("use_smt has no effect: every core runs one hardware thread")
    elif not use_smt and topo.smt():
        notes.append("one hardware thread per core (use_smt=False): SMT siblings stay idle")
    elif use_smt and any(not set(topo.siblings[c]) <= set(b.cpus) for b in bindings for c in b.cpus):
        notes.append("use_smt: a core is split between ranks; their threads share its execution units")
    spare = {n: units[n] - taken.get(n, 0) for n in units if units[n] - taken.get(n, 0) > 0}
    if spare:
        notes.append("unused " + ("threads" if use_smt else "cores") + ": "
                     + ", ".join(f"{k} on NUMA node {n}" for n, k in sorted(spare.items())))
    assert len({c for b in bindings for c in b.cpus + b.loader_cpus}) == \
        sum(len(b.cpus) + len(b.loader_cpus) for b in bindings), "planned CPU sets overlap"
    return BindingPlan(topology=topo, ranks_per_node=ranks_per_node, bindings=tuple(bindings),
                       use_smt=use_smt, loader_cpus=tuple(loader_cpus), notes=tuple(notes))


def describe_binding(binding: RankBinding) -> str:
    """One line for logs: ``rank 0: cpus 48-55 mem 3 gpu 0 nic mlx5_0 threads 8``."""
    loaders = f" loaders {format_cpulist(binding.loader_cpus)}" if binding.loader_cpus else ""
    return (f"rank {binding.local_rank}: cpus {format_cpulist(binding.cpus)} mem {binding.mem_node} "
            f"gpu {binding.gpu} nic {binding.nic} threads {binding.threads}{loaders}")
