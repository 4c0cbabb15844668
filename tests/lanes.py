"""``make test``: the whole suite as two pytest sessions side by side, the cluster lane and the local lane.

The tests that use the emulated SLURM cluster (marked ``cluster``, tests/conftest.py) spend much of their
time waiting: for slurmctld to start a job, for a shaped link's timed phase, for a rank's rendezvous. Their
ranks run under slurmd, outside pytest's process tree (``make test-census``: 158 s of wall for 6 s of CPU in
tests/test_slurm_backend.py). Run one after the other with the local tests, those waits leave one of the two
cores idle; run beside them, the local tests fill it. The cluster tests stay in one session (one cluster per
machine, one test at a time on it), and the local tests in another (their session fixtures: the toy runs, the
demo-suite run), so nothing runs twice.

The cluster lane also runs a few local files that share nothing with the local lane
(``CLUSTER_LANE_COMPANIONS`` in tests/conftest.py), so that both lanes end near the same time.

Usage: ``python tests/lanes.py [pytest arguments]``: each lane gets the same arguments and its marker
expression (``-m cluster_lane`` / ``-m "not cluster_lane"``); its output is streamed with the lane's name in front of
each line and kept whole under ``results/test-lanes/`` (what a failure's traceback is read from). The exit
status is the first failing lane's (a lane that selected no test counts as passed), and the last lines say
how long each lane and the whole run took, and list the slowest tests of both lanes together.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Where each lane's whole output and its JUnit XML are kept.
OUT = REPO / "results" / "test-lanes"
#: The lanes: name and marker expression. The cluster lane comes first: it holds the longest single waits.
LANES = (("cluster", "cluster_lane"), ("local", "not cluster_lane"))
#: pytest's exit status when a session selected no test (a lane may legitimately select none).
NO_TESTS = 5
SLOWEST = 15


def lane_command(marker: str, args: list[str], junit: Path) -> list[str]:
    """The lane's pytest command line; a ``-m EXPR`` among ``args`` is combined with the lane's own."""
    args = list(args)
    if "-m" in args:
        i = args.index("-m")
        if i + 1 >= len(args):
            raise SystemExit("tests/lanes.py: -m needs an expression")
        marker = f"({args[i + 1]}) and ({marker})"
        del args[i:i + 2]
    return [sys.executable, "-m", "pytest", "-m", marker, f"--junitxml={junit}", *args]


def lane_args(name: str, args: list[str]) -> list[str]:
    """The cluster lane leaves pytest's cache (last failures) to the local lane: two sessions writing one file."""
    return ["-p", "no:cacheprovider", *args] if name == "cluster" else list(args)


def stream(name: str, proc: subprocess.Popen, log: Path, lock: threading.Lock) -> None:
    """Copy the lane's output to ``log`` and, line by line with its name in front, to this process's stdout."""
    width = max(len(n) for n, _ in LANES)
    with log.open("w") as keep:
        for line in proc.stdout:
            keep.write(line)
            with lock:
                sys.stdout.write(f"[{name:<{width}}] {line}")
                sys.stdout.flush()


def slowest(junits: dict[str, Path], n: int = SLOWEST) -> list[tuple[float, str, str]]:
    """The ``n`` slowest test cases of all lanes (JUnit's time: setup, call and teardown)."""
    rows = []
    for lane, path in junits.items():
        if not path.is_file():
            continue
        for case in ET.parse(path).getroot().iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name')}"
            rows.append((float(case.get("time") or 0.0), lane, name))
    return sorted(rows, reverse=True)[:n]


#: Lines of a lane's log printed when it failed without naming a failed test.
LOG_TAIL = 30


def failures(junits: dict[str, Path], width: int = 600) -> list[tuple[str, str, str]]:
    """Each failed or erroring test case of all lanes: (lane, test, the first ``width`` characters of its message
    and the last lines of its traceback). Printed last, so that a CI log that keeps only its tail still names them."""
    rows = []
    for lane, path in junits.items():
        if not path.is_file():
            continue
        for case in ET.parse(path).getroot().iter("testcase"):
            for bad in [*case.iter("failure"), *case.iter("error")]:
                name = f"{case.get('classname', '')}::{case.get('name')}"
                tail = "\n".join((bad.text or "").strip().splitlines()[-6:])
                why = (bad.get("message") or "").strip()
                text = why if why and why in tail else "\n".join(x for x in (why, tail) if x)
                rows.append((lane, name, text[-width:]))
    return rows


def main(argv: list[str], out: Path = OUT) -> int:
    out.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    procs, threads, junits, started = {}, [], {}, time.monotonic()
    took: dict[str, float] = {}
    for name, marker in LANES:
        junits[name] = out / f"{name}.xml"
        junits[name].unlink(missing_ok=True)
        cmd = lane_command(marker, lane_args(name, argv), junits[name])
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        # Each lane in a process group of its own, so that an interrupt reaches its kernels and ranks too.
        procs[name] = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, bufsize=1, start_new_session=True)
        t = threading.Thread(target=stream, args=(name, procs[name], out / f"{name}.log", lock), daemon=True)
        t.start()
        threads.append(t)

    def forward(signum, _frame):
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    status = {}
    pending = dict(procs)
    while pending:  # note each lane's own wall time as it ends
        for name, proc in list(pending.items()):
            if proc.poll() is not None:
                status[name] = proc.returncode
                took[name] = time.monotonic() - started
                del pending[name]
        time.sleep(0.2)
    for t in threads:
        t.join()
    wall = time.monotonic() - started

    print(f"\n{'=' * 30} lanes {'=' * 30}")
    for name, _ in LANES:
        rc = status[name]
        word = "passed" if rc == 0 else "selected no test" if rc == NO_TESTS else f"FAILED (exit {rc})"
        print(f"{name} lane: {word} in {took[name]:.0f} s; whole output: {out / (name + '.log')}")
    print(f"both lanes: {wall:.0f} s ({wall / 60:.1f} min) of wall time")
    rows = slowest(junits)
    if rows:
        print(f"slowest {len(rows)} tests of both lanes (setup + call + teardown):")
        for seconds, lane, name in rows:
            print(f"  {seconds:7.1f} s  [{lane}]  {name}")
    bad = failures(junits)
    if bad:
        print(f"{len(bad)} failed test(s):")
        for lane, name, text in bad:
            print(f"  [{lane}]  {name}")
            for line in text.splitlines():
                print(f"      {line}")
    for name, _ in LANES:  # a lane that failed without a failed test (it crashed, or was killed): its log's end
        if status[name] not in (0, NO_TESTS) and not any(lane == name for lane, _, _ in bad):
            log = (out / f"{name}.log").read_text(errors="replace").splitlines()
            print(f"{name} lane failed with no failed test in its JUnit file; the last lines of its log:")
            for line in log[-LOG_TAIL:]:
                print(f"      {line}")
    failing = [rc for name, _ in LANES if (rc := status[name]) not in (0, NO_TESTS)]
    if all(status[name] == NO_TESTS for name, _ in LANES):
        return NO_TESTS
    return failing[0] if failing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
