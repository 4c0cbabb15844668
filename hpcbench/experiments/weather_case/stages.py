"""The stages of the guide's tuning case (C7) as a registry: what each stage turns on.

The guide's table has three rows — original, after communication tuning, full optimisation —
and names three techniques (guide section 3). Each row here is one :class:`Stage`; the three
techniques alone are stages too, so that the ablation shows what each one is worth on its own:

=====================  ============  ================  ============  ===============
stage                  reduction     buckets           compression   micro-steps
=====================  ============  ================  ============  ===============
``original``           flat DDP      DDP's default     none (fp32)   1 (sync each)
``comm_tuned``         hierarchical  tuned             none (fp32)   1 (sync each)
``full``               hierarchical  4 MiB (guide)     quant2bit     k under no_sync
``hierarchical_only``  hierarchical  DDP's default     none (fp32)   1 (sync each)
``quant2bit_only``     flat DDP      4 MiB (guide)     quant2bit     1 (sync each)
``no_sync_only``       flat DDP      DDP's default     none (fp32)   k under no_sync
=====================  ============  ================  ============  ===============

"DDP's default" is ``bucket_cap_mb=None``: 25 MiB buckets with a 1 MiB first bucket. "tuned" is the
config's ``tuned_bucket_mb``. "4 MiB (guide)" is the guide's compression bucket (C8,
:data:`hpcbench.parallel.compression.GUIDE_BUCKET_BYTES`). With the hierarchical reduction, quant2bit
compresses only the inter-node exchange (:mod:`hpcbench.parallel.compression`). k is the config's
``micro_steps`` (the guide's 4).

Pure data, no torch: the config, the summary and the rules read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.core.registry import Registry
# BASELINE: the stage every loss and speed-up is compared with, the guide's first row (declared with C7)
from hpcbench.experiments.weather_case.claims import BASELINE, GUIDE_C7_STEP_MS, GUIDE_C7_UTIL
from hpcbench.parallel.compression import GUIDE_BUCKET_BYTES

#: The guide's compression bucket in DDP's unit (MiB): 4.
GUIDE_BUCKET_MB = GUIDE_BUCKET_BYTES / (1 << 20)

#: Where a stage's DDP bucket size comes from.
BUCKET_DEFAULT, BUCKET_TUNED, BUCKET_GUIDE = "default", "tuned", "guide"


@dataclass(frozen=True)
class Stage:
    """One stage of the ablation: a communication mode, a bucket size, a compression, accumulation or not."""

    name: str
    description: str
    mode: str
    """a name of :data:`hpcbench.parallel.modes.MODES`: ``ddp`` (flat) or ``hierarchical``"""
    bucket: str
    """``default`` (DDP's), ``tuned`` (the config's ``tuned_bucket_mb``) or ``guide`` (4 MiB)"""
    compression: str = "none"
    """a name of :data:`hpcbench.parallel.compression.COMPRESSIONS`"""
    no_sync: bool = False
    """accumulate ``micro_steps`` micro-batches under ``no_sync()`` and synchronise once"""
    guide_row: int | None = None
    """the row of the guide's table this stage reproduces (index into GUIDE_C7_*), or None"""

    def bucket_cap_mb(self, tuned_bucket_mb: float) -> float | None:
        """The ``bucket_cap_mb`` to wrap the model with (None: DDP's default)."""
        return {BUCKET_DEFAULT: None, BUCKET_TUNED: tuned_bucket_mb, BUCKET_GUIDE: GUIDE_BUCKET_MB}[self.bucket]

    def micro_steps(self, k: int) -> int:
        """Micro-batches per optimizer step: ``k`` under no_sync, else 1 (every micro-batch synchronises)."""
        return k if self.no_sync else 1

    @property
    def guide_ms(self) -> float | None:
        return None if self.guide_row is None else float(GUIDE_C7_STEP_MS[self.guide_row])

    @property
    def guide_util(self) -> float | None:
        return None if self.guide_row is None else float(GUIDE_C7_UTIL[self.guide_row])

    def setup(self, tuned_bucket_mb: float, k: int, skip: list[str] | tuple[str, ...]) -> str:
        """One line: what this stage ran with, as recorded next to its numbers."""
        bucket = self.bucket_cap_mb(tuned_bucket_mb)
        parts = ["flat DDP all-reduce" if self.mode == "ddp" else "hierarchical reduction",
                 "DDP's default buckets (25 MiB, first 1 MiB)" if bucket is None else f"{bucket:g} MiB buckets"]
        if self.compression != "none":
            parts.append(f"{self.compression} (skipping {list(skip)})")
        else:
            parts.append("fp32")
        parts.append(f"no_sync over {k} micro-steps" if self.no_sync else "synchronised every micro-step")
        return ", ".join(parts)


STAGES: Registry[Stage] = Registry("weather_case stage")
#: Registration order = the ablation's order (the guide's three rows first).
STAGE_ORDER: list[str] = []


def register_stage(stage: Stage) -> Stage:
    STAGES.register(stage.name, stage)
    STAGE_ORDER.append(stage.name)
    return stage


register_stage(Stage(BASELINE, "flat DDP, fp32 all-reduce every step, DDP's default buckets",
                     "ddp", BUCKET_DEFAULT, guide_row=0))
register_stage(Stage("comm_tuned", "hierarchical reduction with tuned buckets (the guide's 'communication tuning')",
                     "hierarchical", BUCKET_TUNED, guide_row=1))
register_stage(Stage("full", "comm_tuned + 2-bit compression in 4 MiB buckets (layer norms plain) + no_sync "
                             "over k micro-steps", "hierarchical", BUCKET_GUIDE, "quant2bit", True, guide_row=2))
register_stage(Stage("hierarchical_only", "the hierarchical reduction alone, DDP's default buckets",
                     "hierarchical", BUCKET_DEFAULT))
register_stage(Stage("quant2bit_only", "2-bit compression alone (flat, 4 MiB buckets, layer norms plain)",
                     "ddp", BUCKET_GUIDE, "quant2bit"))
register_stage(Stage("no_sync_only", "no_sync accumulation over k micro-steps alone (flat DDP, default buckets)",
                     "ddp", BUCKET_DEFAULT, no_sync=True))

STAGE_NAMES = tuple(STAGE_ORDER)
