"""A phase of a task at another link rate: every node link reshaped, always put back afterwards.

For experiments that sweep the inter-node link inside one task (the scale model's validation,
the advisor's regimes). The driver (the notebook, in the task's SLURM job) finds the cluster it
runs on with :func:`hpcbench.cluster.locate.cluster_of` (``SLURM_CONF``'s folder holds
``cluster.json``) and changes every node link with :func:`hpcbench.cluster.reshape_links`. The
job's shell runs inside the first node's network namespace, where the bridge-side ends of the
links are not visible, so the reshape runs in the host's namespace (that of the cluster's
slurmctld), which works from the host as well::

    nsenter --net=/proc/<slurmctld>/ns/net python -c "...reshape_links(STATE, link_rate=RATE)" STATE RATE

Without the cluster the phase runs on the link it has, and :class:`LinkPhase` says why.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Iterator

from hpcbench.core.errors import HpcbenchError

#: Seconds one reshape may take (two tc commands per node end, a Python start).
RESHAPE_TIMEOUT_S = 60
#: Seconds one reshape of every node link typically takes here, for the tasks' time estimates.
RESHAPE_TYPICAL_S = 1.5
#: What runs in the host's namespace: hpcbench.cluster.reshape_links(STATE_DIR, link_rate=RATE).
RESHAPE_SCRIPT = ("import sys; from hpcbench.cluster import reshape_links; "
                  "info = reshape_links(sys.argv[1], link_rate=sys.argv[2]); "
                  "print(f'links of {info.state_dir} at {info.spec.link_rate}')")


class LinkPhaseError(HpcbenchError):
    """The link could not be reshaped (or put back); the message quotes the command's error."""


@dataclass
class LinkPhase:
    """What one phase did to the link: asked, applied, put back."""

    names: list[str]
    """what runs in the phase (regimes, link rates...), for the records"""
    requested: float | str
    """the rate asked for, as the experiment gave it (bit/s, or tc's spelling)"""
    original: float | None = None
    """the cluster's rate before the phase (None: no cluster)"""
    shaped: bool = False
    restored: bool | None = None
    """the cluster's rate equals ``original`` again after the phase (None: nothing to restore)"""
    why_not: str = ""
    actions: list[str] = field(default_factory=list)

    def describe(self) -> str:
        which = ", ".join(self.names)
        if not self.shaped and self.why_not:
            return f"{which}: link not shaped to {self.requested}: {self.why_not}"
        return f"{which}: " + "; ".join(self.actions)


def reshape_from_host(cluster, rate: float | str) -> float | None:
    """Set every node link of ``cluster`` to ``rate`` (bit/s, or tc's ``"800mbit"``) from the host's namespace;
    return the rate cluster.json holds (bit/s; None when it cannot be read back)."""
    from hpcbench.core.config import BitRate

    from hpcbench.cluster.host_commands import ClusterError
    from hpcbench.cluster.locate import cluster_of, host_netns_of
    from hpcbench.cluster.network import in_netns

    try:
        host = host_netns_of(cluster)
    except ClusterError as exc:
        raise LinkPhaseError(str(exc)) from None
    try:
        bps = float(BitRate(rate))
    except ValueError as exc:
        raise LinkPhaseError(f"link rate: {exc}") from None
    # only hpcbench.cluster imported in the helper: it starts in a fraction of a second
    argv = in_netns(host, [sys.executable, "-c", RESHAPE_SCRIPT, str(cluster.state_dir), repr(bps)])
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=RESHAPE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LinkPhaseError(f"`{' '.join(argv)}` could not run: {exc}") from None
    if proc.returncode != 0:
        raise LinkPhaseError(f"`{' '.join(argv)}` failed (rc {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    now = cluster_of({"SLURM_CONF": str(cluster.slurm_conf)})
    return now.spec.link_rate if now is not None else None


@contextlib.contextmanager
def link_phase(names: list[str], rate: float | str) -> Iterator[LinkPhase]:
    """The cluster's links at ``rate`` while ``names`` run in the body, the original rate again afterwards,
    also on errors.

    Yields:
        The :class:`LinkPhase`; ``shaped`` False with ``why_not`` where there is no emulated cluster.

    Raises:
        LinkPhaseError: the reshape or the restore failed (the restore is tried even when the reshape failed).
    """
    from hpcbench.cluster.locate import cluster_of

    phase = LinkPhase(list(names), rate)
    cluster = cluster_of()
    if cluster is None:
        phase.why_not = ("no emulated cluster (SLURM_CONF's folder holds no cluster.json): the ranks share this "
                         "machine's loopback, whose rate nothing here can set")
        yield phase
        return
    phase.original = cluster.spec.link_rate
    try:
        got = reshape_from_host(cluster, rate)
        phase.shaped = True
        phase.actions.append(f"links reshaped from {phase.original} to {got} (hpcbench.cluster.reshape_links)")
        yield phase
    finally:
        got = reshape_from_host(cluster, phase.original)
        phase.restored = got == phase.original
        phase.actions.append(f"links put back to {got}")


class SteeredLink:
    """Every node link set to one rate after another inside a task, the cluster's own rate put back on exit.

    For a calibration run by a rank (the lead) while the others wait: :meth:`set` reshapes and
    returns the rate cluster.json holds; leaving the ``with`` block always puts the original rate
    back, also on errors. Without the emulated cluster ``shaped`` stays False, ``why_not`` says
    why, and :meth:`set` is refused.
    """

    def __init__(self) -> None:
        from hpcbench.cluster.locate import cluster_of

        self.cluster = cluster_of()
        self.original: float | None = self.cluster.spec.link_rate if self.cluster is not None else None
        self.current: float | None = self.original
        self.restored: bool | None = None
        self.touched = False
        self.actions: list[str] = []
        self.why_not = "" if self.cluster is not None else (
            "no emulated cluster (SLURM_CONF's folder holds no cluster.json): the ranks share this machine's "
            "loopback, whose rate nothing here can set")

    @property
    def can_shape(self) -> bool:
        return self.cluster is not None

    def set(self, rate: float | str) -> float | None:
        """Every node link to ``rate`` (bit/s); returns the rate cluster.json holds afterwards."""
        if self.cluster is None:
            raise LinkPhaseError(self.why_not)
        self.touched = True  # a reshape that fails half-way is put back too
        self.current = reshape_from_host(self.cluster, rate)
        self.actions.append(f"links at {self.current}")
        return self.current

    def __enter__(self) -> "SteeredLink":
        return self

    def __exit__(self, *exc) -> None:
        if self.cluster is None or not self.touched:
            return
        got = reshape_from_host(self.cluster, self.original)
        self.restored = got == self.original
        self.current = got
        self.actions.append(f"links put back to {got}")


def agreed(flag: bool, device) -> bool:
    """Rank 0's ``flag`` on every rank (collective)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([1.0 if flag else 0.0], dtype=torch.float64, device=device)
    dist.broadcast(t, src=0)
    return bool(t.item())


def shape_on_ranks(steer: SteeredLink, rate_bps: float, *, lead: bool, device) -> None:
    """Rank 0 reshapes every node link to ``rate_bps``; every rank returns once it has (collective).

    Raises:
        LinkPhaseError: on every rank, when rank 0's reshape failed (its error on rank 0).
    """
    error: LinkPhaseError | None = None
    if lead:
        try:
            steer.set(rate_bps)
        except LinkPhaseError as exc:
            error = exc
    if not agreed(error is None, device):
        raise error or LinkPhaseError("rank 0 could not reshape the node links (its records and log say why)")
