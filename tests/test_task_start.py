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
