"""Adding an experiment touches its package, its notebook and its test folder, and nothing shared.

Proved on a copy of the repository (every file ``git ls-files -co --exclude-standard`` lists,
committed into a git repository of its own), so that nothing written can reach this checkout and
``git status`` there shows everything that changed. The test adds a throw-away experiment as a
contributor would (exactly three files), regenerates the one generated page that lists experiments,
and then, with the copy first on ``PYTHONPATH`` (the notebook's kernel inherits it):

* the experiment table of ``notebooks/README.md`` gained exactly the new row, and nothing else;
* the ledger rules on a claim with the new experiment's rule, from the records its notebook wrote
  under papermill with the ``hpcbench`` kernel;
* the shared checks a new experiment must pass (:data:`SHARED_CHECKS`) pass in the copy;
* ``git status`` lists the three added files and the regenerated page, nothing else: whatever
  the checks wrote (bytecode, pytest's cache) is ignored by ``.gitignore``.

Every claim has an owner today, and each has one at most: a new experiment that takes a claim also
removes it from its old owner's SPEC. The throw-away therefore declares its rule without a claim,
and the ledger check hands it :data:`CLAIM` in memory, in its own process only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from hpcbench.run.task import CONTEXT_DEFAULTS

ROOT = Path(__file__).resolve().parents[1]
NAME = "zz_trivial"
NOTEBOOK = f"99_{NAME}.ipynb"
#: What adding the experiment writes, repository-relative: its package, its notebook, its tests.
ADDED = (f"hpcbench/experiments/{NAME}/__init__.py", f"notebooks/{NOTEBOOK}",
         f"tests/experiments/{NAME}/test_{NAME}_rules.py")
#: The one generated page that lists experiments; the new one adds a row to its table, name first, description last.
TABLE_PAGE = "notebooks/README.md"
DESCRIPTION = "throw-away: n values written by the notebook process"
ROW_START, ROW_END = f"| `{NAME}` | [{NOTEBOOK}]({NOTEBOOK}) | ", f" | {DESCRIPTION} |"
#: The claim the ledger check hands the throw-away's rule (taken from its owner in memory).
CLAIM = "C13"
#: The shared checks a new experiment must pass; each finds the new one through the registry or the tree.
SHARED_CHECKS = (
    "tests/test_layers.py",  # its imports go down the layers
    "tests/test_docs.py",  # the pages name existing paths; the experiment table is what the registry renders
    "tests/test_ledger.py::test_every_ruled_claim_exists_and_has_one_owner",
    "tests/test_ledger.py::test_no_shared_module_names_an_experiment",
    "tests/test_ledger.py::test_no_import_cycles",
    f"tests/test_notebooks.py::test_parameters_cell_matches_config[{NAME}]",
    f"tests/test_notebooks.py::test_notebooks_are_stored_without_outputs[{NAME}]",
    "tests/test_limits.py::test_every_experiment_estimates_its_defaults_consistently",
    "tests/test_misuse_inputs.py::test_params_listing_says_what_is_checked",
    f"tests/experiments/{NAME}",
    # `hpcbench run NAME` through the runner, as a new user would start it
    f"tests/test_defaults.py::test_experiment_runs_at_its_defaults_or_toy_size_or_refuses_clearly[{NAME}]",
)

PACKAGE_SOURCE = f'''"""Experiment ``{NAME}``: a throw-away; one package is all an experiment takes."""

from dataclasses import dataclass

import pandas as pd

from hpcbench.core.config import Config, param
from hpcbench.experiments import TASK_STARTUP_S, Estimate, Experiment, register
from hpcbench.judge.evidence import Judgement


@dataclass
class TrivialConfig(Config):
    n: int = param(3, "how many values the notebook writes", min=1)


def summarize(records):
    """One launch's records -> one row: how many values it wrote, and which."""
    rows = records[records["metric"] == "value"]
    return pd.DataFrame([{{"n": len(rows), "samples": tuple(rows["value"])}}])


