"""Reports that survive a move: paths in records relative to the run, linked files copied once, traces on request.

A run directory is built with ``RecordWriter`` (``test_report.make_run`` plus two failed tasks
whose notebooks are byte for byte the same, and a comm_modes task whose rank 0 stores its
trace path as :func:`hpcbench.diag.records.record_trace` does now, relative to the run, and
rank 1 as it did before, absolute), then moved with ``shutil.move`` before any report is
built. Every link of the report must then resolve inside the report folder: no ``file:`` URL,
no absolute path, nothing that names where the run was.
"""

from __future__ import annotations

import contextlib
import html as html_lib
import io
import json
import re
import shutil
import subprocess
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

import pytest

from hpcbench.cli import main
from hpcbench.core.results import (PATH_UNIT, RecordContext, RecordWriter, read_records, resolve_stored_path,
                                   run_dir_of, stored_path)
from hpcbench.present.kit import Table, file_link
from hpcbench.report import build_report
from hpcbench.report.report_folder import (FILES_SUBDIR, TRACES_LEFT_OUT, LinkedFiles, report_files,
                                           report_size)

from conftest import CHROMIUM_FLAGS
from test_report import COMM_TASK, _table, _write_status, make_run

RUN = "portable"
#: The two failed tasks; their notebooks have the same bytes, so the report keeps one copy.
FAILED = ("collectives.fail1.r0", "collectives.fail2.r0")
NOTEBOOK_BYTES = b'{"cells": [], "note": "the same failed notebook"}'
#: Where that one copy goes: under the first task that links it.
NOTEBOOK_COPY = f"{FILES_SUBDIR}/{RUN}/{FAILED[0]}/notebook.ipynb"
TRACE_COPIES = [f"{FILES_SUBDIR}/{RUN}/{COMM_TASK}/{rank}.json" for rank in (0, 1)]


def add_failed_and_traced_tasks(run: Path) -> dict[str, Path]:
    """Two failed tasks with identical notebooks; a comm_modes task with one trace per rank.

    Returns:
        ``trace0``, ``trace1``: the trace files as the run holds them.
    """
    for task in FAILED:
        _write_status(run / "tasks" / task, state="failed", error="boom", variant=task.split(".")[1])
        (run / "tasks" / task / "notebook.ipynb").write_bytes(NOTEBOOK_BYTES)
    task_dir = run / "tasks" / COMM_TASK
    _write_status(task_dir, experiment="comm_modes", variant="default")
    ctx = RecordContext(run_id=RUN, suite="smoke", experiment="comm_modes", task_id=COMM_TASK)
    labels = {"model": "mlp", "mode": "ddp", "bucket_cap_mb": 25}
    traces = {}
    for rank in (0, 1):
        trace = task_dir / "trace" / f"{rank}.json"
        trace.parent.mkdir(parents=True, exist_ok=True)
        trace.write_text(json.dumps({"traceEvents": [], "rank": rank}))
        traces[f"trace{rank}"] = trace
        records = task_dir / "records" / f"rank{rank}.parquet"
        with RecordWriter(records, ctx.for_rank(node="n1", rank=rank, world_size=2)) as w:
            for step, seconds in enumerate((0.1, 0.2, 0.3)):
                w.add("step_time", seconds, "s", step=step, labels={**labels, "comm": "mode"})
            if rank == 0:  # as hpcbench.diag.records.record_trace writes it
                w.add("trace_file", None, PATH_UNIT, labels=labels, text=stored_path(trace, records))
            else:  # as it was written before paths were stored relative
                w.add("trace_file", None, "", labels=labels, text=str(trace.resolve()))
    return traces


@pytest.fixture(scope="module")
def moved(tmp_path_factory) -> tuple[Path, Path]:
    """The run built under ``before/`` and moved to ``after/`` (same name) before any report."""
    root = tmp_path_factory.mktemp("portable")
    run = make_run(root / "before", RUN)
    add_failed_and_traced_tasks(run)
    after = root / "after" / "somewhere" / RUN
    after.parent.mkdir(parents=True)
    shutil.move(run, after)
    assert not run.exists()
    return run, after


@pytest.fixture(scope="module")
def reports(moved, cluster, tmp_path_factory) -> dict:
    """The report of the moved run twice: through the command line (no traces), and with traces."""
    _, run = moved
    out = tmp_path_factory.mktemp("reports")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["report", str(run), "--out", str(out / "default"), "--scheduler",
                     cluster.scheduler_address]) == 0
    traces = build_report([run], out / "traces", scheduler=cluster.scheduler_address, progress=lambda _: None,
                          warn=lambda _: None, traces=True)
    return {"default": out / "default" / "index.html", "traces": traces, "stdout": stdout.getvalue()}


