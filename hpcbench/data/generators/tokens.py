"""A GPT-2 token stream: ``train.bin`` / ``val.bin`` of uint16 token ids, as nanoGPT reads them.

The ids are GPT-2 vocabulary ids (0 .. 50256), drawn from a Zipf-like distribution
(rank-frequency exponent 1.1, as natural-language token counts roughly follow) with
the end-of-text token 50256 closing each "document". No text or tokenizer files can be
downloaded here, so the stream is synthetic; what a loader and a model see (dtype,
vocabulary range, layout, throughput) is the real thing. Deterministic in the seed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hpcbench.data.manifest import Manifest, shard_entry

GPT2_VOCAB = 50257
EOT = 50256
ZIPF_EXPONENT = 1.1


@dataclass(frozen=True)
class TokenSpec:
    tokens: int = 1_000_000
    val_fraction: float = 0.1
    mean_document: int = 512
    seed: int = 0


def token_stream(n: int, spec: TokenSpec, rng: np.random.Generator) -> np.ndarray:
    ranks = np.arange(1, EOT + 1, dtype=np.float64)
    p = ranks ** -ZIPF_EXPONENT
    p /= p.sum()
    ids = rng.permutation(EOT)  # which id has which frequency rank
    tokens = ids[rng.choice(EOT, size=n, p=p)].astype(np.uint16)
    tokens[rng.random(n) < 1.0 / spec.mean_document] = EOT
    return tokens


def make_tokens(out: str | os.PathLike, spec: TokenSpec, *, command: str = "") -> Manifest:
    """Write ``train.bin`` and ``val.bin`` (uint16) + a manifest whose samples are tokens."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(spec.seed)
    n_val = int(spec.tokens * spec.val_fraction)
    shards = []
    for name, n in (("train.bin", spec.tokens - n_val), ("val.bin", n_val)):
        path = out / name
        token_stream(n, spec, rng).tofile(path)
        shards.append(shard_entry(out, path, n))
    manifest = Manifest(format="tokens", shards=shards, command=command,
                        params={"tokens": spec.tokens, "val_fraction": spec.val_fraction,
                                "mean_document": spec.mean_document, "seed": spec.seed},
                        extra={"dtype": "uint16", "vocab_size": GPT2_VOCAB, "eot": EOT,
                               "tokenizer": "gpt2 ids, synthetic Zipf stream"})
    manifest.write(out)
    return manifest
