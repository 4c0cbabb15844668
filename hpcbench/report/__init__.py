"""The HTML report: aggregate run directories on dask, present each experiment, one file out.

    from hpcbench.report import build_report
    build_report(["results/run-a", "results/run-b"], "report/")  # -> report/index.html
"""

from hpcbench.report.aggregate import Aggregate, Unreadable, aggregate, load_sources
from hpcbench.report.html import build_report, render
from hpcbench.report.presenters import PRESENTERS, ExperimentData, Presenter, Section

__all__ = ["Aggregate", "ExperimentData", "PRESENTERS", "Presenter", "Section", "Unreadable",
           "aggregate", "build_report", "load_sources", "render"]
