"""Suites: YAML files listing experiments x parameter variants, expanded into tasks.

A suite file looks like this (``hpcbench/suites/demo.yaml`` is the shipped example)::

    name: demo
    description: what this suite is for
    repeat: 1                     # repetitions of every variant (default 1)
    oversubscribe: false          # true: run locally even with more ranks than cores (default false)
    bind: plan                    # each rank bound by the node's affinity plan (default: $HPCBENCH_BIND, else none)
    tasks:
      - experiment: environment
      - experiment: collectives
        repeat: 2                 # overrides the suite's repeat
        params: {iters: 10}       # shared by every variant of this entry
        variants:                 # name -> parameters (default: one variant "default")
          one_node: {nodes: 1, ranks_per_node: 2}
          two_nodes: {nodes: 2, ranks_per_node: 2}

A suite sized by the cluster it runs on (``guide-scale``) writes ``"{nodes}"`` and
``"{gpus_per_node}"`` as parameter values; :class:`Layout` (``--layout 4x8``) fills them in when
it is loaded, and loading it without one is refused, naming the option. ``toy=True`` runs each task
at its experiment's toy size, once, keeping only its layout and regime (:data:`TOY_KEEPS`): the same
jobs and placements in seconds.

Every task's parameters are validated against its experiment's config when the
suite is loaded, so a typo fails before any notebook starts. The same holds for a
suite read back from a run dir's ``suite.json`` (:func:`suite_from_dict`), which
``suite resume`` trusts no more than a YAML file: it may have been edited by hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from hpcbench.core.errors import ConfigError, HpcbenchError, RegistryError, SuiteError
from hpcbench.core.registry import did_you_mean
from hpcbench.experiments import EXPERIMENTS

# Suite and variant names become path components (OUT/<suite>-<time>, tasks/<exp>.<variant>.r<k>)
# and SLURM job names: no '/', no leading '.', no whitespace. Always used with fullmatch:
# with match, "$" also matches before a trailing newline, so "a\n" would pass.
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_NAME_RULE = "may hold only letters, digits, '_', '.', '-' and must start with a letter or digit"
_ENTRY_KEYS = {"experiment", "params", "variants", "repeat"}
_SUITE_KEYS = {"name", "description", "repeat", "oversubscribe", "bind", "tasks"}
# What Suite.to_dict writes to suite.json (run dirs written before oversubscribe or bind existed lack them).
_SUITE_JSON_KEYS = {"name", "description", "source", "oversubscribe", "bind", "tasks"}
#: The placeholders a suite sized by its cluster writes as parameter values, and the Layout field of each.
LAYOUT_PLACEHOLDERS = {"{nodes}": "nodes", "{gpus_per_node}": "gpus_per_node"}
#: What a toy run of a suite keeps of each task's parameters: its layout and regime, so that its jobs and
#: placements are the real run's. The rest is the experiment's toy size (a guide-scale model or message
#: size would not run in seconds, nor fit the toy's other values), its backend included: ``auto``, NCCL
#: with a GPU per rank, gloo on CPU stand-ins.
TOY_KEEPS = ("nodes", "ranks_per_node", "regime", "link_regime")
_TASK_KEYS = {"task_id", "experiment", "variant", "repetition", "params"}  # TaskSpec's fields, in suite.json

#: Repetitions of one variant. Launch-to-launch spread needs 5-30; more than this is a typo
#: (an extra zero) that would otherwise expand into millions of tasks while the suite loads.
MAX_REPEAT = 1000
#: Tasks in one suite: far above any real campaign (the reproduce suite has ~100), low
#: enough that expanding, validating and writing one status.json each stays quick.
MAX_SUITE_TASKS = 10000


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
    oversubscribe: bool = False
    """run locally even when a task has more ranks than this machine has cores (hpcbench.run.limits)"""
    bind: str | None = None
    """every rank's binding (``plan`` or ``none``), set as $HPCBENCH_BIND for the tasks; None: the caller's"""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "source": self.source,
                "oversubscribe": self.oversubscribe, "bind": self.bind, "tasks": [t.__dict__ for t in self.tasks]}


@dataclass(frozen=True)
class Layout:
    """The cluster a sized suite runs on: nodes x GPUs (ranks) per node."""

    nodes: int
    gpus_per_node: int

    @classmethod
    def parse(cls, text: str) -> "Layout":
        """``"4x8"`` -> 4 nodes x 8 GPUs per node; refuses anything else, naming the option."""
        match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", str(text))
        if not match or not all(0 < int(g) <= 1024 for g in match.groups()):
            raise SuiteError(f"--layout {text!r}: give NODESxGPUS_PER_NODE, e.g. 4x8 (hpcbench doctor prints "
                             "this cluster's)")
        return cls(int(match.group(1)), int(match.group(2)))

    def __str__(self) -> str:
        return f"{self.nodes}x{self.gpus_per_node}"


def _placeholders(value: Any) -> set[str]:
    if isinstance(value, str):
        return {value} & set(LAYOUT_PLACEHOLDERS)
    if isinstance(value, dict):
        return set().union(*(_placeholders(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_placeholders(v) for v in value)) if value else set()
    return set()


def _fill(value: Any, layout: Layout) -> Any:
    if isinstance(value, str) and value in LAYOUT_PLACEHOLDERS:
        return getattr(layout, LAYOUT_PLACEHOLDERS[value])
    if isinstance(value, dict):
        return {k: _fill(v, layout) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, layout) for v in value]
    return value


def shipped_suites() -> list[str]:
    """Names of the suites shipped inside the package."""
    folder = resources.files("hpcbench") / "suites"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def is_plain_name(text: Any) -> bool:
    """Whether ``text`` is usable as a suite, variant or task name (see ``_NAME_RE``)."""
    return isinstance(text, str) and _NAME_RE.fullmatch(text) is not None


class DuplicateKeyError(yaml.YAMLError):
    """A YAML mapping holds the same key twice; carries the key and both lines (1-based)."""

    def __init__(self, key: Any, line: int, first_line: int):
        self.key, self.line, self.first_line = key, line, first_line
        super().__init__(f"line {line}: duplicate key {key!r} (first given at line {first_line})")


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping.

    PyYAML keeps the last value silently, so two variants named ``a`` would run one of
    them, and ``iters`` given twice would run with whichever came last. YAML 1.2 requires
    keys to be unique; this loader enforces it. Merge keys (``<<: *base``) may still be
    overridden, as YAML intends.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            first_line: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = key in first_line
                except TypeError:
                    continue  # an unhashable key: the base class reports it with its position
                line = key_node.start_mark.line + 1
                if seen:
                    raise DuplicateKeyError(key, line, first_line[key])
                first_line[key] = line
        return super().construct_mapping(node, deep=deep)


def load_suite(name_or_path: str | Path, *, layout: Layout | None = None, toy: bool = False) -> Suite:
    """Load a shipped suite by name, or a user's suite from a YAML path.

    Args:
        layout: fills a sized suite's ``"{nodes}"`` and ``"{gpus_per_node}"`` (module docstring).
        toy: each experiment's toy size over its tasks, their layout kept.

    Raises:
        SuiteError: naming the file and entry for anything malformed (unreadable or
            non-UTF-8 file, invalid YAML, a key given twice), and ConfigError-derived
            messages for invalid parameters.
    """
    text, source = _read_suite_text(name_or_path)
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)
    except DuplicateKeyError as exc:
        raise SuiteError(f"{source}, line {exc.line}: key {exc.key!r} is given twice (first at line "
                         f"{exc.first_line}); YAML would keep only the last one") from None
    except yaml.YAMLError as exc:
        raise SuiteError(f"{source}: not valid YAML ({exc})") from None
    return parse_suite(data, source, layout=layout, toy=toy)


def _read_suite_text(name_or_path: str | Path) -> tuple[str, str]:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.exists():
            raise SuiteError(f"suite file {path} does not exist")
        if not path.is_file():
            raise SuiteError(f"suite file {path} is not a file")
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except UnicodeDecodeError as exc:
            raise SuiteError(f"{path}: not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x}); "
                             "save the suite as UTF-8") from None
        except OSError as exc:
            raise SuiteError(f"{path}: cannot read the suite file ({exc.strerror or exc})") from None
    name = str(name_or_path)
    if name not in shipped_suites():
        raise SuiteError(f"unknown suite {name!r}; shipped suites: {shipped_suites()} "
                         "(or pass the path of a .yaml file)")
    res = resources.files("hpcbench") / "suites" / f"{name}.yaml"
    return res.read_text(), f"hpcbench/suites/{name}.yaml"


def parse_suite(data: Any, source: str = "<suite>", *, layout: Layout | None = None, toy: bool = False) -> Suite:
    """Expand a suite mapping into validated tasks (see the module docstring)."""
    if not isinstance(data, dict):
        raise SuiteError(f"{source}: a suite is a mapping with keys {sorted(_SUITE_KEYS)}")
    _refuse_unknown_keys(data, _SUITE_KEYS, source)
    sized = _placeholders(data.get("tasks"))
    if sized and layout is None:
        raise SuiteError(f"{source} is sized by the cluster it runs on ({', '.join(sorted(sized))}): give "
                         "--layout NODESxGPUS_PER_NODE, e.g. 4x8 (hpcbench doctor prints this cluster's)")
    if layout is not None:
        data = {**data, "tasks": _fill(data.get("tasks"), layout)}
    bind = _bind(data.get("bind"), source)
    name = _suite_name(data.get("name"), source)
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
        _refuse_unknown_keys(entry, _ENTRY_KEYS, where)
        try:
            exp = EXPERIMENTS.get(str(entry["experiment"]))
        except RegistryError as exc:
            raise SuiteError(f"{where}: {exc}") from None
        shared = entry.get("params") or {}
        variants = entry.get("variants") or {"default": {}}
        if not isinstance(shared, dict) or not isinstance(variants, dict):
            raise SuiteError(f"{where}: 'params' and 'variants' must be mappings")
        repeat = _repeat(entry.get("repeat", suite_repeat), f"{where}.repeat")
        if toy:
            repeat = 1  # a rehearsal: one launch of each variant shows its jobs and placements
        # Counted before expanding: a bound checked after the loop would come too late.
        count = len(variants) * repeat
        if len(tasks) + count > MAX_SUITE_TASKS:
            raise SuiteError(f"{where}: {len(variants)} variant(s) x repeat {repeat} = {count} tasks, after "
                             f"{len(tasks)} from earlier entries, exceeds the limit of {MAX_SUITE_TASKS} "
                             "tasks per suite; split it into several suites")
        for variant, overrides in variants.items():
            variant = str(variant)
            if not is_plain_name(variant):
                raise SuiteError(f"{where}: variant name {variant!r} {_NAME_RULE}")
            if overrides is not None and not isinstance(overrides, dict):
                raise SuiteError(f"{where}, variant {variant!r}: the overrides must be a mapping of "
                                 f"parameter: value, got {type(overrides).__name__} {overrides!r}")
            params = {**shared, **(overrides or {})}
            if toy:
                params = {**exp.toy, **{k: v for k, v in params.items() if k in TOY_KEEPS}}
            try:
                config = exp.config.from_dict(params)
            except ConfigError as exc:
                raise SuiteError(f"{where}, variant {variant!r}: {exc}") from None
            for rep in range(repeat):
                task_id = f"{exp.name}.{variant}.r{rep}"
                if task_id in seen:
                    raise SuiteError(f"{where}: task {task_id} appears twice in the suite")
                seen.add(task_id)
                tasks.append(TaskSpec(task_id, exp.name, variant, rep, config.to_dict()))
    return Suite(name=name, description=str(data.get("description", "")), tasks=tasks, source=source,
                 oversubscribe=_flag(data.get("oversubscribe", False), f"{source}: oversubscribe"), bind=bind)


def single_task_suite(experiment: str, params: dict[str, Any], variant: str = "default") -> Suite:
    """The suite of ``hpcbench run``: one experiment, one parameter set."""
    return parse_suite({"name": "run", "tasks": [{"experiment": experiment, "variants": {variant: params}}]},
                       source=f"hpcbench run {experiment}")


def suite_from_dict(data: Any, source: str) -> Suite:
    """The inverse of :meth:`Suite.to_dict`, validated: a run dir's ``suite.json`` read back.

    ``suite resume`` runs what this returns, so a hand-edited file is checked like a
    YAML suite: task entries with exactly TaskSpec's keys, registered experiments,
    parameters valid for their config, and task ids that are the plain
    ``<experiment>.<variant>.r<k>`` they name (a task id is a folder under ``tasks/``;
    ``../../x`` would write outside the run dir).

    Raises:
        SuiteError: naming ``source`` and the entry.
    """
    if not isinstance(data, dict):
        raise SuiteError(f"{source}: not a JSON object with keys {sorted(_SUITE_JSON_KEYS)}")
    _refuse_unknown_keys(data, _SUITE_JSON_KEYS, source)
    for key in ("name", "tasks"):
        if key not in data:
            raise SuiteError(f"{source}: the key {key!r} is missing")
    name = data["name"]
    if not is_plain_name(name):
        raise SuiteError(f"{source}: suite name {name!r} {_NAME_RULE}")
    entries = data["tasks"]
    if not isinstance(entries, list) or not entries:
        raise SuiteError(f"{source}: 'tasks' must be a non-empty list, got {type(entries).__name__}")
    if len(entries) > MAX_SUITE_TASKS:
        raise SuiteError(f"{source}: {len(entries)} tasks exceed the limit of {MAX_SUITE_TASKS}")
    tasks: list[TaskSpec] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"{source}: tasks[{i}]"
        if not isinstance(entry, dict):
            raise SuiteError(f"{where}: a task is an object with keys {sorted(_TASK_KEYS)}")
        _refuse_unknown_keys(entry, _TASK_KEYS, where)
        missing = sorted(_TASK_KEYS - set(entry))
        if missing:
            raise SuiteError(f"{where}: missing key(s) {missing}")
        task_id, variant, rep, params = entry["task_id"], entry["variant"], entry["repetition"], entry["params"]
        try:
            exp = EXPERIMENTS.get(str(entry["experiment"]))
        except RegistryError as exc:
            raise SuiteError(f"{where}: {exc}") from None
        if not is_plain_name(variant):
            raise SuiteError(f"{where}: variant name {variant!r} {_NAME_RULE}")
        if isinstance(rep, bool) or not isinstance(rep, int) or not 0 <= rep < MAX_REPEAT:
            raise SuiteError(f"{where}: repetition {rep!r} must be an integer from 0 to {MAX_REPEAT - 1}")
        expected = f"{exp.name}.{variant}.r{rep}"
        if task_id != expected:
            raise SuiteError(f"{where}: task_id {task_id!r} is not the plain name {expected!r} of its "
                             "experiment, variant and repetition")
        if task_id in seen:
            raise SuiteError(f"{where}: task {task_id} appears twice")
        seen.add(task_id)
        if not isinstance(params, dict):
            raise SuiteError(f"{where}: 'params' must be an object")
        try:
            config = exp.config.from_dict(params)
        except ConfigError as exc:
            raise SuiteError(f"{where} ({task_id}): {exc}") from None
        tasks.append(TaskSpec(task_id, exp.name, variant, rep, config.to_dict()))
    bind = _bind(data.get("bind"), source)
    return Suite(name=name, description=str(data.get("description", "")), tasks=tasks,
                 source=str(data.get("source", "")),
                 oversubscribe=_flag(data.get("oversubscribe", False), f"{source}: oversubscribe"), bind=bind)


def _refuse_unknown_keys(data: dict, valid: set[str], where: str) -> None:
    unknown = sorted((k for k in data if k not in valid), key=str)
    if unknown:
        hint = did_you_mean(unknown, valid)
        raise SuiteError(f"{where}: unknown key(s) {unknown}" + (f" ({hint})" if hint else "")
                         + f"; valid keys: {sorted(valid)}")


def _suite_name(value: Any, source: str) -> str:
    """The suite's ``name``, else its file's stem; either must be a plain name (it names the run dir)."""
    name = str(value) if value not in (None, "") else Path(source).stem
    if not is_plain_name(name):
        origin = "" if value not in (None, "") else " (taken from the file name; set 'name:')"
        raise SuiteError(f"{source}: suite name {name!r}{origin} {_NAME_RULE}; it names the run dir")
    return name


def _bind(value: Any, source: str) -> str | None:
    """The suite's ``bind``: None (the caller's $HPCBENCH_BIND), or a mode every rank knows."""
    from hpcbench.dist.binding import BIND_MODES  # here: the binding module is not needed to list suites

    if value is not None and value not in BIND_MODES:
        raise SuiteError(f"{source}: bind {value!r} must be one of {list(BIND_MODES)}")
    return value


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise SuiteError(f"{where}: {value!r} must be true or false")
    return value


def _repeat(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SuiteError(f"{where}: {value!r} must be an integer >= 1")
    if value > MAX_REPEAT:
        raise SuiteError(f"{where}: {value} is more than the {MAX_REPEAT} repetitions a variant may have")
    return value


__all__ = ["LAYOUT_PLACEHOLDERS", "TOY_KEEPS", "Layout", "MAX_REPEAT", "MAX_SUITE_TASKS", "Suite", "TaskSpec", "UniqueKeyLoader", "is_plain_name",
           "load_suite", "parse_suite", "shipped_suites", "single_task_suite", "suite_from_dict",
           "HpcbenchError"]
