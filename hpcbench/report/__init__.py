"""The HTML report: aggregate run directories on dask, present each experiment, one file out.

    from hpcbench.report import build_report
    build_report(["results/run-a", "results/run-b"], "report/")  # -> report/index.html

Modules: :mod:`aggregate` (dask), :mod:`kit` (the document model presenters build),
:mod:`verdict` (intervals and references), :mod:`rulekit` (what rules share),
:mod:`ledger` (claims x rules -> rows), :mod:`html` (the page), :mod:`report_folder` (the
output folder, checked first and replaced whole), :mod:`publish`.
"""

from hpcbench.report.aggregate import Aggregate, Unreadable, aggregate, load_sources
from hpcbench.report.html import build_report, render
from hpcbench.report.kit import ExperimentData, Section

__all__ = ["Aggregate", "ExperimentData", "Section", "Unreadable", "aggregate", "build_report", "load_sources",
           "render"]
