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
* ``rules.py``   — the verdict rules, by claim id, reading the summaries of all launches;
* ``__init__.py`` — ``SPEC = Experiment(...)``, registered on import.

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

from hpcbench.core.config import Config
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


def single_process(cfg: Any) -> Resources:
    """An experiment that runs in the notebook process itself."""
    return Resources()


def distributed_resources(cfg: Any) -> Resources:
    """A :class:`~hpcbench.core.config.DistributedConfig`'s nodes x ranks per node, GPU when NCCL."""
    return Resources(nodes=cfg.nodes, ranks_per_node=cfg.ranks_per_node, gpu=cfg.backend == "nccl")


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
    rules: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    """Claim id -> rule(claim, evidence) -> :class:`hpcbench.report.ledger.Judgement`."""
    context_claims: tuple[str, ...] = ()
    """Claims the experiment informs without judging them (C16's inventory)."""
    present: Callable[..., list] | None = None
    """The report section: present(data: ExperimentData) -> list[Section]."""
    raw_rows: bool = False
    """The presenter needs the experiment's raw rows (small inventories only)."""
    reads: tuple[str, ...] = ()
    """Other experiments whose records the rules read (collectives' C16 reads the environment's)."""
    resources: Callable[[Any], Resources] = single_process

    @property
    def claims(self) -> tuple[str, ...]:
        return tuple(self.rules) + tuple(c for c in self.context_claims if c not in self.rules)

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


def rule_owners() -> dict[str, list[str]]:
    """Claim id -> the experiments whose SPEC rules on it."""
    owners: dict[str, list[str]] = {}
    for name in EXPERIMENTS.names():
        for claim_id in EXPERIMENTS.get(name).rules:
            owners.setdefault(claim_id, []).append(name)
    return owners
