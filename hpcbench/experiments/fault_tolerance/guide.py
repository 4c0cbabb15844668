"""The guide's figures for the claims this experiment rules on (C11, C15), each once, with where it says them.

Only this experiment reads them, so they live here and not in :mod:`hpcbench.core.facts`, which
keeps the figures a lower layer needs (the guide's own arithmetic, the monitor's thresholds).
The wording they come from: :data:`hpcbench.guide.claims.CLAIMS` (``C11``, ``C15``).
"""

from __future__ import annotations

#: C11 (guide sec. 6, "Best practices"): "save the full training state every hour".
GUIDE_C11_FULL_EVERY_S = 3600
#: C11: "and a light checkpoint every 10 minutes".
GUIDE_C11_LIGHT_EVERY_S = 600
#: C15 (guide sec. 2.5, "Too little fault tolerance"): the job wrapper reruns srun "up to 3 times" (retry from 0
#: while < 3): 3 runs in all.
GUIDE_C15_TRIES = 3

__all__ = ["GUIDE_C11_FULL_EVERY_S", "GUIDE_C11_LIGHT_EVERY_S", "GUIDE_C15_TRIES"]
