"""What the user sees while a run goes: a bar on a terminal, plain lines in a log.

Workers print ``[hpcbench progress] ...`` lines (:func:`hpcbench.dist.worker.progress`);
the launcher copies them into ``RUN_DIR/tasks/<task>/progress.log`` (:data:`PROGRESS_FILE`),
and this module tails that file for the tasks that are running, so the command line
shows "bucket 4 MiB: step p50 ..." rather than "0/1 task" for minutes.

On a terminal: one tqdm bar with the newest progress line as its postfix. When
stderr is not a terminal (a SLURM job's log, ``| tee``): no ``\\r`` redraws, one
time-stamped line per event, and a heartbeat line when nothing was said for a while.

The bar is a line without its newline, redrawn in place; anything else written to the
terminal meanwhile lands at its end. What this process logs without a handler of its own
(papermill's "Kernel died while waiting for execute reply", a library's warning) therefore
goes through the bar while it is shown, on a line of its own.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import IO

from hpcbench.dist.launcher import PROGRESS_FILE
from hpcbench.run.rundir import TaskStatus, task_dir

#: Seconds of silence after which plain output says what is still running.
HEARTBEAT_S = 60.0


class _ThroughTheBar(logging.Handler):
    """Python's last-resort log handler (warnings and above, the bare message) writing through a tqdm bar."""

    def __init__(self, bar, stream: IO[str]):
        super().__init__(logging.WARNING)
        self.bar, self.stream = bar, stream

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.bar.write(self.format(record), file=self.stream)
        except Exception:  # noqa: BLE001 - a log line must never break the run
            self.handleError(record)


class Progress:
    """The run's progress display; the backends call :meth:`started`, :meth:`done`, :meth:`tick`."""

    def __init__(self, run_dir: Path, total: int, desc: str, *, enabled: bool = True,
                 stream: IO[str] | None = None, interactive: bool | None = None):
        self.run_dir = Path(run_dir)
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.total, self.finished, self.failed = total, 0, 0
        self._offsets: dict[str, int] = {}
        self._last_said = time.monotonic()
        self._bar = None
        if enabled and self.interactive:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=desc, unit="task", file=self.stream)
            # Python's handler of last resort writes to stderr, where the bar is: hand it the bar's writer.
            self._last_resort = logging.lastResort
            logging.lastResort = _ThroughTheBar(self._bar, self.stream)

    # -- events ----------------------------------------------------------------
    def say(self, message: str) -> None:
        """A line for the user, always shown (also with --quiet: it is not progress)."""
        if self._bar is not None:
            self._bar.write(message, file=self.stream)
        else:
            print(self._stamp(message), file=self.stream, flush=True)
        self._last_said = time.monotonic()

    def started(self, task_id: str) -> None:
        if self.enabled and self._bar is None:
            self.say(f"{task_id}: started")

    def done(self, st: TaskStatus) -> None:
        self.finished += 1
        self.failed += st.state != "done"
        took = f" in {st.duration_s:.1f} s" if st.duration_s is not None else ""
        msg = f"{st.task_id}: {st.state}{took}"
        if st.error:
            msg += f" -- {st.error.splitlines()[0][:200]}"
        if self._bar is None:
            msg += f"  [{self.finished}/{self.total} tasks]"
        self.say(msg)
        if self._bar is not None:
            self._bar.set_postfix(failed=self.failed)
            self._bar.update(1)

    def tick(self, running: list[str], /, **counts: int) -> None:
        """Show new progress lines of the running tasks (called about once a second)."""
        if not self.enabled:
            return
        newest = None
        for task_id in running:
            for line in self._new_lines(task_id):
                newest = f"{task_id}: {line}"
                if self._bar is None:
                    self.say(newest)
        if self._bar is not None:
            if newest:
                self._bar.set_postfix_str(newest[:80])
            elif counts:
                self._bar.set_postfix(**counts)
        elif time.monotonic() - self._last_said > HEARTBEAT_S:
            extra = ", ".join(f"{k} {v}" for k, v in counts.items())
            self.say(f"{self.finished}/{self.total} tasks finished; running: {', '.join(running) or 'none'}"
                     + (f"; {extra}" if extra else ""))

    def close(self) -> None:
        if self._bar is not None:
            if isinstance(logging.lastResort, _ThroughTheBar):
                logging.lastResort = self._last_resort
            self._bar.close()

    # -- helpers ---------------------------------------------------------------
    def _new_lines(self, task_id: str) -> list[str]:
        path = task_dir(self.run_dir, task_id) / PROGRESS_FILE
        seen = self._offsets.get(task_id, 0)
        try:
            with open(path, "rb") as fh:
                fh.seek(seen)
                chunk = fh.read()
        except OSError:
            return []
        end = chunk.rfind(b"\n") + 1  # whole lines only
        self._offsets[task_id] = seen + end
        return [ln for ln in chunk[:end].decode(errors="replace").splitlines() if ln.strip()]

    @staticmethod
    def _stamp(message: str) -> str:
        return f"[{time.strftime('%H:%M:%S')}] {message}"
