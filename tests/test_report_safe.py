"""Reports safe to publish: no path, home or host name of the machine in anything a report writes, and
unreadable inputs named, refused by default, recorded and refused again by publish.

The report is built by the command line from real runs: the session's toy runs of ``io_formats``
(whose resilience epoch records ``repaired <staged copy> from <original>``, two absolute paths) and
``environment`` (which records the interpreter's full path), beside a run directory whose failed
task's notebook holds a traceback naming the run, $HOME, the interpreter and the host. Every file
the report wrote is then searched, the inline SVG images decoded.
"""

from __future__ import annotations

import base64
import json
import os
import platform
import re
import socket
import sys
import tempfile
from pathlib import Path

import pytest

from hpcbench.cli import main
from hpcbench.core.results import find_record_files, read_records
from hpcbench.report.publish import load_publications
from hpcbench.report.redact import Redactor
from hpcbench.report.report_folder import FILES_SUBDIR, REPORT_JSON

from test_report import _table, _write_status, make_run

FAILED_TASK = "collectives.failed.r0"


def hostnames() -> set[str]:
    names = {socket.gethostname(), socket.getfqdn()}
    return {n for n in names | {n.split(".")[0] for n in names} if n and n != "localhost"}


def add_failed_task(run: Path) -> Path:
    """A failed task whose notebook's traceback names the run directory, $HOME, the interpreter and the host."""
    task_dir = run / "tasks" / FAILED_TASK
    _write_status(task_dir, state="failed", variant="failed",
                  error=f"RuntimeError: cannot open {task_dir / 'data' / 'x.h5'} on {socket.gethostname()}")
    trace = (f"Traceback (most recent call last):\n  File \"{Path.home() / 'lib' / 'train.py'}\", line 3\n"
             f"  {sys.executable} -m hpcbench run on {socket.gethostname()}\n"
             f"RuntimeError: cannot open {task_dir / 'data' / 'x.h5'}\n")
    notebook = {"cells": [{"cell_type": "code", "source": "run()", "metadata": {}, "execution_count": 1,
                           "outputs": [{"output_type": "error", "ename": "RuntimeError", "evalue": "x",
                                        "traceback": trace.splitlines()}]}],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (task_dir / "notebook.ipynb").write_text(json.dumps(notebook))
    return task_dir


def report_texts(folder: Path) -> dict[str, str]:
    """Every file of the report as text, the page's inline SVG images decoded, its PNG images (binary) left out."""
    texts = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        text = path.read_bytes().decode("utf-8", errors="replace")
        text = re.sub(r"data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)",
                      lambda m: base64.b64decode(m.group(1)).decode("utf-8", errors="replace"), text)
        texts[path.relative_to(folder).as_posix()] = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", text)
    return texts


@pytest.fixture(scope="module")
def safe_report(toy_runs, cluster, tmp_path_factory) -> dict:
    io, env = toy_runs.get("io_formats"), toy_runs.get("environment")
    for run in (io, env):
        assert run.proc.returncode == 0, run.proc.stderr[-2000:]
    failed = make_run(tmp_path_factory.mktemp("failing"), "failing")
    add_failed_task(failed)
    out = tmp_path_factory.mktemp("safe") / "report"
    code = main(["report", str(io.run_dir), str(env.run_dir), str(failed), "--out", str(out),
                 "--scheduler", cluster.scheduler_address])
    assert code == 0
    return {"out": out, "io": io.run_dir, "env": env.run_dir, "failed": failed}


def test_no_path_home_or_host_of_the_machine_in_the_report(safe_report, tmp_path_factory):
    out = safe_report["out"]
    texts = report_texts(out)
    notebook = f"{FILES_SUBDIR}/failing/{FAILED_TASK}/notebook.ipynb"
    assert {"index.html", REPORT_JSON, notebook} <= set(texts)
    base = tmp_path_factory.getbasetemp()
    forbidden = {str(base), os.path.realpath(base), str(Path.home()), sys.executable, tempfile.gettempdir() + "/"}
    for name, text in texts.items():
        found = [f for f in forbidden if f in text]
        assert not found, f"{name} names {found}"
        hosts = [h for h in hostnames() if re.search(rf"(?<![\w.-]){re.escape(h)}(?![\w-])", text)]
        assert not hosts, f"{name} names the host {hosts}"
    html = texts["index.html"]
    # What the paths became: the interpreter as its version and environment, data paths relative to the run
    # or under <tmp>, the failed notebook's traceback under <home>.
    assert f"Python {platform.python_version()} ({Path(sys.prefix).name})" in html
    assert re.search(r"repaired &lt;tmp&gt;/hpcbench-staged-[^ ]+/shard-\d+\.h5 from tasks/io_formats\.[^ ]+/shard-",
                     html)
    assert "&lt;home&gt;/lib/train.py" in texts[notebook] or "<home>/lib/train.py" in texts[notebook]
    assert f"cannot open tasks/{FAILED_TASK}/data/x.h5" in texts[notebook]
    assert json.loads(texts[REPORT_JSON])["schema_version"] == 2


def test_the_run_directories_are_left_as_they_were(safe_report):
    """The report redacts what it writes, never its inputs."""
    records = [read_records(p) for p in find_record_files(safe_report["io"] / "tasks")]
    repairs = [t for r in records for t in r.loc[r["metric"] == "repair", "text"]]
    assert repairs and all(str(safe_report["io"]) in t for t in repairs)
    notebook = safe_report["failed"] / "tasks" / FAILED_TASK / "notebook.ipynb"
    assert str(Path.home()) in notebook.read_text()


def test_the_redactor_rules():
    run = "/scratch/u/runs/r1"
    redactor = Redactor([run], {"<tmp>": "/tmp", "<home>": "/home/u"}, ["node7", "node7.cluster.org"])
    assert redactor.text(f"{run}/tasks/t/data: 3 files; {run}") == "tasks/t/data: 3 files; r1"
    # A path recorded before the run moved: relative to the run all the same.
    assert redactor.text("/old/place/r1/tasks/t/trace/0.json") == "tasks/t/trace/0.json"
    assert redactor.text("repaired /tmp/staged-1/s.h5 under /home/u/.cache, not /tmpfoo or a/tmp/b") == \
        "repaired <tmp>/staged-1/s.h5 under <home>/.cache, not /tmpfoo or a/tmp/b"
    assert redactor.text("on node7 and node7.cluster.org; node70 and xnode7 stay") == \
        "on <host> and <host>; node70 and xnode7 stay"
    assert redactor.text("/opt/envs/train/bin/python3.12 -m x") == "Python 3.12 (train) -m x"
    assert redactor.html("<td>/tmp/a &amp; b</td>") == "<td>&lt;tmp&gt;/a &amp; b</td>"
    svg = base64.b64encode(b"<svg><text>/home/u/plot</text></svg>").decode()
    png = "data:image/png;base64,iVBORw0KGgo/tmp/x"  # binary: never touched
    redacted = redactor.html(f'<img src="data:image/svg+xml;base64,{svg}"><img src="{png}">')
    svg_after = base64.b64decode(re.search(r"base64,([^\"]+)", redacted).group(1))
    assert svg_after == b"<svg><text>&lt;home&gt;/plot</text></svg>"
    assert png in redacted
    assert redactor.data({"a": ["/tmp/x", 1, None]}) == {"a": ["<tmp>/x", 1, None]}
    same = b'{"cells": [], "x": "nothing to hide"}'
    assert redactor.file_bytes(same, "n.ipynb") is same  # unchanged bytes stay byte for byte


# -- unreadable inputs ---------------------------------------------------------------------

@pytest.fixture
def bad_run(tmp_path, monkeypatch) -> Path:
    """A run directory (relative to the current directory) with an empty and a truncated records file."""
    monkeypatch.chdir(tmp_path)
    run = make_run(tmp_path / "runs", "bad")
    records = run / "tasks" / "collectives.base.r0" / "records"
    (records / "empty.parquet").write_bytes(b"")
    whole = (records / "rank0.parquet").read_bytes()
    (records / "truncated.parquet").write_bytes(whole[: len(whole) // 2])
    return Path("runs") / "bad"


BAD = ("tasks/collectives.base.r0/records/empty.parquet", "tasks/collectives.base.r0/records/truncated.parquet")


def test_unreadable_inputs_are_named_and_stop_the_report_unless_allowed(bad_run, cluster, capsys):
    out = Path("reports") / "bad"
    args = ["report", str(bad_run), "--out", str(out), "--scheduler", cluster.scheduler_address]
    assert main(args) == 1
    err = capsys.readouterr().err
    for path in BAD:  # each named on the terminal, by its path relative to the current directory
        assert re.search(rf"^hpcbench: warning: unreadable input: {re.escape(str(bad_run / path))} \(.+\)$", err,
                         re.M), err
    assert re.search(r"^hpcbench: error: 2 input\(s\) unreadable .*--allow-unreadable$", err, re.M)
    assert not out.exists()
    # Allowed: written (exit 0), still named, recorded in report.json and listed on the page.
    assert main([*args, "--allow-unreadable"]) == 0
    err = capsys.readouterr().err
    assert all(f"unreadable input: {bad_run / path} (" in err for path in BAD)
    manifest = json.loads((out / REPORT_JSON).read_text())
    assert sorted((u["run"], u["path"]) for u in manifest["unreadable"]) == [("bad", p) for p in BAD]
    assert all(u["reason"] for u in manifest["unreadable"])
    table = _table((out / "index.html").read_text(), "unreadable-inputs")
    assert all(p in table for p in BAD) and str(Path.cwd()) not in table


def test_publish_refuses_a_report_with_unreadable_inputs_unless_allowed(bad_run, cluster, capsys):
    out, site = Path("reports") / "bad", Path("site")
    assert main(["report", str(bad_run), "--out", str(out), "--scheduler", cluster.scheduler_address,
                 "--allow-unreadable"]) == 0
    capsys.readouterr()
    assert main(["publish", str(out), "--to", str(site)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hpcbench: error: {out}: 2 input(s) of this report were unreadable")
    assert "--allow-unreadable" in err[0] and not site.exists()
    assert main(["publish", str(out), "--to", str(site), "--allow-unreadable"]) == 0
    [publication] = load_publications(site)
    assert publication.unreadable == 2
    assert "2 input(s) unreadable" in (site / "index.html").read_text()
