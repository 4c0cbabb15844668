"""What a task's start costs: papermill is imported without jsonschema's IRI checker, and notebooks are
still validated.

Each check runs in a fresh interpreter, as a task or SLURM job starts: in this test process jsonschema
may be imported already, and then :func:`hpcbench.run.execute.import_papermill` rightly changes nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys

from hpcbench.experiments import notebooks_dir

PROBE = """
import json, sys, time
t0 = time.process_time()
from hpcbench.run.execute import SKIPPED_FORMAT_CHECKER, import_papermill
pm = import_papermill()
cpu = time.process_time() - t0
import nbformat
from nbformat.validator import NotebookValidationError
good = nbformat.read(sys.argv[1], as_version=4)
nbformat.validate(good)
bad = nbformat.read(sys.argv[1], as_version=4)
bad.cells[0]["cell_type"] = "no such type"
try:
    nbformat.validate(bad)
    rejected = False
except NotebookValidationError:
    rejected = True
print(json.dumps({"cpu_s": cpu, "checker_loaded": sys.modules.get(SKIPPED_FORMAT_CHECKER) is not None,
                  "rejected": rejected, "has_execute": hasattr(pm, "execute_notebook")}))
"""


def _probe(notebook) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, str(notebook)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_papermill_starts_without_the_iri_checker_and_notebooks_are_still_validated():
    result = _probe(notebooks_dir() / "00_environment.ipynb")
    assert result["has_execute"] and not result["checker_loaded"]
    # the schema is still enforced: a valid notebook passes, a broken one is refused
    assert result["rejected"]
    print(f"papermill imported in {result['cpu_s']:.2f} s of CPU")  # ~0.75 s here, 2.4 s with the checker


RANK_PROBE = """
import json, sys, time
import hpcbench.dist.worker
hpcbench.dist.worker.defer_imports()  # as a rank's main does first
from hpcbench.core.results import RecordContext, RecordWriter
from hpcbench.experiments import EXPERIMENTS
for name in EXPERIMENTS.names():
    __import__(f"hpcbench.experiments.{name}")
t = 1764770000.123456
with RecordWriter(sys.argv[1], RecordContext()) as w:
    w.add("x", 1.0, "s", when=t)
loaded = "pandas.core.frame" in sys.modules
import pandas as pd
print(json.dumps({"pandas": loaded, "usable": pd.DataFrame({"a": [1]}).shape == (1, 1)}))
"""


def test_a_rank_writes_its_records_without_importing_pandas(tmp_path):
    """Every rank imports the worker, its experiment's package and the records writer: pandas (~0.5 s of CPU per
    rank) is not loaded on that path, yet works where it is used; the time written is the one given, to the µs."""
    from hpcbench.core.results import read_records

    path = tmp_path / "r.parquet"
    out = subprocess.run([sys.executable, "-c", RANK_PROBE, str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"pandas": False, "usable": True}
    stamp = read_records(path)["time"].iloc[0]
    assert stamp.tz is not None and round(stamp.timestamp() * 1e6) == 1764770000123456
