"""The local backend: tasks run on this machine through papermill."""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from hpcbench.run.backends.base import Backend, RunContext
from hpcbench.run.execute import execute_task
from hpcbench.run.rundir import TaskStatus
from hpcbench.run.suite import TaskSpec

#: Seconds between two looks at the running tasks (progress, stop flag).
TICK_S = 1.0


class LocalBackend(Backend):
    """Tasks run on this machine, at most ``jobs`` at a time.

    The default of one at a time is deliberate: benchmarks that share two cores
    measure each other. Raise ``--jobs`` for functional runs.
    """

    name = "local"

    def run_tasks(self, tasks: list[TaskSpec], ctx: RunContext) -> list[TaskStatus]:
        results: list[TaskStatus] = []
        running: set[str] = set()
        lock = threading.Lock()  # the pool's threads add and remove, the main thread reads

        def one(spec: TaskSpec) -> TaskStatus | None:
            if ctx.stop.requested:  # queued when the stop came: never started, stays pending
                return None
            with lock:
                running.add(spec.task_id)
            ctx.progress.started(spec.task_id)
            try:
                return execute_task(spec, ctx.run_dir, ctx.suite, stop=ctx.stop)
            finally:
                with lock:
                    running.discard(spec.task_id)

        with ThreadPoolExecutor(max_workers=max(1, ctx.jobs or 1), thread_name_prefix="hpcbench-task") as pool:
            pending: set[Future] = {pool.submit(one, t) for t in tasks}
            while pending:
                # A timeout, not a blocking wait: the main thread must come back to take
                # signals and show progress while a task runs for minutes.
                finished, pending = wait(pending, timeout=TICK_S, return_when=FIRST_COMPLETED)
                for fut in finished:
                    st = fut.result()
                    if st is not None:
                        results.append(st)
                        ctx.progress.done(st)
                with lock:
                    now_running = sorted(running)
                ctx.progress.tick(now_running)
        order = {t.task_id: i for i, t in enumerate(tasks)}
        return sorted(results, key=lambda s: order[s.task_id])
