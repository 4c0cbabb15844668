"""The local backend: tasks run on this machine through papermill."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, as_completed

from hpcbench.run.backends.base import Backend
from hpcbench.run.execute import execute_task
from hpcbench.run.rundir import TaskStatus


class LocalBackend(Backend):
    """Tasks run on this machine, at most ``jobs`` at a time.

    The default of one at a time is deliberate: benchmarks that share two cores
    measure each other. Raise ``--jobs`` for functional runs.
    """

    name = "local"

    def run_tasks(self, tasks, run_dir, suite, *, jobs, on_done, options, bar):
        results: list[TaskStatus] = []
        lock = threading.Lock()
        with ThreadPoolExecutor(max_workers=max(1, jobs or 1), thread_name_prefix="hpcbench-task") as pool:
            futures = [pool.submit(execute_task, t, run_dir, suite) for t in tasks]
            for fut in as_completed(futures):
                st = fut.result()
                with lock:
                    results.append(st)
                    on_done(st)
        order = {t.task_id: i for i, t in enumerate(tasks)}
        return sorted(results, key=lambda s: order[s.task_id])
