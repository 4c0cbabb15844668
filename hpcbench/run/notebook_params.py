"""The ``parameters`` cell of an experiment's notebook, rendered from its config dataclass.

papermill overrides the assignments of the cell tagged ``parameters`` by name, so that cell must
hold exactly the config's fields with their defaults, then the task context the runner sets
(:data:`~hpcbench.run.task.CONTEXT_DEFAULTS`). It is generated, never edited by hand, and laid out
in two blocks::

    # Parameters: the fields of <config class>; papermill overrides them by name.
    # `hpcbench params <experiment>` lists what each one allows, with its full doc.
    iters = 10  # timed iterations per size; each one is kept as a sample
    ...

    # -- task context: set by hpcbench when it runs this notebook; leave as is --
    run_id = 'interactive'  # name of the run dir; 'interactive' when run by hand
    ...

Each line's comment is its ``param`` doc cut to one line (:func:`one_line`); papermill reads it as
the parameter's help (``papermill --help-notebook``). ``tests/test_notebook_params.py`` fails when
a notebook's cell differs from :func:`render`; ``hpcbench docs --write`` rewrites it
(:func:`notebook_pages`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from hpcbench.core.errors import HpcbenchError
from hpcbench.experiments import EXPERIMENTS, Experiment
from hpcbench.run.task import CONTEXT_DEFAULTS

#: The tag papermill looks for.
TAG = "parameters"
#: The line between the user's parameters and the task context.
CONTEXT_HEADER = "# -- task context: set by hpcbench when it runs this notebook; leave as is --"
#: What each context parameter is, one line each (same keys as CONTEXT_DEFAULTS).
CONTEXT_DOCS: dict[str, str] = {
    "run_id": "name of the run dir; 'interactive' when run by hand",
    "suite": "the suite this task belongs to; '' when run by hand",
    "variant": "the suite's name for this parameter set",
    "task_id": "<experiment>.<variant>.r<repetition> in a suite; '' makes it <experiment>.<variant>",
    "repetition": "which repeat of this variant, from 0 (a suite's `repeat` says how many)",
    "output_dir": "the task's folder in the run dir; '' writes under results/interactive/<task_id>",
}
#: Longest comment kept whole; a longer doc is cut at a clause boundary (``hpcbench params`` shows it all).
MAX_COMMENT = 100
#: A cut shorter than this says too little: the doc is then cut at a word instead.
MIN_CUT = 30

# papermill's parameter inspection skips any line with two "=" (it reads one assignment per
# line), so a comment must not hold one: comparisons become their signs, the rest a colon.
_NO_EQUALS = ((">=", "≥"), ("<=", "≤"), ("!=", "≠"), ("==", ":"), (" = ", ": "), ("=", ": "))
# Where a clause ends; not ": ", which introduces what the words before it mean.
_BOUNDARIES = ("; ", ". ", ", ", " (", " — ")
_OPEN, _CLOSE = "([{", ")]}"


def one_line(doc: str, limit: int = MAX_COMMENT) -> str:
    """``doc`` as a one-line comment of at most about ``limit`` characters, without ``=``.

    A longer doc is cut at its last clause boundary (``;``, ``.``, ``,``, an opening parenthesis)
    outside brackets that keeps at least :data:`MIN_CUT` characters and ends on a clause of three
    words or more (not a dangling "; empty"); else at a word, with an ellipsis and the brackets
    it left open closed.

    Args:
        doc: a field's ``param`` doc, any length, any line breaks.
        limit: the longest comment kept whole.

    Returns:
        The comment text, without its ``#``.
    """
    text = " ".join(doc.split())
    if len(text) > limit:
        text = _cut(text, limit)
    for old, new in _NO_EQUALS:
        text = text.replace(old, new)
    return text


def _closers(text: str) -> str:
    """The brackets that close what ``text`` leaves open, innermost first ("" when balanced)."""
    expected: list[str] = []
    for ch in text:
        if ch in _OPEN:
            expected.append(_CLOSE[_OPEN.index(ch)])
        elif expected and ch == expected[-1]:
            expected.pop()
    return "".join(reversed(expected))


def _cut(text: str, limit: int) -> str:
    cut, clause = 0, 0
    for i in range(min(len(text), limit + 1)):
        if text.startswith(_BOUNDARIES, i) and not _closers(text[:i]):
            if i >= MIN_CUT and len(text[clause:i].split()) >= 3:
                cut = i
            clause = i + 2
    if cut:
        return text[:cut].rstrip(" ,;:.")
    head = text[:limit - 1].rsplit(" ", 1)[0].rstrip(" ,;:.([{")
    return head + "…" + _closers(head)


def _assignment(name: str, value: Any, doc: str) -> str:
    line = f"{name} = {value!r}"
    return f"{line}  # {doc}" if doc else line


def render(exp: Experiment) -> str:
    """The source of ``exp``'s parameters cell: its config's fields, then the task context.

    Values are written with ``repr``, so ``ast.literal_eval`` (and papermill) read back the
    config's defaults exactly.

    Args:
        exp: a registered experiment (its ``name`` and ``config`` class are read).

    Returns:
        The cell's source, lines joined by newlines, no trailing newline (as Jupyter stores it).
    """
    config = exp.config
    defaults = config.defaults()
    lines = [f"# Parameters: the fields of {config.__module__}.{config.__qualname__}; papermill overrides them by name.",
             f"# `hpcbench params {exp.name}` lists what each one allows, with its full doc."]
    lines += [_assignment(row["name"], defaults[row["name"]], one_line(row["doc"])) for row in config.describe()]
    lines += ["", CONTEXT_HEADER]
    lines += [_assignment(name, value, CONTEXT_DOCS[name]) for name, value in CONTEXT_DEFAULTS.items()]
    return "\n".join(lines)


def parameters_cell(notebook: Any, where: str | Path = "") -> Any:
    """The cell tagged ``parameters`` of an nbformat notebook (one, or :class:`HpcbenchError`)."""
    cells = [c for c in notebook.cells if TAG in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise HpcbenchError(f"{where or 'notebook'}: {len(cells)} cells tagged {TAG!r}, expected one")
    return cells[0]


def refresh(exp: Experiment, text: str) -> str:
    """``text`` (the notebook file's JSON) with its parameters cell rendered afresh; ``text`` itself when current.

    Only the cell's source changes: its id, tags and (empty) outputs stay as they are.

    Args:
        exp: the experiment the notebook belongs to.
        text: the ``.ipynb`` file's content.

    Returns:
        The file's new content, written as ``nbformat.write`` would.
    """
    import nbformat

    notebook = nbformat.reads(text, as_version=4)
    cell = parameters_cell(notebook, exp.notebook_path())
    fresh = render(exp)
    if cell.source == fresh:
        return text
    cell.source = fresh
    return nbformat.writes(notebook) + "\n"  # as nbformat.write ends the file


def notebook_pages() -> list[tuple[Path, Callable[[str], str]]]:
    """(notebook path, text -> fresh text) of every registered experiment, for ``hpcbench docs``."""
    return [(exp.notebook_path(), lambda text, exp=exp: refresh(exp, text))
            for exp in sorted((EXPERIMENTS.get(n) for n in EXPERIMENTS.names()), key=lambda e: e.notebook)]