def rule(claim, evidence):
    """Counts the values of every launch; never decides."""
    n = int(evidence.summaries["n"].sum()) if len(evidence.summaries) else 0
    return Judgement("inconclusive", f"{{n}} values", "a throw-away rule")


def estimate(cfg):
    return Estimate(0, 1, TASK_STARTUP_S, basis="the notebook's process alone, writing a few records")


SPEC = register(Experiment(name="{NAME}", notebook="{NOTEBOOK}", config=TrivialConfig,
                           description="{DESCRIPTION}", summarize=summarize, estimate=estimate))
'''

NOTEBOOK_CODE = f'''import hpcbench
from hpcbench.run.task import Task

print(f"hpcbench from {{hpcbench.__file__}}")
task = Task.from_namespace("{NAME}", globals())
with task.writer() as w:
    for k in range(task.config.n):
        w.add("value", float(k), "", step=k)
'''

RULES_TEST_SOURCE = f'''"""{NAME}'s summary and rule on recorded records."""

import pandas as pd

from hpcbench.core.results import RecordContext, RecordWriter, read_records
from hpcbench.experiments.{NAME} import rule, summarize
from hpcbench.experiments import get_claim
from hpcbench.judge.evidence import evidence_for


def test_the_rule_counts_the_values_of_every_launch(tmp_path):
    frames = []
    for k, n in enumerate((2, 3)):
        ctx = RecordContext(run_id="r", experiment="{NAME}", task_id=f"{NAME}.r{{k}}", repetition=k,
                            params={{"n": n}})
        with RecordWriter(tmp_path / f"{{k}}.parquet", ctx.for_rank(node="n1", rank=0, world_size=1)) as w:
            for step in range(n):
                w.add("value", float(step), "", step=step)
        frames.append(read_records(w.path))
    evidence = evidence_for("{NAME}", pd.concat(frames, ignore_index=True), summarize=summarize)
    assert sorted(evidence.summaries["n"]) == [2, 3]
    judgement = rule(get_claim("{CLAIM}"), evidence)
    assert (judgement.verdict, judgement.measured) == ("inconclusive", "5 values")
'''

#: Run in the copy: the claim handed to the throw-away's rule, its notebook under papermill, the ledger.
LEDGER_CHECK = f'''
import json, sys
from pathlib import Path

import pandas as pd
import papermill as pm

import hpcbench
from hpcbench.core.results import find_record_files, read_records
from hpcbench.experiments import EXPERIMENTS, rule_owners
from hpcbench.experiments.{NAME} import rule
from hpcbench.report.ledger import evaluate_claim

out, claim = Path(sys.argv[1]), sys.argv[2]
for name in EXPERIMENTS.names():  # the claim's owner lets go of it, in this process only
    EXPERIMENTS.get(name).claims.rules.pop(claim, None)
spec = EXPERIMENTS.get("{NAME}")
spec.claims.rules[claim] = rule
notebook = spec.notebook_path()
executed = pm.execute_notebook(str(notebook), str(out / "executed.ipynb"),
                               parameters={{"n": 4, "output_dir": str(out / "task")}}, kernel_name="hpcbench",
                               progress_bar=False, cwd=str(notebook.parent))
printed = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.outputs)
records = pd.concat([read_records(p) for p in find_record_files(out / "task")], ignore_index=True)
row = evaluate_claim(claim, records)
print(json.dumps({{"library": hpcbench.__file__, "notebook": str(notebook), "owners": rule_owners()[claim],
                  "kernel_said": printed, "verdict": row.verdict, "measured": row.measured,
                  "experiment": row.experiment,
                  "config": json.loads((out / "task" / "config.json").read_text())["config"]}}))
