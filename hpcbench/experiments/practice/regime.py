"""C12's regime: a platform on which a healthy run's step time is steady well inside the gate's 5 %.

Defined in :mod:`hpcbench.practice.regime` (the technique layer, where the gate itself lives), so
that ``scaling``'s C13 reads the same regime without importing this experiment; re-exported here
unchanged. The module docstring there gives the regime, why half the gate's limit, and how each
launch calibrates it.
"""

from hpcbench.practice.regime import (FACT_HEALTHY_CV, FACT_HEALTHY_STEPS, GATE_REGIME, IN_REGIME, NOT_RECORDED,
                                      OUT_OF_REGIME, SpreadRegime)

__all__ = ["FACT_HEALTHY_CV", "FACT_HEALTHY_STEPS", "GATE_REGIME", "IN_REGIME", "NOT_RECORDED", "OUT_OF_REGIME",
           "SpreadRegime"]
