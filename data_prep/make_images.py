#!/usr/bin/env python
"""Make a synthetic ImageNet-like JPEG folder.

Input:  nothing (deterministic in --seed).
Output: OUT/class_XXX/img_XXXXXXX.jpg (--count images spread over --classes folders, ~110 KB
        mean, log-normal sizes) and OUT/manifest.json (format "files": one entry per image
        with its label, bytes and sha256).
Expect: 2000 images ~ 220 MB, ~40 s on 2 cores.

    python data_prep/make_images.py --out data/images --count 2000 --classes 10
"""

import argparse
import sys

from hpcbench.data.generators.images import ImageSpec, make_images


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder to create")
    p.add_argument("--count", type=int, default=2000, help="number of images (default 2000)")
    p.add_argument("--classes", type=int, default=10, help="number of class folders (default 10)")
    p.add_argument("--mean-kb", type=float, default=110.0, help="mean JPEG size in KB (ImageNet: ~110)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--processes", type=int, default=None, help="rendering processes (default: CPU count)")
    a = p.parse_args()
    m = make_images(a.out, ImageSpec(a.count, a.classes, int(a.mean_kb * 1000), a.seed), processes=a.processes,
                    command=" ".join(sys.argv))
    print(f"{a.out}: {m.samples} images in {len(m.classes)} classes, {m.bytes / 1e6:.1f} MB "
          f"(mean {m.bytes / max(1, m.samples) / 1e3:.1f} KB); manifest {a.out}/manifest.json")


if __name__ == "__main__":
    main()
