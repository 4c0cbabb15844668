"""What a new user sees besides the results: the version, SLURM without a cluster, the next step after a run,
the progress display's lines. Each message must say what happened and what to do, and nothing else."""

from __future__ import annotations

import io
import logging
import os
import re
import stat
import time
from importlib.metadata import version
from pathlib import Path

import pytest

from hpcbench.cli import main
from hpcbench.run.backends.slurm import unreachable_message
from hpcbench.run.progress import Progress
from hpcbench.run.rundir import TaskStatus

#: What squeue 23.x prints on a machine with no slurm.conf and no DNS SRV record for slurmctld.
SQUEUE_WITHOUT_CLUSTER = """squeue: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host
squeue: error: fetch_config: DNS SRV lookup failed
squeue: error: _establish_config_source: failed to fetch config
squeue: fatal: Could not establish a configuration source
"""


def test_version_comes_from_the_package_metadata(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"hpcbench {version('hpcbench')}"


def test_squeue_without_a_cluster_becomes_one_line_with_a_hint():
    text = unreachable_message(SQUEUE_WITHOUT_CLUSTER, None)
    assert "\n" not in text and "res_nsearch" not in text
    assert "no slurmctld answers" in text and "Could not establish a configuration source" in text
    assert "SLURM_CONF is not set" in text and "hpcbench cluster up" in text and "--backend local" in text
    assert "SLURM_CONF=/etc/x/slurm.conf: is that the cluster's slurm.conf" in unreachable_message(
        SQUEUE_WITHOUT_CLUSTER, "/etc/x/slurm.conf")


@pytest.fixture
def failing_squeue(tmp_path, monkeypatch):
    """sbatch, squeue and scontrol on PATH that answer as they do where no slurmctld is configured."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sbatch", "squeue", "scontrol"):
        exe = bin_dir / name
        exe.write_text(f"#!/bin/sh\ncat >&2 <<'EOF'\n{SQUEUE_WITHOUT_CLUSTER.replace('squeue', name)}EOF\nexit 1\n")
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("SLURM_CONF", raising=False)


def test_slurm_backend_without_a_cluster_refuses_with_a_hint_before_the_run_dir(failing_squeue, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["run", "environment", "--backend", "slurm", "--run-dir", str(run_dir)]) == 2
    out, err = capsys.readouterr()
    assert "run dir:" not in out and not run_dir.exists()  # refused before anything was announced or made
    assert err.count("\n") == 1 and "Hint: SLURM_CONF is not set" in err and "DNS SRV" not in err
    # --dry-run says the same in its list of problems
    assert main(["run", "environment", "--backend", "slurm", "--run-dir", str(run_dir), "--dry-run"]) == 2
    assert "no slurmctld answers" in capsys.readouterr().out


def _status(task_id: str) -> TaskStatus:
    return TaskStatus(task_id=task_id, experiment="t", variant="default", repetition=0, params={}, state="done",
                      duration_s=1.0)


def test_the_next_step_names_the_report_folder_that_will_be_written(tmp_path, capsys, monkeypatch):
    import hpcbench.cli as cli

    run_dir = tmp_path / "demo-20261201-120000"
    built = []
    monkeypatch.setattr("hpcbench.report.build_report", lambda dirs, out: built.append(out) or out / "index.html")
    monkeypatch.setattr("hpcbench.report.report_folder.describe_report", str)
    assert cli._summary_and_report([_status("t.default.r0")], run_dir, None) == 0
    assert f"--out reports/{run_dir.name}" in capsys.readouterr().out
    # `make demo` passes --report reports/demo: no suggestion of another folder, the report's own path instead
    assert cli._summary_and_report([_status("t.default.r0")], run_dir, "reports/demo") == 0
    out = capsys.readouterr().out
    assert "next:" not in out and "reports/demo/index.html" in out and built == [Path("reports/demo")]


def test_a_log_line_during_the_bar_gets_a_line_of_its_own(tmp_path, monkeypatch):
    # Written straight to stderr, it would land at the end of the bar's line, which has no newline while shown.
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # as in the CLI: no handler but the last resort
    before = logging.lastResort
    stream = io.StringIO()
    display = Progress(tmp_path, 1, "suite s", stream=stream, interactive=True)
    logging.getLogger("nbclient.test").error("Kernel died while waiting for execute reply.")
    display.done(_status("t.default.r0"))
    display.close()
    text = stream.getvalue()
    assert "Kernel died while waiting for execute reply.\n" in text
    assert not re.search(r"task/s\]Kernel died|\|Kernel died", text)  # never glued to the bar
    assert text.endswith("\n") and logging.lastResort is before  # ...and Python's own handler is back


#: A cell that leaves a process in the kernel's process group, recording the signals that reach it.
WATCHER = """import subprocess, sys
subprocess.Popen([sys.executable, "-c", '''
import os, signal, sys, time
def note(signum, frame):
    open({path!r}, "a").write(signal.Signals(signum).name + "\\\\n")
    sys.exit(0)
signal.signal(signal.SIGINT, note)
signal.signal(signal.SIGTERM, note)
open({path!r}, "a").write("ready %d\\\\n" % os.getpid())
time.sleep(60)
'''])
import time, pathlib
while not pathlib.Path({path!r}).exists():
    time.sleep(0.05)
"""


@pytest.mark.parametrize("quiet", [False, True], ids=["jupyter_client's own", "hpcbench's"])
def test_kernel_shutdown_sends_no_sigint_to_the_kernels_process_group(tmp_path, quiet):
    # jupyter_client's manager interrupts first: the SIGINT is what made a kernel that was finishing a message
    # print "[IPKernelApp] ERROR | KeyboardInterrupt caught in kernel." on the user's terminal.
    import nbformat
    import papermill as pm
    import psutil

    from hpcbench.run.execute import KERNEL_NAME
    from hpcbench.run.interrupt import quiet_shutdown_kernel_manager

    seen = tmp_path / "signals.txt"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(WATCHER.format(path=str(seen)))])
    nbformat.write(nb, tmp_path / "in.ipynb")
    extra = {"kernel_manager_class": quiet_shutdown_kernel_manager()} if quiet else {}
    try:
        pm.execute_notebook(str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb"), kernel_name=KERNEL_NAME,
                            progress_bar=False, log_output=False, **extra)
        time.sleep(1.0)
        lines = seen.read_text().splitlines()
        # hpcbench's: no SIGINT, and what the notebook left behind still ends, quietly, once the kernel is gone
        assert lines[1:] == (["SIGTERM"] if quiet else ["SIGINT"]), lines
    finally:  # whatever happened, no watcher outlives the test
        pid = int(seen.read_text().split()[1])
        if psutil.pid_exists(pid):
            psutil.Process(pid).kill()
