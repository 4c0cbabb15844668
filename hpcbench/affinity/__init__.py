"""Binding planner (guide section 2.3, T-affinity): which cores, memory node, GPU and NIC each rank gets.

``topology`` reads a node from sysfs, ``plan`` decides, ``emit`` writes the decision as
srun/numactl/sbatch text, ``applied`` applies it inside a rank and reads back what the
rank really got.
"""

from hpcbench.affinity.applied import (apply_binding, bind_loader_worker, binding_mismatches,
                                       observed_binding)
from hpcbench.affinity.emit import numactl_argv, plan_table, rank_env, sbatch_script, srun_args
from hpcbench.affinity.plan import BindingPlan, RankBinding, max_ranks, plan_binding
from hpcbench.affinity.topology import (NodeTopology, NumaNode, PciDevice, format_cpulist, parse_cpulist,
                                        read_topology)

__all__ = [
    "BindingPlan", "NodeTopology", "NumaNode", "PciDevice", "RankBinding", "apply_binding",
    "bind_loader_worker", "binding_mismatches", "format_cpulist", "max_ranks", "numactl_argv",
    "observed_binding", "parse_cpulist", "plan_binding", "plan_table", "rank_env", "read_topology",
    "sbatch_script", "srun_args",
]
