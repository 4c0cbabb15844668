"""The experiments: one package each under ``hpcbench/experiments/<name>/``, known through its SPEC.

An experiment package holds everything about one experiment, as a ReFrame test class
or a torchtitan experiment folder does:

* ``config.py``  — the typed config; its fields are the notebook's parameters;
* ``worker.py``  — what runs (per rank, or in the notebook process); the only module
  that imports torch;
* ``summary.py`` — ``summarize(records)``: one task's records -> one tidy frame, computed
  once and read by the notebook table, the report table, the plot and the rules;
  ``verify(records, cfg)``: the sanity check;
* ``plot.py``, ``present.py`` — the notebook's figure and the report's section;
* ``claims.py``  — each claim it rules on, declared once: the guide's words and figures, the
  comparison's band, the regime and the guide statement it comes from, what the platform can
  show (:data:`ClaimSet.declared`; :func:`all_claims`);
* ``rules.py``   — the verdict rules, by claim id, reading ``claims.py`` and the summaries of all launches;
* ``__init__.py`` — ``SPEC = Experiment(...)`` (its :class:`ClaimSet` names the rules and
  predictions), registered on import, and the experiment's
  ``estimate(cfg) -> Estimate``: memory and time of one task, from its config alone; and, when
  the defaults take minutes, ``TOY``: the parameter overrides of a functional run of seconds
  (``hpcbench run NAME --toy``).

Shared modules (runner, report, ledger) know experiments only through
:data:`EXPERIMENTS`; every package below this one is imported by :func:`load_all`, so
adding an experiment is adding a package (and a notebook and a test file).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from hpcbench.core.config import Config, DistributedConfig
from hpcbench.core.errors import HpcbenchError
from hpcbench.core.registry import Registry

if TYPE_CHECKING:  # the report imports pandas and matplotlib; the spec only names them
    import pandas as pd

NOTEBOOKS_ENV = "HPCBENCH_NOTEBOOKS"


@dataclass(frozen=True)
class Resources:
    """What one task of an experiment needs."""

    nodes: int = 1
    ranks_per_node: int = 1
    gpu: bool = False

    def describe(self) -> str:
        gpu = ", GPU" if self.gpu else ""
        return f"{self.nodes} node(s) x {self.ranks_per_node} rank(s){gpu}"


#: Memory of one rank process of its own before it allocates any data: Python with torch and
#: hpcbench's worker imported. Measured with 3 such processes side by side (torch 2.x, x86_64,
#: CPU build): 578 MiB RSS each, of which 314 MiB private (USS); the shared libraries are counted
#: once, in TASK_BASE_BYTES.
RANK_BYTES = 384 << 20
#: Memory of one task besides its ranks: the notebook's kernel under papermill with torch imported
#: (~580 MiB RSS, pandas included), torchrun's agent process (~300 MiB private) and torch's shared
#: libraries, counted once (~260 MiB).
TASK_BASE_BYTES = 1 << 30
#: Start-up of one task: kernel, imports, rank rendezvous, notebook cells (10-30 s on 2 cores).
TASK_STARTUP_S = 20.0


@dataclass(frozen=True)
class Estimate:
    """What one task is expected to need, computed from its config before anything starts.

    Rough on purpose: it exists so that a size typo (``max_bytes=1T``) is refused before a
    run starts, with the numbers in the message. ``basis`` states the formula, so a refusal
    can be checked by hand.
    """

    memory_per_rank: int
    """peak host memory of one rank process, in bytes (single-process experiments: what the notebook's
    process and the processes it forks hold beyond the task's base)"""
    ranks: int = 1
    """processes holding ``memory_per_rank`` each: nodes x ranks_per_node for distributed experiments"""
    seconds: float | None = None
    """rough wall time of the task; None when the experiment gives no estimate"""
    basis: str = ""
    """one line: how the numbers were computed"""
    overhead: int = TASK_BASE_BYTES
    """memory held once per task besides the ranks: the notebook's kernel, the launcher, shared libraries"""
    device_memory_per_rank: int = 0
    """bytes on each rank's accelerator (GPU tasks); shown, not checked: the accelerator is not
    known before the task runs on it"""

    def __post_init__(self) -> None:
        for name in ("memory_per_rank", "overhead", "device_memory_per_rank"):
            if getattr(self, name) < 0:
                raise ValueError(f"Estimate.{name}: {getattr(self, name)} is out of range; allowed: >= 0 bytes")
        if self.ranks < 1:
            raise ValueError(f"Estimate.ranks: {self.ranks} is out of range; allowed: >= 1")
        if self.seconds is not None and not self.seconds >= 0:
            raise ValueError(f"Estimate.seconds: {self.seconds} is out of range; allowed: >= 0 or None")

    @property
    def memory_total(self) -> int:
        """Host bytes of the whole task: every rank plus the overhead."""
        return self.memory_per_rank * self.ranks + self.overhead


def baseline_estimate(cfg: Any) -> Estimate:
    """The default for an experiment that declares no estimate: one bare process per rank, no time.

    An under-estimate by construction (the experiment's own data is not counted), so it
    refuses only layouts that cannot even start; the basis says so.
    """
    distributed = isinstance(cfg, DistributedConfig)
    ranks = cfg.nodes * cfg.ranks_per_node if distributed else 1
    return Estimate(RANK_BYTES if distributed else 0, ranks, None,
                    "no estimate of its own: the task's base and one bare process per rank; the experiment's "
                    "data not counted")


def wants_gpu(cfg: Any) -> str | None:
    """The config field that asks for one CUDA device per rank (``backend: nccl``, ``device: cuda``); None if none.

    ``backend: auto`` and ``device: auto`` are not counted: they pick CUDA only where every rank has a GPU.
    """
    if getattr(cfg, "backend", None) == "nccl":
        return "backend: nccl"
    if getattr(cfg, "device", None) == "cuda":
        return "device: cuda"
    return None


def single_process(cfg: Any) -> Resources:
    """An experiment that runs in the notebook process itself (on a GPU when its config asks for one)."""
    return Resources(gpu=wants_gpu(cfg) is not None)


def distributed_resources(cfg: Any) -> Resources:
    """A :class:`~hpcbench.core.config.DistributedConfig`'s nodes x ranks per node, a GPU per rank when NCCL."""
    return Resources(nodes=cfg.nodes, ranks_per_node=cfg.ranks_per_node, gpu=wants_gpu(cfg) is not None)


def config_resources(cfg: Any) -> Resources:
    """The default: :func:`distributed_resources` for a distributed config, else :func:`single_process`.

    The config's type already says whether the experiment spreads over ranks, so a spec names its
    resources only when they differ (scaling's largest stage).
    """
    return distributed_resources(cfg) if isinstance(cfg, DistributedConfig) else single_process(cfg)


@dataclass(frozen=True)
class ClaimSet:
    """What one experiment does with the guide's claims, each mapping keyed by claim id.

    The claim side of an :class:`Experiment`, read by the ledger and the catalogue; the rest of the
    spec (config, summary, presenter, estimate) runs the experiment.
    """

    rules: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    """Claim id -> rule(claim, evidence) -> :class:`hpcbench.judge.evidence.Judgement`."""
    predictions: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    """Claim id -> predictor(claim, evidence) -> text, or an object with ``describe()`` (the text) and
    ``headline`` (one number and its main assumption, for the ledger's summary row): what the model
    predicts at the guide's scale (the ledger's predicted column). An experiment predicts the claims it
    rules on (``prediction.py`` beside ``rules.py``); the evidence, possibly with no launches, is that
    of :attr:`prediction_inputs`."""
    prediction_inputs: str | None = None
    """The experiment whose evidence the :attr:`predictions` are given, where their measured inputs come
    from another's launches (weather_case's C7 prediction takes the link efficiency measured by
    ``scale_model``); None: this experiment's own. A name, not an import: experiments do not import each
    other, and the ledger looks it up in the registry."""
    regimes: Mapping[str, Any] = field(default_factory=dict)
    """Claim id -> the regime its figure was measured in (a :class:`hpcbench.scale.regime.GuideRegime`, a
    busy share, or another with ``summary(launches)`` and ``brief(launches)``, such as practice's step-time
    spread): the ledger shows it beside the regime the launches reached (their ``fact.regime.*``)."""
    applicability: Mapping[str, Any] = field(default_factory=dict)
    """Claim id -> what it needs of the platform (a :class:`hpcbench.judge.applicability.Requirement`, declared
    in the experiment's ``claims.py``): its rule asks it of each launch group's facts, ``hpcbench doctor`` of the
    facts a launch on this cluster would record. A claim without an entry applies on every platform."""
    context: tuple[str, ...] = ()
    """Claims the experiment informs without judging them (C16's inventory)."""
    declared: tuple[Any, ...] = ()
    """The claims this experiment declares (:class:`hpcbench.guide.claims.Claim`, from its ``claims.py``): the one
    place each claim's words, figures, arithmetic, bands and regime live. Every claim C1-C17 is declared by
    exactly one experiment, the one that rules on it (:func:`all_claims`)."""

    @property
    def informs(self) -> tuple[str, ...]:
        """The context claims it does not also rule on."""
        return tuple(c for c in self.context if c not in self.rules)

    @property
    def ids(self) -> tuple[str, ...]:
        """The claims it rules on, then those it only informs."""
        return tuple(self.rules) + self.informs


@dataclass(frozen=True)
class Experiment:
    """Everything the shared modules need to know about one experiment."""

    name: str
    notebook: str
    """File name under ``notebooks/``."""
    config: type[Config]
    description: str
    summarize: Callable[["pd.DataFrame"], "pd.DataFrame"] | None = None
    """One task's records -> its summary frame (see the module docstring)."""
    claims: ClaimSet = field(default_factory=ClaimSet)
    """What the experiment rules on, predicts and informs, by claim id; empty: none."""
    present: Callable[..., list] | None = None
    """The report section: present(data: ExperimentData) -> list[Section]."""
    raw_rows: bool = False
    """The presenter needs the experiment's raw rows (small inventories only)."""
    reads: tuple[str, ...] = ()
    """Other experiments whose records the rules read (collectives' C16 reads the environment's)."""
    resources: Callable[[Any], Resources] = config_resources
    estimate: Callable[[Any], Estimate] = baseline_estimate
    """config -> :class:`Estimate` of one task: what the runner checks against the machine's limits."""
    toy: Mapping[str, Any] = field(default_factory=dict)
    """Parameter overrides that shrink one task to a functional run of seconds on 2 cores, for
    ``hpcbench run NAME --toy`` and the test that runs every experiment: only what differs from the
    defaults, each valid for :attr:`config`; empty when the defaults are that cheap already. A toy
    run checks that the experiment works end to end; its numbers mean nothing."""

    def notebook_path(self) -> Path:
        path = notebooks_dir() / self.notebook
        if not path.is_file():
            raise HpcbenchError(f"experiment {self.name!r}: notebook {path} does not exist "
                                f"(set {NOTEBOOKS_ENV} to the folder holding hpcbench's notebooks)")
        return path


def notebooks_dir() -> Path:
    """``$HPCBENCH_NOTEBOOKS`` or the ``notebooks/`` folder of this checkout."""
    env = os.environ.get(NOTEBOOKS_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "notebooks"


class _Experiments(Registry[Experiment]):
    """The registry, filled on first use by importing every experiment package."""

    _loaded = False

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            load_all()

    def get(self, name: str) -> Experiment:
        self._load()
        return super().get(name)

    def names(self) -> list[str]:
        self._load()
        return super().names()

    def __contains__(self, name: object) -> bool:
        self._load()
        return super().__contains__(name)

    def __len__(self) -> int:
        self._load()
        return super().__len__()


EXPERIMENTS: Registry[Experiment] = _Experiments("experiment")


def register(exp: Experiment) -> Experiment:
    return EXPERIMENTS.register(exp.name, exp)


def load_all() -> None:
    """Import every package under ``hpcbench.experiments`` (each registers its SPEC)."""
    for info in pkgutil.iter_modules(__path__):
        if info.ispkg:
            importlib.import_module(f"{__name__}.{info.name}")


def claim_owners(kind: str) -> dict[str, list[str]]:
    """Claim id -> the experiments whose :class:`ClaimSet` holds it under ``kind`` (``"rules"``, ``"predictions"``)."""
    owners: dict[str, list[str]] = {}
    for name in EXPERIMENTS.names():
        for claim_id in getattr(EXPERIMENTS.get(name).claims, kind):
            owners.setdefault(claim_id, []).append(name)
    return owners


def _claim_number(claim_id: str) -> int:
    return int(claim_id.lstrip("C"))


def all_claims() -> tuple[Any, ...]:
    """Every claim of the guide, C1..C17 in order, as the experiments declare them (each in its ``claims.py``).

    Raises:
        HpcbenchError: a claim declared by two experiments, or one an experiment rules on without declaring
            it anywhere (the declaration is the one place its figures live).
    """
    by_id: dict[str, tuple[str, Any]] = {}
    for name in EXPERIMENTS.names():
        for claim in EXPERIMENTS.get(name).claims.declared:
            if claim.id in by_id:
                raise HpcbenchError(f"claim {claim.id} is declared by both {by_id[claim.id][0]} and {name}")
            by_id[claim.id] = (name, claim)
    undeclared = sorted(set(claim_owners("rules")) - set(by_id), key=_claim_number)
    if undeclared:
        raise HpcbenchError(f"claims ruled on but declared by no experiment's claims.py: {undeclared}")
    return tuple(by_id[cid][1] for cid in sorted(by_id, key=_claim_number))


def get_claim(claim_id: str) -> Any:
    """The declared claim ``claim_id`` (e.g. ``"C3"``).

    Raises:
        ClaimError: listing the valid ids when ``claim_id`` is unknown.
    """
    from hpcbench.guide.claims import ClaimError

    found = {c.id: c for c in all_claims()}
    if claim_id not in found:
        raise ClaimError(f"unknown claim {claim_id!r}; valid: {', '.join(found)}")
    return found[claim_id]


def declaring_experiment(claim_id: str) -> str:
    """The experiment whose ``claims.py`` declares ``claim_id``."""
    for name in EXPERIMENTS.names():
        if any(c.id == claim_id for c in EXPERIMENTS.get(name).claims.declared):
            return name
    get_claim(claim_id)  # raises ClaimError for an unknown id
    raise HpcbenchError(f"claim {claim_id} is declared by no experiment")


def rule_owners() -> dict[str, list[str]]:
    """Claim id -> the experiments whose SPEC rules on it."""
    return claim_owners("rules")
