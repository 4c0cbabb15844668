"""The advisor over a run folder (``hpcbench advise RUN_DIR``): read every task's records and state,
then ask :func:`hpcbench.advise.recommend.advise_tasks`.

Reading a run folder (its ``run.json``, ``suite.json`` and the tasks' ``status.json``) is the
runner's format, so it happens here, above :mod:`hpcbench.run`; the advisor itself sees records.
"""

from __future__ import annotations

from pathlib import Path

from hpcbench.advise.recommend import Advice, RunAdvice, advise_tasks
from hpcbench.advise.thresholds import THRESHOLDS, Thresholds
from hpcbench.core.results import find_record_files, read_records
from hpcbench.run.rundir import load_run, read_statuses


def collect_run_advice(run_dir: str | Path, *, task: str | None = None,
                       thresholds: Thresholds = THRESHOLDS) -> RunAdvice:
    """Advice for every task (and series) of a run folder, and every task or series skipped with its reason.

    Raises:
        HpcbenchError: not a run folder (naming the file at fault); AdviceError: no task ``task``.
    """
    import pandas as pd

    run_dir = Path(run_dir)
    load_run(run_dir)  # refuses a folder that is not a run, naming what is missing
    states = {s.task_id: s.state for s in read_statuses(run_dir)}
    records = {}
    # every task is read even with ``task``: the others' collectives-style rows may give its link
    for folder in sorted(p for p in (run_dir / "tasks").glob("*") if p.is_dir()):
        files = find_record_files(folder / "records")
        records[folder.name] = pd.concat([read_records(p) for p in files], ignore_index=True) if files else None
    return advise_tasks(records, states, run_dir=run_dir, task=task, thresholds=thresholds)


def advise_run(run_dir: str | Path, *, task: str | None = None,
               thresholds: Thresholds = THRESHOLDS) -> list[Advice]:
    """Advice for every task (and series) of a run folder written by ``hpcbench run`` / ``hpcbench suite``.

    Args:
        run_dir: the run folder (``run.json``, ``suite.json``, ``tasks/<id>/records/*.parquet``).
        task: only this task id.

    Raises:
        HpcbenchError: not a run folder (naming the file at fault); AdviceError: no task (or not
            ``task``) has usable records, with the reasons, each once, and the tasks under it.
    """
    found = collect_run_advice(run_dir, task=task, thresholds=thresholds)
    if not found.advices:
        raise found.refused()
    return found.advices
