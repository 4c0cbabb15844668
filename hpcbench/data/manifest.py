"""The manifest every data set carries: what it holds and how to check it.

``manifest.json`` sits in the data set's folder::

    {"hpcbench_manifest": 1, "format": "tfrecord", "samples": 2000, "bytes": 221034512,
     "classes": ["class_000", ...],
     "shards": [{"path": "shard-00000.tfrecord", "samples": 291, "bytes": 33554987,
                 "sha256": "..."}, ...],
     "source": null, "command": "...", "params": {...}}

* ``shards`` are in sample order: sample ``i`` of the data set is the ``i``-th sample
  when the shards are read in this order, whatever the format (the converters keep the
  source folder's order), so every format can be compared sample by sample.
* For the ``files`` format every JPEG is a one-sample "shard" with its ``label``.
* ``source`` is the folder holding a pristine copy (set by staging); a reader repairs a
  corrupt shard from it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from hpcbench.data.errors import DatasetNotFoundError, ManifestError

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
_HASH_CHUNK = 4 << 20


@dataclass(frozen=True)
class ShardEntry:
    """One file of a data set."""

    path: str
    """Relative to the data set's folder."""
    samples: int
    bytes: int
    sha256: str
    label: int | None = None
    """Only for one-sample shards (the ``files`` format): the sample's class index."""


@dataclass
class Manifest:
    format: str
    shards: list[ShardEntry]
    classes: list[str] = field(default_factory=list)
    source: str | None = None
    command: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    """Format-specific facts (shapes, dtypes, token counts)."""

    @property
    def samples(self) -> int:
        return sum(s.samples for s in self.shards)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    def to_dict(self) -> dict[str, Any]:
        shards = []
        for s in self.shards:
            d = asdict(s)
            if d["label"] is None:
                del d["label"]
            shards.append(d)
        return {"hpcbench_manifest": MANIFEST_VERSION, "format": self.format, "samples": self.samples,
                "bytes": self.bytes, "classes": list(self.classes), "shards": shards,
                "source": self.source, "command": self.command, "params": dict(self.params),
                "extra": dict(self.extra), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def write(self, folder: str | os.PathLike) -> Path:
        """Write ``folder/manifest.json`` atomically and return its path."""
        path = Path(folder) / MANIFEST_NAME
        tmp = path.with_name(f".{MANIFEST_NAME}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1))
        os.replace(tmp, path)
        return path


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def shard_entry(folder: Path, path: Path, samples: int, label: int | None = None) -> ShardEntry:
    """Describe a finished shard file (size and sha256 read from disk)."""
    return ShardEntry(path=path.relative_to(folder).as_posix(), samples=samples,
                      bytes=path.stat().st_size, sha256=sha256_file(path), label=label)


def _field(data: dict, name: str, kind: type | tuple, where: str) -> Any:
    if name not in data:
        raise ManifestError(f"field {name!r} is missing", path=where)
    value = data[name]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ManifestError(f"field {name!r} has the wrong type ({type(value).__name__})", path=where)
    return value


def load_manifest(path: str | os.PathLike) -> tuple[Manifest, Path]:
    """Read a data set's manifest.

    Args:
        path: the data set's folder, or its ``manifest.json``.

    Returns:
        (manifest, data set folder).

    Raises:
        DatasetNotFoundError: the path does not exist.
        ManifestError: no manifest, unreadable JSON, a missing/ill-typed field, or counts that
            do not add up; the message names the file and the field.
    """
    path = Path(path)
    if not path.exists():
        raise DatasetNotFoundError("data set path does not exist", path=str(path))
    file = path / MANIFEST_NAME if path.is_dir() else path
    folder = file.parent
    if not file.is_file():
        raise ManifestError(f"no {MANIFEST_NAME} in this folder; build the data set with data_prep/ "
                            f"(e.g. python data_prep/make_images.py --out {folder})", path=str(folder))
    try:
        data = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"not readable JSON ({exc})", path=str(file)) from None
    where = str(file)
    if not isinstance(data, dict):
        raise ManifestError("not a JSON object", path=where)
    version = _field(data, "hpcbench_manifest", int, where)
    if version != MANIFEST_VERSION:
        raise ManifestError(f"field 'hpcbench_manifest' is {version}, this hpcbench reads {MANIFEST_VERSION}",
                            path=where)
    fmt = _field(data, "format", str, where)
    raw_shards = _field(data, "shards", list, where)
    shards = []
    for i, raw in enumerate(raw_shards):
        w = f"{where} shards[{i}]"
        if not isinstance(raw, dict):
            raise ManifestError("not an object", path=w)
        shard_path = _field(raw, "path", str, w)
        if Path(shard_path).is_absolute() or ".." in Path(shard_path).parts:
            raise ManifestError(f"field 'path' must stay inside the data set folder: {shard_path!r}", path=w)
        label = raw.get("label")
        if label is not None and (not isinstance(label, int) or isinstance(label, bool)):
            raise ManifestError("field 'label' is not an integer", path=w)
        shards.append(ShardEntry(path=shard_path, samples=_field(raw, "samples", int, w),
                                 bytes=_field(raw, "bytes", int, w), sha256=_field(raw, "sha256", str, w),
                                 label=label))
    manifest = Manifest(format=fmt, shards=shards, classes=list(data.get("classes") or []),
                        source=data.get("source"), command=str(data.get("command", "")),
                        params=dict(data.get("params") or {}), extra=dict(data.get("extra") or {}))
    if "samples" in data and data["samples"] != manifest.samples:
        raise ManifestError(f"field 'samples' is {data['samples']} but the shards hold {manifest.samples}",
                            path=where)
    return manifest, folder


def check_files(manifest: Manifest, folder: str | os.PathLike, *, deep: bool = False) -> list[str]:
    """What does not match the manifest: missing files, wrong sizes, (``deep``) wrong sha256.

    Returns:
        One line per problem, each naming the file; empty when all match.
    """
    folder = Path(folder)
    problems = []
    for shard in manifest.shards:
        path = folder / shard.path
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            problems.append(f"{path}: missing")
            continue
        if size != shard.bytes:
            problems.append(f"{path}: {size} bytes, the manifest says {shard.bytes}")
        elif deep and sha256_file(path) != shard.sha256:
            problems.append(f"{path}: sha256 differs from the manifest")
    return problems


def shard_paths(manifest: Manifest, folder: str | os.PathLike) -> Iterable[Path]:
    folder = Path(folder)
    return [folder / s.path for s in manifest.shards]
