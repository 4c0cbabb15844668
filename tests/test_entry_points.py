"""One command: everything a user runs is an ``hpcbench`` subcommand, and ``python -m hpcbench`` is
the same command for job scripts and launchers."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from conftest import REPO
from hpcbench.cli import DELEGATED

#: Files that may run as ``__main__``: the command itself, and one survival-job try, which
#: ``slurm/run_with_retries.sh`` runs by its path with the standard library only (a try must start
#: in tens of milliseconds; importing hpcbench would not let it).
MAIN_ALLOWED = {"hpcbench/__main__.py", "hpcbench/experiments/fault_tolerance/survival_try.py"}


def _has_main_guard(path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            names = {getattr(n, "id", None) for n in ast.walk(node.test)}
            consts = {getattr(n, "value", None) for n in ast.walk(node.test)}
            if "__name__" in names and "__main__" in consts:
                return True
    return False


def test_no_module_but_the_command_is_an_entry_point():
    guarded = sorted(str(p.relative_to(REPO)) for p in (REPO / "hpcbench").rglob("*.py") if _has_main_guard(p))
    extra = set(guarded) - MAIN_ALLOWED
    assert not extra, f"`python -m` entry points besides the hpcbench command: {sorted(extra)}; make them subcommands"


@pytest.mark.parametrize("name", [n for n, (_, help_text) in DELEGATED.items() if help_text is not None])
def test_every_delegated_subcommand_answers_help_under_its_own_name(name):
    done = subprocess.run([sys.executable, "-m", "hpcbench", name, "--help"], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"usage: hpcbench {name}"), done.stdout[:200]


def test_the_command_lists_every_subcommand_but_the_internal_ones():
    done = subprocess.run([sys.executable, "-m", "hpcbench", "--help"], capture_output=True, text=True, cwd=REPO,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    for name, (_, help_text) in DELEGATED.items():
        assert (f"    {name} " in done.stdout) == (help_text is not None), name


def test_rank_without_a_spec_is_refused_with_its_usage():
    done = subprocess.run([sys.executable, "-m", "hpcbench", "rank"], capture_output=True, text=True, cwd=REPO,
                          timeout=60)
    assert done.returncode == 2 and "usage: python -m hpcbench rank SPEC.json" in done.stderr


def test_docs_check_says_the_generated_pages_are_current():
    done = subprocess.run([sys.executable, "-m", "hpcbench", "docs"], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_nothing_runs_a_module_of_hpcbench_but_the_command():
    """Job templates, scripts, docs and tests start ``python -m hpcbench ...``, never ``-m hpcbench.<module>``
    (a module without a ``__main__`` guard would import and exit 0, doing nothing)."""
    import re

    pattern = re.compile(r"""-m["',\s]+hpcbench\.[a-z_.]+""")
    offenders = []
    for path in REPO.rglob("*"):
        if (not path.is_file() or any(part in {".git", ".venv", "results", "reports", "__pycache__", "node_modules"}
                                      for part in path.relative_to(REPO).parts)
                or path.suffix not in {".py", ".sh", ".template", ".sbatch", ".md", ".yaml", ".ipynb", ""}):
            continue
        text = path.read_text(encoding="utf-8", errors="ignore")
        offenders += [f"{path.relative_to(REPO)}: {m.group(0)}" for m in pattern.finditer(text)]
    offenders = [o for o in offenders if not o.startswith("tests/test_entry_points.py")]
    assert not offenders, f"modules run by path instead of the command: {offenders}"
