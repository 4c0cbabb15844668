"""The guide inside the repository: the digest page matches the catalogue, and nothing points outside."""

import subprocess
from pathlib import Path

from hpcbench.guide.claims import CLAIMS
from hpcbench.guide.digest import PAGE, render
from hpcbench.guide.techniques import TECHNIQUES

ROOT = Path(__file__).resolve().parents[1]


def test_the_digest_page_is_what_the_catalogue_renders():
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "hpcbench/guide/README.md differs from hpcbench/guide/claims.py and techniques.py: "
        "run `.venv/bin/python -m hpcbench.guide.digest --write`")


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
