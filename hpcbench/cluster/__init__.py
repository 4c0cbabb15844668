"""Clusters to run distributed benchmarks on; today an emulated multi-node SLURM on one host.

See :mod:`hpcbench.cluster.emulated`.
"""

from hpcbench.cluster.emulated import (
    DEFAULT_STATE_DIR,
    ClusterError,
    ClusterInfo,
    ClusterSpec,
    NodeInfo,
    check_prerequisites,
    cluster_down,
    cluster_status,
    cluster_up,
    load_cluster,
    reshape_links,
)

__all__ = ["ClusterSpec", "NodeInfo", "ClusterInfo", "ClusterError", "DEFAULT_STATE_DIR", "cluster_up",
           "cluster_down", "cluster_status", "load_cluster", "check_prerequisites", "reshape_links"]
