"""One task = one experiment run with one parameter set; what a notebook holds on to.

papermill injects two kinds of parameters into a notebook: the experiment's config
fields and the *task context* below (which run, which variant, where to write).
A notebook gathers both with :meth:`Task.from_namespace`, so its code stays short::

    task = Task.from_namespace("collectives", globals())
    task.launch(run_worker)
    df = task.records()

A suite run gives ``output_dir`` (the task's folder in its run dir). A notebook run by hand
has none: its results go to ``results/interactive/<task_id>`` of the repository
(:func:`results_root`), emptied at each run so that they are the last run's only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

from hpcbench.core.config import Config
from hpcbench.core.errors import ConfigError
from hpcbench.core.results import RecordContext, RecordWriter, empty_frame, find_record_files, read_records
from hpcbench.experiments import EXPERIMENTS, Experiment
from hpcbench.system.facts import launch_facts, write_facts

#: Parameters every notebook carries besides its config fields, with the defaults
#: used when a person runs the notebook by hand.
CONTEXT_DEFAULTS: dict[str, Any] = {
    "run_id": "interactive",
    "suite": "",
    "variant": "default",
    "task_id": "",
    "repetition": 0,
    "output_dir": "",
}


#: Overrides where interactive results go (default: ``results/`` of the repository).
RESULTS_ENV = "HPCBENCH_RESULTS"


def results_root() -> Path:
    """The ``results/`` folder that interactive runs write under.

    ``$HPCBENCH_RESULTS`` when set; else ``results/`` of the repository this package is
    checked out in (its ``pyproject.toml`` names hpcbench), so a notebook run by hand from
    ``notebooks/`` writes where git ignores it, not next to the notebook; else (an installed
    package) ``results/`` of the current directory.
    """
    if os.environ.get(RESULTS_ENV):
        return Path(os.environ[RESULTS_ENV]).expanduser()
    repo = Path(__file__).resolve().parents[2]
    try:
        pyproject = (repo / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        pyproject = ""
    if re.search(r"""^name\s*=\s*["']hpcbench["']""", pyproject, re.M):
        return repo / "results"
    return Path.cwd() / "results"


def interactive_dir(task_id: str) -> Path:
    """``results_root()/interactive/<task_id>``, the folder of a task run by hand.

    Raises:
        ConfigError: when ``task_id`` would lead outside that folder (``..``, a slash):
            the folder is deleted at each run, so it must be the task's own.
    """
    base = results_root() / "interactive"
    out = base / task_id
    if not task_id or Path(task_id).name != task_id or task_id in (".", ".."):
        raise ConfigError(f"{task_id!r} is not one folder name inside {base}", field="task_id")
    return out


@dataclass
class Task:
    experiment: Experiment
    config: Config
    context: RecordContext
    out_dir: Path

    @classmethod
    def from_namespace(cls, experiment: str, namespace: Mapping[str, Any]) -> "Task":
        """Build from a notebook's globals: the config fields and the context parameters.

        Only names that are config fields or context parameters are read; the
        config is validated before any work starts.
        """
        exp = EXPERIMENTS.get(experiment)
        values = {k: namespace[k] for k in exp.config.field_names() if k in namespace}
        ctx = {k: namespace.get(k, v) for k, v in CONTEXT_DEFAULTS.items()}
        return cls.create(exp, values, ctx)

    @classmethod
    def create(cls, exp: Experiment, values: Mapping[str, Any], ctx: Mapping[str, Any]) -> "Task":
        config = exp.config.from_dict(values)
        task_id = ctx.get("task_id") or f"{exp.name}.{ctx.get('variant') or 'default'}"
        if ctx.get("output_dir"):
            out_dir = Path(ctx["output_dir"])  # a suite's task folder: its runner owns what is in it
        else:
            out_dir = interactive_dir(task_id)
            # Replaced per run: a rerun with fewer ranks must not find the last run's rank files.
            shutil.rmtree(out_dir, ignore_errors=True)
        context = RecordContext(
            run_id=str(ctx.get("run_id") or "interactive"), suite=str(ctx.get("suite") or ""),
            experiment=exp.name, variant=str(ctx.get("variant") or "default"), task_id=task_id,
            repetition=int(ctx.get("repetition") or 0), params=config.to_dict(),
        )
        out_dir.mkdir(parents=True, exist_ok=True)
        # The resolved config is saved with every result (nanoGPT's habit).
        (out_dir / "config.json").write_text(json.dumps(
            {"experiment": exp.name, "config": config.to_dict(), "context": json.loads(context.to_json())},
            indent=2))
        task = cls(experiment=exp, config=config, context=context, out_dir=out_dir)
        # Where this launch runs (cluster, shaped link, InfiniBand): the rules read
        # applicability from these records, never from guesses.
        with task.writer("facts") as writer:
            write_facts(writer, launch_facts(nodes=getattr(config, "nodes", 1)))
        return task

    @property
    def records_dir(self) -> Path:
        return self.out_dir / "records"

    def writer(self, tag: str | None = None) -> RecordWriter:
        """A writer for records made by the notebook process itself (the driver)."""
        tag = tag or self.experiment.name
        return RecordWriter(self.records_dir / f"{tag}-driver.parquet", self.context)

    def launch(self, entry: Callable, **kwargs: Any):
        """Run ``entry`` on the config's ``nodes x ranks_per_node`` ranks (see :func:`hpcbench.dist.launch`)."""
        from hpcbench.dist import launch

        res = self.experiment.resources(self.config)
        kwargs.setdefault("backend", getattr(self.config, "backend", "auto"))
        return launch(entry, self.config, nodes=res.nodes, ranks_per_node=res.ranks_per_node,
                      context=self.context, out_dir=self.out_dir, **kwargs)

    def records(self) -> pd.DataFrame:
        """Every record this task has written so far, all ranks together."""
        files = find_record_files(self.records_dir)
        if not files:
            return empty_frame()
        return pd.concat([read_records(p) for p in files], ignore_index=True)
