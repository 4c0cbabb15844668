"""What presenters build report sections with: :mod:`kit` (cells, tables, figures, sections,
the experiment's data, number formats, the generic statistics table).

Below the techniques and the experiments, so that they can all present; the page itself (its
templates, aggregation, the report folder) is :mod:`hpcbench.report`'s.
"""
