"""Diagnostics (the guide's section 5, T-diag): where a step's time goes, a profiler trace per
task, and the checks that keep multi-node training from diverging.

* :mod:`~hpcbench.diag.step_breakdown`: :class:`StepTimer` splits each training step into
  data wait, forward, backward, exposed communication wait and optimizer (CUDA events on
  GPU, ``perf_counter`` on CPU); :func:`jitter`; rows in the results schema;
* :mod:`~hpcbench.diag.trace`: :func:`profile_steps` writes a Chrome/Perfetto trace to
  ``<task dir>/trace/<rank>.json``; :func:`trace_summary` lists the top operators by self
  time and the gaps between kernels (between top-level operators on CPU);
* :mod:`~hpcbench.diag.divergence`: the same start on every rank (:func:`check_same_start`),
  the TF32 state (:func:`tf32_state`, :func:`disable_tf32`) and :func:`clip_gradients`.

Importing this package does not import torch; each function does when called.
"""

from hpcbench.diag.divergence import (ClipStats, DivergenceError, check_same_start, clip_gradients, disable_tf32,
                                      parameter_checksum, ranks_agree, tf32_state)
from hpcbench.diag.step_breakdown import (PHASES, StepTimer, StepTimerError, breakdown_records, jitter,
                                          write_breakdown)
from hpcbench.diag.trace import GapStats, OpTime, StepProfiler, TraceSummary, profile_steps, trace_summary

__all__ = ["PHASES", "ClipStats", "DivergenceError", "GapStats", "OpTime", "StepProfiler", "StepTimer",
           "StepTimerError", "TraceSummary", "breakdown_records", "check_same_start", "clip_gradients",
           "disable_tf32", "jitter", "parameter_checksum", "profile_steps", "ranks_agree", "tf32_state",
           "trace_summary", "write_breakdown"]
