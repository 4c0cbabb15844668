"""One exception root for hpcbench.

Every error a user can cause names the thing at fault (field, file, task, rank,
cell) so that the message alone says what to fix. Catch ``HpcbenchError`` to
catch them all; the CLI turns them into one-line messages and exit code 2.
"""

from __future__ import annotations

import os


class HpcbenchError(Exception):
    """Root of every error hpcbench raises on purpose."""


class ConfigError(HpcbenchError, ValueError):
    """A configuration value or key is invalid; the message names the field.

    Subclasses ``ValueError`` so that dataclass ``__post_init__`` validation reads
    the way torchtitan's does, while still being catchable as ``HpcbenchError``.
    """

    def __init__(self, message: str, *, field: str | None = None, config: str | None = None):
        self.field = field
        self.config = config
        where = ".".join(p for p in (config, field) if p)
        super().__init__(f"{where}: {message}" if where else message)


class RegistryError(HpcbenchError, KeyError):
    """A name is not registered; the message lists what is."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class ResultsError(HpcbenchError):
    """A results file is unreadable or does not follow the schema; names the file."""

    def __init__(self, message: str, *, path: str | None = None):
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class LogError(HpcbenchError):
    """An error whose evidence is in a log: the message names the log and quotes its tail."""

    def __init__(self, message: str, *, log_path: str | os.PathLike | None = None, tail: str = ""):
        self.log_path = str(log_path) if log_path else None
        self.tail = tail
        text = message
        if log_path:
            text += f" (log: {log_path})"
        if tail:
            text += "\n--- last lines of the log ---\n" + tail
        super().__init__(text)


class LaunchError(LogError):
    """Distributed worker processes failed; carries the log path and its tail."""


class SuiteError(HpcbenchError):
    """A suite file is malformed; names the file and the entry."""


class TaskError(HpcbenchError):
    """A task (one notebook run) failed; names the task and the failing cell."""

    def __init__(self, message: str, *, task_id: str | None = None, cell: int | None = None):
        self.task_id = task_id
        self.cell = cell
        where = f"task {task_id}" if task_id else ""
        if cell is not None:
            where += f", cell {cell}"
        super().__init__(f"{where}: {message}" if where else message)


class CheckpointError(HpcbenchError):
    """A checkpoint cannot be written, read or restored; names the checkpoint or folder."""

    def __init__(self, message: str, *, path: str | os.PathLike | None = None):
        self.path = str(path) if path is not None else None
        super().__init__(f"{path}: {message}" if path is not None else message)
