"""Experiment ``io_formats``: small files against container formats, prefetching, staging (C4, C5)."""

from hpcbench.core.units import approx_bytes
from hpcbench.experiments import TASK_BASE_BYTES, TASK_STARTUP_S, ClaimSet, Estimate, Experiment, register
from hpcbench.experiments.io_formats.claims import APPLICABILITY, CLAIMS
from hpcbench.experiments.io_formats.config import IoFormatsConfig
from hpcbench.experiments.io_formats.present import present_io_formats
from hpcbench.experiments.io_formats.rules import RULES
from hpcbench.experiments.io_formats.summary import summarize

#: A DataLoader worker forked from the notebook's process: the pages it writes beyond the shared ones.
WORKER_BYTES = 128 << 20
#: A decoded image without image_size (kept at its own size): JPEG's ~10:1, as float32.
DECODED_PER_JPEG_BYTE = 40
#: Rough rates for the time estimate: JPEG decode, cold reads, image generation, shard conversion.
DECODE_S, READ_BYTES_S, GENERATE_S, CONVERT_BYTES_S = 3e-3, 100e6, 5e-3, 200e6


def estimate(cfg: IoFormatsConfig) -> Estimate:
    """Batches in flight (raw and decoded) and one shard per reader process, in the notebook's process tree.

    The data set itself lives on disk and in the page cache, which the kernel reclaims:
    it is not counted (the disk it needs is in the basis).
    """
    jpeg = cfg.mean_image_kb * 1000
    decoded = 3 * cfg.image_size ** 2 * 4 if cfg.image_size else DECODED_PER_JPEG_BYTE * jpeg
    batch = cfg.batch_size * (jpeg + (decoded if cfg.decode else 0))
    shard = cfg.shard_size if any(f != "files" for f in cfg.formats) else 0
    settings = [(0, 0) if w == 0 else (w, p) for w in cfg.workers for p in cfg.prefetch_factors]
    settings = sorted(set(settings))
    workers_peak = max(w * (WORKER_BYTES + shard + p * batch) for w, p in settings)
    memory = int(shard + 3 * batch + workers_peak)  # the step's batch and the prefetcher's 2

    data = cfg.images * jpeg
    folders = len(set(cfg.formats) | {"files"})
    per_image = jpeg / READ_BYTES_S + (DECODE_S if cfg.decode else 0)
    steps = -(-cfg.images // cfg.batch_size)

    def epoch(workers: int) -> float:
        return max(steps * cfg.compute_ms / 1000, cfg.images * per_image / max(1, workers))

    seconds = TASK_STARTUP_S + (0 if cfg.dataset else cfg.images * GENERATE_S) + (folders - 1) * data / CONVERT_BYTES_S
    seconds += folders * cfg.epochs * sum(epoch(w) for w, _ in settings)
    if cfg.stage:
        seconds += data / READ_BYTES_S + epoch(min(cfg.workers)) * (2 if cfg.corrupt_shards else 1)
    given = " (a given dataset: sized as `images` images)" if cfg.dataset else ""
    return Estimate(
        memory_per_rank=memory, ranks=1, seconds=seconds,
        basis=f"batches of {cfg.batch_size} in flight ({approx_bytes(batch)} each) x prefetch per worker, "
              f"one {approx_bytes(shard)} shard per reader, {approx_bytes(WORKER_BYTES)} per worker, "
              f"+ {approx_bytes(TASK_BASE_BYTES)} for the notebook's process; "
              f"disk: ~{approx_bytes(data * (folders + cfg.stage))}{given}")


#: Toy size (``hpcbench run io_formats --toy``): 24 images of ~20 KB in 100 KB shards, one prefetch factor: every
#: format's reader in seconds.
TOY = dict(images=24, classes=3, mean_image_kb=20, shard_size=100_000, prefetch_factors=[1], batch_size=4, compute_ms=5,
           image_size=32)


SPEC = register(Experiment(
    name="io_formats", notebook="03_io_formats.ipynb", config=IoFormatsConfig,
    claims=ClaimSet(RULES, declared=CLAIMS, applicability=APPLICABILITY),
    summarize=summarize, present=present_io_formats, estimate=estimate, toy=TOY,
    description="small files vs HDF5 / TFRecord / tar shards, cold cache: samples/s, MB/s, read p50/p99, file "
                "opens, accelerator idle share, prefetch depth, node-local staging, shard repair",
))
