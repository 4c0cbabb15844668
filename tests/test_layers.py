"""The layer order of hpcbench's subpackages, enforced: imports go down, never up, and never round.

Every import of every module counts (module level and function-local, ``import x`` and
``from x import y``, relative ones resolved), read with ``ast`` without importing anything.
A subpackage is ``hpcbench.<name>`` (a module ``hpcbench/<name>.py`` is one too). An import of a
higher layer fails, and so do two subpackages of one layer that import each other, even through
others. hpcbench/README.md ("Layers") draws the same order.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "hpcbench"
README = PACKAGE / "README.md"

#: Subpackage -> layer, bottom (0) up. An import may go down or stay in its layer without a cycle.
LAYERS = {
    # ground: units, schema, errors, facts of the world, the guide's claims. ``__init__`` holds only
    # the version, and every import of hpcbench runs it first.
    "__init__": 0, "core": 0, "guide": 0,
    # what rules judge with and presenters build with
    "judge": 1, "present": 1,
    # techniques
    "data": 2, "models": 2, "parallel": 2, "fault": 2, "affinity": 2, "monitor": 2, "diag": 2, "scale": 2,
    "cluster": 2, "system": 2, "dist": 2, "advise": 2, "practice": 2,
    "experiments": 3,
    # orchestration
    "run": 4, "report": 4,
    # entry points
    "cli": 5, "__main__": 5, "bench": 5, "reproduce": 5,
}
LAYER_NAMES = ("ground", "judge and present", "techniques", "experiments", "orchestration", "entry points")

#: (importing files, as a glob from the repository root, imported subpackage, why it is allowed). Keep it
#: short: each entry is something in the wrong room; one that matches no import fails, so the list only shrinks.
EXCEPTIONS: list[tuple[str, str, str]] = []


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _unit(module: str, pkg: str, units: set[str]) -> str | None:
    """The subpackage ``module`` belongs to; ``__init__`` for the root package itself."""
    parts = module.split(".")
    if parts[0] != pkg:
        return None
    if len(parts) == 1:
        return "__init__"
    return parts[1] if parts[1] in units else "__init__"


def subpackages(root: Path) -> set[str]:
    """The package's modules and folders holding Python (``guide/`` is a namespace package)."""
    return {p.stem if p.is_file() else p.name for p in root.iterdir()
            if p.suffix == ".py" or (p.is_dir() and any(p.rglob("*.py")))}


def imports_of(root: Path) -> list[tuple[str, str, str]]:
    """Every import between subpackages of the package at ``root``: (from, to, "file:line")."""
    pkg = root.name
    units = subpackages(root) - {"__init__"}
    found = []
    for path in sorted(root.rglob("*.py")):
        module = _module_name(path, root)
        src = _unit(module, pkg, units)
        where = f"{path.relative_to(root.parent)}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                    base = here[: len(here) - node.level + 1]
                    name = ".".join(base + ([node.module] if node.module else []))
                else:
                    name = node.module or ""
                # ``from hpcbench import cluster`` imports the subpackage, not the root
                targets = ([f"{name}.{a.name}" for a in node.names] if name == pkg else [name])
            else:
                continue
            for target in targets:
                dst = _unit(target, pkg, units)
                if dst is not None and dst != src:
                    found.append((src, dst, f"{where}:{node.lineno}"))
    return found


def _cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    comps: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return comps


def layer_problems(root: Path, layers: dict[str, int],
                   exceptions: list[tuple[str, str, str]] = ()) -> tuple[list[str], list[tuple[str, str, str]]]:
    """What breaks the order: imports up a layer, cycles inside one, subpackages with no layer.

    An import of ``exceptions`` (a glob of the importing file, relative to ``root``'s parent, and
    the imported subpackage) is left out of all three.

    Returns:
        (one line per offending import, naming its file:line; the exceptions that matched nothing).
    """
    used: set[tuple[str, str]] = set()
    problems, same_layer = [], {}
    for src, dst, where in imports_of(root):
        excepted = [(g, d) for g, d, _ in exceptions if d == dst and fnmatch.fnmatch(where.rsplit(":", 1)[0], g)]
        if excepted:
            used.update(excepted)
            continue
        for unit in (src, dst):
            if unit not in layers:
                problems.append(f"{where}: {unit} has no layer (add it to LAYERS and the README's picture)")
        if src not in layers or dst not in layers:
            continue
        if layers[dst] > layers[src]:
            problems.append(f"{where}: {src} (layer {layers[src]}) imports {dst} (layer {layers[dst]}): up a layer")
        elif layers[dst] == layers[src]:
            same_layer.setdefault((src, dst), []).append(where)
    edges: dict[str, set[str]] = {}
    for src, dst in same_layer:
        edges.setdefault(src, set()).add(dst)
    for comp in _cycles(edges):
        ring = " <-> ".join(sorted(comp))
        for (src, dst), wheres in sorted(same_layer.items()):
            if src in comp and dst in comp:
                problems += [f"{where}: {src} imports {dst}: a cycle inside one layer ({ring})" for where in wheres]
    stale = [e for e in exceptions if (e[0], e[1]) not in used]
    return sorted(set(problems)), stale


