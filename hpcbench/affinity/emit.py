"""Write a :class:`~hpcbench.affinity.plan.BindingPlan` as the commands that apply it.

``srun`` options (masks per local rank), a ``numactl`` prefix, a rank's environment, a
whole sbatch script (the guide's section 2.3 script made right for the node) and a
table for display. Pure functions: plan in, text out.

References: srun(1) ``--cpu-bind=mask_cpu``, ``--mem-bind=map_mem``, ``--gpu-bind=map_gpu``
and ``--hint``; numactl(8); NCCL environment variables (``NCCL_IB_HCA``,
``NCCL_SOCKET_IFNAME``: a leading ``=`` asks for an exact name, so ``mlx5_1`` does not
also select ``mlx5_10``).
"""

from __future__ import annotations

import shlex

from hpcbench.affinity.plan import BindingPlan, RankBinding
from hpcbench.affinity.topology import NodeTopology, format_cpulist


def cpu_mask(cpus) -> str:
    """A hex CPU mask as srun's ``mask_cpu`` takes it: CPUs 0-3 -> ``0xf``."""
    mask = 0
    for cpu in cpus:
        mask |= 1 << cpu
    return hex(mask)


def srun_args(plan: BindingPlan) -> list[str]:
    """srun options that bind every local rank as planned.

    ``--hint=nomultithread`` is written only where the plan has no masks to give: srun
    refuses ``--hint`` together with ``--cpu-bind`` (other than ``verbose``), and the masks
    already hold one thread per core when ``use_smt`` is off. The sbatch script carries the
    hint for the allocation (see :func:`sbatch_script`).

    Returns:
        e.g. ``["--ntasks-per-node=8", "--cpus-per-task=8", "--cpu-bind=mask_cpu:0xff...,...",
        "--mem-bind=map_mem:3,3,1,1,7,7,5,5", "--gpu-bind=map_gpu:0,1,2,3,4,5,6,7"]``.
    """
    args = [f"--ntasks-per-node={plan.ranks_per_node}", f"--cpus-per-task={plan.cpus_per_rank}",
            "--cpu-bind=mask_cpu:" + ",".join(cpu_mask(b.cpus) for b in plan.bindings)]
    if plan.numa_nodes > 1 and all(b.mem_node is not None for b in plan.bindings):
        args.append("--mem-bind=map_mem:" + ",".join(str(b.mem_node) for b in plan.bindings))
    if any(b.gpu is not None for b in plan.bindings):
        args.append("--gpu-bind=map_gpu:" + ",".join(str(b.gpu) for b in plan.bindings))
    return args


def numactl_argv(binding: RankBinding, topology: NodeTopology | None = None) -> list[str]:
    """A ``numactl`` prefix that binds one rank: its CPUs and its memory node.

    ``--cpunodebind=N`` where the rank holds every CPU of NUMA node N (needs ``topology``),
    ``--physcpubind=LIST`` otherwise; ``--membind=N`` when the plan names a memory node.
    DataLoader workers are not in the list: they move to their own cores themselves
    (:func:`hpcbench.affinity.applied.bind_loader_worker`).
    """
    argv = ["numactl"]
    node_cpus = None
    if topology is not None and binding.mem_node is not None:
        node_cpus = next((n.cpus for n in topology.numa if n.id == binding.mem_node), None)
    if node_cpus and set(node_cpus) == set(binding.cpus):
        argv.append(f"--cpunodebind={binding.mem_node}")
    else:
        argv.append(f"--physcpubind={format_cpulist(binding.cpus)}")
    if binding.mem_node is not None:
        argv.append(f"--membind={binding.mem_node}")
    return argv


def nic_env(binding: RankBinding) -> dict[str, str]:
    """The NCCL variable that names one rank's NIC: ``NCCL_IB_HCA`` for an HCA, ``NCCL_SOCKET_IFNAME`` for
    an Ethernet netdev, its value ``=<nic>`` (exactly that name); empty without a NIC."""
    if binding.nic is None:
        return {}
    var = "NCCL_SOCKET_IFNAME" if binding.nic_link == "ethernet" else "NCCL_IB_HCA"
    return {var: "=" + binding.nic}


def rank_env(binding: RankBinding) -> dict[str, str]:
    """Environment of one rank: threads, its GPU, its NIC."""
    env = {"OMP_NUM_THREADS": str(binding.threads)}
    if binding.gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(binding.gpu)
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # the plan numbers GPUs in PCI bus order; CUDA's default is fastest first
    env.update(nic_env(binding))
    return env


def _sbatch_line(option: str, why: str) -> str:
    return f"#SBATCH {option:<30} # {why}"


