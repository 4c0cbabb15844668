"""The emulated multi-node SLURM cluster as a session fixture.

``emulated_cluster`` brings up a 2-node cluster (network namespaces n1, n2 joined by
1gbit links, one slurmd each, slurmctld on the host) once per test session, returns its
:class:`~hpcbench.cluster.ClusterInfo` and tears it down at the end, even on failure.
``gres_cluster`` is the same with 8 stand-in GPUs per node as SLURM GRES, for one module at a time.
Run SLURM clients with ``env={**os.environ, **info.env()}`` and a timeout.

Missing root/SLURM/munge/iproute2 skips locally and fails in CI (``missing()``).
"""

from __future__ import annotations

import contextlib

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


#: The GPU cluster's state dir: its own, so that the session cluster's is never rewritten with GPUs.
GRES_STATE_DIR = "/tmp/hpcbench-test-gres"
#: Stand-in GPUs per node of the GPU cluster: a DGX-like node's 8, as the recorded topology has.
GRES_GPUS_PER_NODE = 8


@pytest.fixture(scope="module")
def gres_cluster():
    """A running 2-node emulated cluster whose nodes declare 8 GPUs as SLURM GRES (stand-in devices).

    One machine holds one cluster: this one takes over the network from the session cluster while
    the module runs and brings the session cluster back afterwards if it was up (its ClusterInfo
    stays valid: same state dir, same slurm.conf).
    """
    require_cluster_prerequisites()
    with taking_over_the_session_cluster(ClusterSpec(nodes=2, link_rate="1gbit", link_delay="0ms",
                                                     state_dir=GRES_STATE_DIR, gpus_per_node=GRES_GPUS_PER_NODE)) as info:
        yield info


@contextlib.contextmanager
def taking_over_the_session_cluster(spec: ClusterSpec):
    """A cluster of ``spec`` in the session cluster's place (one machine holds one: ``cluster_up`` takes the
    names over), taken down afterwards and the session cluster brought back if it was up; its ClusterInfo
    stays valid (same state dir, same slurm.conf)."""
    from hpcbench.cluster import load_cluster
    from hpcbench.cluster.host_commands import ClusterError

    try:
        load_cluster(SESSION_STATE_DIR)
        session_was_up = True
    except ClusterError:
        session_was_up = False
    try:
        yield cluster_up(spec)
    finally:
        cluster_down(spec.state_dir)
        if session_was_up:
            cluster_up(session_cluster_spec())


def run_task_on_cluster(cluster, run_dir, experiment: str, params: dict):
    """One task of ``experiment`` run on ``cluster`` through the SLURM backend: (its status, all its records).

    The cluster's SLURM environment is set for the run and put back afterwards; a task that did not
    finish fails the calling test with its error.
    """
    import os

    import pandas as pd

    from hpcbench.core.results import find_record_files, read_records
    from hpcbench.run.runner import run_suite
    from hpcbench.run.suite import parse_suite

    saved = {k: os.environ.get(k) for k in cluster.env()}
    os.environ.update(cluster.env())
    try:
        suite = parse_suite({"name": experiment[:1], "tasks": [{"experiment": experiment, "params": params}]})
        (status,) = run_suite(suite, run_dir, backend="slurm", progress=False)
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    assert status.state == "done", status.error
    return status, pd.concat([read_records(p) for p in find_record_files(run_dir / "tasks")], ignore_index=True)
