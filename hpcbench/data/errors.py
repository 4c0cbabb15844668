"""Errors of the data layer; each names the file, shard or field at fault."""

from __future__ import annotations

from hpcbench.core.errors import HpcbenchError


class DataError(HpcbenchError):
    """A data set cannot be used as it is; the message names the path at fault."""

    def __init__(self, message: str, *, path: str | None = None):
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class DatasetNotFoundError(DataError):
    """The data set path does not exist."""


class ManifestError(DataError):
    """The manifest is missing, unreadable, or does not match the files (names the field)."""


class ShardError(DataError):
    """A shard is corrupt or truncated and could not be repaired; names the shard."""

    def __init__(self, message: str, *, path: str | None = None, samples: int = 0):
        self.samples = samples
        super().__init__(message, path=path)


class CorruptRecordError(DataError):
    """A record inside a shard fails its own check (CRC, header, length): a repairable fault."""
