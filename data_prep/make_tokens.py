#!/usr/bin/env python
"""Make a GPT-2 token stream (uint16 ids), laid out as nanoGPT's train.bin / val.bin.

Input:  nothing (deterministic in --seed): synthetic Zipf-distributed GPT-2 ids (0..50256)
        with end-of-text (50256) between documents; no tokenizer files are needed.
Output: OUT/train.bin, OUT/val.bin (np.uint16) and OUT/manifest.json (tokens per file, sha256).
Expect: --tokens x 2 bytes in all (default 1,000,000 tokens = 2 MB), --val-fraction in val.bin.

    python data_prep/make_tokens.py --out data/tokens --tokens 1000000
"""

import argparse
import sys

from hpcbench.data.generators.tokens import TokenSpec, make_tokens


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--tokens", type=int, default=1_000_000)
    p.add_argument("--val-fraction", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    m = make_tokens(a.out, TokenSpec(a.tokens, a.val_fraction, seed=a.seed), command=" ".join(sys.argv))
    print(f"{a.out}: {m.samples} tokens ({', '.join(f'{s.path}: {s.samples}' for s in m.shards)}); "
          f"manifest {a.out}/manifest.json")


if __name__ == "__main__":
    main()
