"""Apply a rank's binding inside its process, and read back what the process really has.

A plan that was not applied looks exactly like one that was until someone reads
``/proc/self/status``: :func:`observed_binding` records it and :func:`binding_mismatches`
says in words what differs.

Memory policy goes through the ``set_mempolicy``/``get_mempolicy`` system calls (glibc
has no wrapper; libnuma is not needed). References: set_mempolicy(2), get_mempolicy(2),
proc(5) (``Cpus_allowed_list``, ``Mems_allowed_list``).
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from pathlib import Path

from hpcbench.affinity.emit import rank_env
from hpcbench.affinity.plan import RankBinding
from hpcbench.affinity.topology import format_cpulist, parse_cpulist
from hpcbench.core.errors import ConfigError, HpcbenchError

#: include/uapi/linux/mempolicy.h
MPOL_MODES = {0: "default", 1: "preferred", 2: "bind", 3: "interleave", 4: "local",
              5: "preferred_many", 6: "weighted_interleave"}
_MPOL_BY_NAME = {v: k for k, v in MPOL_MODES.items()}
_MPOL_MODE_FLAGS = (1 << 15) | (1 << 14) | (1 << 13)  # STATIC_NODES, RELATIVE_NODES, NUMA_BALANCING
#: System call numbers (arch/x86/entry/syscalls/syscall_64.tbl; include/uapi/asm-generic/unistd.h).
_SYSCALLS = {"x86_64": {"set_mempolicy": 238, "get_mempolicy": 239},
             "aarch64": {"set_mempolicy": 237, "get_mempolicy": 236}}
_MASK_WORDS = 16  # 1024 node bits, the kernel's MAX_NUMNODES upper bound
_WORD_BITS = 8 * ctypes.sizeof(ctypes.c_ulong)


def _syscall(name: str, *args) -> int:
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        raise HpcbenchError(f"{name}: no system call number known for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    result = libc.syscall(ctypes.c_long(numbers[name]), *args)
    if result < 0:
        err = ctypes.get_errno()
        raise HpcbenchError(f"{name} failed: {os.strerror(err)} (errno {err})")
    return result


def set_memory_policy(mode: str, nodes) -> None:
    """Set this process's memory policy: ``"bind"``, ``"preferred"``, ``"interleave"`` to ``nodes``, or ``"default"``.

    Raises:
        ConfigError: naming ``mode`` when it is not one of those.
        HpcbenchError: the system call failed (message carries errno).
    """
    if mode not in ("default", "bind", "preferred", "interleave"):
        raise ConfigError(f"{mode!r} is not one of default, bind, preferred, interleave", field="mode")
    mask = (ctypes.c_ulong * _MASK_WORDS)()
    for node in ([] if mode == "default" else nodes):
        mask[node // _WORD_BITS] |= 1 << (node % _WORD_BITS)
    # maxnode + 1: the kernel drops the last bit it is given (see numa(3)'s notes on libnuma).
    _syscall("set_mempolicy", ctypes.c_int(_MPOL_BY_NAME[mode]),
             None if mode == "default" else mask, ctypes.c_ulong(_MASK_WORDS * _WORD_BITS + 1))


def memory_policy() -> tuple[str, tuple[int, ...]]:
    """This process's memory policy and its nodes, e.g. ``("bind", (3,))``; ``("default", ())``."""
    mode = ctypes.c_int(0)
    mask = (ctypes.c_ulong * _MASK_WORDS)()
    _syscall("get_mempolicy", ctypes.byref(mode), mask, ctypes.c_ulong(_MASK_WORDS * _WORD_BITS),
             None, ctypes.c_ulong(0))
    nodes = tuple(w * _WORD_BITS + b for w in range(_MASK_WORDS) for b in range(_WORD_BITS) if mask[w] >> b & 1)
    name = MPOL_MODES.get(mode.value & ~_MPOL_MODE_FLAGS, f"mode {mode.value}")
    return name, nodes


def _memory_nodes(status: dict[str, str] | None = None) -> list[int]:
    status = status or _proc_status()
    return parse_cpulist(status.get("Mems_allowed_list", "0"))


