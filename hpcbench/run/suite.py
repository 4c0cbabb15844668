"""Suites: YAML files listing experiments x parameter variants, expanded into tasks.

A suite file looks like this (``hpcbench/suites/demo.yaml`` is the shipped example)::

    name: demo
    description: what this suite is for
    repeat: 1                     # repetitions of every variant (default 1)
    tasks:
      - experiment: environment
      - experiment: collectives
        repeat: 2                 # overrides the suite's repeat
        params: {iters: 10}       # shared by every variant of this entry
        variants:                 # name -> parameters (default: one variant "default")
          one_node: {nodes: 1, ranks_per_node: 2}
          two_nodes: {nodes: 2, ranks_per_node: 2}

Every task's parameters are validated against its experiment's config when the
suite is loaded, so a typo fails before any notebook starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from hpcbench.core.errors import ConfigError, HpcbenchError, RegistryError, SuiteError
from hpcbench.experiments import EXPERIMENTS

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ENTRY_KEYS = {"experiment", "params", "variants", "repeat"}
_SUITE_KEYS = {"name", "description", "repeat", "tasks"}


@dataclass(frozen=True)
class TaskSpec:
    """One notebook run: an experiment with one resolved parameter set."""

    task_id: str
    experiment: str
    variant: str
    repetition: int
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Suite:
    name: str
    description: str
    tasks: list[TaskSpec]
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "source": self.source,
                "tasks": [t.__dict__ for t in self.tasks]}


def shipped_suites() -> list[str]:
    """Names of the suites shipped inside the package."""
    folder = resources.files("hpcbench") / "suites"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_suite(name_or_path: str | Path) -> Suite:
    """Load a shipped suite by name, or a user's suite from a YAML path.

    Raises:
        SuiteError: naming the file and entry for anything malformed, and
            ConfigError-derived messages for invalid parameters.
    """
    text, source = _read_suite_text(name_or_path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SuiteError(f"{source}: not valid YAML ({exc})") from None
    return parse_suite(data, source)


def _read_suite_text(name_or_path: str | Path) -> tuple[str, str]:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise SuiteError(f"suite file {path} does not exist")
        return path.read_text(), str(path)
    name = str(name_or_path)
    if name not in shipped_suites():
        raise SuiteError(f"unknown suite {name!r}; shipped suites: {shipped_suites()} "
                         "(or pass the path of a .yaml file)")
    res = resources.files("hpcbench") / "suites" / f"{name}.yaml"
    return res.read_text(), f"hpcbench/suites/{name}.yaml"


def parse_suite(data: Any, source: str = "<suite>") -> Suite:
    """Expand a suite mapping into validated tasks (see the module docstring)."""
    if not isinstance(data, dict):
        raise SuiteError(f"{source}: a suite is a mapping with keys {sorted(_SUITE_KEYS)}")
    unknown = sorted(set(data) - _SUITE_KEYS)
    if unknown:
        raise SuiteError(f"{source}: unknown key(s) {unknown}; valid keys: {sorted(_SUITE_KEYS)}")
    name = str(data.get("name") or Path(source).stem)
    suite_repeat = _repeat(data.get("repeat", 1), f"{source}: repeat")
    entries = data.get("tasks")
    if not isinstance(entries, list) or not entries:
        raise SuiteError(f"{source}: 'tasks' must be a non-empty list")
    tasks: list[TaskSpec] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"{source}: tasks[{i}]"
        if not isinstance(entry, dict) or "experiment" not in entry:
            raise SuiteError(f"{where}: each task needs an 'experiment' key")
        bad = sorted(set(entry) - _ENTRY_KEYS)
        if bad:
            raise SuiteError(f"{where}: unknown key(s) {bad}; valid keys: {sorted(_ENTRY_KEYS)}")
        try:
            exp = EXPERIMENTS.get(str(entry["experiment"]))
        except RegistryError as exc:
            raise SuiteError(f"{where}: {exc}") from None
        shared = entry.get("params") or {}
        variants = entry.get("variants") or {"default": {}}
        if not isinstance(shared, dict) or not isinstance(variants, dict):
            raise SuiteError(f"{where}: 'params' and 'variants' must be mappings")
        repeat = _repeat(entry.get("repeat", suite_repeat), f"{where}.repeat")
        for variant, overrides in variants.items():
            variant = str(variant)
            if not _NAME_RE.match(variant):
                raise SuiteError(f"{where}: variant name {variant!r} may hold only letters, digits, '_', '.', '-'")
            try:
                config = exp.config.from_dict({**shared, **(overrides or {})})
            except ConfigError as exc:
                raise SuiteError(f"{where}, variant {variant!r}: {exc}") from None
            for rep in range(repeat):
                task_id = f"{exp.name}.{variant}.r{rep}"
                if task_id in seen:
                    raise SuiteError(f"{where}: task {task_id} appears twice in the suite")
                seen.add(task_id)
                tasks.append(TaskSpec(task_id, exp.name, variant, rep, config.to_dict()))
    return Suite(name=name, description=str(data.get("description", "")), tasks=tasks, source=source)


def single_task_suite(experiment: str, params: dict[str, Any], variant: str = "default") -> Suite:
    """The suite of ``hpcbench run``: one experiment, one parameter set."""
    return parse_suite({"name": "run", "tasks": [{"experiment": experiment, "variants": {variant: params}}]},
                       source=f"hpcbench run {experiment}")


def _repeat(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SuiteError(f"{where}: {value!r} must be an integer >= 1")
    return value


__all__ = ["Suite", "TaskSpec", "load_suite", "parse_suite", "shipped_suites", "single_task_suite",
           "HpcbenchError"]