'''


def _notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "hpcbench", "display_name": "hpcbench (Python 3)", "language": "python"}
    params = nbformat.v4.new_code_cell("n = 3\n" + "".join(f"{k} = {v!r}\n" for k, v in CONTEXT_DEFAULTS.items()))
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {NAME}\n\nA throw-away experiment: it writes `n` values."),
                params, nbformat.v4.new_code_cell(NOTEBOOK_CODE)]
    return nb


def _git(repo: Path, *args: str) -> str:
    identity = ["-c", "user.name=hpcbench test", "-c", "user.email=test@localhost", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *identity, *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def _copy_repository(dest: Path) -> None:
    """The repository's files as this checkout has them (tracked, or new and not ignored), committed in ``dest``.

    What git ignores (the venv, results, caches) is left behind.
    """
    listed = _git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for rel in filter(None, listed):
        src, dst = ROOT / rel, dest / rel
        if not (src.is_file() or src.is_symlink()):
            continue  # tracked, but deleted in this checkout
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "the repository as the checkout has it")


def _run(copy: Path, *argv: str, timeout: float) -> subprocess.CompletedProcess:
    """``python argv`` in the copy, with the copy first on the path (a notebook's kernel inherits it)."""
    env = {**os.environ, "PYTHONPATH": str(copy)}
    env.pop("HPCBENCH_NOTEBOOKS", None)  # the copy's notebooks/, found from its own package
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # write bytecode, as a contributor's Python does: git must ignore it
    return subprocess.run([sys.executable, *argv], cwd=copy, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _said(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"


@pytest.mark.slow
def test_adding_an_experiment_touches_its_package_its_notebook_and_its_test_only(tmp_path):
    copy = (tmp_path / "repo").resolve()
    _copy_repository(copy)
    assert _git(copy, "status", "--porcelain") == ""
    assert not (copy / ADDED[0]).parent.exists(), f"{NAME} exists already: the test needs a free name"

    # What a contributor writes: three files.
    (copy / ADDED[0]).parent.mkdir(parents=True)
    (copy / ADDED[0]).write_text(PACKAGE_SOURCE)
    nbformat.write(_notebook(), copy / ADDED[1])
    (copy / ADDED[2]).parent.mkdir(parents=True)
    (copy / ADDED[2]).write_text(RULES_TEST_SOURCE)

    # The one generated change: the experiment table gains the new row.
    generated = _run(copy, "-m", "hpcbench", "docs", "--write", timeout=120)
    assert generated.returncode == 0, _said(generated)
    diff = _git(copy, "diff", "--no-color", "-U0", "--", TABLE_PAGE).splitlines()
    added = [line[1:] for line in diff if line.startswith("+") and not line.startswith("+++")]
    removed = [line[1:] for line in diff if line.startswith("-") and not line.startswith("---")]
    assert len(added) == 1 and not removed, diff
    assert added[0].startswith(ROW_START) and added[0].endswith(ROW_END), added

    # The ledger judges the claim with the new rule, on what the notebook wrote under papermill.
    out = tmp_path / "ledger"
    out.mkdir()
    ledger = _run(copy, "-c", LEDGER_CHECK, str(out), CLAIM, timeout=300)
    assert ledger.returncode == 0, _said(ledger)
    seen = json.loads(ledger.stdout.strip().splitlines()[-1])
    assert Path(seen["library"]).resolve().is_relative_to(copy), seen["library"]
    assert Path(seen["notebook"]).resolve() == copy / ADDED[1]
    # The kernel imported the copy too: the checkout has no such experiment, and it says where it read hpcbench.
    assert f"hpcbench from {copy}/hpcbench/__init__.py" in seen["kernel_said"], seen["kernel_said"]
    assert seen["owners"] == [NAME] and seen["experiment"] == NAME
    assert (seen["verdict"], seen["measured"]) == ("inconclusive", "4 values")
    assert seen["config"] == {"n": 4}

    # The shared checks pass with the new experiment in the tree.
    checks = _run(copy, "-m", "pytest", "-q", *SHARED_CHECKS, timeout=600)
    assert checks.returncode == 0, _said(checks)

    # Nothing else changed: whatever the checks and the kernel wrote is ignored.
    status = _git(copy, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert sorted(status) == sorted([f"?? {path}" for path in ADDED] + [f" M {TABLE_PAGE}"]), status