def apply_binding(binding: RankBinding, *, device_env: bool = True) -> list[str]:
    """Bind the calling process (a rank) as ``binding`` says.

    CPU affinity (``sched_setaffinity``), memory policy ``MPOL_BIND`` to the rank's node where
    the machine has more than one memory node, ``OMP_NUM_THREADS`` and, if torch is already
    imported, ``torch.set_num_threads``. Call it first thing in the rank, before threads start
    and before CUDA is initialised.

    Args:
        binding: this rank's binding from the plan.
        device_env: also set the GPU and NIC variables of
            :func:`hpcbench.affinity.emit.rank_env` (``CUDA_VISIBLE_DEVICES``: the planned GPU
            becomes the process's ``cuda:0``; ``NCCL_IB_HCA`` / ``NCCL_SOCKET_IFNAME``). Pass
            False where the launcher selects devices itself (e.g. ``cuda:{local_rank}``).

    Returns:
        What was done, one sentence each (the launcher can record them).
    """
    done = []
    os.sched_setaffinity(0, binding.cpus)
    done.append(f"CPU affinity {format_cpulist(binding.cpus)}")
    nodes = _memory_nodes()
    if binding.mem_node is None:
        done.append("memory policy left as is: the plan names no memory node")
    elif len(nodes) <= 1:
        done.append(f"memory policy left as is: one memory node ({format_cpulist(nodes)}), "
                    f"memory is local anyway")
    else:
        set_memory_policy("bind", [binding.mem_node])
        done.append(f"memory bound to NUMA node {binding.mem_node}")
    env = rank_env(binding) if device_env else {"OMP_NUM_THREADS": str(binding.threads)}
    os.environ.update(env)
    done.extend(f"{k}={v}" for k, v in env.items())
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(binding.threads)
        done.append(f"torch intra-op threads {binding.threads}")
    return done


def bind_loader_worker(cpus, worker_id: int | None = None) -> None:
    """Pin a DataLoader worker to its planned cores, one thread; use as ``worker_init_fn``.

    Args:
        cpus: the rank's loader CPUs (``plan.loader_cpus[local_rank]``).
        worker_id: the worker's number; with it the worker takes one CPU of ``cpus``
            (round robin), without it all of them.
    """
    cpus = tuple(cpus)
    if not cpus:
        return
    os.sched_setaffinity(0, cpus if worker_id is None else (cpus[worker_id % len(cpus)],))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)  # a worker decodes; intra-op threads would fight the rank's


def _proc_status(path: str | Path = "/proc/self/status") -> dict[str, str]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def cpus_allowed_list(pid: int | str = "self") -> str:
    """``Cpus_allowed_list`` of ``/proc/<pid>/status`` as the kernel writes it (``"0-3,8"``; "" if absent)."""
    return _proc_status(f"/proc/{pid}/status").get("Cpus_allowed_list", "")


def allowed_cpus(pid: int | str = "self") -> list[int]:
    """The CPUs process ``pid`` may run on, sorted."""
    return sorted(set(parse_cpulist(cpus_allowed_list(pid))))


def observed_binding() -> dict:
    """What the calling process really has: CPUs, memory nodes and policy, threads, GPU, NIC.

    Returns:
        ``cpus_allowed_list`` / ``mems_allowed_list`` (text from ``/proc/self/status``),
        ``cpus`` / ``mems`` (the same as lists), ``mempolicy`` ("default", "bind",
        "preferred", "interleave", "local"; "unknown: ..." where the call is refused),
        ``mempolicy_nodes``, ``torch_threads`` (None when torch is not imported),
        ``omp_num_threads``, ``cuda_visible_devices``, ``slurm_step_gpus`` / ``slurm_job_gpus`` (the
        GPUs SLURM gave the task's step / its job, by the node's index), ``nccl_ib_hca``,
        ``nccl_socket_ifname`` (None when unset) and ``pid``.
    """
    status = _proc_status()
    cpus_text = status.get("Cpus_allowed_list", "")
    mems_text = status.get("Mems_allowed_list", "")
    try:
        policy, policy_nodes = memory_policy()
    except HpcbenchError as exc:  # seccomp may refuse get_mempolicy in containers
        policy, policy_nodes = f"unknown: {exc}", ()
    torch = sys.modules.get("torch")
    return {
        "pid": os.getpid(),
        "cpus_allowed_list": cpus_text,
        "cpus": parse_cpulist(cpus_text),
        "mems_allowed_list": mems_text,
        "mems": parse_cpulist(mems_text),
        "mempolicy": policy,
        "mempolicy_nodes": list(policy_nodes),
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "slurm_step_gpus": os.environ.get("SLURM_STEP_GPUS"),
        "slurm_job_gpus": os.environ.get("SLURM_JOB_GPUS"),
        "nccl_ib_hca": os.environ.get("NCCL_IB_HCA"),
        "nccl_socket_ifname": os.environ.get("NCCL_SOCKET_IFNAME"),
    }


