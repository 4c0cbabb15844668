#!/usr/bin/env python
"""Stage a data set to node-local storage before a job reads it.

Input:  SRC, any data set folder with manifest.json (e.g. on Lustre).
Output: DEST (default: $SLURM_TMPDIR, a BeeOND mount, $TMPDIR or /tmp, + the folder's name)
        holding the shards, each copied in parallel and checked against its sha256, and a
        manifest whose "source" is SRC, so readers repair a corrupt local shard from SRC.

    python data_prep/stage.py --src /lustre/proj/images-tfrecord [--dest /mnt/beeond/x] [--workers 8]
"""

import argparse

from hpcbench.data.staging import stage_dataset


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", required=True)
    p.add_argument("--dest", default=None)
    p.add_argument("--workers", type=int, default=8, help="parallel copies")
    a = p.parse_args()
    r = stage_dataset(a.src, a.dest, workers=a.workers)
    print(f"{r.path}: {r.files} files, {r.bytes / 1e6:.1f} MB staged in {r.seconds:.2f} s "
          f"({r.bytes / 1e6 / max(r.seconds, 1e-9):.0f} MB/s), every sha256 checked")


if __name__ == "__main__":
    main()
