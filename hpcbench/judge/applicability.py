"""Where a claim applies: named platform conditions, read the same way by the rules and the preflight.

A claim such as C17 ("match the gradient bucket to the IB MTU") says something only where its
premise holds: InfiniBand carries the reduction, through NCCL. Whether it holds is read from a
launch's recorded facts (:func:`hpcbench.judge.evidence.facts_of`: the ``fact.*`` records, the
workers' ``backend``, the ``storage.filesystem`` record, and the launch's ``params``), before any
measured value is looked at, and the same way whatever that value is.

Each such premise is one :class:`Condition`, registered once in :data:`CONDITIONS` by name; a claim
composes the ones it needs into a :class:`Requirement`, declared beside the claim in its experiment's
``claims.py`` (the SPEC's ``ClaimSet(applicability=...)``). Two readers ask the same requirement:

* the claim's rule, on each launch group's facts (``judge_comparisons(..., applies=REQUIREMENT)``);
  a group where it fails is "not applicable: <reason>" in the ledger;
* ``hpcbench doctor``, on the facts a launch on this cluster would record (:mod:`hpcbench.run.doctor`),
  so that the preflight's "cannot rule, because ..." is the ledger's reason, word for word.

A condition's reason has two parts: what was found (the condition's own words, e.g. "ran on gloo")
and, optionally, why the claim cares (its *stake*, :meth:`Condition.because`), so that one test of
the facts serves claims that explain their premise differently.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from hpcbench.core.facts import EMULATED_CLUSTER
from hpcbench.core.registry import Registry
from hpcbench.core.results import json_object

__all__ = ["Condition", "Requirement", "CONDITIONS", "register", "requires", "nodes_of",
           "MULTI_NODE", "INTER_NODE_LINK", "INFINIBAND", "NCCL", "LUSTRE", "STORAGE_WRITE", "SLOW_LINK",
           "IN_MEMORY_FILESYSTEMS", "DATA", "RUN_DIR"]

#: Facts of one launch: ``cluster``, ``link_rate_bps``, ``infiniband``, ``gpus``, ``backend``,
#: ``storage.filesystem``, ``params`` (JSON text or a mapping) and the rest of :func:`facts_of`.
Facts = Mapping[str, Any]

#: Which folder a launch's ``storage.filesystem`` fact describes, for a reader that predicts it
#: (the preflight knows both folders before any launch): the data set's, or the run dir's (checkpoints).
DATA = "data"
RUN_DIR = "run dir"

#: File systems that hold their files in memory: a write to them is no storage write.
IN_MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")


@dataclass(frozen=True)
class Condition:
    """One premise a claim may need of the platform, tested on a launch's facts."""

    name: str
    """Its registered name, e.g. ``"infiniband"``."""
    needs: str
    """What the platform must offer, in a few words (the preflight's "needs" column)."""
    test: Callable[[Facts], str | None]
    """facts -> None where the premise holds, else what was found instead (e.g. "ran on gloo")."""
    stake: str = ""
    """Why a claim cares, appended to what was found (", which ignores NCCL_* settings"); see :meth:`because`."""
    storage: str = ""
    """:data:`DATA` or :data:`RUN_DIR` when the test reads ``storage.filesystem``: which folder's file system
    that fact names for the claims that use this condition; ``""`` when it reads no file system."""

    def why_not(self, facts: Facts) -> str | None:
        """None where the premise holds, else the reason: what was found, then the stake."""
        found = self.test(facts)
        return None if found is None else found + self.stake

    def because(self, stake: str) -> Condition:
        """The same test, its reason followed by ``stake`` (one claim's words for why it needs it)."""
        return replace(self, stake=stake)


#: Every condition, by name: the one place each premise is tested.
CONDITIONS: Registry[Condition] = Registry("applicability condition")


def register(name: str, needs: str, test: Callable[[Facts], str | None], *, storage: str = "") -> Condition:
    """Register ``test(facts) -> str | None`` as the :class:`Condition` ``name`` and return it."""
    return CONDITIONS.register(name, Condition(name, needs, test, storage=storage))


