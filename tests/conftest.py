"""Shared test helpers.

``needs(...)`` skips a test whose optional system piece is absent, with the reason,
except when ``HPCBENCH_REQUIRE_INTEGRATION=1`` (as CI sets it): then the absence
is a failure, so CI can never go green by skipping.

``HPCBENCH_TEST_CENSUS=FILE`` writes, per test, its wall time and the CPU time of pytest's
process tree in it (this process and the children it reaped: kernels, torchrun, ranks; not
the SLURM daemons' jobs): which tests wait and which compute, what a plan to run the suite in
less wall time needs to know (``make test-census`` prints the table).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

import pytest

pytest_plugins = ["cluster_fixtures", "toy_runs"]

REPO = Path(__file__).resolve().parents[1]
REQUIRE_INTEGRATION = os.environ.get("HPCBENCH_REQUIRE_INTEGRATION") == "1"
# The SLURM backend looks at its jobs every 0.5 s here, not every 2 s: the cluster tests' jobs are short, and a
# job's end is otherwise seen ~1 s late on average (tests/test_slurm_backend.py alone runs ~25 jobs).
os.environ.setdefault("HPCBENCH_SLURM_POLL_S", "0.5")
# Popped: pytest sessions that tests start themselves (tests/test_new_experiment.py) must not write it.
CENSUS = os.environ.pop("HPCBENCH_TEST_CENSUS", None)
_census: list[dict] = []


def _cpu() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not CENSUS:
        yield
        return
    (self0, kids0), t0 = _cpu(), time.monotonic()
    yield
    (self1, kids1), t1 = _cpu(), time.monotonic()
    _census.append({"test": item.nodeid, "wall_s": t1 - t0, "cpu_self_s": self1 - self0,
                    "cpu_children_s": kids1 - kids0})


def pytest_sessionfinish(session, exitstatus):
    if CENSUS and _census:
        Path(CENSUS).parent.mkdir(parents=True, exist_ok=True)
        Path(CENSUS).write_text(json.dumps(_census, indent=0))


#: Tests that use the emulated SLURM cluster: marked ``cluster``. ``make test`` runs them in a lane of their own
#: beside the rest (tests/lanes.py), since one machine holds one cluster and its tests must not overlap each other.
CLUSTER_FIXTURE = "emulated_cluster"
#: The same for the cluster with stand-in GPUs (tests/cluster_fixtures.py), which takes the session one's place.
GRES_CLUSTER_FIXTURE = "gres_cluster"
#: Local test files that the cluster lane runs too, to even the two lanes out (alone, the cluster lane ends
#: minutes before the local one). Picked by the lanes' wall times (`make test-census`, results/test-lanes/*.xml)
#: so that neither lane ends long before the other; none shares a session fixture (the toy runs, the demo
#: run) with the local lane. The lanes' timings are in the dated pages under reports/.
CLUSTER_LANE_COMPANIONS = ("tests/test_suite.py", "tests/test_verdict.py", "tests/test_runner_signals.py",
                           "tests/test_gpu_check.py", "tests/test_new_experiment.py", "tests/test_compression.py",
                           "tests/test_report.py", "tests/test_checkpoint.py", "tests/test_srun_ranks.py",
                           "tests/test_publish.py", "tests/test_doctor.py")


def pytest_collection_modifyitems(config, items):
    """Mark every test whose fixtures reach the session cluster ``cluster`` (a test that brings a cluster up or
    down by itself carries the mark explicitly), and those and the companions above ``cluster_lane``: make
    test's lanes are ``-m cluster_lane`` and ``-m "not cluster_lane"``."""
    for item in items:
        uses = set(getattr(item, "fixturenames", ())) & {CLUSTER_FIXTURE, GRES_CLUSTER_FIXTURE}
        if uses and not item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.cluster)
        if item.get_closest_marker("cluster") or item.nodeid.split("::")[0] in CLUSTER_LANE_COMPANIONS:
            item.add_marker(pytest.mark.cluster_lane)


def missing(reason: str) -> None:
    """Skip (locally) or fail (in CI) because a system piece is absent."""
    if REQUIRE_INTEGRATION:
        pytest.fail(f"HPCBENCH_REQUIRE_INTEGRATION=1 but {reason}")
    pytest.skip(reason)


def need_executable(name: str, hint: str) -> str:
    """Path of ``name`` on PATH, or skip/fail saying how to install it."""
    path = shutil.which(name)
    if path is None:
        missing(f"{name} is not installed ({hint})")
    return path


@pytest.fixture(scope="session")
def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    missing("no headless Chromium (apt-get install chromium)")


@pytest.fixture(scope="session")
def python_exe() -> str:
    return sys.executable


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class RenderedPage:
    """What headless Chromium made of a page: screenshot contrast, console errors, the DOM."""

    def __init__(self, pixel_std: float, js_errors: list[str], dom: str, screenshot: Path):
        self.pixel_std = pixel_std
        self.js_errors = js_errors
        self.dom = dom
        self.screenshot = screenshot


def render_in_chromium(exe: str, html: Path, tmp_path: Path, size: str = "1200,900") -> RenderedPage:
    """Open ``html`` in headless Chromium: screenshot, console errors (``--v=1`` logs
    every console message, uncaught exceptions as ``"Uncaught ..."``) and the DOM."""
    import subprocess

    import matplotlib.image

    url = Path(html).resolve().as_uri()
    png = tmp_path / "screenshot.png"

    def run(profile: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([exe, *CHROMIUM_FLAGS, f"--window-size={size}",
                               f"--user-data-dir={tmp_path / profile}", *args, url],
                              capture_output=True, text=True, timeout=90)

    shot = run("profile-shot", f"--screenshot={png}", "--enable-logging=stderr", "--v=1")
    assert png.is_file(), shot.stderr[-2000:]
    pixels = matplotlib.image.imread(png)
    errors = [line for line in shot.stderr.splitlines()
              if "Uncaught" in line or ("CONSOLE" in line and "error" in line.lower())]
    dom = run("profile-dom", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    return RenderedPage(float(pixels[..., :3].std()), errors, dom.stdout, png)


def broken_notebooks(tmp_path, broken: str):
    """A notebooks folder where ``broken`` raises in its first code cell after the parameters."""
    import shutil

    import nbformat

    from hpcbench.experiments import notebooks_dir

    folder = tmp_path / "broken-notebooks"
    shutil.copytree(notebooks_dir(), folder)
    nb = nbformat.read(folder / broken, as_version=4)
    idx = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    nb.cells.insert(idx + 1, nbformat.v4.new_code_cell('raise RuntimeError("injected failure")'))
    nbformat.write(nb, folder / broken)
    return folder


def execute_notebook(name, tmp_path, **params):
    """Run experiment ``name``'s notebook with papermill in a real kernel; return (records, task dir)."""
    import pandas as pd
    import papermill as pm

    from hpcbench.experiments import EXPERIMENTS
    from hpcbench.core.results import find_record_files, read_records

    out_dir = tmp_path / name
    pm.execute_notebook(str(EXPERIMENTS.get(name).notebook_path()), str(tmp_path / f"{name}.ipynb"),
                        parameters={**params, "output_dir": str(out_dir), "task_id": f"{name}.t"},
                        kernel_name="hpcbench", progress_bar=False, cwd=str(tmp_path))
    files = find_record_files(out_dir)
    assert files, f"{name} wrote no records"
    return pd.concat([read_records(p) for p in files], ignore_index=True), out_dir


@pytest.fixture(scope="module")
def cluster():
    """A dask LocalCluster in this process (threads), for tests that aggregate records."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as c:
        yield c
