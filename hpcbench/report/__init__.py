"""The HTML report: aggregate run directories on dask, present each experiment, one file out.

    from hpcbench.report import build_report
    build_report(["results/run-a", "results/run-b"], "report/")  # -> report/index.html

Modules: :mod:`aggregate` (dask), :mod:`ledger` (claims x rules -> rows), :mod:`ledger_page`
(the ledger as the page shows it), :mod:`html` (the page), :mod:`templates` (its jinja2
templates), :mod:`report_folder` (the output folder, checked first and replaced whole),
:mod:`redact` (no path or name of the machine in what a report writes), :mod:`report_json` (the
report's metadata as data, versioned: ``SCHEMA.md``), :mod:`publish` (the static site),
:mod:`claim_history` (claims across reports: the site's claims page, ``--compare``), :mod:`advice`
(the advisor over a run folder). What experiments use lies
below: :mod:`hpcbench.judge` (verdicts, rule kit, evidence) and :mod:`hpcbench.present` (tables,
figures, sections).
"""

from hpcbench.report.aggregate import Aggregate, Unreadable, aggregate, load_sources
from hpcbench.report.html import build_report, render

__all__ = ["Aggregate", "Unreadable", "aggregate", "build_report", "load_sources", "render"]
