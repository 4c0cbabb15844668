"""Node-local staging: copy a data set's shards next to the GPUs before the job reads them.

The guide's third fix for the storage bottleneck (C5) is a node-local NVMe cache, e.g.
a BeeOND file system striped over the job's nodes (``slurm/beeond.sh``). Staging copies
each shard in parallel, hashing while copying (one pass over the bytes), checks every
sha256 against the manifest before anything reads the copy, and writes a manifest whose
``source`` names the original, so a reader repairs a corrupt local shard from it.
"""

from __future__ import annotations

import hashlib
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from hpcbench.data.errors import DataError, ShardError
from hpcbench.data.manifest import Manifest, load_manifest

#: Where a BeeOND file system is usually mounted for a job (``beeond start -c MOUNT``).
BEEOND_MOUNT_ENV = "HPCBENCH_BEEOND_MOUNT"
_COPY_CHUNK = 8 << 20


@dataclass(frozen=True)
class StagingResult:
    path: Path
    seconds: float
    bytes: int
    files: int
    same_device: bool
    """Source and destination are on one device: staging then saves no device reads."""


def node_local_dir() -> tuple[Path, str]:
    """The node-local folder to stage into, and why it was chosen.

    Order: ``$SLURM_TMPDIR`` (per-job local disk on many sites), a BeeOND mount named by
    ``$HPCBENCH_BEEOND_MOUNT`` when it is mounted, ``$TMPDIR``, ``/tmp``.
    """
    if os.environ.get("SLURM_TMPDIR"):
        return Path(os.environ["SLURM_TMPDIR"]), "$SLURM_TMPDIR"
    beeond = os.environ.get(BEEOND_MOUNT_ENV)
    if beeond and os.path.ismount(beeond):
        return Path(beeond), f"BeeOND mount ${BEEOND_MOUNT_ENV}"
    if os.environ.get("TMPDIR"):
        return Path(os.environ["TMPDIR"]), "$TMPDIR"
    return Path("/tmp"), "/tmp"


def _copy_hashed(src: Path, dst: Path) -> str:
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.staging")
    h = hashlib.sha256()
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            while chunk := fin.read(_COPY_CHUNK):
                h.update(chunk)
                fout.write(chunk)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    return h.hexdigest()


def stage_dataset(source: str | os.PathLike, dest: str | os.PathLike | None = None, *,
                  workers: int = 8) -> StagingResult:
    """Copy the data set at ``source`` to ``dest`` (default: :func:`node_local_dir` / its name).

    Every copied shard's sha256 is checked against the manifest (a mismatching copy is
    copied once more, then :class:`ShardError` names it); the manifest is written last, so
    a half-staged folder is never taken for a data set.

    Returns:
        where it went, how long it took, bytes and files copied.
    """
    manifest, src = load_manifest(source)
    if dest is None:
        base, _ = node_local_dir()
        dest = base / f"hpcbench-staged-{src.resolve().name}"
    dest = Path(dest)
    if dest.resolve() == src.resolve():
        raise DataError("staging destination is the data set itself", path=str(dest))
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "manifest.json").unlink(missing_ok=True)

    def copy(i: int) -> None:
        shard = manifest.shards[i]
        for _ in range(2):
            if _copy_hashed(src / shard.path, dest / shard.path) == shard.sha256:
                return
        raise ShardError("the staged copy does not match the manifest's sha256 (twice)",
                         path=str(dest / shard.path), samples=shard.samples)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max(1, workers)) as pool:
        list(pool.map(copy, range(len(manifest.shards))))
    staged: Manifest = replace(manifest, source=str(src.resolve()))
    staged.write(dest)
    os.sync()
    seconds = time.perf_counter() - t0
    return StagingResult(dest, seconds, manifest.bytes, len(manifest.shards),
                         same_device=os.stat(src).st_dev == os.stat(dest).st_dev)
