"""The guide inside the repository: the digest page matches the catalogue, and nothing points outside."""

import ast
import re
import subprocess
from pathlib import Path

import pytest

from hpcbench.experiments import EXPERIMENTS, all_claims, claim_owners, declaring_experiment
from hpcbench.experiments.digest import PAGE, render
from hpcbench.guide.techniques import TECHNIQUES

ROOT = Path(__file__).resolve().parents[1]
CLAIMS = all_claims()


def test_the_digest_page_is_what_the_catalogue_renders():
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "hpcbench/guide/README.md differs from the experiments' claims.py and hpcbench/guide/techniques.py: "
        "run `.venv/bin/hpcbench docs --write`")


def test_every_claim_and_technique_is_on_the_page_with_its_figures():
    page = render()
    for c in CLAIMS:
        assert f"### {c.id} ({c.kind}): {c.title}" in page and f"Section {c.section}. {c.wording}" in page
        assert f"Main figure: {c.headline}." in page
        assert all(f"| {what} | {figure} |" in page for what, figure in c.figures)
    for t in TECHNIQUES:
        assert f"### {t.id}: {t.section}" in page


def test_techniques_name_real_claims_and_real_places():
    ids = {c.id for c in CLAIMS}
    assert [t.id for t in TECHNIQUES] == ["T-comm", "T-io", "T-affinity", "T-monitor", "T-fault", "T-case",
                                          "T-tools", "T-diag", "T-practice"]
    for t in TECHNIQUES:
        assert set(t.claims) <= ids, t.id
        missing = [w for w in t.where if not (ROOT / w).exists()]
        assert not missing, f"{t.id} names paths that do not exist: {missing}"


def test_nothing_in_the_repository_points_outside_it():
    """Users who clone the repository have the digest, not the team's working copy of the guide."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    offenders = []
    for name in tracked:
        path = ROOT / name
        if name == "tests/test_guide.py" or not path.is_file() or path.suffix in {".png", ".parquet", ".h5"}:
            continue
        text = path.read_text(encoding="utf-8", errors="ignore")
        if any(s in text for s in ("SOURCE.md", "shared/seed", "../shared")):
            offenders.append(name)
    assert not offenders, f"these files point at the guide outside the repository: {offenders}"


# -- each claim declared once, in its experiment ---------------------------------------------------------

def test_every_claim_is_declared_once_by_the_experiment_that_rules_on_it():
    assert [c.id for c in CLAIMS] == [f"C{i}" for i in range(1, 18)]
    for claim_id, owners in claim_owners("rules").items():
        assert declaring_experiment(claim_id) == owners[0], claim_id
    for name in EXPERIMENTS.names():
        declared = EXPERIMENTS.get(name).claims.declared
        if declared:
            assert (ROOT / "hpcbench" / "experiments" / name / "claims.py").is_file(), name
            assert all(type(c).__module__ == "hpcbench.guide.claims" for c in declared)


def _assigned_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    names.add(n.id)
    return names


def _calls(path: Path, name: str) -> int:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sum(isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == name
               for n in ast.walk(tree))


GUIDE_FIGURE = re.compile(r"GUIDE_C\d+")


@pytest.mark.parametrize("path", sorted((ROOT / "hpcbench").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_claims_figures_and_regime_are_defined_only_in_its_experiments_claims_py(path):
    """A claim's figure (a ``GUIDE_C<n>`` constant) and a guide regime (``GuideRegime(...)``) are defined in the
    ``claims.py`` of an experiment, nowhere else; core/facts.py keeps vendor and software constants only."""
    rel = path.relative_to(ROOT).as_posix()
    if re.fullmatch(r"hpcbench/experiments/[a-z_]+/claims\.py", rel):
        return
    figures = sorted(n for n in _assigned_names(path) if GUIDE_FIGURE.match(n))
    assert not figures, f"{rel} defines the guide's figures {figures}: declare them in the experiment's claims.py"
    if rel != "hpcbench/scale/regime.py":  # the class itself
        assert not _calls(path, "GuideRegime"), f"{rel} builds a GuideRegime: declare it in the experiment's claims.py"
