"""Each rank's CPU/memory binding: apply the node's affinity plan (``bind: plan``) and record what the rank got.

Locally torchrun starts the ranks, so a scheduler's per-task binding would bind its agent, not
the ranks; on a SLURM allocation srun starts them with ``--cpu-bind=none``. Either way the plan
is applied inside each rank, before its work starts, from the machine's own topology:
:func:`hpcbench.affinity.plan.plan_binding` for the ranks on this machine
(``LOCAL_WORLD_SIZE``), this rank taking binding ``LOCAL_RANK``. An emulated split of
one machine into nodes still binds per machine, so emulated nodes never share a core.

The GPU is SLURM's to give: where the job holds GPUs (GRES), the launcher asks srun to give each
task the plan's device (:func:`srun_gpu_binding`); the rank compares what it got with the plan.
The plan's NIC variable (``NCCL_IB_HCA`` / ``NCCL_SOCKET_IFNAME``) is set in the rank unless the
site or the job already set that variable, which then wins (and is recorded).

``$HPCBENCH_TOPOLOGY_ROOT`` makes the plan from a recorded node instead (a sysfs tree, as
``hpcbench plan-binding --root`` reads): a dress rehearsal of a GPU node's placement on a machine
without one, its cores stood in for by this machine's (:mod:`hpcbench.affinity.stand_in`).

Whatever the mode, every rank records what it really has (``Cpus_allowed_list``,
``Mems_allowed_list``, memory policy, threads, GPU, NIC variables): a plan that was not applied, or
a scheduler that bound ranks nobody asked it to, shows in the records.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from hpcbench.core.errors import ConfigError

BIND_MODES = ("none", "plan")
#: Default bind mode of every launch; the launcher's ``bind`` argument overrides it.
BIND_ENV = "HPCBENCH_BIND"
#: A recorded node's sysfs tree to plan from instead of this machine's (a dress rehearsal).
TOPOLOGY_ROOT_ENV = "HPCBENCH_TOPOLOGY_ROOT"


def bind_mode(requested: str | None, env: Mapping[str, str] | None = None) -> str:
    """``requested``, else ``$HPCBENCH_BIND``, else ``none``; an unknown mode names the allowed ones."""
    env = os.environ if env is None else env
    mode = requested or env.get(BIND_ENV) or "none"
    if mode not in BIND_MODES:
        source = "bind" if requested else BIND_ENV
        raise ConfigError(f"{mode!r} is not one of {list(BIND_MODES)}", field=source)
    return mode


def topology_root(env: Mapping[str, str] | None = None) -> Path | None:
    """``$HPCBENCH_TOPOLOGY_ROOT`` as an existing folder, or None (plan from this machine).

    Raises:
        ConfigError: naming the variable when it is relative or no folder: every rank and the
            launcher must read the same tree, from whatever directory they start in.
    """
    env = os.environ if env is None else env
    raw = env.get(TOPOLOGY_ROOT_ENV, "")
    if not raw:
        return None
    root = Path(raw)
    if not root.is_absolute() or not root.is_dir():
        raise ConfigError(f"{raw!r}: expected the absolute path of a recorded node's sysfs tree "
                          f"(e.g. tests/fixtures/topology/two_socket_8gpu_4nic, made absolute)", field=TOPOLOGY_ROOT_ENV)
    return root


def node_plan(ranks_per_node: int, env: Mapping[str, str] | None = None) -> Any:
    """The :class:`~hpcbench.affinity.plan.BindingPlan` of ``ranks_per_node`` ranks on this node (or on the
    recorded one ``$HPCBENCH_TOPOLOGY_ROOT`` names)."""
    from hpcbench.affinity.plan import plan_binding
    from hpcbench.affinity.topology import read_topology

    root = topology_root(env)
    return plan_binding(read_topology(root) if root else read_topology(), ranks_per_node)


@dataclass(frozen=True)
class AppliedPlan:
    """One rank's binding under ``bind: plan``: the plan's, the one applied here, and what that assumed."""

    planned: Any  # RankBinding of the plan (of the recorded node in a rehearsal)
    applied: Any  # RankBinding applied in this process (the stand-in in a rehearsal)
    topology: str  # "this machine" or the recorded tree's path
    notes: tuple[str, ...] = ()
    nic_kept: bool = False  # the NIC variable was set before the plan (by the site or the job) and kept


def apply_plan_for_this_rank(env: Mapping[str, str] | None = None) -> AppliedPlan:
    """Plan this node's ranks and apply this rank's binding (``LOCAL_RANK`` of ``LOCAL_WORLD_SIZE``).

    CPUs, memory policy and threads are applied (:func:`hpcbench.affinity.applied.apply_binding`);
    the NIC variable is set unless already set; the GPU is left to SLURM or the worker.
    """
    from hpcbench.affinity.applied import apply_binding
    from hpcbench.affinity.emit import nic_env
    from hpcbench.affinity.stand_in import stand_in_binding
    from hpcbench.affinity.topology import read_topology

    env = os.environ if env is None else env
    local_rank = int(env.get("LOCAL_RANK", "0"))
    local_world = int(env.get("LOCAL_WORLD_SIZE", "1"))
    root = topology_root(env)
    planned = node_plan(local_world, env).bindings[local_rank]
    applied, notes, where, kept = planned, [], "this machine", False
    if root is not None:
        here = read_topology()
        stand_in = stand_in_binding(planned, local_world, sorted(os.sched_getaffinity(0)), [n.id for n in here.numa])
        applied, notes, where = stand_in.applied, list(stand_in.notes), str(root)
    # device_env=False: the GPU comes from SLURM's per-task binding or the worker's cuda:LOCAL_RANK;
    # hiding the other GPUs here would renumber them under the worker.
    apply_binding(applied, device_env=False)
    for name, value in nic_env(applied).items():
        if os.environ.get(name, value) != value:
            kept = True
            notes.append(f"{name}={os.environ[name]} was set before the plan and is kept; the plan names {value}")
        os.environ.setdefault(name, value)
    return AppliedPlan(planned=planned, applied=applied, topology=where, notes=tuple(notes), nic_kept=kept)


def srun_gpu_binding(ranks_per_node: int, env: Mapping[str, str]) -> list[str]:
    """srun options that give each task the plan's GPU, where the job holds GPUs; else none.

    ``--gres=gpu:K`` takes K of the job's GPUs per node for the step and ``--gpu-bind=map_gpu:...``
    gives task i the plan's GPU of local rank i (srun(1)): SLURM then sets each task's
    ``CUDA_VISIBLE_DEVICES`` and ``SLURM_STEP_GPUS`` to that one device. The indices are the node's
    as long as no device cgroup renumbers them, or the job holds every GPU of its nodes (the
    backend's jobs are ``--exclusive``). A planned GPU outside the job's allocation makes slurmstepd
    bind the first one instead, which the rank's check then reports.

    Args:
        ranks_per_node: the step's tasks per node.
        env: the launcher's environment (``SLURM_JOB_GPUS`` says the job holds GPUs).
    """
    if not (env.get("SLURM_JOB_GPUS") or env.get("SLURM_GPUS_ON_NODE")):
        return []
    gpus = [b.gpu for b in node_plan(ranks_per_node, env).bindings]
    if any(g is None for g in gpus):
        return []
    return [f"--gres=gpu:{ranks_per_node}", "--gpu-bind=map_gpu:" + ",".join(str(g) for g in gpus)]


def gpu_bound_by_slurm(env: Mapping[str, str] | None = None) -> bool:
    """Whether SLURM bound exactly one GPU to this task (``SLURM_STEP_GPUS`` and ``CUDA_VISIBLE_DEVICES``
    name one device each): then it is the task's ``cuda:0``. A single device a user made visible to
    several ranks is not a binding."""
    env = os.environ if env is None else env

    def count(name: str) -> int:
        return len([d for d in env.get(name, "").split(",") if d.strip()])

    return count("SLURM_STEP_GPUS") == 1 and count("CUDA_VISIBLE_DEVICES") == 1


def device_index(local_rank: int, env: Mapping[str, str] | None = None) -> int:
    """The CUDA device a rank selects: 0 where SLURM bound one GPU to the task, else ``local_rank`` (it
    sees every GPU of its node: torchrun's ranks, or a step without a GPU binding)."""
    return 0 if gpu_bound_by_slurm(env) else local_rank


#: observed_binding() fields that repeat another one parsed (cpus <- cpus_allowed_list) or say nothing later.
_PARSED_DUPLICATES = ("pid", "cpus", "mems")


def _describe(binding: Any) -> str:
    from hpcbench.affinity.topology import format_cpulist

    return (f"cpus {format_cpulist(binding.cpus)}; memory node {binding.mem_node}; gpu {binding.gpu}; "
            f"nic {binding.nic}; threads {binding.threads}")


def gpu_mismatch(planned: Any, observed: Mapping[str, Any]) -> str | None:
    """A sentence when the GPU a rank was given differs from the plan's; None when it matches or nothing
    assigns GPUs here (no GPU planned, or neither SLURM nor a launcher named one)."""
    from hpcbench.affinity.applied import assigned_gpu

    if planned.gpu is None or not any(observed.get(k) for k in ("slurm_step_gpus", "slurm_job_gpus",
                                                                 "cuda_visible_devices")):
        return None
    gpu, how = assigned_gpu(dict(observed), planned.local_rank)
    if gpu == planned.gpu:
        return None
    return f"local rank {planned.local_rank}: GPU {gpu} ({how}), planned GPU {planned.gpu}"


def record_binding(writer: Any, mode: str, planned: AppliedPlan | None = None) -> list[str]:
    """Write what this rank really has (and, under a plan, every way it differs from it); returns the differences.

    Under a plan the rows also hold the plan's binding (``rank_binding_planned``), the one applied
    where it differs (field ``stand_in``), the GPU the rank was given (field ``assigned_gpu``) and
    the notes of what was assumed (field ``note``).
    """
    from hpcbench.affinity.applied import assigned_gpu, binding_mismatches, observed_binding

    observed = observed_binding()
    labels = {"bind": mode}
    for key, value in sorted(observed.items()):
        if key in _PARSED_DUPLICATES:
            continue
        writer.add("rank_binding", None, "", labels={**labels, "field": key}, text=str(value))
    mismatches: list[str] = []
    if planned is not None:
        plan, applied = planned.planned, planned.applied
        writer.add("rank_binding_planned", None, "", labels=labels,
                   text=f"{_describe(plan)}; planned for {planned.topology}")
        if applied != plan:
            writer.add("rank_binding", None, "", labels={**labels, "field": "stand_in"}, text=_describe(applied))
        if plan.gpu is not None:
            gpu, how = assigned_gpu(observed, plan.local_rank)
            writer.add("rank_binding", None, "", labels={**labels, "field": "assigned_gpu"}, text=f"{gpu} ({how})")
        for note in planned.notes:
            writer.add("rank_binding", None, "", labels={**labels, "field": "note"}, text=note)
        # The GPU is compared with what SLURM assigned; a NIC variable the site had set is a note, not a miss.
        mismatches = binding_mismatches(replace(applied, gpu=None, nic=None if planned.nic_kept else applied.nic),
                                        observed)
        gpu_miss = gpu_mismatch(plan, observed)
        mismatches += [gpu_miss] if gpu_miss else []
        writer.add("rank_binding_mismatches", len(mismatches), "count", labels=labels)
        for sentence in mismatches:  # as text too, so the report's binding table shows them
            writer.add("rank_binding", None, "", labels={**labels, "field": "mismatch"}, text=sentence)
    return mismatches
