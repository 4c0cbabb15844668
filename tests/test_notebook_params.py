"""The notebooks' parameters cells: rendered from the config, one commented line per parameter, context apart."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from types import SimpleNamespace

import nbformat
import papermill as pm
import pytest

from hpcbench.core.config import Config, param
from hpcbench.core.errors import HpcbenchError
from hpcbench.experiments import EXPERIMENTS
from hpcbench.run.notebook_params import (CONTEXT_DOCS, CONTEXT_HEADER, MAX_COMMENT, notebook_pages, one_line,
                                          parameters_cell, refresh, render)
from hpcbench.run.task import CONTEXT_DEFAULTS


@pytest.mark.parametrize("name", EXPERIMENTS.names())
def test_parameters_cell_is_the_rendered_one(name):
    exp = EXPERIMENTS.get(name)
    cell = parameters_cell(nbformat.read(exp.notebook_path(), as_version=4))
    assert cell.source == render(exp), f"{exp.notebook}: run `hpcbench docs --write` to render its parameters cell"


@pytest.mark.parametrize("name", EXPERIMENTS.names())
def test_every_parameter_has_a_comment_and_the_context_comes_after_the_separator(name):
    exp = EXPERIMENTS.get(name)
    inspected = pm.inspect_notebook(str(exp.notebook_path()))  # what `papermill --help-notebook` shows
    assert list(inspected) == exp.config.field_names() + list(CONTEXT_DEFAULTS)
    for key, found in inspected.items():
        assert found["help"], f"{exp.notebook}: {key} has no comment"
        assert "\n" not in found["help"] and len(found["help"]) <= MAX_COMMENT + 2, (key, found["help"])
    lines = parameters_cell(nbformat.read(exp.notebook_path(), as_version=4)).source.splitlines()
    separator = lines.index(CONTEXT_HEADER)
    assigned = [line.split(" = ", 1)[0] for line in lines if " = " in line and not line.startswith("#")]
    assert assigned[:len(exp.config.field_names())] == exp.config.field_names()
    context_lines = [line.split(" = ", 1)[0] for line in lines[separator + 1:]]
    assert context_lines == list(CONTEXT_DEFAULTS)


def test_every_context_parameter_is_documented():
    assert list(CONTEXT_DOCS) == list(CONTEXT_DEFAULTS)


@pytest.mark.parametrize("doc,expected", [
    ("timed iterations", "timed iterations"),
    ("  spread\n  over lines  ", "spread over lines"),
    # papermill skips a line with two "=": none may be left in a comment
    ("a verdict needs >= 5; 0 = off; k=1 first", "a verdict needs ≥ 5; 0: off; k: 1 first"),
    # a long doc is cut at its last clause boundary outside brackets...
    ("inter-node link rate of the phase, in tc syntax (slow: ~0.5 s per ring all-reduce; measured on two "
     "nodes); set with reshape_links for the phase", "inter-node link rate of the phase, in tc syntax"),
    # ...never after a last clause of one or two words ("; empty")...
    ("seconds each external command may take, in wall time; empty; two words; then a tail that goes past "
     "the limit", "seconds each external command may take, in wall time"),
    # ...else at a word, with the brackets it left open closed
    ("model (" + "word " * 30 + ")", "model (" + ("word " * 18).strip() + "…)"),
])
def test_one_line(doc, expected):
    assert one_line(doc) == expected
    assert len(one_line(doc)) <= MAX_COMMENT + 2 and "=" not in one_line(doc)


@dataclass
class ToyConfig(Config):
    n: int = param(3, "how many values; 0 = none")
    names: list[str] = param(["a", "b"], "names " * 40)


def test_render_reads_back_through_papermill(tmp_path):
    exp = SimpleNamespace(name="toy", config=ToyConfig, notebook_path=lambda: tmp_path / "toy.ipynb")
    cell = nbformat.v4.new_code_cell("n = 3\n" + "".join(f"{k} = {v!r}\n" for k, v in CONTEXT_DEFAULTS.items()))
    cell.metadata["tags"] = ["parameters"]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Toy"), cell,
                                               nbformat.v4.new_code_cell("print(n)")],
                                        metadata={"kernelspec": {"name": "hpcbench", "language": "python",
                                                                 "display_name": "hpcbench (Python 3)"}})
    nbformat.write(notebook, exp.notebook_path())
    text = exp.notebook_path().read_text()

    fresh = refresh(exp, text)
    assert fresh != text and refresh(exp, fresh) == fresh  # a current notebook is left as it is, byte for byte
    exp.notebook_path().write_text(fresh)
    inspected = pm.inspect_notebook(str(exp.notebook_path()))
    assert {k: ast.literal_eval(v["default"]) for k, v in inspected.items()} == {**ToyConfig.defaults(),
                                                                                 **CONTEXT_DEFAULTS}
    assert inspected["n"]["help"] == "how many values; 0: none"
    # Only the parameters cell's source changed: its id and tags, and the other cells, are kept.
    again = nbformat.reads(fresh, as_version=4)
    assert [c.id for c in again.cells] == [c.id for c in notebook.cells]
    assert again.cells[1].metadata["tags"] == ["parameters"]
    assert [c.source for c in again.cells[::2]] == [c.source for c in notebook.cells[::2]]


def test_a_notebook_without_one_parameters_cell_is_refused():
    with pytest.raises(HpcbenchError, match="0 cells tagged 'parameters'"):
        parameters_cell(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), "toy.ipynb")


def test_docs_covers_every_notebook():
    paths = [path for path, _ in notebook_pages()]
    assert sorted(paths) == sorted(EXPERIMENTS.get(n).notebook_path() for n in EXPERIMENTS.names())