def binding_mismatches(binding: RankBinding, observed: dict) -> list[str]:
    """Sentences naming each way ``observed`` (from :func:`observed_binding`) differs from the plan.

    Memory is checked only where the process can reach more than one memory node; a GPU
    only for being exactly one device (SLURM's device cgroup renumbers it to 0, so the
    index alone cannot be compared).

    Returns:
        An empty list when the plan was applied.
    """
    rank = f"local rank {binding.local_rank}"
    problems = []
    cpus = set(observed.get("cpus", []))
    if cpus != set(binding.cpus):
        problems.append(f"{rank}: runs on CPUs {observed.get('cpus_allowed_list') or format_cpulist(cpus)}, "
                        f"planned {format_cpulist(binding.cpus)}")
    mems = observed.get("mems", [])
    if binding.mem_node is not None and len(mems) > 1:
        policy, nodes = observed.get("mempolicy"), list(observed.get("mempolicy_nodes", []))
        if policy not in ("bind", "preferred") or nodes != [binding.mem_node]:
            problems.append(f"{rank}: memory policy {policy} {format_cpulist(nodes) or '(all nodes)'}, "
                            f"planned bind to NUMA node {binding.mem_node}")
    if observed.get("omp_num_threads") != str(binding.threads):
        problems.append(f"{rank}: OMP_NUM_THREADS={observed.get('omp_num_threads')}, planned {binding.threads}")
    threads = observed.get("torch_threads")
    if threads is not None and threads != binding.threads:
        problems.append(f"{rank}: torch uses {threads} intra-op threads, planned {binding.threads}")
    if binding.gpu is not None:
        visible = observed.get("cuda_visible_devices")
        if visible is None or len([d for d in visible.split(",") if d.strip()]) != 1:
            problems.append(f"{rank}: CUDA_VISIBLE_DEVICES={visible}, planned exactly GPU {binding.gpu}")
    if binding.nic is not None:
        var = "nccl_socket_ifname" if binding.nic_link == "ethernet" else "nccl_ib_hca"
        value = observed.get(var)
        if value is None or value.lstrip("=").split(":")[0] != binding.nic:
            problems.append(f"{rank}: {var.upper()}={value}, planned {binding.nic}")
    return problems


def assigned_gpu(observed: dict, local_rank: int) -> tuple[int | None, str]:
    """The GPU a rank uses, by the node's index, from what SLURM or its launcher gave it.

    ``SLURM_STEP_GPUS`` first: slurmstepd sets it per task to the step's GPUs by the node's index,
    "not relative to any device cgroup" where one renumbers ``CUDA_VISIBLE_DEVICES`` from 0 (srun(1),
    OUTPUT ENVIRONMENT VARIABLES); else ``CUDA_VISIBLE_DEVICES``. One device is the rank's; several (a step whose tasks
    all see its GPUs, or torchrun's ranks) mean the rank uses the ``local_rank``-th, as the worker does.

    Args:
        observed: from :func:`observed_binding`.
        local_rank: the rank's place on its node.
    Returns:
        The GPU index (None when none is assigned or the list holds names, not indices) and how it
        was read, in words (``"SLURM_STEP_GPUS=1"``).
    """
    for key in ("slurm_step_gpus", "cuda_visible_devices"):
        value = observed.get(key)
        if value is None or not value.strip():
            continue
        name = key.upper()
        ids = [part.strip() for part in value.split(",") if part.strip()]
        if not all(part.isdigit() for part in ids):
            return None, f"{name}={value} holds device names, not the node's indices"
        if len(ids) == 1:
            return int(ids[0]), f"{name}={value}"
        if local_rank < len(ids):
            return int(ids[local_rank]), f"{name}={value}: local rank {local_rank} uses the one at position {local_rank}"
        return None, f"{name}={value} has no device for local rank {local_rank}"
    return None, "no GPU assigned: neither SLURM_STEP_GPUS nor CUDA_VISIBLE_DEVICES is set"
