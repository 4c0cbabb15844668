"""The report: dask aggregation with known numbers, escaping, unreadable inputs, Chromium.

Run directories are built with RecordWriter from synthetic collectives- and
environment-shaped records whose statistics are worked out by hand below. One
LocalCluster (threads, module scope) serves every test that needs one; the main
report is built through ``scheduler=`` its address, so that path is the one tested.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hpcbench.core.errors import HpcbenchError
from hpcbench.core.metrics import busbw
from hpcbench.core.results import RecordContext, RecordWriter
from hpcbench.core.units import format_bytes
from hpcbench.present.kit import Cell, Table, file_link
from hpcbench.report import aggregate, build_report, render, report_folder
from hpcbench.report.report_folder import FILES_SUBDIR, NOT_IN_REPORT, LinkedFiles, safe_file_name

from conftest import render_in_chromium

XSS_ERROR = "<script>alert(1)</script>"
BOLD_VARIANT = "<b>bold</b>"
OPS = ("all_reduce", "all_gather")
SIZES = (1024, 4096)
#: Per-step times (ms) of a 1 KiB message; a size scales them, a repetition multiplies them.
BASE_MS = (1.0, 2.0, 3.0)
EXPECTED_CLAIMS = 17  # the claims of the guide that hpcbench.report.ledger evaluates


def _labels(op: str, size: int, group: str = "world") -> dict:
    return {"op": op, "size_bytes": size, "group": group, "group_index": 0, "group_ranks": 2,
            "dtype": "float32"}


def _write_status(task_dir: Path, **fields) -> None:
    task_dir.mkdir(parents=True, exist_ok=True)
    status = {"task_id": task_dir.name, "experiment": "collectives", "variant": "base", "repetition": 0,
              "params": {}, "state": "done", "error": None, "started": "2025-01-01T00:00:00Z",
              "finished": "2025-01-01T00:00:05Z", "duration_s": 5.0, "notebook": "notebook.ipynb",
              "log": None}
    status.update(fields)
    (task_dir / "status.json").write_text(json.dumps(status))


def _collectives_task(run: Path, run_id: str, variant: str, rep: int, scale: float,
                      wrong: tuple[str, int] | None = None) -> None:
    """Rank 0 writes the samples, rank 1 the not-applicable row (as a 1-node run does)."""
    task_id = f"collectives.{'bold' if variant == BOLD_VARIANT else variant}.r{rep}"
    task_dir = run / "tasks" / task_id
    _write_status(task_dir, variant=variant, repetition=rep)
    ctx = RecordContext(run_id=run_id, suite="smoke", experiment="collectives", variant=variant,
                        task_id=task_id, repetition=rep, params={"iters": 3}, node="n1")
    with RecordWriter(task_dir / "records" / "rank0.parquet", ctx.for_rank(node="n1", rank=0, world_size=2)) as w:
        for op in OPS:
            for size in SIZES:
                labels = _labels(op, size)
                for step, ms in enumerate(BASE_MS):
                    t = ms * 1e-3 * (size / 1024) * scale
                    w.add("time", t, "s", step=step, labels=labels)
                    w.add("busbw", busbw(op, size, t, 2), "GB/s", step=step, labels=labels)
                w.add("correct", 0.0 if wrong == (op, size) else 1.0, "bool", labels=labels)
    with RecordWriter(task_dir / "records" / "rank1.parquet", ctx.for_rank(node="n1", rank=1, world_size=2)) as w:
        w.add("busbw", None, "GB/s", labels={"op": "all_reduce", "group": "inter"},
              text="not applicable: inter groups have 1 rank with 1 node x 2 ranks")


def _environment_task(run: Path, run_id: str, torch_version: str) -> None:
    """Records but no status.json (a task run by hand): must be fine.

    Shaped as hpcbench.system.inventory writes them: text always, a number when the fact
    is a quantity, labels naming the category and where the fact was read.
    """
    task_dir = run / "tasks" / "environment.default.r0"
    for rank, node in enumerate(("n1", "n2")):
        ctx = RecordContext(run_id=run_id, suite="smoke", experiment="environment", task_id=task_dir.name,
                            node=node, rank=rank, world_size=2)
        with RecordWriter(task_dir / "records" / f"{node}.parquet", ctx) as w:
            w.add("torch.version", None, "", text=torch_version,
                  labels={"category": "torch", "source": "torch.__version__"})
            w.add("python.version", None, "", text="3.11.2", labels={"category": "python", "source": "sys"})
            w.add("cpu.logical_cpus", 2, "count", text="2", labels={"category": "cpu", "source": "/proc/cpuinfo"})


def _other_task(run: Path, run_id: str) -> None:
    """An experiment without a presenter of its own: the generic statistics table."""
    task_dir = run / "tasks" / "dataloader.default.r0"
    _write_status(task_dir, experiment="dataloader", variant="default")
    ctx = RecordContext(run_id=run_id, suite="smoke", experiment="dataloader", task_id=task_dir.name)
    with RecordWriter(task_dir / "records" / "driver.parquet", ctx) as w:
        for step, value in enumerate((10.0, 20.0, 60.0)):
            w.add("samples_per_s", value, "1/s", step=step, labels={"workers": 4})


def make_run(root: Path, run_id: str, *, scale: float = 1.0, broken: bool = False) -> Path:
    run = root / run_id
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({
        "run_id": run_id, "suite": "smoke", "created": "2025-01-01T00:00:00Z", "host": f"{run_id}-login",
        "backend": "local", "hpcbench_version": "0.1.0"}))
    _collectives_task(run, run_id, "base", 0, scale)
    _collectives_task(run, run_id, "base", 1, 2 * scale, wrong=("all_gather", 4096))
    _collectives_task(run, run_id, BOLD_VARIANT, 0, scale)
    _environment_task(run, run_id, f"2.14.1+{run_id}")
    if not broken:
        _other_task(run, run_id)
    if broken:
        _write_status(run / "tasks" / "collectives.broken.r0", state="failed", error=XSS_ERROR,
                      variant="broken")
        bad = run / "tasks" / "collectives.base.r0" / "records" / "corrupt.parquet"
        bad.write_bytes(np.random.default_rng(0).bytes(512))
        foreign = run / "tasks" / "foreign" / "records" / "foreign.parquet"
        foreign.parent.mkdir(parents=True)
        pd.DataFrame({"x": [1, 2], "y": ["a", "b"]}).to_parquet(foreign)
    return run


#: The notebook of the failed task :func:`add_linked_files` writes; a space to make safe.
LINKED_NOTEBOOK = "out notebook.ipynb"
#: Where its copy goes in the report folder of a run labelled ``linked``.
LINKED_NOTEBOOK_COPY = f"{FILES_SUBDIR}/linked/collectives.linked.r0/out_notebook.ipynb"
COMM_TASK = "comm_modes.default.r0"


def add_linked_files(run: Path, *, big_trace_bytes: int = 0) -> dict[str, Path]:
    """Files the report links: a failed task's notebook and a comm_modes trace per rank.

    Rank 1's trace is padded to ``big_trace_bytes`` (to pass a lowered size cap).

    Returns:
        ``notebook``, ``trace0`` and ``trace1``: the files as the run holds them.
    """
    failed = run / "tasks" / "collectives.linked.r0"
    _write_status(failed, state="failed", error="boom", variant="linked", notebook=LINKED_NOTEBOOK)
    (failed / LINKED_NOTEBOOK).write_text('{"cells": [], "note": "the <linked> notebook"}')
    task_dir = run / "tasks" / COMM_TASK
    _write_status(task_dir, experiment="comm_modes", variant="default")
    ctx = RecordContext(run_id=run.name, suite="smoke", experiment="comm_modes", task_id=COMM_TASK)
    labels = {"model": "mlp", "mode": "ddp", "bucket_cap_mb": 25}
    files = {"notebook": failed / LINKED_NOTEBOOK}
    for rank in (0, 1):
        # Where hpcbench.diag writes them: <task dir>/trace/<rank>.json, recorded resolved.
        trace = task_dir / "trace" / f"{rank}.json"
        trace.parent.mkdir(parents=True, exist_ok=True)
        trace.write_text(json.dumps({"traceEvents": [], "rank": rank}).ljust(big_trace_bytes if rank else 0))
        files[f"trace{rank}"] = trace
        with RecordWriter(task_dir / "records" / f"rank{rank}.parquet",
                          ctx.for_rank(node="n1", rank=rank, world_size=2)) as w:
            for step, seconds in enumerate((0.1, 0.2, 0.3)):
                w.add("step_time", seconds, "s", step=step, labels={**labels, "comm": "mode"})
                w.add("throughput", 64 / seconds, "samples/s", step=step, labels={**labels, "scope": "total"})
            w.add("trace_file", None, "", labels=labels, text=str(trace.resolve()))
    return files


def linked_hrefs(html: str) -> list[str]:
    """The page's links into its own ``files/``, unescaped."""
    return [urllib.parse.unquote(h) for h in re.findall(rf'href="({FILES_SUBDIR}/[^"]+)"', html)]


