"""Each rank's CPU/memory binding: apply the node's affinity plan (``bind: plan``) and record what the rank got.

Locally torchrun starts the ranks, so a scheduler's per-task binding would bind its agent, not
the ranks; on a SLURM allocation srun starts them with ``--cpu-bind=none``. Either way the plan
is applied inside each rank, before its work starts, from the machine's own topology:
:func:`hpcbench.affinity.plan.plan_binding` for the ranks on this machine
(``LOCAL_WORLD_SIZE``), this rank taking binding ``LOCAL_RANK``. An emulated split of
one machine into nodes still binds per machine, so emulated nodes never share a core.

Whatever the mode, every rank records what it really has (``Cpus_allowed_list``,
``Mems_allowed_list``, memory policy, threads, GPU): a plan that was not applied, or a
scheduler that bound ranks nobody asked it to, shows in the records.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Mapping

from hpcbench.core.errors import ConfigError

BIND_MODES = ("none", "plan")
#: Default bind mode of every launch; the launcher's ``bind`` argument overrides it.
BIND_ENV = "HPCBENCH_BIND"


def bind_mode(requested: str | None, env: Mapping[str, str] | None = None) -> str:
    """``requested``, else ``$HPCBENCH_BIND``, else ``none``; an unknown mode names the allowed ones."""
    env = os.environ if env is None else env
    mode = requested or env.get(BIND_ENV) or "none"
    if mode not in BIND_MODES:
        source = "bind" if requested else BIND_ENV
        raise ConfigError(f"{mode!r} is not one of {list(BIND_MODES)}", field=source)
    return mode


def apply_plan_for_this_rank(env: Mapping[str, str] | None = None) -> Any:
    """Plan this machine's ranks and apply this rank's binding; returns the :class:`RankBinding` applied."""
    from hpcbench.affinity.applied import apply_binding
    from hpcbench.affinity.plan import plan_binding
    from hpcbench.affinity.topology import read_topology

    env = os.environ if env is None else env
    local_rank = int(env.get("LOCAL_RANK", "0"))
    local_world = int(env.get("LOCAL_WORLD_SIZE", "1"))
    plan = plan_binding(read_topology(), local_world)
    binding = plan.bindings[local_rank]
    # device_env=False: the worker picks cuda:LOCAL_RANK itself; hiding the other GPUs here would
    # renumber them under it.
    apply_binding(binding, device_env=False)
    return binding


#: observed_binding() fields that repeat another one parsed (cpus <- cpus_allowed_list) or say nothing later.
_PARSED_DUPLICATES = ("pid", "cpus", "mems")


def record_binding(writer: Any, mode: str, planned: Any = None) -> list[str]:
    """Write what this rank really has (and, under a plan, every way it differs from it); returns the differences."""
    from hpcbench.affinity.applied import binding_mismatches, observed_binding

    observed = observed_binding()
    labels = {"bind": mode}
    for key, value in sorted(observed.items()):
        if key in _PARSED_DUPLICATES:
            continue
        writer.add("rank_binding", None, "", labels={**labels, "field": key}, text=str(value))
    mismatches: list[str] = []
    if planned is not None:
        writer.add("rank_binding_planned", None, "", labels=labels,
                   text=f"cpus {','.join(map(str, planned.cpus))}; memory node {planned.mem_node}; "
                        f"gpu {planned.gpu}; threads {planned.threads}")
        # The GPU and NIC are not applied here (see apply_plan_for_this_rank): compare what was.
        mismatches = binding_mismatches(replace(planned, gpu=None, nic=None), observed)
        writer.add("rank_binding_mismatches", len(mismatches), "count", labels=labels)
        for sentence in mismatches:  # as text too, so the report's binding table shows them
            writer.add("rank_binding", None, "", labels={**labels, "field": "mismatch"}, text=sentence)
    return mismatches
