"""The per-node sampler: a background process that polls the monitoring sources at 1 Hz.

Run by :class:`Sampler` (or by hand: ``hpcbench sample --out F.parquet``),
it writes the project's one results schema (:mod:`hpcbench.core.results`): one row per
sample with ``metric``/``value``/``unit``, the source's labels plus ``{"source": name}``
and the caller's labels, ``step`` = tick number and ``time`` = when it was read.

What is absent is written, never faked: at start, for each unusable source one row
``monitor_source_absent`` (value NaN, ``text`` = the reason, label ``source``) and one NaN
row per metric it would have given, ``text`` = "not available: <reason>"; the same for the
single metrics a usable source lacks (NVML without GPM...). Each tick also records
``monitor_sample_duration`` (s), the sampler's own cost.

The records file is rewritten atomically every ``flush_every_s`` and at exit, so it is
always readable and a killed sampler loses at most that much. SIGTERM (or SIGINT, or EOF
on stdin when started by :class:`Sampler`, so an orphaned sampler ends with its parent)
stops it after a last flush, with exit status 0.

This module imports nothing heavy at the top, so the child installs its signal handlers
before pandas loads; it never imports torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

READY_LINE = "hpcbench-sampler-ready"
DEFAULT_INTERVAL_S = 1.0        # 1 Hz: step-scale faults show, overhead stays <= 1 %
DEFAULT_FLUSH_EVERY_S = 30.0    # rewriting the file costs ~ms per 10k rows; this bounds loss on a kill
FAILURES_BEFORE_DISABLE = 3     # a source that raises this many ticks running is dropped, with the reason
ABSENT_SOURCE_METRIC = "monitor_source_absent"
SOURCE_ERROR_METRIC = "monitor_source_error"
SAMPLE_DURATION_METRIC = "monitor_sample_duration"


class Sampler:
    """Starts and stops the sampler process; use as a context manager around training.

    Args:
        out_path: the records file (Parquet) the process writes.
        interval_s: seconds between samples (1 Hz by default).
        sources: registered source names (default: all; unusable ones are recorded absent).
        labels: labels added to every row (e.g. ``{"fault": "slow_storage"}``).
        feed: the loader's :class:`~hpcbench.monitor.sources.storage.ReadLatencyFeed` or its path.
        context: identity columns of the rows (default: experiment "monitor", this host).
        flush_every_s: how often the records file is rewritten while running.
        log_path: the child's stderr (default: ``<out_path>.log``).
    """

    def __init__(self, out_path: str | os.PathLike, *, interval_s: float = DEFAULT_INTERVAL_S,
                 sources: Iterable[str] | None = None, labels: Mapping[str, str] | None = None,
                 feed: Any = None, context: Any = None, flush_every_s: float = DEFAULT_FLUSH_EVERY_S,
                 log_path: str | os.PathLike | None = None):
        from hpcbench.core.errors import ConfigError
        from hpcbench.monitor.sources import SOURCES

        if not interval_s > 0:
            raise ConfigError(f"must be > 0, got {interval_s}", field="interval_s", config="Sampler")
        if not flush_every_s > 0:
            raise ConfigError(f"must be > 0, got {flush_every_s}", field="flush_every_s", config="Sampler")
        self.sources = None if sources is None else list(sources)
        for name in self.sources or []:
            SOURCES.get(name)  # an unknown name fails here, listing the registered ones
        self.out_path = Path(out_path)
        self.interval_s = float(interval_s)
        self.labels = {str(k): str(v) for k, v in (labels or {}).items()}
        self.feed_path = None if feed is None else Path(getattr(feed, "path", feed))
        self.context = context
        self.flush_every_s = float(flush_every_s)
        self.log_path = Path(log_path) if log_path else self.out_path.with_name(self.out_path.name + ".log")
        self._proc: subprocess.Popen | None = None
        self._ready = False
        self._log = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def argv(self) -> list[str]:
        """The child's command line."""
        argv = [sys.executable, "-m", "hpcbench", "sample", "--out", str(self.out_path),
                "--interval", repr(self.interval_s), "--flush-every", repr(self.flush_every_s),
                "--labels", json.dumps(self.labels), "--stop-on-stdin-eof"]
        if self.sources is not None:
            argv += ["--sources", ",".join(self.sources)]
        if self.feed_path is not None:
            argv += ["--feed", str(self.feed_path)]
        if self.context is not None:
            # default=str: a task's params may hold paths or other non-JSON values
            ctx = dataclasses.asdict(self.context)
            ctx["params"] = dict(self.context.params)
            argv += ["--context", json.dumps(ctx, sort_keys=True, default=str)]
        return argv

    def start(self, *, wait_ready: bool = False, timeout: float = 60.0) -> "Sampler":
        """Launch the process; with ``wait_ready``, return once its signal handlers are in place."""
        if self._proc is not None:
            raise RuntimeError("sampler already started")
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._proc = subprocess.Popen(self.argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._log, env=env, close_fds=True)
        if wait_ready:
            self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> bool:
        assert self._proc is not None and self._proc.stdout is not None
        deadline = time.monotonic() + timeout
        while not self._ready and self._proc.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready, _, _ = select.select([self._proc.stdout], [], [], left)
            if ready:
                line = self._proc.stdout.readline().decode(errors="replace").strip()
                if line == READY_LINE:
                    self._ready = True
                elif not line:
                    break  # EOF: the child is exiting
        return self._ready

    def stop(self, *, timeout: float = 15.0) -> Path:
        """SIGTERM, wait for the last flush and exit 0; kill after ``timeout``.

        Returns:
            The records file.
        Raises:
            LogError: the process failed or had to be killed (names the log, quotes its tail).
        """
        from hpcbench.core.errors import LogError

        proc = self._proc
        if proc is None:
            raise RuntimeError("sampler not started")
        self._wait_ready(timeout)   # a SIGTERM before the handlers are in would lose the records
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
            rc = rc if rc else -signal.SIGKILL
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
        if self._log is not None:
            self._log.close()
        self._proc = None
        if rc != 0:
            raise LogError(f"sampler exited with status {rc}", log_path=self.log_path, tail=_tail(self.log_path))
        return self.out_path

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self.stop()


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# -- the child ---------------------------------------------------------------------------------
class _RecordLog:
    """Rows kept in memory and rewritten atomically as one records file on each flush."""

    def __init__(self, path: Path, context: Any):
        self.path, self.context = path, context
        self.rows: list[dict[str, Any]] = []

    def add(self, metric: str, value: float | None, unit: str, **kw: Any) -> None:
        self.rows.append(dict(metric=metric, value=value, unit=unit, **kw))

    def flush(self) -> None:
        from hpcbench.core.results import RecordWriter

        with RecordWriter(self.path, self.context) as writer:
            for row in self.rows:
                writer.add(**row)


