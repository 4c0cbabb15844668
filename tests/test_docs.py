"""The documentation stays short where it must, names only paths that exist, and is generated where it can go stale.

Which paths are checked. A markdown link is resolved from the page's folder, as a browser would;
a path in backticks (`slurm/README.md`) is read from the repository root. Either is checked when
its first component is a top-level entry of the repository (``git ls-files``, tracked or new and
not ignored) and git would not ignore it: generated outputs (``results/...``, ``reports/demo/...``,
``.venv/...``) are not in the repository, so naming them is fine. Placeholders (``<name>``,
``*.ipynb``, ``{local,slurm}.py``, ``$VAR``, a component in capitals such as ``RUN_DIR`` or ``NAME``)
are not paths and are skipped.
"""

from __future__ import annotations

import os
import re
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

from hpcbench.experiments import catalogue

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The pages the README's "where to go next" must link, and whose paths this test checks.
GUIDES = ("hpcbench/guide/README.md", "notebooks/README.md", "slurm/README.md", "hpcbench/README.md",
          "reports/README.md", "data_prep/README.md")
MAX_README_LINES = 200

_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")
_PLACEHOLDER = re.compile(r"[<>*{}$|=~\\]|\.\.\.|(^|/)[A-Z][A-Z0-9_]*(/|$)")
_EXTERNAL = ("http://", "https://", "mailto:")


def _git(*args: str, stdin: str | None = None) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, input=stdin, capture_output=True, text=True).stdout


@lru_cache(maxsize=1)
def _repo_files() -> tuple[str, ...]:
    """Files of the repository: tracked, or new and not ignored (a page not committed yet counts)."""
    return tuple(_git("ls-files", "--cached", "--others", "--exclude-standard").splitlines())


@lru_cache(maxsize=1)
def _top_level() -> frozenset[str]:
    return frozenset(name.split("/")[0] for name in _repo_files())


def _ignored(paths: list[str]) -> set[str]:
    """The paths (relative to the root) that git ignores, whether they exist or not."""
    if not paths:
        return set()
    return set(_git("check-ignore", "--no-index", "--stdin", stdin="\n".join(paths) + "\n").splitlines())


def _doc_pages() -> list[Path]:
    pages = [README, ROOT / "slurm/README.md", ROOT / "notebooks/README.md", ROOT / "hpcbench/README.md"]
    return pages + sorted((ROOT / "reports").glob("*.md"))


def _markdown_files() -> list[Path]:
    return [ROOT / name for name in _repo_files() if name.endswith(".md") and (ROOT / name).is_file()]


def _code_paths(text: str) -> list[str]:
    """Candidate repository paths in backticks, relative to the root."""
    found = []
    for span in _CODE.findall(_FENCE.sub("", text)):
        for token in span.split():
            token = token.strip("\"'()[],;:").rstrip(".")
            if not token or token.startswith(("-", "/")) or token.startswith(_EXTERNAL) or _PLACEHOLDER.search(token):
                continue
            if token.split("/")[0] in _top_level():
                found.append(token)
    return found


def _anchors(page: Path) -> set[str]:
    """The anchors a markdown renderer gives ``page``'s headings (GitHub's rule: lower case, punctuation
    dropped, spaces to hyphens)."""
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", _FENCE.sub("", page.read_text(encoding="utf-8")), re.M):
        anchors.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return anchors


def _link_targets(text: str) -> list[str]:
    """Relative link targets (images included), anchors cut off."""
    targets = []
    for target in _LINK.findall(_FENCE.sub("", text)):
        if target.startswith(_EXTERNAL) or target.startswith("#"):
            continue
        targets.append(target.split("#")[0])
    return [t for t in targets if t]


