"""Notebooks: parameters cells mirror their config dataclasses; each runs under papermill."""

import ast
import json
import sys

import nbformat
import papermill as pm
import pytest

from conftest import execute_notebook
from hpcbench.experiments import EXPERIMENTS
from hpcbench.run.execute import KERNEL_DISPLAY_NAME, KERNEL_NAME, check_kernel
from hpcbench.run.task import CONTEXT_DEFAULTS


@pytest.mark.parametrize("name", EXPERIMENTS.names())
def test_parameters_cell_matches_config(name):
    exp = EXPERIMENTS.get(name)
    inspected = pm.inspect_notebook(str(exp.notebook_path()))
    declared = {k: ast.literal_eval(v["default"]) for k, v in inspected.items()}
    expected = {**exp.config.defaults(), **CONTEXT_DEFAULTS}
    assert list(declared) == exp.config.field_names() + list(CONTEXT_DEFAULTS)
    assert declared == expected


@pytest.mark.parametrize("name", EXPERIMENTS.names())
def test_notebooks_are_stored_without_outputs(name):
    nb = nbformat.read(EXPERIMENTS.get(name).notebook_path(), as_version=4)
    # The kernel `make setup` registers: JupyterLab, a hub's servers and papermill all pick it by this name.
    assert nb.metadata["kernelspec"]["name"] == KERNEL_NAME == "hpcbench"
    assert nb.metadata["kernelspec"]["display_name"] == KERNEL_DISPLAY_NAME
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None


def test_kernel_is_registered_for_this_interpreter():
    assert check_kernel() is None  # `make setup` registered `hpcbench`, running this venv's python
    message = check_kernel("no-such-kernel")
    assert "'no-such-kernel' not found" in message
    assert f"{sys.executable} -m ipykernel install --sys-prefix --name no-such-kernel" in message


def test_environment_notebook_runs(tmp_path):
    df, out_dir = execute_notebook("environment", tmp_path)
    assert set(df["experiment"]) == {"environment"}
    assert (df["metric"] == "toolchain.python").any()
    saved = json.loads((out_dir / "config.json").read_text())
    assert saved["experiment"] == "environment"


def test_collectives_notebook_runs_tiny(tmp_path):
    df, _ = execute_notebook("collectives", tmp_path, nodes=2, ranks_per_node=2, ops=["all_reduce", "broadcast"],
                     max_bytes=4096, iters=2, warmup_iters=1)
    checks = df[df["metric"] == "correct"]
    assert len(checks) == 2 * 2 * 5 and (checks["value"] == 1.0).all()
    nb = nbformat.read(tmp_path / "collectives.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "PASS" in text
    # the plot was drawn (an image output exists)
    assert any("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