def run(out_path: str | os.PathLike, *, interval_s: float = DEFAULT_INTERVAL_S, sources: Iterable[str] | None = None,
        labels: Mapping[str, str] | None = None, feed: str | os.PathLike | None = None, context: Any = None,
        flush_every_s: float = DEFAULT_FLUSH_EVERY_S, stop: threading.Event | None = None,
        max_ticks: int | None = None) -> Path:
    """The sampling loop (the child's body; callable in-process too).

    Args:
        stop: set it to end the loop (signal handlers do); ``max_ticks`` ends it as well.
    Returns:
        The records file, flushed.
    """
    from hpcbench.core.results import RecordContext
    from hpcbench.monitor.sources import create_sources

    stop = stop or threading.Event()
    labels = dict(labels or {})
    log = _RecordLog(Path(out_path), context or RecordContext(experiment="monitor"))
    options = {"storage": {"feed": feed}} if feed is not None else {}
    names = None if sources is None else list(sources)
    active = []
    for source in create_sources(names, **options):
        try:
            reason = source.available()
        except Exception as exc:  # a broken driver must not take the sampler down
            reason = f"{type(exc).__name__}: {exc}"
        base = {**labels, "source": source.name}
        if reason is not None:
            _record_absent(log, source.name, source.metrics, reason, base)
            continue
        for metric, why in source.absent_metrics.items():
            log.add(metric, None, _unit(metric), labels=base, text=f"not available: {why}")
        active.append(source)

    failures = {s.name: 0 for s in active}
    start = time.monotonic()
    next_flush = start  # flush after the first tick: the file exists early
    tick = 0
    try:
        while not stop.is_set() and (max_ticks is None or tick < max_ticks):
            began, wall = time.monotonic(), time.time()
            for source in list(active):
                base = {**labels, "source": source.name}
                try:
                    samples = source.sample()
                    failures[source.name] = 0
                except Exception as exc:
                    failures[source.name] += 1
                    log.add(SOURCE_ERROR_METRIC, None, "", step=tick, when=wall, labels=base,
                            text=f"{type(exc).__name__}: {exc}")
                    if failures[source.name] >= FAILURES_BEFORE_DISABLE:
                        active.remove(source)
                        _record_absent(log, source.name, source.metrics,
                                       f"failed {FAILURES_BEFORE_DISABLE} times running: {exc}", base)
                    continue
                for s in samples:
                    log.add(s.metric, s.value, s.unit, step=tick, when=wall, labels={**base, **s.labels})
            log.add(SAMPLE_DURATION_METRIC, time.monotonic() - began, "s", step=tick, when=wall,
                    labels={**labels, "source": "sampler"})
            tick += 1
            if time.monotonic() >= next_flush:
                log.flush()
                next_flush = time.monotonic() + flush_every_s
            # The next tick on the start + k * interval grid; ticks missed while stopped
            # (SIGSTOP, a suspended job) are skipped, not run in a burst.
            now = time.monotonic()
            k = max(tick, int((now - start) / interval_s) + 1)
            stop.wait(max(0.0, start + k * interval_s - now))
    finally:
        for source in active:
            try:
                source.close()
            except Exception:  # closing is best effort; the records matter more
                pass
        log.flush()
    return log.path


