"""One try of a survival job (C15): a small real workload over a data set, run by ``slurm/run_with_retries.sh``.

    python survival_try.py DATA_DIR SECONDS TRY_LOG

Standard library only and run by its path, so that a try starts in tens of milliseconds
(importing hpcbench would not). It checks every shard of ``DATA_DIR`` against its
``manifest.json`` (sha256) at its start, appends ``attempt=N intact=1|0`` to ``TRY_LOG``,
then works for ``SECONDS`` in 10 steps, each reading and checking every shard again.

Exit status: 0 the work is done; 1 a shard failed its check during the work (the data set
was damaged under the job); 3 a shard was bad at the start check (damaged before this try and
not repaired, or damaged while it started). Killed by a signal, the wrapper sees 128 + signal.
"""

import hashlib
import json
import os
import sys
import time

STEPS = 10


def bad_shards(folder: str, shards: list) -> list:
    """Shards whose bytes do not match their manifest entry's sha256."""
    bad = []
    for shard in shards:
        try:
            with open(os.path.join(folder, shard["path"]), "rb") as fh:
                ok = hashlib.sha256(fh.read()).hexdigest() == shard["sha256"]
        except OSError:
            ok = False
        if not ok:
            bad.append(shard["path"])
    return bad


def main(folder: str, seconds: float, try_log: str) -> int:
    t0 = time.monotonic()
    with open(os.path.join(folder, "manifest.json")) as fh:
        shards = json.load(fh)["shards"]
    bad = bad_shards(folder, shards)
    line = f"attempt={os.environ.get('HPCBENCH_ATTEMPT', '?')} intact={0 if bad else 1}\n"
    fd = os.open(try_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    if bad:
        print(f"survival_try: shard(s) bad at the start: {bad}", file=sys.stderr)
        return 3
    for step in range(1, STEPS + 1):
        time.sleep(max(0.0, t0 + seconds * step / STEPS - time.monotonic()))
        bad = bad_shards(folder, shards)
        if bad:
            print(f"survival_try: step {step}: shard(s) failed their sha256: {bad}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2]), sys.argv[3]))
