"""The demo suite end to end, as `make demo` runs it: CLI suite -> CLI report -> headless Chromium."""

import json
import re
import subprocess
import sys

import pytest

from conftest import render_in_chromium
from hpcbench.run.rundir import read_statuses
from hpcbench.run.suite import load_suite


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    run_dir, report_dir = root / "run", root / "report"
    # --jobs 2, as `make demo` runs it: the demo is a functional run (oversubscribed), not a measurement.
    suite = subprocess.run([sys.executable, "-m", "hpcbench", "suite", "demo", "--run-dir", str(run_dir),
                            "--jobs", "2"],
                           capture_output=True, text=True, timeout=900, cwd=root)
    report = subprocess.run([sys.executable, "-m", "hpcbench", "report", str(run_dir), "--out", str(report_dir)],
                            capture_output=True, text=True, timeout=300, cwd=root)
    return run_dir, report_dir, suite, report


def test_every_demo_task_is_done(demo_run):
    run_dir, _, suite, _ = demo_run
    assert suite.returncode == 0, suite.stdout + suite.stderr
    statuses = read_statuses(run_dir)
    assert [s.task_id for s in statuses] == sorted(t.task_id for t in load_suite("demo").tasks)
    assert all(s.state == "done" for s in statuses)
    for s in statuses:
        assert (run_dir / "tasks" / s.task_id / "notebook.ipynb").is_file()
        assert list((run_dir / "tasks" / s.task_id / "records").glob("*.parquet"))


def test_demo_report(demo_run, chromium, tmp_path):
    _, report_dir, _, report = demo_run
    assert report.returncode == 0, report.stderr
    index = report_dir / "index.html"
    assert f"report: {index.resolve()}" in report.stdout
    html = index.read_text()
    assert "Collectives" in html and "Environment" in html
    assert "two_nodes_2x2" in html and "one_node_2ranks" in html
    # C16 is judged from this run's data ("context"), the rest honestly "not measured yet"
    ledger = re.search(r'<table[^>]*id="claims-ledger".*?</table>', html, re.S).group(0)
    assert ledger.count("not measured yet") >= 10
    assert re.search(r"C16.*?context", ledger, re.S)
    page = render_in_chromium(chromium, index, tmp_path)
    assert page.pixel_std > 0.02 and page.js_errors == []
    assert 'id="claims-ledger"' in page.dom