def _record_absent(log: _RecordLog, name: str, metrics: Iterable[str], reason: str, labels: dict) -> None:
    log.add(ABSENT_SOURCE_METRIC, None, "", labels=labels, text=reason)
    for metric in metrics:
        log.add(metric, None, _unit(metric), labels=labels, text=f"not available: {reason}")


def _unit(metric: str) -> str:
    from hpcbench.monitor.sources import METRICS

    return METRICS.get(metric, ("",))[0]


def absent_reasons(frame: Any) -> dict[str, str]:
    """``{metric: reason}`` for every metric a records frame marks "not available" (for reports)."""
    rows = frame[frame["value"].isna() & frame["text"].fillna("").str.startswith("not available: ")]
    return {m: t[len("not available: "):] for m, t in zip(rows["metric"], rows["text"])}


def _stop_on_eof(stop: threading.Event) -> None:
    # os.read, not sys.stdin: a daemon thread blocked inside a buffered reader aborts
    # the interpreter at exit.
    while os.read(0, 4096):
        pass
    stop.set()


def main(argv: list[str] | None = None) -> int:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    ap = argparse.ArgumentParser(prog="hpcbench sample", description="Sample this node's monitoring sources into a records file.")
    ap.add_argument("--out", required=True, help="records file (Parquet)")
    ap.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S, help="seconds between samples")
    ap.add_argument("--sources", default=None, help="comma-separated source names (default: all)")
    ap.add_argument("--labels", default="{}", help="JSON object of labels added to every row")
    ap.add_argument("--feed", default=None, help="ReadLatencyFeed file of the data loader")
    ap.add_argument("--context", default=None, help="RecordContext as JSON")
    ap.add_argument("--flush-every", type=float, default=DEFAULT_FLUSH_EVERY_S)
    ap.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    ap.add_argument("--stop-on-stdin-eof", action="store_true", help="stop when stdin closes (parent gone)")
    args = ap.parse_args(argv)
    print(READY_LINE, flush=True)
    if args.stop_on_stdin_eof:
        threading.Thread(target=_stop_on_eof, args=(stop,), name="stdin-eof", daemon=True).start()
    if args.duration is not None:
        timer = threading.Timer(args.duration, stop.set)
        timer.daemon = True
        timer.start()
    context = None
    if args.context:
        from hpcbench.core.results import RecordContext

        context = RecordContext.from_json(args.context)
    run(args.out, interval_s=args.interval, sources=args.sources.split(",") if args.sources else None,
        labels=json.loads(args.labels), feed=args.feed, context=context, flush_every_s=args.flush_every, stop=stop)
    return 0

