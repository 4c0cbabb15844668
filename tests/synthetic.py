"""Synthetic launches written with the real RecordWriter: what an experiment's rules read, without torch.

A *launch* is one task of one run; ``launch(...)`` writes its records (facts first, as
:class:`hpcbench.run.task.Task` does) and returns them as a frame of the one schema.
``noisy(center, n, spread, seed)`` gives n per-step samples around a center.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hpcbench.core.results import RecordContext, RecordWriter, read_records
from hpcbench.system.facts import write_facts

#: The facts of a run on the emulated cluster's shaped link, and of one plain machine.
SHAPED = {"cluster": "emulated cluster, shaped link", "link_rate_bps": 2e8, "infiniband": "absent", "gpus": 0.0}
LOOPBACK = {"cluster": "emulated nodes, one loopback", "infiniband": "absent", "gpus": 0.0}
GPU_IB = {"cluster": "SLURM, 2 node(s)", "infiniband": "present", "gpus": 8.0}


def noisy(center: float, n: int = 12, spread: float = 0.02, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(center * (1 + spread * rng.standard_normal(n)))


def launch(tmp_path, experiment: str, rows, *, run_id: str = "run1", task_id: str = "t", repetition: int = 0,
           params: dict | None = None, facts: dict | None = None, backend: str | None = None,
           variant: str = "default") -> pd.DataFrame:
    """Write one launch's records; ``rows`` are (metric, values or value, unit, labels[, text])."""
    path = tmp_path / f"{run_id}-{task_id}-r{repetition}.parquet"
    ctx = RecordContext(run_id=run_id, experiment=experiment, variant=variant, task_id=task_id,
                        repetition=repetition, params=params or {}, node="n1", world_size=4)
    with RecordWriter(path, ctx) as writer:
        write_facts(writer, facts if facts is not None else SHAPED)
        if backend:
            writer.add("backend", None, "", text=backend)
        for row in rows:
            metric, values, unit, labels = row[:4]
            text = row[4] if len(row) > 4 else None
            values = values if isinstance(values, (list, tuple)) else [values]
            for step, value in enumerate(values):
                writer.add(metric, value, unit, step=step, labels=labels, text=text)
    return read_records(path)


def launches(tmp_path, experiment: str, make_rows, n: int, **kwargs) -> pd.DataFrame:
    """``n`` launches (repetitions r0..r{n-1}, each its own task), rows from ``make_rows(k)``."""
    frames = [launch(tmp_path, experiment, make_rows(k), task_id=f"{experiment}.r{k}", repetition=k, **kwargs)
              for k in range(n)]
    return pd.concat(frames, ignore_index=True)
