"""One task = one experiment run with one parameter set; what a notebook holds on to.

papermill injects two kinds of parameters into a notebook: the experiment's config
fields and the *task context* below (which run, which variant, where to write).
A notebook gathers both with :meth:`Task.from_namespace`, so its code stays short::

    task = Task.from_namespace("collectives", globals())
    task.launch(run_worker)
    df = task.records()
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

from hpcbench.core.config import Config
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
        out_dir = Path(ctx.get("output_dir") or Path("results") / "interactive" / task_id)
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
