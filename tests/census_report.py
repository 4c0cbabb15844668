"""Print the test census (``HPCBENCH_TEST_CENSUS``, see conftest.py): per test file, wall and CPU time.

Run: ``python tests/census_report.py results/test-census.json [--top 25]``

``cpu / wall`` near 1 means a file keeps one core busy; near 2, both (this machine's 2 cores); well
below 1, it waits (timed phases, rendezvous) or its work runs outside pytest's process tree: a
SLURM job's processes are slurmd's children, so the emulated cluster's tests show their wall time
here but not the CPU their ranks spent.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("census", type=Path)
    ap.add_argument("--top", type=int, default=25, help="files shown, by wall time")
    args = ap.parse_args(argv)
    rows = json.loads(args.census.read_text())
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for r in rows:
        f = files[r["test"].split("::")[0]]
        f[0] += r["wall_s"]
        f[1] += r["cpu_self_s"]
        f[2] += r["cpu_children_s"]
        f[3] += 1
    wall = sum(f[0] for f in files.values())
    cpu = sum(f[1] + f[2] for f in files.values())
    print(f"{len(rows)} tests in {len(files)} files: wall {wall / 60:.1f} min, CPU of pytest's process tree "
          f"{cpu / 60:.1f} min ({cpu / wall:.2f} cores on average)\n")
    print(f"{'file':62s} {'tests':>5s} {'wall s':>7s} {'CPU s':>7s} {'children':>8s} {'cpu/wall':>8s}")
    for name, (w, me, kids, n) in sorted(files.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"{name:62s} {n:5d} {w:7.1f} {me + kids:7.1f} {kids:8.1f} {(me + kids) / w if w else 0:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
