"""CPU cache hit rate from hardware perf events, node-wide.

``cpu_cache_hit_rate`` = 1 - delta ``cache-misses`` / delta ``cache-references`` (the
guide's "CPU cache hit rate > 90 %, perf", C6). perf's generic events map to the
last-level cache on most x86 CPUs (Intel: LLC references/misses; AMD: varies by model),
so this is an LLC hit rate. A ``perf stat -a -x, -I <ms>`` child counts all CPUs; the
source sums the intervals it printed since the previous sample.

Virtual machines often do not pass the PMU through: perf then prints ``<not supported>``
and the source is absent with that reason. System-wide counting needs root or
``kernel.perf_event_paranoid`` <= 0.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import Callable, Iterable

from hpcbench.monitor.sources.base import Sample, Source, run_command

EVENTS = ("cache-references", "cache-misses")
PERF_PACKAGE_HINT = "Debian/Ubuntu package linux-perf (or linux-tools-$(uname -r))"


def parse_perf_csv_line(line: str) -> tuple[float | None, str, float | None, str] | None:
    """One ``perf stat -x,`` line as ``(interval time or None, event, count or None, raw count field)``.

    Interval lines start with a timestamp; plain ``perf stat`` lines do not. Hybrid CPUs
    name events ``cpu_core/cache-references/``; the PMU prefix is dropped.
    """
    fields = [f.strip() for f in line.strip().split(",")]
    if len(fields) < 3 or line.startswith("#"):
        return None
    stamp: float | None = None
    try:
        stamp = float(fields[0])
        fields = fields[1:]
    except ValueError:
        pass
    if len(fields) < 3:
        return None
    raw, event = fields[0], fields[2]
    event = event.split("/")[1] if event.count("/") >= 2 else event
    event = event.split(":")[0]
    try:
        count: float | None = float(raw)
    except ValueError:
        count = None  # "<not supported>", "<not counted>"
    return stamp, event, count, raw


def probe_reason(text: str, returncode: int) -> str | None:
    """Why ``perf stat -e cache-references,cache-misses`` output gives no hit rate, or None."""
    seen = {}
    for line in text.splitlines():
        parsed = parse_perf_csv_line(line)
        if parsed and parsed[1] in EVENTS:
            seen[parsed[1]] = parsed
    for event in EVENTS:
        if event in seen and seen[event][2] is None:
            return f"perf: {event} {seen[event][3]} on this CPU/VM"
    if returncode != 0 or len(seen) < len(EVENTS):
        last = (text.strip().splitlines() or ["no output"])[-1].strip()
        if "paranoid" in text or "ermission" in text:
            paranoid = (Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip()
                        if Path("/proc/sys/kernel/perf_event_paranoid").exists() else "?")
            return f"perf: no permission for system-wide counting (kernel.perf_event_paranoid={paranoid})"
        return f"perf stat failed (rc {returncode}): {last}"
    return None


class PerfCacheSource(Source):
    """LLC hit rate from a long-running ``perf stat -a -I`` child.

    Args:
        perf: the perf executable.
        step_ms: perf's print interval; samples sum all intervals since the previous one.
        runner: ``runner(argv) -> (returncode, text)`` for the availability probe (tests).
    """

    name = "perf_cache"
    metrics = ("cpu_cache_hit_rate",)

    def __init__(self, *, perf: str = "perf", step_ms: int = 250, runner: Callable | None = None,
                 which: Callable[[str], str | None] = shutil.which, clock: Callable[[], float] | None = None):
        super().__init__(clock=clock)
        self.perf, self.step_ms = perf, int(step_ms)
        self._runner = runner or run_command
        self._which = which
        self._proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pending: dict[float, dict[str, float]] = {}   # interval stamp -> event -> count
        self._done: list[dict[str, float]] = []
        self._reason: str | None = None
        self._checked = False

    def available(self) -> str | None:
        if not self._checked:
            self._checked = True
            if self._runner is run_command and self._which(self.perf) is None:
                self._reason = f"perf is not installed ({PERF_PACKAGE_HINT})"
            else:
                rc, text = self._runner([self.perf, "stat", "-x,", "-a", "-e", ",".join(EVENTS), "--", "sleep", "0.05"])
                self._reason = probe_reason(text, rc)
        return self._reason

    def feed_line(self, line: str) -> None:
        """Take one line of ``perf stat -I`` output (the reader thread calls this; tests too)."""
        parsed = parse_perf_csv_line(line)
        if not parsed or parsed[0] is None or parsed[1] not in EVENTS or parsed[2] is None:
            return
        stamp, event, count, _ = parsed
        with self._lock:
            counts = self._pending.setdefault(stamp, {})  # type: ignore[arg-type]
            counts[event] = counts.get(event, 0.0) + count  # hybrid CPUs: one line per PMU
            # An interval is complete once a later one starts.
            for older in [s for s in self._pending if s < stamp]:  # type: ignore[operator]
                self._done.append(self._pending.pop(older))

    def _read(self) -> Iterable[Sample]:
        if self._proc is None:
            self._start()
            return []
        return self.drain()

    def drain(self) -> list[Sample]:
        """The hit rate over the intervals completed since the previous drain (none: no sample)."""
        with self._lock:
            done, self._done = self._done, []
        refs = sum(c.get("cache-references", 0.0) for c in done)
        misses = sum(c.get("cache-misses", 0.0) for c in done)
        if refs <= 0:
            return []
        return [Sample("cpu_cache_hit_rate", 1.0 - misses / refs, "fraction", {"cpu": "all"})]

    def _start(self) -> None:
        argv = [self.perf, "stat", "-x,", "-a", "-I", str(self.step_ms), "-e", ",".join(EVENTS)]
        self._proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self._thread = threading.Thread(target=self._pump, name="perf-stat-reader", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        for line in self._proc.stderr:
            self.feed_line(line)

    def close(self) -> None:
        if self._proc is None:
            return
        self._proc.send_signal(signal.SIGINT)  # perf prints its totals and exits on SIGINT
        try:
            self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None


SOURCE = PerfCacheSource
