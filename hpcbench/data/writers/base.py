"""The template every shard writer follows: roll shards by size, hash them, write the manifest."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Iterator

from hpcbench.data.errors import ManifestError
from hpcbench.data.manifest import Manifest, ShardEntry, load_manifest, shard_entry
from hpcbench.core.registry import Registry


@dataclass(frozen=True)
class SourceSample:
    index: int
    """Position in the data set; the same in every format."""
    label: int
    data: bytes
    """The JPEG file's bytes, unchanged."""

    @property
    def key(self) -> str:
        # WebDataset splits keys at the first dot of a member name: keep keys dot-free.
        return f"{self.index:09d}"


def iter_source(folder: str | os.PathLike) -> tuple[Manifest, Iterator[SourceSample]]:
    """The samples of a ``files`` data set in manifest order (its manifest is checked first)."""
    manifest, folder = load_manifest(folder)
    if manifest.format != "files":
        raise ManifestError(f"field 'format' is {manifest.format!r}; converters read an image folder "
                            f"('files', made by data_prep/make_images.py)", path=str(folder))

    def samples() -> Iterator[SourceSample]:
        for i, shard in enumerate(manifest.shards):
            if shard.label is None:
                raise ManifestError("field 'label' is missing", path=f"{folder} shards[{i}]")
            yield SourceSample(i, shard.label, (folder / shard.path).read_bytes())

    return manifest, samples()


class ShardWriter:
    """Base of the per-format writers (template method: subclasses fill in three methods).

    Shards are rolled over when the bytes written reach ``shard_bytes`` (a shard holds at
    least one sample), named ``shard-NNNNN.<suffix>``.
    """

    format: ClassVar[str] = ""
    suffix: ClassVar[str] = ""

    def open_shard(self, path: Path) -> None:
        raise NotImplementedError

    def write(self, sample: SourceSample) -> int:
        """Add one sample to the open shard; return the bytes it added."""
        raise NotImplementedError

    def close_shard(self) -> None:
        raise NotImplementedError

    def convert(self, source: str | os.PathLike, out: str | os.PathLike, *, shard_bytes: int,
                command: str = "") -> Manifest:
        src_manifest, samples = iter_source(source)
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        shards: list[ShardEntry] = []
        path: Path | None = None
        written = count = 0
        try:
            for sample in samples:
                if path is None:
                    path = out / f"shard-{len(shards):05d}.{self.suffix}"
                    self.open_shard(path)
                written += self.write(sample)
                count += 1
                if written >= shard_bytes:
                    self.close_shard()
                    shards.append(shard_entry(out, path, count))
                    path, written, count = None, 0, 0
            if path is not None:
                self.close_shard()
                shards.append(shard_entry(out, path, count))
        except BaseException:
            if path is not None:
                try:
                    self.close_shard()
                finally:
                    path.unlink(missing_ok=True)
            raise
        manifest = Manifest(format=self.format, shards=shards, classes=src_manifest.classes, command=command,
                            params={"source": str(Path(source).resolve()), "shard_bytes": int(shard_bytes),
                                    **{f"source_{k}": v for k, v in src_manifest.params.items()}},
                            extra={"payload_bytes": src_manifest.bytes})
        manifest.write(out)
        return manifest


WRITERS: Registry[type[ShardWriter]] = Registry("shard format")


def register_writer(cls: type[ShardWriter]) -> type[ShardWriter]:
    WRITERS.register(cls.format, cls)
    return cls


def convert(source: str | os.PathLike, out: str | os.PathLike, fmt: str, *, shard_bytes: int = 32 << 20,
            command: str = "") -> Manifest:
    """Convert the image folder ``source`` to ``fmt`` shards in ``out`` (+ manifest).

    Raises:
        RegistryError: unknown ``fmt`` (the message lists the known formats).
        ManifestError / DatasetNotFoundError: ``source`` is not a usable image folder.
    """
    return WRITERS.get(fmt)().convert(source, out, shard_bytes=shard_bytes, command=command)