class _Links(HTMLParser):
    """Every ``href`` and ``src`` of a page, unescaped as a browser reads them."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("href", "src") and value is not None]


def page_links(html: str) -> list[str]:
    parser = _Links()
    parser.feed(html)
    return parser.urls


def assert_links_stay_inside(index: Path) -> list[str]:
    """Every link of the page is an anchor, inline data, or a relative path to a file of the report folder.

    Returns:
        The links to files, unquoted, relative to the folder.
    """
    folder = index.parent.resolve()
    files = []
    for url in page_links(index.read_text(encoding="utf-8")):
        if url.startswith("#") or url.startswith("data:"):
            continue
        parts = urllib.parse.urlsplit(url)
        assert not parts.scheme and not parts.netloc, f"{index}: links outside the report: {url}"
        path = urllib.parse.unquote(parts.path)
        assert not path.startswith("/"), f"{index}: absolute link {url}"
        target = (folder / path).resolve()
        assert target.is_relative_to(folder) and target.is_file(), f"{index}: {url} is not a file of the report"
        files.append(path)
    return files


# -- stored paths ------------------------------------------------------------------

def test_paths_are_stored_relative_to_the_run_and_read_back_after_a_move(tmp_path):
    run = tmp_path / "R"
    records = run / "tasks" / "t.default.r0" / "records" / "rank0.parquet"
    trace = run / "tasks" / "t.default.r0" / "trace" / "0.json"
    assert run_dir_of(records) == run
    assert stored_path(trace, records) == "tasks/t.default.r0/trace/0.json"
    # A task run by hand (OUT/records/...) is its own run directory.
    assert stored_path(tmp_path / "out" / "trace" / "1.json", tmp_path / "out" / "records" / "r.parquet") == \
        "trace/1.json"
    # A file outside the run keeps its absolute path: no relative one would survive a move either.
    assert stored_path(tmp_path / "scratch" / "x.json", records) == str(tmp_path / "scratch" / "x.json")

    moved = tmp_path / "elsewhere" / "R"
    (moved / "tasks" / "t.default.r0" / "trace").mkdir(parents=True)
    (moved / "tasks" / "t.default.r0" / "trace" / "0.json").write_text("{}")
    assert resolve_stored_path("tasks/t.default.r0/trace/0.json", moved) == moved / "tasks/t.default.r0/trace/0.json"
    # An absolute path of an older record: found below the run directory's name, where the run is now.
    assert resolve_stored_path(trace, moved) == moved / "tasks/t.default.r0/trace/0.json"
    # A run directory renamed since: the old absolute path is all there is (the report says "missing").
    assert resolve_stored_path(trace, tmp_path / "renamed") == trace


def test_the_moved_run_holds_both_formats(moved):
    _, run = moved
    rows = [read_records(p) for p in sorted((run / "tasks" / COMM_TASK / "records").glob("*.parquet"))]
    texts = [r[r["metric"] == "trace_file"][["unit", "text"]].iloc[0].tolist() for r in rows]
    assert texts[0] == [PATH_UNIT, f"tasks/{COMM_TASK}/trace/0.json"]
    assert texts[1][0] == "" and Path(texts[1][1]).is_absolute() and not Path(texts[1][1]).exists()


# -- the report of a moved run -----------------------------------------------------

@pytest.mark.parametrize("which", ["default", "traces"])
def test_every_link_resolves_inside_the_report(reports, moved, which):
    index = reports[which]
    before, _ = moved
    linked = assert_links_stay_inside(index)
    html = index.read_text(encoding="utf-8")
    assert "file:" not in html and str(before) not in html
    assert NOTEBOOK_COPY in linked
    # Everything the report copied is linked: no orphan (and no temporary) file.
    copied = sorted(p.relative_to(index.parent).as_posix() for p in (index.parent / FILES_SUBDIR).rglob("*")
                    if p.is_file())
    assert copied == sorted(set(linked))


def test_identical_files_are_stored_once(reports, moved):
    index = reports["default"]
    failed = _table(index.read_text(encoding="utf-8"), "failed-tasks-table")
    rows = {task: re.search(rf"<tr[^>]*>(?:(?!</tr>).)*{re.escape(task)}.*?</tr>", failed, re.S).group(0)
            for task in FAILED}
    assert all(f'href="{NOTEBOOK_COPY}"' in row for row in rows.values())  # both link the one copy
    notebooks = [p for p in (index.parent / FILES_SUBDIR).rglob("*.ipynb")]
    assert [p.relative_to(index.parent).as_posix() for p in notebooks] == [NOTEBOOK_COPY]
    assert notebooks[0].read_bytes() == NOTEBOOK_BYTES


def test_traces_only_with_the_flag(reports, moved):
    _, run = moved
    default, traced = reports["default"], reports["traces"]
    left_out = _table(default.read_text(encoding="utf-8"), "comm-modes-traces")
    assert "href" not in left_out and left_out.count(html_lib.escape(TRACES_LEFT_OUT)) == 2
    assert not any((default.parent / t).exists() for t in TRACE_COPIES)
    # With --traces both ranks' traces are copied: the relative path and the old absolute one,
    # found where the run lies now.
    table = _table(traced.read_text(encoding="utf-8"), "comm-modes-traces")
    for rank, copy in enumerate(TRACE_COPIES):
        assert f'href="{copy}"' in table
        original = run / "tasks" / COMM_TASK / "trace" / f"{rank}.json"
        assert (traced.parent / copy).read_bytes() == original.read_bytes()
    assert TRACES_LEFT_OUT not in table


def test_the_command_line_prints_the_report_size(reports):
    index = reports["default"]
    size, count = report_size(index.parent)
    # index.html, report.json and the one notebook.
    assert count == 3 == len(report_files(index.parent))
    line = reports["stdout"].splitlines()[-1]  # the last line, after the progress lines
    assert re.fullmatch(rf"report: {re.escape(str(index.resolve()))} \((\d+ B|\d+\.\d (KiB|MiB)), 3 files\)", line)
    assert size == sum(p.stat().st_size for p in index.parent.rglob("*") if p.is_file())


def test_linked_files_dedup_and_trace_flag_without_a_cluster(tmp_path):
    run, out = tmp_path / "run", tmp_path / "report"
    for task in ("a", "b"):
        (run / task).mkdir(parents=True)
        (run / task / "x.json").write_text("same bytes")
    out.mkdir()
    files = LinkedFiles(out, {"src": run})
    trace = file_link("a/x.json", folder=("src", "a"), optional=True)
    table = Table(columns=["file"], rows=[[file_link("a/x.json", folder=("src", "a"))],
                                          [file_link(run / "b" / "x.json", folder=("src", "b"))], [trace]])
    files.resolve_tables([table])
    cells = [row[0] for row in table.rows]
    assert [c.href for c in cells[:2]] == ["files/src/a/x.json"] * 2
    assert files.copied_bytes == len("same bytes") and [p.name for p in out.rglob("*") if p.is_file()] == ["x.json"]
    assert cells[2].href is None and cells[2].parts[1].text == TRACES_LEFT_OUT
    (tmp_path / "traced").mkdir()
    assert LinkedFiles(tmp_path / "traced", {"src": run}, traces=True).resolve(trace).href == "files/src/a/x.json"


# -- Chromium --------------------------------------------------------------------

PROBE = """<!DOCTYPE html><html><body><pre id="results"></pre><script>
var results = [];
%s.forEach(function (href) {
  var xhr = new XMLHttpRequest();
  try {
    xhr.open("GET", href, false);
    xhr.send();
    results.push([href, xhr.responseText.length]);
  } catch (e) {
    results.push([href, -1]);
  }
});
document.getElementById("results").textContent = JSON.stringify(results);
</script></body></html>
"""


@pytest.mark.integration
def test_every_linked_file_loads_in_headless_chromium(reports, moved, chromium, tmp_path):
    """The report, copied to another place with the run directory gone, in Chromium: the links of the
    page as Chromium parsed it, each fetched relative to the page as a click would, all load."""
    folder = tmp_path / "copied"
    shutil.copytree(reports["traces"].parent, folder)

    def dump_dom(page: Path, profile: str) -> str:
        done = subprocess.run([chromium, *CHROMIUM_FLAGS, "--allow-file-access-from-files",
                               f"--user-data-dir={tmp_path / profile}", "--dump-dom", page.as_uri()],
                              capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    links = [u for u in page_links(dump_dom(folder / "index.html", "page"))
             if not u.startswith("#") and not u.startswith("data:")]
    assert set(links) >= {NOTEBOOK_COPY, *TRACE_COPIES}
    # A link to a file that is not there must fail, or the probe proves nothing.
    missing = f"{FILES_SUBDIR}/no-such-file.json"
    probe = folder / "probe.html"
    probe.write_text(PROBE % json.dumps([*links, missing]))
    dom = dump_dom(probe, "probe")
    results = dict(json.loads(html_lib.unescape(re.search(r'<pre id="results">(.*?)</pre>', dom, re.S).group(1))))
    assert results.pop(missing) == -1
    assert results and all(length > 0 for length in results.values()), results