@pytest.fixture(scope="module")
def client(cluster):
    from distributed import Client

    with Client(cluster, set_as_default=False) as c:
        yield c


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("runs")
    return make_run(root, "cluster-a", broken=True), make_run(root, "cluster-b", scale=0.5)


@pytest.fixture(scope="module")
def agg(runs, client):
    lines: list[str] = []
    result = aggregate(list(runs), client, files_per_partition=3, progress=lines.append)
    result.progress_lines = lines
    return result


@pytest.fixture(scope="module")
def report(runs, cluster, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    return build_report(list(runs), out, scheduler=cluster.scheduler_address, files_per_partition=4)


def _series(stats: pd.DataFrame, source: str, variant: str, metric: str, op: str, size: int) -> pd.Series:
    sel = stats[(stats["source"] == source) & (stats["variant"] == variant) & (stats["metric"] == metric)
                & (stats["op"] == op) & (stats["size_bytes"] == size)]
    assert len(sel) == 1, sel
    return sel.iloc[0]


# -- aggregation -----------------------------------------------------------------

def test_stats_match_hand_computed_values(agg):
    stats = agg.experiment_stats("collectives")
    s = _series(stats, "cluster-a", "base", "time", "all_reduce", 1024)
    # Samples (ms): repetition 0: 1 2 3, repetition 1: 2 4 6.
    # Sorted 1 2 2 3 4 6: p50 = (2+3)/2 = 2.5, mean = 18/6 = 3,
    # p99 = 4 + 0.99*5 - 4 = 0.95 of the way from 4 to 6 = 5.9 (linear interpolation).
    assert s["n"] == 6 and s["repetitions"] == 2
    assert s["p50"] == pytest.approx(2.5e-3)
    assert s["mean"] == pytest.approx(3e-3)
    assert s["p99"] == pytest.approx(5.9e-3)
    assert s["min"] == pytest.approx(1e-3) and s["max"] == pytest.approx(6e-3)
    assert s["std"] == pytest.approx(np.std([1, 2, 3, 2, 4, 6], ddof=1) * 1e-3)
    # Repetition means 2 and 4 ms: (4 - 2) / 3 = 66.7 %.
    assert s["spread_pct"] == pytest.approx(200 / 3)

    # busbw = S / t (x 1 for all_reduce on 2 ranks); 1/t sorted (1/ms): 1/6 1/4 1/3 1/2 1/2 1,
    # p50 = (1/3 + 1/2) / 2 = 5/12 per ms.
    b = _series(stats, "cluster-a", "base", "busbw", "all_reduce", 1024)
    assert b["p50"] == pytest.approx(1024 * 5 / 12 * 1e3 / 1e9)
    # all_gather on 2 ranks: factor 1/2; 4 KiB takes 4x as long: same S/t.
    g = _series(stats, "cluster-a", "base", "busbw", "all_gather", 4096)
    assert g["p50"] == pytest.approx(0.5 * 1024 * 5 / 12 * 1e3 / 1e9)
    # cluster-b is twice as fast, one repetition less per series only in the bold variant.
    tb = _series(stats, "cluster-b", "base", "time", "all_reduce", 1024)
    assert tb["p50"] == pytest.approx(1.25e-3)
    one = _series(stats, "cluster-a", BOLD_VARIANT, "time", "all_reduce", 1024)
    assert one["repetitions"] == 1 and np.isnan(one["spread_pct"]) and one["p50"] == pytest.approx(2e-3)
    bad = _series(stats, "cluster-a", "base", "correct", "all_gather", 4096)
    assert bad["min"] == 0 and bad["mean"] == pytest.approx(0.5)


def test_text_rows_are_kept_as_text_not_averaged(agg):
    text = agg.experiment_text("collectives")
    assert set(text["text"]) == {"not applicable: inter groups have 1 rank with 1 node x 2 ranks"}
    assert (text["group"] == "inter").all()
    stats = agg.experiment_stats("collectives")
    assert not (stats["group"] == "inter").any()
    env = agg.experiment_text("environment")
    assert set(env["text"]) == {"3.11.2", "2.14.1+cluster-a", "2.14.1+cluster-b"}
    assert set(env["node"]) == {"n1", "n2"}
    assert set(env["label.source"]) == {"torch.__version__", "sys"}  # clashes with the source column
    # A fact with a number and a text is a number in the stats.
    cpus = agg.experiment_stats("environment")
    # ... one series per source and node: a node that differs shows as its own row
    assert set(cpus["metric"]) == {"cpu.logical_cpus"} and (cpus["mean"] == 2).all()
    assert sorted(zip(cpus["source"], cpus["node"])) == sorted(
        (src, node) for src in set(cpus["source"]) for node in ("n1", "n2"))


def test_files_are_batched_and_unreadable_inputs_listed(agg, runs):
    n_files = sum(len(list(r.rglob("*.parquet"))) for r in runs)
    # cluster-a: 3 tasks x 2 files + 2 environment files + corrupt + foreign = 10 -> 4 batches of 3;
    # cluster-b: 8 files + 1 dataloader file = 9 -> 3 batches.
    assert n_files == 19
    assert f"loading {n_files} records files in 7 partition(s) from 2 source(s)" in agg.progress_lines[0]
    reasons = {Path(u.path).name: u.reason for u in agg.unreadable}
    assert set(reasons) == {"corrupt.parquet", "foreign.parquet"}
    assert "not a readable Parquet file" in reasons["corrupt.parquet"]
    assert "missing columns" in reasons["foreign.parquet"]
    # Everything else was read: 2 sources x (3 collectives tasks x 2 files + 2 environment files).
    rows = {label: len(frame) for label, frame in agg.records_by_source.items()}
    per_task = len(OPS) * len(SIZES) * (2 * len(BASE_MS) + 1) + 1
    assert rows == {"cluster-a": 3 * per_task + 6, "cluster-b": 3 * per_task + 6 + 3}


def test_tasks_read_from_status_files(agg):
    failed = [t for t in agg.tasks if t.state == "failed"]
    assert [(t.source, t.task_id, t.error) for t in failed] == [("cluster-a", "collectives.broken.r0", XSS_ERROR)]
    assert failed[0].notebook.name == "notebook.ipynb"
    assert sum(t.state == "done" for t in agg.tasks) == 7


def test_missing_run_dir_is_named_before_any_cluster(tmp_path, runs):
    missing_dir = tmp_path / "no-such-run"
    # An unreachable scheduler: reaching it first would fail differently.
    with pytest.raises(HpcbenchError, match=re.escape(str(missing_dir))):
        build_report([runs[0], missing_dir], tmp_path / "out", scheduler="tcp://127.0.0.1:9")
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(HpcbenchError, match="not a directory"):
        build_report([a_file], tmp_path / "out")


# -- the page --------------------------------------------------------------------

def test_report_escapes_untrusted_text(report):
    html = report.read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script" not in html.lower()
    assert "&lt;b&gt;bold&lt;/b&gt;" in html
    assert "<b>bold" not in html


def test_report_is_self_contained(report):
    html = report.read_text()
    assert re.search(r"""(src|href)=["']?(https?:)?//""", html) is None
    assert "<link" not in html
    assert html.count('src="data:image/svg+xml;base64,') >= 1


def test_report_sections(report, runs):
    html = report.read_text()
    # Both sources side by side in the collectives comparison, variants too.
    comparison = _table(html, "collectives-comparison")
    for header in ("cluster-a · base", "cluster-b · base", "cluster-a · &lt;b&gt;bold&lt;/b&gt;"):
        assert header in comparison
    assert comparison.count("<tr") == 2 + len(OPS) * len(SIZES)
    # cluster-a base all_reduce 1 KiB busbw p50 (see the stats test), 4 significant digits.
    assert f"{1024 * 5 / 12 * 1e3 / 1e9:.4g}" in comparison
    failures = _table(html, "collectives-failures")
    assert 'class="fail"' in failures and "all_gather" in failures and "4 KiB" in failures
    assert "not applicable: inter groups" in html
    inventory = _table(html, "environment-inventory")
    for column in ("cluster-a / n1", "cluster-a / n2", "cluster-b / n1"):
        assert column in inventory
    assert "2.14.1+cluster-b" in inventory and "category=cpu, source=/proc/cpuinfo" in inventory
    # The generic table for an experiment without a presenter: mean of 10 20 60 = 30, p50 20.
    generic = re.search(r'<section id="exp-dataloader">.*?</section>', html, re.S).group(0)
    assert "samples_per_s" in generic and "<td>30</td>" in generic and "<td>20</td>" in generic
    unreadable = _table(html, "unreadable-inputs")
    assert "corrupt.parquet" in unreadable and "foreign.parquet" in unreadable
    failed = _table(html, "failed-tasks-table")
    assert "collectives.broken.r0" in failed and "notebook.ipynb" in failed
    assert 'id="claims-ledger"' in html
    assert "failed <strong>1</strong>" in html


def _table(html: str, table_id: str) -> str:
    match = re.search(rf'<table id="{table_id}">.*?</table>', html, re.S)
    assert match, f"no table {table_id}"
    return match.group(0)


@dataclass
class FakeRow:
    claim_id: str
    section: str
    wording: str
    claimed: object
    measured: object
    predicted: object
    verdict: str
    detail: str
    experiment: str


def test_claims_ledger_per_source(agg, monkeypatch):
    """A fake claims module: every claim shown, measured per source, verdicts styled."""
    seen = []

    def evaluate_claims(records: pd.DataFrame, summaries=None):
        seen.append(set(records["run_id"]))
        measured = len(records[records["experiment"] == "collectives"])
        return [
            FakeRow("C16", "4.2", "busbw <i>near</i> link rate", 24.0, float(measured), 22.5,
                    "confirmed", "", "collectives"),
            FakeRow("C3", "2.1", "hierarchical allreduce is faster", None, None, None,
                    "not measured yet", "needs two nodes", ""),
        ]

    fake = types.ModuleType("hpcbench.report.ledger")
    fake.evaluate_claims = evaluate_claims
    fake.VERDICTS = ("confirmed", "refuted", "not measured yet")
    monkeypatch.setitem(sys.modules, "hpcbench.report.ledger", fake)
    html = render(agg)
    assert seen == [{"cluster-a"}, {"cluster-b"}]  # one source at a time
    ledger = _table(html, "claims-ledger")
    assert ledger.count("<tr") == 1 + 2
    assert "measured here (cluster-a)" in ledger and "measured here (cluster-b)" in ledger
    assert "predicted at the guide&#39;s scale" in ledger
    assert "busbw &lt;i&gt;near&lt;/i&gt; link rate" in ledger
    assert 'class="part verdict verdict-confirmed tone-good"' in ledger
    assert 'class="part verdict verdict-not-measured-yet tone-open"' in ledger
    a_rows = len(agg.records_by_source["cluster-a"].query("experiment == 'collectives'"))
    assert f'<td class="measured">{a_rows}</td>' in ledger


def test_experiments_bring_their_presenters():
    from hpcbench.experiments import EXPERIMENTS

    assert all(EXPERIMENTS.get(name).present is not None for name in ("collectives", "environment"))
    assert format_bytes(4 << 20) == "4 MiB" and format_bytes(1020) == "1,020 B"


def test_local_cluster_path(tmp_path):
    """Without ``scheduler=`` the report starts and stops its own cluster."""
    run = make_run(tmp_path, "solo")
    index = build_report([run], tmp_path / "out", title="solo <run>")
    html = index.read_text()
    assert index == tmp_path / "out" / "index.html"
    assert "<title>solo &lt;run&gt;</title>" in html
    assert "cluster-a" not in html and "solo · base" in html


def test_same_run_id_twice_gets_unique_labels(tmp_path, client):
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    for d in ("x", "y"):
        (tmp_path / d / "run.json").write_text(json.dumps({"run_id": "same"}))
    result = aggregate([tmp_path / "x", tmp_path / "y"], client, progress=lambda _: None)
    assert result.labels == ["same", "same (2)"]
    assert result.stats.empty and result.unreadable == []


# -- linked files ----------------------------------------------------------------

@pytest.fixture(scope="module")
def linked_report(cluster, tmp_path_factory):
    """A report whose failed tasks link notebooks (one missing) and whose comm_modes links traces;
    the per-file cap lowered so that rank 1's 8 KiB trace stays out."""
    root = tmp_path_factory.mktemp("linked")
    run = make_run(root, "linked", broken=True)
    files = add_linked_files(run, big_trace_bytes=8192)
    warnings: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(report_folder, "MAX_LINKED_FILE_BYTES", 4096)
        index = build_report([run], root / "report", scheduler=cluster.scheduler_address, progress=lambda _: None,
                             warn=warnings.append, traces=True)
    return index, files, warnings


def test_linked_notebooks_are_copied_and_linked_relatively(linked_report):
    index, files, _ = linked_report
    html = index.read_text()
    folder = index.parent
    assert (folder / LINKED_NOTEBOOK_COPY).read_bytes() == files["notebook"].read_bytes()
    assert LINKED_NOTEBOOK_COPY in linked_hrefs(html)
    # Every relative link resolves inside the folder; no temporary copy (a hidden file) is left.
    assert all((folder / h).is_file() for h in linked_hrefs(html))
    assert sorted(p.relative_to(folder).as_posix() for p in (folder / FILES_SUBDIR).rglob("*") if p.is_file()) == \
        sorted(linked_hrefs(html))
    failed = _table(html, "failed-tasks-table")
    assert f'href="{LINKED_NOTEBOOK_COPY}"' in failed and "the &lt;linked&gt; notebook" not in html
    # The broken task's status names a notebook that was never written: "missing", no link.
    broken_row = re.search(r"<tr[^>]*>(?:(?!</tr>).)*collectives\.broken\.r0.*?</tr>", failed, re.S).group(0)
    assert '<span class="part detail warn">missing</span>' in broken_row and "href" not in broken_row


def test_linked_traces_are_copied_unless_over_the_cap(linked_report):
    index, files, warnings = linked_report
    html = index.read_text()
    folder = index.parent
    trace0 = f"{FILES_SUBDIR}/linked/{COMM_TASK}/0.json"
    assert (folder / trace0).read_bytes() == files["trace0"].read_bytes()
    traces = _table(html, "comm-modes-traces")
    assert f'href="{trace0}"' in traces
    # Rank 1's trace is over the (lowered) cap: not copied, named without a link (a file: link would name
    # the machine in a published page), and marked.
    assert not (folder / FILES_SUBDIR / "linked" / COMM_TASK / "1.json").exists()
    assert str(files["trace1"].parent) not in html and 'href="file:' not in html
    assert f"not copied: 8.0 KiB &gt; 4 KiB cap per file; {NOT_IN_REPORT}" in traces
    assert [w for w in warnings if "not copied" in w] == [
        "1 linked file(s) not copied into the report, the page names them without a link: "
        f"{files['trace1'].resolve()} (not copied: 8.0 KiB > 4 KiB cap per file)"]


def test_linked_files_names_caps_and_refusals(tmp_path):
    """Without a cluster: unique safe names, one copy per file, the total cap, files outside the runs."""
    run, out = tmp_path / "run", tmp_path / "report"
    (run / "a").mkdir(parents=True)
    (run / "b").mkdir()
    out.mkdir()
    (run / "a" / "x.json").write_text("a" * 10)
    (run / "b" / "x.json").write_text("b" * 10)
    (run / "c.json").write_text("c" * 10)
    secret = tmp_path / "id_rsa"
    secret.write_text("private")
    (run / "escape.txt").symlink_to(secret)  # inside the run, pointing out of it
    files = LinkedFiles(out, [run], max_total_bytes=25)
    table = Table(columns=["file"], rows=[
        [file_link(run / "a" / "x.json", folder=("src 1", "../t"))],
        [file_link(run / "b" / "x.json", "second", folder=("src 1", "../t"))],  # same name, same folder
        [file_link(run / "b" / ".." / "a" / "x.json")],  # the first file again: no second copy
        [file_link(run / "c.json")],  # 30 bytes in all: over the total cap
        [file_link(run / "escape.txt")],
        [Cell(parts=(Cell("trace"), file_link(tmp_path / "gone.json")))],
    ])
    files.resolve_tables([table])
    cells = [row[0] for row in table.rows]
    assert [c.href for c in cells[:3]] == ["files/src_1/_t/x.json", "files/src_1/_t/x-2.json", "files/src_1/_t/x.json"]
    assert cells[1].text == "second"
    assert (out / "files/src_1/_t/x-2.json").read_text() == "b" * 10 and files.copied_bytes == 20
    link, note = cells[3].parts
    assert link.href == (run / "c.json").as_uri() and note.text.startswith("not copied: 10 B more would pass")
    link, note = cells[4].parts
    assert link.href == secret.as_uri() and "outside the report's run directories" in note.text
    assert not any(p.name in ("id_rsa", "escape.txt") for p in out.rglob("*"))
    # A link inside parts: its two lines are spliced in, one level, as the page shows them.
    assert [(p.text, p.href) for p in cells[5].parts] == [("trace", None), ("gone.json", None), ("missing", None)]
    assert all(c.file is None for c in cells)
    # A page rendered without a report folder keeps absolute links, and says so.
    alone = LinkedFiles(None, [run]).resolve(file_link(run / "c.json"))
    assert alone.parts[0].href == (run / "c.json").as_uri()
    assert "rendered without a report folder" in alone.parts[1].text
    assert safe_file_name("../.ssh/id rsa") == "_.ssh_id_rsa" and safe_file_name("..") == "file"
    assert report_folder.MAX_LINKED_FILE_BYTES == 50 << 20
    assert report_folder.MAX_LINKED_FILES_TOTAL_BYTES >= report_folder.MAX_LINKED_FILE_BYTES


# -- Chromium --------------------------------------------------------------------

@pytest.mark.integration
def test_report_renders_in_headless_chromium(report, chromium, tmp_path):
    page = render_in_chromium(chromium, report, tmp_path)
    assert page.pixel_std > 0.02  # not a blank page
    assert page.js_errors == []
    dom = page.dom
    ledger = _table(dom, "claims-ledger")
    body = re.search(r"<tbody>(.*?)</tbody>", ledger, re.S).group(1)
    assert body.count("<tr") == EXPECTED_CLAIMS


# -- the gate before scaling out (C12), per task ---------------------------------------------------

STEPPING = "trainer"  # an experiment without a presenter: the gate table rides on the generic section


def add_stepping_tasks(run: Path) -> None:
    """Three tasks that record steps: a steady one (the gate passes), a jumpy one with slow reads (it fails),
    and one whose single step, without a no-op twin, measures nothing (not measured)."""
    def task(name: str, times: list[float], reads: list[float], twins: bool = True) -> None:
        task_dir = run / "tasks" / f"{STEPPING}.{name}.r0"
        _write_status(task_dir, experiment=STEPPING, variant=name)
        ctx = RecordContext(run_id=run.name, suite="smoke", experiment=STEPPING, variant=name, task_id=task_dir.name)
        for rank in (0, 1):
            with RecordWriter(task_dir / "records" / f"rank{rank}.parquet",
                              ctx.for_rank(node=f"n{rank + 1}", rank=rank, world_size=2)) as w:
                for step, t in enumerate(times):
                    w.add("step_time", t, "s", step=step, labels={"model": "m", "comm": "mode"})
                    if twins:
                        w.add("step_time", 0.9 * t, "s", step=step, labels={"model": "m", "comm": "noop"})
                for step, t in enumerate(reads):
                    w.add("read_time", t, "s", step=step, labels={"bytes": 4096})

    task("steady", [0.100, 0.101, 0.099, 0.100, 0.102, 0.098], [0.01] * 6)
    task("jumpy", [0.1, 0.2, 0.1, 0.05, 0.1, 0.2], [0.01] * 5 + [0.4])
    task("single", [0.1], [], twins=False)


@pytest.fixture(scope="module")
def gate_report(cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("gated")
    run = make_run(root, "gated")
    add_stepping_tasks(run)
    add_linked_files(run)  # comm_modes: its own presenter, steps without no-op twins
    index = build_report([run], root / "report", scheduler=cluster.scheduler_address, progress=lambda _: None,
                         warn=lambda _: None)
    return index


def test_tasks_without_steps_have_no_gate(agg):
    assert agg.gates.empty and agg.experiment_gates("collectives").empty


def test_the_gate_is_shown_per_task_with_its_reasons(gate_report):
    html = gate_report.read_text()
    table = _table(html, f"gate-{STEPPING}")
    head = re.search(r"<thead>(.*?)</thead>", table, re.S).group(1)
    for column in ("step_time_cv &lt; 0.05", "comm_share &lt; 0.3", "read_p99 &lt; 0.1 s", "gate"):
        assert column in head
    rows = {re.search(r"trainer\.(\w+)\.r0", r).group(1): r
            for r in re.findall(r"<tr[^>]*>(?:(?!</tr>).)*?trainer\.\w+\.r0.*?</tr>", table, re.S)}
    assert set(rows) == {"steady", "jumpy", "single"}
    assert "passes" in rows["steady"] and 'class="fail"' not in rows["steady"] and "0.1 ✓" in rows["steady"]
    assert re.search(r'<tr class="fail">', rows["jumpy"]) and "fails: step_time_cv, read_p99" in rows["jumpy"]
    assert "0.4 ✗" in rows["jumpy"] or "0.389 ✗" in rows["jumpy"]  # the P99 of six reads, one slow
    assert "not measured" in rows["single"] and "fewer than 2 steps" in rows["single"]
    assert "no read_time rows" in rows["single"]
    # a presenter of its own keeps its tables and gets the gate after them
    comm = re.search(r'<section id="exp-comm-modes">.*?</section>', html, re.S).group(0)
    gate = _table(comm, "gate-comm-modes")
    assert "fails: step_time_cv" in gate and "no comm_time rows" in gate


@pytest.mark.integration
def test_gate_table_renders_in_headless_chromium(gate_report, chromium, tmp_path):
    page = render_in_chromium(chromium, gate_report, tmp_path)
    assert page.js_errors == []
    table = _table(page.dom, f"gate-{STEPPING}")
    assert table.count("<tr") == 1 + 3 and "fails: step_time_cv, read_p99" in table
