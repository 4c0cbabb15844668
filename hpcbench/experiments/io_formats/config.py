"""Parameters of the ``io_formats`` experiment (``notebooks/03_io_formats.ipynb``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hpcbench.core.config import ByteSize, Config, param
from hpcbench.data.manifest import MANIFEST_NAME

FORMATS = ("files", "hdf5", "tfrecord", "tar")
VERIFY_MODES = ("sha256", "size", "none")
#: The readers' orders (hpcbench.data.readers.base.ORDERS), named here so that the config imports no torch.
READ_ORDERS = ("samples", "runs")
#: The readers' JPEG decodes (hpcbench.data.readers.base.JPEG_DECODES), named here for the same reason.
JPEG_DECODES = ("scaled", "full")


@dataclass
class IoFormatsConfig(Config):
    """Parameters of ``03_io_formats``; the notebook's parameters cell mirrors them."""

    dataset: str = param("", "an image folder made by data_prep/make_images.py; empty: generate one "
                             "under the task's output folder",
                         allowed=f"empty, or an existing folder holding {MANIFEST_NAME} (or that file)")
    images: int = param(256, "images to generate when dataset is empty (the benchmark uses 2000)", min=8)
    classes: int = param(8, "classes of the generated images", min=1, max=100000)
    mean_image_kb: float = param(110.0, "mean JPEG size of the generated images; ImageNet's is ~110 KB", min=1)
    formats: list[str] = param(list(FORMATS), "formats to compare; 'files' is the small-file baseline",
                               choices=FORMATS, allowed="non-empty")
    shard_size: ByteSize = param(ByteSize(8 << 20), "target shard size; 64M-1G on a parallel file system",
                                 min=4096)
    workers: list[int] = param([0, 2], "DataLoader num_workers values to sweep", min=0, max=256,
                               allowed="non-empty")
    prefetch_factors: list[int] = param([1, 2, 4], "DataLoader prefetch_factor values (batches in flight per "
                                                   "worker) swept when workers > 0; 1 = the guide's buffer of "
                                                   "num_workers x batch_size samples", min=1, max=64,
                                     allowed="non-empty")
    batch_size: int = param(16, "samples per batch", min=1, max=65536)
    worker_batching: bool = param(True, "each reader process (DataLoader worker) reads and collates whole batches, "
                                        "raw bytes packed into one shared-memory tensor, and the DataLoader runs "
                                        "with batch_size=None (WebDataset's .batched, tf.data's batch before "
                                        "prefetch); false: the DataLoader batches single samples")
    read_order: str = param("samples", "samples: each sample shuffled on its own and read alone; runs: runs of up "
                                       "to 32 consecutive samples of a shard shuffled as units, each run one read "
                                       "straight into the batch (FFCV's quasi-random order; needs "
                                       "worker_batching and decode false)", choices=READ_ORDERS)
    reuse_batch_memory: bool = param(False, "each DataLoader worker keeps its batches in a ring of max(prefetch_factors) "
                                            "+ 4 shared-memory buffers, reused in turn, instead of fresh shared memory "
                                            "per batch; each step checks its batch was not overwritten (needs "
                                            "worker_batching and decode false)")
    epochs: int = param(1, "measured epochs per setting, each with a cold page cache", min=1, max=1000)
    compute_ms: float = param(20.0, "emulated accelerator compute per batch, in ms (DLIO-style)", min=0)
    image_size: int = param(128, "decoded images are resized to this square size; 0 keeps their size",
                            min=0, max=8192)
    decode: bool = param(True, "decode JPEGs to tensors (jpeg_decode says how); false measures storage alone")
    jpeg_decode: str = param("scaled", "scaled: decode at the smallest DCT scale that covers image_size; full: at "
                                       "full size; both then resize (scaled: libjpeg's 1/2, 1/4 or 1/8, the "
                                       "reader's jpeg_decode)", choices=JPEG_DECODES)
    verify: str = param("sha256", "shard check on open: sha256 (resilient, reads each shard whole), size, none",
                        choices=VERIFY_MODES)
    cold_cache: bool = param(True, "evict the data set's files from the page cache before every measured epoch")
    device_prefetch: bool = param(True, "feed the step through the device prefetcher (CUDA side stream on GPU, "
                                        "a background thread on CPU)")
    stage: bool = param(True, "measure node-local staging and a cold epoch read from the staged copy")
    stage_dir: str = param("", "node-local folder to stage into; empty: $SLURM_TMPDIR, a BeeOND mount, "
                               "$TMPDIR or /tmp")
    corrupt_shards: int = param(1, "shards of the staged copy corrupted before a resilience epoch; 0 skips it",
                                min=0, max=1000)
    keep_data: bool = param(False, "keep the generated, converted and staged data after the run")
    seed: int = param(0, "seed of the generated images and of shuffling")

    def validate(self) -> None:
        # The worker reads the data set only after the notebook has started; a mistyped
        # path must fail here, with the suite, not minutes later in a notebook cell.
        # The rest of the manifest (counts, checksums) is checked by load_manifest there.
        if self.dataset:
            path = Path(self.dataset)
            if not path.exists():
                raise self._error("dataset", f"{self.dataset!r} does not exist; leave it empty to generate one")
            if path.is_dir() and not (path / MANIFEST_NAME).is_file():
                raise self._error("dataset", f"{self.dataset!r} holds no {MANIFEST_NAME}; build the data set "
                                             f"with data_prep/make_images.py --out {self.dataset}")
        if not self.formats:
            raise self._error("formats", f"is empty; allowed: {list(FORMATS)}")
        if self.read_order == "runs" and (self.decode or not self.worker_batching):
            raise self._error("read_order", "'runs' reads raw batches straight into their tensor: it needs "
                                            "decode = false and worker_batching = true")
        if self.reuse_batch_memory and (self.decode or not self.worker_batching):
            raise self._error("reuse_batch_memory", "the ring holds raw batches read straight into it: it needs "
                                                    "decode = false and worker_batching = true")
        if not self.workers:
            raise self._error("workers", "is empty; give at least one num_workers value")
        if not self.prefetch_factors:
            raise self._error("prefetch_factors", "is empty; 1 is the guide's buffer")
