"""The monitoring sampler's cost to training: step time with it running against paused, side by side.

Run: ``hpcbench bench sampler-overhead [--pairs 6] [--block-s 5] [--interval 1.0]``

A small MLP trains SGD steps on CPU (the case where the sampler competes hardest: it
shares the cores with the step). The sampler (:class:`hpcbench.monitor.Sampler`, every
source usable here, 1 Hz) starts once; the run then alternates blocks of ``--block-s``
seconds with the sampler running ("on") and frozen with SIGSTOP ("off"), the order
flipped every pair so drift in the machine's speed falls on both sides. Starting and
stopping the process per block would measure its start-up instead of its steady cost.

Printed per pair: the median step time on and off and their ratio; then the median
overhead over pairs (target <= 1 %: a monitor that costs more than that distorts the step
times it watches), and the sampler's own CPU time
per wall second (from /proc/<pid>/stat), a steadier view of the same cost. A perf child
of the sampler (cache hit rate, where the PMU is available) is not frozen in the "off"
blocks, so its share is on both sides and not in the ratio. No assertion on timing:
the figure is reported, judged against the target. On a loaded machine (other jobs on
the same cores) the side-by-side ratio is noisy; the CPU-time bound is printed with it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

import torch

from hpcbench.bench.result import BenchResult, Ratio
from hpcbench.core.results import read_records
from hpcbench.monitor import Sampler

OVERHEAD_TARGET = 0.01   # <= 1 % of step time at 1 Hz: beyond that the monitor distorts the steps it watches
#: A run of seconds for tests/test_bench.py: every path of the benchmark at toy size; its figures mean nothing.
#: Two pairs: the second ends with the sampler running, as the default six do.
TOY_ARGS = ["--pairs", "2", "--block-s", "1", "--hidden", "64", "--layers", "2", "--batch-size", "8"]


def build_step(hidden: int, batch: int, layers: int):
    """A training step of an MLP on random data; returns a function that runs one step."""
    torch.manual_seed(0)
    mods: list[torch.nn.Module] = []
    for _ in range(layers):
        mods += [torch.nn.Linear(hidden, hidden), torch.nn.ReLU()]
    model = torch.nn.Sequential(*mods, torch.nn.Linear(hidden, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(batch, hidden), torch.randint(0, 10, (batch,))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def run_block(step, seconds: float) -> list[float]:
    """Step times (s) of as many steps as fit in ``seconds``."""
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return times


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` in seconds (proc(5): fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """This benchmark's options (``hpcbench bench sampler-overhead --help``)."""
    ap.add_argument("--pairs", type=int, default=6, help="on/off block pairs; the median over pairs is reported")
    ap.add_argument("--block-s", type=float, default=5.0, help="seconds per block (several sampler ticks)")
    ap.add_argument("--interval", type=float, default=1.0, help="sampler interval (1 Hz: the monitor's default rate)")
    ap.add_argument("--hidden", type=int, default=512, help="MLP width (sets the step time)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=64)


def run(args: argparse.Namespace) -> BenchResult:
    """Blocks with the sampler running and frozen, alternating: one row per pair; step time on / off per pair
    and their median, and the sampler's CPU share, as ratios judged against :data:`OVERHEAD_TARGET`."""
    step = build_step(args.hidden, args.batch_size, args.layers)
    run_block(step, 1.0)  # warm-up: allocator, thread pool
    with tempfile.TemporaryDirectory(prefix="bench-sampler-overhead-") as tmp:
        out = Path(tmp) / "monitor.parquet"
        sampler = Sampler(out, interval_s=args.interval, flush_every_s=30.0).start(wait_ready=True)
        pid = sampler.pid
        assert pid is not None
        while not out.exists():          # sampling has begun once the first tick is flushed
            time.sleep(0.05)
        rows = []
        sampler_cpu, on_wall = 0.0, 0.0
        try:
            for pair in range(args.pairs):
                result = {}
                for mode in (("on", "off") if pair % 2 == 0 else ("off", "on")):
                    os.kill(pid, signal.SIGCONT if mode == "on" else signal.SIGSTOP)
                    cpu0, wall0 = cpu_seconds(pid), time.perf_counter()
                    result[mode] = statistics.median(run_block(step, args.block_s))
                    if mode == "on":
                        sampler_cpu += cpu_seconds(pid) - cpu0
                        on_wall += time.perf_counter() - wall0
                rows.append({"pair": pair, "step_on_ms": result["on"] * 1e3, "step_off_ms": result["off"] * 1e3,
                             "overhead": result["on"] / result["off"] - 1.0})
        finally:
            os.kill(pid, signal.SIGCONT)
            sampler.stop()
        frame = read_records(out)
    durations = frame[frame["metric"] == "monitor_sample_duration"]["value"]
    sources = sorted({json.loads(s).get("source") for s in frame["labels"]} - {"sampler", None}
                     - {json.loads(s)["source"] for s in frame[frame["metric"] == "monitor_source_absent"]["labels"]})

    overheads = [r["overhead"] for r in rows]
    overhead = statistics.median(overheads)
    cpu_share = sampler_cpu / on_wall if on_wall else float("nan")
    ratios = [Ratio(f"pair {r['pair']}: step time, sampler on / off", "step on (median)", "step off (median)",
                    1.0 + r["overhead"]) for r in rows]
    ratios.append(Ratio("step time, sampler on / off, median over pairs", "step on", "step off", 1.0 + overhead,
                        1.0 + OVERHEAD_TARGET, higher_is_better=False))
    # A step whose threads all wait for the slowest loses at most the time the sampler takes
    # from one core: its CPU share bounds the overhead when other load makes the ratio noisy.
    ratios.append(Ratio("sampler CPU time / wall time while running (bounds the overhead)", "sampler CPU s",
                        "wall s with the sampler running", cpu_share, OVERHEAD_TARGET, higher_is_better=False))
    return BenchResult("sampler-overhead", rows=rows, ratios=ratios, notes=[
        f"MLP {args.layers}x{args.hidden}, batch {args.batch_size}, {torch.get_num_threads()} threads on "
        f"{os.cpu_count()} CPUs; sampler every {args.interval:g} s, sources: {', '.join(sources)}; "
        f"{args.pairs} pairs of {args.block_s:g} s blocks",
        f"median overhead over pairs: {overhead:+.2%} (min {min(overheads):+.2%}, max {max(overheads):+.2%}); "
        f"sampler per tick: median {durations.median() * 1e3:.2f} ms over {len(durations)} ticks",
        f"target: overhead <= {OVERHEAD_TARGET:.0%} of step time, by the side-by-side median and by the CPU-time "
        f"bound"])
