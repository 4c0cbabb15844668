"""An ImageNet-like folder of JPEG files: ``OUT/class_XXX/img_XXXXXXX.jpg``.

ImageNet's training JPEGs average about 110 KB at roughly 400x350-500x375 pixels, with a
long right tail. Here each image draws a target size from a log-normal distribution with
that mean (sigma 0.45), picks a width/height whose pixel count gives that size at the
measured bytes per pixel of the content, and renders content that compresses like a
photograph: a smooth random colour field (large structures), mid-frequency texture and
per-pixel noise, saved at JPEG quality 90. Sizes therefore vary like real files and the
decoder does real work; every byte is a function of (seed, image index).
"""

from __future__ import annotations

import io
import math
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hpcbench.data.manifest import Manifest, shard_entry

#: Bytes per pixel of this content at quality 90 (measured ~0.39 over a few hundred images); sets the pixel count.
BYTES_PER_PIXEL = 0.39
JPEG_QUALITY = 90
SIZE_SIGMA = 0.45
MIN_SIDE, MAX_SIDE = 64, 2048


@dataclass(frozen=True)
class ImageSpec:
    count: int = 2000
    classes: int = 10
    mean_bytes: int = 110_000
    seed: int = 0


def class_name(label: int) -> str:
    return f"class_{label:03d}"


def image_path(index: int, spec: ImageSpec) -> str:
    """Relative path of image ``index``; images are spread round-robin over the classes."""
    return f"{class_name(index % spec.classes)}/img_{index:07d}.jpg"


def render_jpeg(index: int, spec: ImageSpec) -> bytes:
    """The JPEG bytes of image ``index`` (deterministic in ``spec.seed`` and ``index``)."""
    from PIL import Image

    rng = np.random.default_rng([spec.seed, index])
    # Log-normal with the requested mean: mean = exp(mu + sigma^2 / 2).
    mu = math.log(spec.mean_bytes) - SIZE_SIGMA ** 2 / 2
    target = rng.lognormal(mu, SIZE_SIGMA)
    aspect = rng.uniform(0.75, 1.33)
    pixels = target / BYTES_PER_PIXEL
    w = int(min(MAX_SIDE, max(MIN_SIDE, math.sqrt(pixels * aspect))))
    h = int(min(MAX_SIDE, max(MIN_SIDE, pixels / w)))
    coarse = rng.integers(0, 256, size=(max(2, h // 32), max(2, w // 32), 3), dtype=np.uint8)
    field = np.asarray(Image.fromarray(coarse).resize((w, h), Image.BICUBIC), dtype=np.int16)
    texture = rng.integers(0, 256, size=(h // 4 + 1, w // 4 + 1, 3), dtype=np.uint8)
    texture = np.asarray(Image.fromarray(texture).resize((w, h), Image.BILINEAR), dtype=np.int16) - 128
    noise = rng.normal(0.0, 10.0, size=(h, w, 3)).astype(np.int16)
    pixels_arr = np.clip(field + (texture * 0.35).astype(np.int16) + noise, 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels_arr).save(buf, "JPEG", quality=JPEG_QUALITY)
    return buf.getvalue()


def _write_range(args: tuple[str, ImageSpec, int, int]) -> None:
    out, spec, start, stop = args
    for i in range(start, stop):
        path = Path(out) / image_path(i, spec)
        path.write_bytes(render_jpeg(i, spec))


def make_images(out: str | os.PathLike, spec: ImageSpec, *, processes: int | None = None,
                command: str = "") -> Manifest:
    """Write ``spec.count`` JPEGs in ``spec.classes`` class folders under ``out`` + a manifest.

    Args:
        out: the folder to create (may exist; its images are overwritten).
        spec: count, classes, mean size, seed.
        processes: rendering processes (default: the CPU count).

    Returns:
        The manifest (format ``files``; one shard per image, in index order).
    """
    out = Path(out)
    for label in range(min(spec.classes, spec.count)):
        (out / class_name(label)).mkdir(parents=True, exist_ok=True)
    processes = max(1, min(processes or os.cpu_count() or 1, spec.count // 50 or 1))
    bounds = np.linspace(0, spec.count, processes * 4 + 1, dtype=int)
    jobs = [(str(out), spec, int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    if processes == 1:
        for job in jobs:
            _write_range(job)
    else:
        with ProcessPoolExecutor(processes) as pool:
            list(pool.map(_write_range, jobs))
    shards = [shard_entry(out, out / image_path(i, spec), 1, label=i % spec.classes) for i in range(spec.count)]
    manifest = Manifest(format="files", shards=shards,
                        classes=[class_name(c) for c in range(spec.classes)], command=command,
                        params={"count": spec.count, "classes": spec.classes, "mean_bytes": spec.mean_bytes,
                                "seed": spec.seed, "jpeg_quality": JPEG_QUALITY})
    manifest.write(out)
    return manifest