@dataclass(frozen=True)
class Requirement:
    """What one claim needs of the platform: every one of its conditions."""

    conditions: tuple[Condition, ...] = ()

    def why_not(self, facts: Facts) -> str | None:
        """None where every condition holds, else the first failing one's reason (what the ledger shows)."""
        return next((why for c in self.conditions if (why := c.why_not(facts)) is not None), None)

    __call__ = why_not  # a requirement is what ``judge_comparisons(..., applies=)`` asks

    def needs(self) -> str:
        """What the platform must offer, every condition's ``needs`` joined."""
        return ", ".join(c.needs for c in self.conditions) or "nothing of the platform"


def requires(*conditions: Condition | str) -> Requirement:
    """A claim's :class:`Requirement`: conditions, or their registered names.

    Raises:
        RegistryError: an unknown name, listing the registered ones.
    """
    return Requirement(tuple(CONDITIONS.get(c) if isinstance(c, str) else c for c in conditions))


# -- the facts the conditions read ------------------------------------------------------------

def nodes_of(facts: Facts) -> int:
    """The nodes a launch ran on: its ``params``' ``nodes`` (JSON text or a mapping), 1 when it names none."""
    params = facts.get("params")
    params = params if isinstance(params, Mapping) else json_object(params)
    return int(params.get("nodes", 1) or 1)


def _text(facts: Facts, name: str, unknown: str) -> str:
    value = facts.get(name)
    return unknown if value is None or value != value or value == "" else str(value)  # value != value: NaN


# -- the conditions -------------------------------------------------------------------------------

def _multi_node(facts: Facts) -> str | None:
    return None if nodes_of(facts) >= 2 else "one node: there is no inter-node link"


def _inter_node_link(facts: Facts) -> str | None:
    # Real nodes under SLURM have a link of their own, and so do the emulated cluster's (shaped);
    # emulated nodes on one machine share one loopback, as does everything on one machine.
    cluster = _text(facts, "cluster", "")
    if cluster == EMULATED_CLUSTER or cluster.startswith("SLURM"):
        return None
    return f"ran on {cluster or 'an unrecorded setup'}: every byte crosses one loopback"


def _infiniband(facts: Facts) -> str | None:
    # fact.infiniband: "present" when /sys/class/infiniband listed a device with an ACTIVE port
    return None if _text(facts, "infiniband", "absent") == "present" else "no active InfiniBand port was recorded"


def _nccl(facts: Facts) -> str | None:
    backend = _text(facts, "backend", "")
    return None if backend == "nccl" else f"ran on {backend or 'an unrecorded backend'}"


def _lustre(facts: Facts) -> str | None:
    fs = _text(facts, "storage.filesystem", "unknown")
    return None if fs.lower().startswith("lustre") else f"the data was on {fs}"


def _storage_write(facts: Facts) -> str | None:
    fs = _text(facts, "storage.filesystem", "unknown")
    if fs.split()[0].lower() in IN_MEMORY_FILESYSTEMS:
        return f"the checkpoints were written to {fs}, which holds them in memory"
    return None


#: The launch spans two nodes or more.
MULTI_NODE = register("multi_node", "two or more nodes", _multi_node)
#: Bytes between nodes cross a link of their own (SLURM nodes, or the emulated cluster's shaped link).
INTER_NODE_LINK = register("inter_node_link", "a real inter-node link (SLURM nodes or the emulated cluster's)",
                           _inter_node_link)
#: An active InfiniBand port (``fact.infiniband``).
INFINIBAND = register("infiniband", "an active InfiniBand port", _infiniband)
#: The workers ran NCCL (their ``backend`` record).
NCCL = register("nccl", "NCCL as the backend (a GPU per rank)", _nccl)
#: The data set sits on Lustre (``storage.filesystem`` of the data).
LUSTRE = register("lustre", "the data on Lustre", _lustre, storage=DATA)
#: Checkpoints go to storage, not to a file system held in memory (``storage.filesystem`` of the run dir).
STORAGE_WRITE = register("storage_write", "a run dir on storage, not in memory", _storage_write, storage=RUN_DIR)

#: Techniques that spare inter-node bytes or synchronisations (a two-level reduction, gradient compression,
#: fewer all-reduces, a larger batch) can show only where an inter-node link is slower than the intra-node one.
SLOW_LINK = requires(MULTI_NODE, INTER_NODE_LINK.because(
    ", so there is no slower inter-node link whose bytes or waits a technique could spare"))
