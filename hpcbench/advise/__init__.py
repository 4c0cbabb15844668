"""The advisor (C14): classify a run from what it measured, recommend the guide's technique, predict each option.

``hpcbench advise RUN_DIR`` prints the advice for every task of a run (the folder is read by
:mod:`hpcbench.report.advice`, the records advised here by :func:`advise_tasks`):

* :mod:`~hpcbench.advise.figures` reads one data-parallel series' measured figures (step with and
  without communication, one synchronisation alone, DDP's bucket layout, the link rate);
* :mod:`~hpcbench.advise.link` gets its link as a scale-model platform (fitted from
  collectives-style probe rows, else inferred from the shaped rate, else fitted from the run's
  own collectives-style tasks on the same layout) and splits one synchronisation into its
  latency and byte terms;
* :mod:`~hpcbench.advise.classify` applies C14's order with the thresholds of
  :mod:`~hpcbench.advise.thresholds`: bandwidth-bound -> gradient compression, latency-sensitive
  -> topology optimisation, otherwise overlap;
* :mod:`~hpcbench.advise.recommend` predicts every option's gain with
  :func:`hpcbench.scale.predict.predict_step` and formats the advice.

Pure library: pandas and numpy, no torch.
"""

from hpcbench.advise.classify import REGIMES, Classification, Regime, classify
from hpcbench.advise.figures import AdviceError, Figure, Measured, find_series, measure
from hpcbench.advise.recommend import (OVERLAP_MICRO_STEPS, TECHNIQUES, Advice, Option, RunAdvice, Skipped, advice_json,
                                       advise, advise_all, advise_tasks, format_advice)
from hpcbench.advise.thresholds import THRESHOLDS, Thresholds

__all__ = ["Advice", "AdviceError", "Classification", "Figure", "Measured", "OVERLAP_MICRO_STEPS", "Option",
           "REGIMES", "Regime", "RunAdvice", "Skipped", "TECHNIQUES", "THRESHOLDS", "Thresholds", "advice_json",
           "advise", "advise_all", "advise_tasks", "classify", "find_series", "format_advice", "measure"]
