"""The emulated multi-node SLURM cluster as a session fixture.

``emulated_cluster`` brings up a 2-node cluster (network namespaces n1, n2 joined by
1gbit links, one slurmd each, slurmctld on the host) once per test session, returns its
:class:`~hpcbench.cluster.ClusterInfo` and tears it down at the end, even on failure.
Run SLURM clients with ``env={**os.environ, **info.env()}`` and a timeout.

Missing root/SLURM/munge/iproute2 skips locally and fails in CI (``missing()``).
"""

from __future__ import annotations

import pytest

from hpcbench.cluster import ClusterSpec, check_prerequisites, cluster_down, cluster_up

#: A short fixed path: slurmd's step sockets live under it and unix socket paths max out at 108 bytes.
SESSION_STATE_DIR = "/tmp/hpcbench-test-cluster"


def session_cluster_spec() -> ClusterSpec:
    """The spec of the session cluster (tests that take it down bring it back with this)."""
    return ClusterSpec(nodes=2, link_rate="1gbit", link_delay="0ms", state_dir=SESSION_STATE_DIR)


def require_cluster_prerequisites() -> None:
    """Skip (locally) or fail (CI) naming what is missing and how to install it."""
    from conftest import missing

    absent = check_prerequisites()
    if absent:
        missing("the emulated SLURM cluster needs: " + "; ".join(absent))


@pytest.fixture(scope="session")
def emulated_cluster():
    """A running 2-node emulated SLURM cluster (ClusterInfo), up for the whole session."""
    require_cluster_prerequisites()
    spec = session_cluster_spec()
    try:
        yield cluster_up(spec)
    finally:
        cluster_down(spec.state_dir)
