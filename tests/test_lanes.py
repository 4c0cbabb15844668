"""make test's two lanes (tests/lanes.py): which tests go to the cluster lane, the lanes' command lines, the
slowest tests read from their JUnit files."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO
from lanes import lane_args, lane_command, main, slowest


#: A plugin for one collection that prints every test's markers as the session's hooks left them (conftest's
#: ``cluster`` and ``cluster_lane`` included), so that one collection tells what ``-m EXPR`` would select for each
#: expression below (a collection per expression took ~20 s of make test).
MARKS_PLUGIN = """
def pytest_collection_finish(session):
    for item in session.items:
        print("MARKS", item.nodeid, ",".join(sorted({m.name for m in item.iter_markers()})) or "-")
"""


def collected_marks(tmp_path, *paths: str) -> dict[str, set[str]]:
    """{node id: its markers} of one ``pytest --co`` over ``paths``."""
    (tmp_path / "lane_marks_plugin.py").write_text(MARKS_PLUGIN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "-p",
                           "lane_marks_plugin", *paths], capture_output=True, text=True, cwd=REPO, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    marks = {}
    for line in proc.stdout.splitlines():
        if line.startswith("MARKS "):
            nodeid, names = line[len("MARKS "):].rsplit(" ", 1)  # a parametrized id may hold spaces
            marks[nodeid] = set(names.split(",")) - {"-"}
    assert marks, proc.stdout
    return marks


def selected(marks: dict[str, set[str]], marker: str, *, negate: bool = False, path: str | None = None) -> set[str]:
    """The test names ``-m marker`` (or ``-m "not marker"``) selects among ``marks``, in ``path`` when given."""
    return {nodeid.split("::", 1)[1] for nodeid, names in marks.items()
            if (marker in names) != negate and (path is None or nodeid.startswith(path + "::"))}


def test_tests_on_the_cluster_and_those_that_bring_one_up_or_down_are_in_the_cluster_lane(tmp_path):
    paths = ("tests/test_cluster.py", "tests/experiments/scaling/test_scaling_runs.py")
    marks = collected_marks(tmp_path, *paths, "tests/test_verdict.py")
    ours = {nodeid: names for nodeid, names in marks.items() if nodeid.split("::")[0] in paths}
    cluster, local = selected(ours, "cluster"), selected(ours, "cluster", negate=True)
    assert not cluster & local
    # through the emulated_cluster fixture
    assert {"test_srun_lands_on_two_named_nodes", "test_up_is_idempotent_and_down_leaves_nothing"} <= cluster
    # marked by hand: its own 4-node cluster; a cluster_down that looks at the live network
    assert {"test_three_stages_run_on_four_cluster_nodes", "test_down_when_nothing_is_up_is_harmless"} <= cluster
    # no cluster at all
    assert {"test_spec_reads_tc_units", "test_notebook_stops_before_stage_two_when_the_gate_fails_at_stage_one"} <= local
    # make test's cluster lane: those, and the local companions that even the lanes out
    lane = selected(marks, "cluster_lane")
    assert cluster <= lane and not (local & lane) and any(name.startswith("test_") for name in lane - cluster)
    assert selected(marks, "cluster_lane", path="tests/test_verdict.py")
    assert not selected(marks, "cluster", path="tests/test_verdict.py")


def test_a_marker_expression_of_the_caller_is_combined_with_the_lanes(tmp_path):
    cmd = lane_command("not cluster", ["-ra", "-m", "slow", "tests"], tmp_path / "j.xml")
    assert cmd[1:5] == ["-m", "pytest", "-m", "(slow) and (not cluster)"] and cmd.count("-m") == 2
    assert cmd[-2:] == ["-ra", "tests"]
    assert lane_args("cluster", ["tests"]) == ["-p", "no:cacheprovider", "tests"]
    assert lane_args("local", ["tests"]) == ["tests"]
    with pytest.raises(SystemExit, match="-m needs an expression"):
        lane_command("cluster", ["-m"], tmp_path / "j.xml")


def test_slowest_reads_both_lanes_junit_files(tmp_path):
    (tmp_path / "a.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.test_a" name="t1" time="3.5"/>'
        '<testcase classname="tests.test_a" name="t2" time="0.5"/></testsuite></testsuites>')
    (tmp_path / "b.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.test_b" name="t3" time="9"/></testsuite></testsuites>')
    rows = slowest({"cluster": tmp_path / "a.xml", "local": tmp_path / "b.xml", "gone": tmp_path / "c.xml"}, n=2)
    assert rows == [(9.0, "local", "tests.test_b::t3"), (3.5, "cluster", "tests.test_a::t1")]


def test_the_runner_passes_when_both_lanes_pass_and_fails_with_the_failing_lane(tmp_path, capsys):
    ok, bad = tmp_path / "test_ok.py", tmp_path / "test_bad.py"
    ok.write_text("import pytest\n\n@pytest.mark.cluster_lane\ndef test_c():\n    pass\n\ndef test_l():\n    pass\n")
    lanes = tmp_path / "lanes"  # not results/test-lanes/: make test's own lanes write there
    assert main(["-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(ok)], out=lanes) == 0
    out = capsys.readouterr().out
    assert "[cluster] " in out and "[local  ] " in out and "cluster lane: passed" in out and "local lane: passed" in out
    bad.write_text("def test_l():\n    assert 1 == 2\n")
    assert main(["-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(bad)], out=lanes) == 1
    out = capsys.readouterr().out
    assert "cluster lane: selected no test" in out and "local lane: FAILED (exit 1)" in out
    assert "assert 1 == 2" in (lanes / "local.log").read_text()
    # the summary's last lines name the failed test and its assertion (CI keeps only the tail of the output)
    summary = out[out.index("=" * 30 + " lanes"):]
    assert "1 failed test(s):" in summary and "[local]  test_bad::test_l" in summary
    assert "assert 1 == 2" in summary.split("1 failed test(s):")[1]
    # a lane that fails before any test (here a usage error: no JUnit file at all) shows its log's end instead
    assert main(["-q", "-p", "no:cacheprovider", "--no-such-option"], out=lanes) == 4
    summary = capsys.readouterr().out.split("=" * 30 + " lanes")[1]
    assert "local lane failed with no failed test in its JUnit file" in summary
    assert "unrecognized arguments: --no-such-option" in summary