def _missing_paths(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    named = set(_code_paths(text))
    for target in _link_targets(text):
        resolved = os.path.normpath(os.path.join(os.path.relpath(page.parent, ROOT), target))
        if not resolved.startswith(".."):  # links leaving the repository fail their own test below
            named.add(resolved)
    named = {p for p in named if p.split("/")[0] in _top_level() and not _PLACEHOLDER.search(p)}
    ignored = _ignored(sorted(named))
    return sorted(p for p in named if p not in ignored and not (ROOT / p).exists())


def test_readme_is_a_first_screen_not_a_manual():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines (at most {MAX_README_LINES}): move reference material beside "
        "what it describes (slurm/, notebooks/, hpcbench/README.md) and dated results to reports/")


def test_readme_points_to_every_guide():
    text = README.read_text(encoding="utf-8")
    missing = [g for g in GUIDES if f"]({g})" not in text]
    assert not missing, f"README.md does not link {missing}"


def test_readme_test_section_gives_the_test_command():
    """CI (`.ci/run`) runs the command README's "## Test" section gives."""
    text = README.read_text(encoding="utf-8")
    match = re.search(r"^## Test\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, "README.md has no '## Test' section"
    assert "    make test" in match.group(1).splitlines(), "README's '## Test' section must hold the line '    make test'"


@pytest.mark.parametrize("page", _doc_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_page_names_exists(page):
    missing = _missing_paths(page)
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", _doc_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_anchor_a_page_links_exists(page):
    broken = []
    for target in _LINK.findall(_FENCE.sub("", page.read_text(encoding="utf-8"))):
        if "#" not in target or target.startswith(_EXTERNAL):
            continue
        path, anchor = target.split("#", 1)
        linked = (page.parent / path).resolve() if path else page
        if linked.suffix == ".md" and linked.is_file() and anchor not in _anchors(linked):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links headings that do not exist: {broken}"


def test_the_path_rule_checks_what_it_should():
    text = ("`slurm/README.md`, `sbatch slurm/nope.sbatch`, `results/x/y`, `reports/demo/index.html`, "
            "`hpcbench/experiments/<name>/`, `notebooks/*.ipynb`, `hpcbench.fault.train`, [a](notebooks/nope.md)")
    assert _code_paths(text) == ["slurm/README.md", "slurm/nope.sbatch", "reports/demo/index.html"]
    assert _link_targets(text) == ["notebooks/nope.md"]
    assert _ignored(["reports/demo/index.html", "slurm/README.md"]) == {"reports/demo/index.html"}


def test_the_experiment_table_is_what_the_registry_renders():
    page = catalogue.PAGE.read_text(encoding="utf-8")
    assert catalogue.current(page) == catalogue.render(), (
        "the experiment table of notebooks/README.md differs from the registry: run "
        "`.venv/bin/hpcbench docs --write`")


def test_no_markdown_page_links_outside_the_repository():
    """A clone holds the repository only: a link to a working copy beside it is dead for everyone else."""
    sibling = ".." + "/shared"  # spelled apart so that this file does not name it
    offenders = []
    for page in _markdown_files():
        text = page.read_text(encoding="utf-8", errors="ignore")
        rel_dir = os.path.relpath(page.parent, ROOT)
        for target in _link_targets(text):
            resolved = os.path.normpath(os.path.join(rel_dir, target))
            if target.startswith(("/", "file:")) or resolved.startswith(".."):
                offenders.append(f"{page.relative_to(ROOT)}: {target}")
        if sibling in text:
            offenders.append(f"{page.relative_to(ROOT)}: names {sibling}")
    assert not offenders, f"markdown pages point outside the repository: {offenders}"


# The shape a newcomer meets. README: what it is, then what to do; every README section one screen;
# no page outside reports/ (nor any code comment) carries a day's measurements: those go to the
# dated pages under reports/, which README links.
README_SECTIONS = ("# hpcbench", "## Quick start", "## What the report shows", "## Where to go next", "## Test")
MAX_INTRO_LINES = 8
MAX_TEST_LINES = 12
MAX_SECTION_LINES = 40
MAX_PARAGRAPH_WORDS = 150
MAX_INDEX_CELL_WORDS = 30
#: A date (not a timestamp's date part, which examples of log lines and formats carry).
_DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b(?!T)")


def _sections(page: Path) -> list[tuple[str, list[str]]]:
    """(heading, its lines up to the next heading of any level <= 3), outside code fences."""
    sections: list[tuple[str, list[str]]] = []
    fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = not fence
        if not fence and re.match(r"#{1,3} ", line):
            sections.append((line, []))
        elif sections:
            sections[-1][1].append(line)
    return sections


def _body(lines: list[str]) -> list[str]:
    """A section's lines without the blank ones at its ends."""
    text = "\n".join(lines).strip("\n")
    return text.splitlines() if text else []


def _readmes() -> list[Path]:
    return [ROOT / name for name in _repo_files()
            if name.endswith("README.md") and not name.startswith("tests/") and (ROOT / name).is_file()]


def test_readme_starts_with_what_it_is_then_what_to_do():
    sections = _sections(README)
    assert tuple(h for h, _ in sections) == README_SECTIONS, (
        f"README.md's sections are {[h for h, _ in sections]}, expected {list(README_SECTIONS)} in that order")
    body = dict((h, _body(lines)) for h, lines in sections)
    assert len(body["# hpcbench"]) <= MAX_INTRO_LINES, (
        f"README.md's introduction has {len(body['# hpcbench'])} lines (at most {MAX_INTRO_LINES})")
    assert len(body["## Test"]) <= MAX_TEST_LINES, (
        f"README.md's '## Test' has {len(body['## Test'])} lines (at most {MAX_TEST_LINES})")


@pytest.mark.parametrize("page", _readmes(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_readme_section_fits_one_screen(page):
    long = [f"{h!r}: {len(_body(lines))} lines" for h, lines in _sections(page)
            if len(_body(lines)) > MAX_SECTION_LINES]
    assert not long, (f"{page.relative_to(ROOT)}: sections over {MAX_SECTION_LINES} lines: {long}; "
                      "split them, or move reference material to its own page")
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    paragraphs = [p for p in re.split(r"\n\s*\n", text) if not p.lstrip().startswith("|")]
    wordy = [f"{p.split()[:6]}...: {len(p.split())} words" for p in paragraphs if len(p.split()) > MAX_PARAGRAPH_WORDS]
    assert not wordy, f"{page.relative_to(ROOT)}: paragraphs over {MAX_PARAGRAPH_WORDS} words: {wordy}"


def test_the_reports_index_cells_are_short():
    rows = [line for line in (ROOT / "reports/README.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("|")]
    long = [cell.strip()[:40] for row in rows for cell in row.strip("|").split("|")
            if len(cell.split()) > MAX_INDEX_CELL_WORDS]
    assert not long, f"reports/README.md: index cells over {MAX_INDEX_CELL_WORDS} words: {long}"


def test_no_page_or_code_outside_reports_carries_a_date():
    """A date beside a figure is history: it belongs on that date's page under reports/."""
    kinds = (".md", ".py", ".yaml", ".sh", ".ipynb", ".template", ".sbatch", ".toml", ".cfg")
    dated = []
    for name in _repo_files():
        if name.startswith(("reports/", "tests/")) or not (name.endswith(kinds) or name == "Makefile"):
            continue
        path = ROOT / name
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="ignore").splitlines(), 1):
            if _DATE.search(line):
                dated.append(f"{name}:{number}")
    assert not dated, f"dates outside reports/ (move the measurement to reports/<date>.md): {dated}"


def test_the_shape_rules_catch_what_they_should(tmp_path):
    page = tmp_path / "README.md"
    page.write_text("# t\n\nintro\n\n## Long\n" + "line\n" * (MAX_SECTION_LINES + 1) + "```\n## not a heading\n```\n",
                    encoding="utf-8")
    sections = _sections(page)
    assert [h for h, _ in sections] == ["# t", "## Long"]
    assert len(_body(sections[1][1])) == MAX_SECTION_LINES + 1 + 3
    assert _DATE.search("measured on 2026-12-03: 5 s") and not _DATE.search("start=2026-11-29T10:15:00Z")