def sbatch_script(plan: BindingPlan, *, nodes: int, command: str, job_name: str = "hpcbench",
                  time: str = "01:00:00") -> str:
    """An sbatch script that runs ``command`` once per planned rank on ``nodes`` such nodes.

    The guide's ``--ntasks=32 --cpus-per-task=8 --gres=gpu:8 --hint=nomultithread`` with
    ``OMP_NUM_THREADS=8`` and ``numactl --cpunodebind=0 --membind=0``, made right for this
    node: counts from the plan, per-rank CPU masks and memory nodes instead of one
    ``numactl`` for every rank (which would pile all ranks onto node 0), the GPU map and each
    rank's NIC. Every line says why.
    """
    topo = plan.topology
    first = plan.bindings[0]
    loaders = len(plan.loader_cpus[0])
    unit = "hardware threads" if plan.use_smt else "cores"
    cpus_why = f"{len(first.cpus)} compute {unit if len(first.cpus) > 1 else unit[:-1]}" + (f" + {loaders} for DataLoader workers" if loaders else "") + \
        " per rank, all on the rank's NUMA node"
    lines = ["#!/bin/bash",
             f"# Generated by hpcbench.affinity for a node with {topo.describe()}.",
             "# Plan:"]
    lines += [f"#   rank {b.local_rank}: cpus {format_cpulist(b.cpus)}"
              + (f" loaders {format_cpulist(b.loader_cpus)}" if b.loader_cpus else "")
              + f", memory node {b.mem_node}, gpu {b.gpu}, nic {b.nic}" for b in plan.bindings]
    lines += [f"#   note: {n}" for n in plan.notes]
    lines += [
        _sbatch_line(f"--job-name={job_name}", "name in squeue and sacct"),
        _sbatch_line(f"--nodes={nodes}", "every node has the topology this plan was made for"),
        _sbatch_line(f"--ntasks={nodes * plan.ranks_per_node}",
                     f"the guide's --ntasks: {nodes} nodes x {plan.ranks_per_node} ranks"),
        _sbatch_line(f"--ntasks-per-node={plan.ranks_per_node}",
                     "one rank per GPU" if topo.gpus else "ranks spread over the NUMA nodes"),
        _sbatch_line(f"--cpus-per-task={plan.cpus_per_rank}", cpus_why),
    ]
    if any(b.gpu is not None for b in plan.bindings):
        lines.append(_sbatch_line(f"--gres=gpu:{plan.ranks_per_node}",
                                  f"one GPU per rank ({len(topo.gpus)} on the node)"))
    if not plan.use_smt and topo.smt():
        lines.append(_sbatch_line("--hint=nomultithread", "count physical cores; SMT siblings stay idle"))
    lines += [
        _sbatch_line("--exclusive", "the masks name CPUs by number: only a whole node makes them ours"),
        _sbatch_line(f"--time={time}", "wall-clock limit"),
        "",
        f"export OMP_NUM_THREADS={first.threads}  # = compute {unit} per rank: no oversubscription",
    ]
    if any(b.gpu is not None for b in plan.bindings):
        lines.append("export CUDA_DEVICE_ORDER=PCI_BUS_ID  # GPU indices in PCI bus order, as the plan numbers them")
    lines.append("unset SLURM_HINT  # srun refuses a hint next to --cpu-bind; the masks hold the choice")
    nic_ranks: dict[tuple[str, str], list[int]] = {}
    for b in plan.bindings:
        if b.nic is not None:
            var = "NCCL_SOCKET_IFNAME" if b.nic_link == "ethernet" else "NCCL_IB_HCA"
            nic_ranks.setdefault((var, b.nic), []).append(b.local_rank)
    run = shlex.quote(("rank_env; " if nic_ranks else "") + "exec " + command)
    if nic_ranks:
        lines += ["", "# Each rank's NIC: the one on its NUMA node (srun has no per-rank environment).",
                  "rank_env() {", '  case "$SLURM_LOCALID" in']
        for (var, nic), ranks in nic_ranks.items():
            value = shlex.quote("=" + nic)
            value = f"'{value}'" if value == "=" + nic else value  # quoted so `==` does not read as a typo
            lines.append(f"    {'|'.join(map(str, ranks))}) export {var}={value} ;;")
        lines += ["  esac", "}", "export -f rank_env"]
    lines += ["", "# Per-rank CPU masks" + (", memory nodes" if plan.numa_nodes > 1 else "")
              + (" and GPUs" if topo.gpus else "") + " from the plan (task/affinity applies them).",
              "srun " + " ".join(srun_args(plan)) + f" bash -c {run}", ""]
    return "\n".join(lines)


def plan_table(plan: BindingPlan) -> list[dict]:
    """One row per local rank for display: CPUs, memory node, GPU and NIC with their NUMA nodes."""
    topo = plan.topology
    rows = []
    for b in plan.bindings:
        gpu = topo.gpus[b.gpu] if b.gpu is not None else None
        nic = next((n for n in topo.nics if n.name == b.nic), None)
        rows.append({
            "local_rank": b.local_rank,
            "cpus": format_cpulist(b.cpus),
            "threads": b.threads,
            "loader_cpus": format_cpulist(b.loader_cpus),
            "numa_of_cpus": ",".join(str(n) for n in sorted({topo.numa_of_cpu(c) for c in b.cpus}, key=str)),
            "mem_node": b.mem_node,
            "gpu": b.gpu,
            "gpu_pci": gpu.pci if gpu else None,
            "gpu_numa": gpu.numa_node if gpu else None,
            "nic": b.nic,
            "nic_numa": nic.numa_node if nic else None,
        })
    return rows
