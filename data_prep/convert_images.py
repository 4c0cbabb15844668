#!/usr/bin/env python
"""Convert an image folder to shards: hdf5, tfrecord or tar (WebDataset layout).

Input:  SRC, a folder made by make_images.py (its manifest.json is checked first).
Output: OUT/shard-NNNNN.{h5,tfrecord,tar} of about --shard-size bytes each, samples in the
        source's order, and OUT/manifest.json (samples, bytes, shard list with sha256).
Expect: as many samples as SRC; shard bytes ~ SRC bytes (+ per-record framing).

    python data_prep/convert_images.py --src data/images --out data/images-tfrecord --format tfrecord
"""

import argparse
import sys

from hpcbench.core.config import parse_bytes
from hpcbench.data.writers import WRITERS, convert


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", required=True, help="image folder with manifest.json")
    p.add_argument("--out", required=True, help="folder for the shards")
    p.add_argument("--format", required=True, choices=WRITERS.names())
    p.add_argument("--shard-size", default="32M", help="target shard size (default 32M; e.g. 64M, 1G)")
    a = p.parse_args()
    m = convert(a.src, a.out, a.format, shard_bytes=parse_bytes(a.shard_size), command=" ".join(sys.argv))
    print(f"{a.out}: {m.samples} samples in {len(m.shards)} {a.format} shards, {m.bytes / 1e6:.1f} MB; "
          f"manifest {a.out}/manifest.json")


if __name__ == "__main__":
    main()