def test_imports_go_down_the_layers_and_never_round():
    problems, stale = layer_problems(PACKAGE, LAYERS, EXCEPTIONS)
    assert not problems, "imports against the layer order (hpcbench/README.md, 'Layers'):\n" + "\n".join(problems)
    assert not stale, f"exceptions that no import needs any more, remove them: {stale}"


def test_every_subpackage_has_a_layer_and_the_readme_draws_them_all():
    units = subpackages(PACKAGE)
    assert units <= set(LAYERS), f"subpackages with no layer: {sorted(units - set(LAYERS))}"
    assert set(LAYERS) - {"__init__"} <= units, f"layers of subpackages that do not exist: {set(LAYERS) - units}"
    text = README.read_text(encoding="utf-8")
    match = re.search(r"^## Layers\n(.*?)^## ", text, re.M | re.S)
    assert match, "hpcbench/README.md has no '## Layers' section"
    drawn = set(re.findall(r"[a-z_]+", match.group(1)))
    missing = sorted(u for u in set(LAYERS) - {"__init__"} if u not in drawn)
    assert not missing, f"the README's layer picture does not name {missing}"


def _write(root: Path, rel: str, text: str = "") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_checker_finds_an_upward_import_and_a_cycle(tmp_path):
    pkg = tmp_path / "toy"
    _write(pkg, "__init__.py")
    _write(pkg, "base/__init__.py")
    _write(pkg, "base/units.py", "def metres(x):\n    return x\n")
    _write(pkg, "low/__init__.py")
    _write(pkg, "low/model.py", "from toy.base.units import metres\n\n\ndef fit():\n    from toy.top.cli import main\n")
    _write(pkg, "a/__init__.py")
    _write(pkg, "a/one.py", "from ..b import two\n")
    _write(pkg, "b/__init__.py")
    _write(pkg, "b/two.py", "def f():\n    import toy.a.one\n")
    _write(pkg, "top/__init__.py")
    _write(pkg, "top/cli.py", "from toy import low\nfrom .. import a\n\n\ndef main():\n    pass\n")
    layers = {"__init__": 0, "base": 0, "low": 1, "a": 1, "b": 1, "top": 2}

    problems, stale = layer_problems(pkg, layers)
    assert problems == [
        "toy/a/one.py:1: a imports b: a cycle inside one layer (a <-> b)",
        "toy/b/two.py:2: b imports a: a cycle inside one layer (a <-> b)",
        "toy/low/model.py:5: low (layer 1) imports top (layer 2): up a layer",
    ]
    # an exception lets one edge through, and one that matches nothing is reported as stale
    problems, stale = layer_problems(pkg, layers, [("toy/low/*.py", "top", "why"), ("toy/base/*", "low", "never")])
    assert len(problems) == 2 and stale == [("toy/base/*", "low", "never")]
    # a subpackage missing from the map is named, not silently allowed
    problems, _ = layer_problems(pkg, {k: v for k, v in layers.items() if k != "top"})
    assert any("top has no layer" in p for p in problems)


@pytest.mark.parametrize("source,expected", [("from . import x", "toy.a.x"), ("from .. import b", "toy.b")])
def test_relative_imports_resolve_from_a_package_init(tmp_path, source, expected):
    pkg = tmp_path / "toy"
    _write(pkg, "__init__.py")
    _write(pkg, "a/__init__.py", source + "\n")
    _write(pkg, "b/__init__.py")
    found = imports_of(pkg)
    assert found == ([] if expected.startswith("toy.a") else [("a", "b", "toy/a/__init__.py:1")])
