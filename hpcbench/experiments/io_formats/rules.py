"""Verdict rules of ``io_formats``: C4 (small files starve the accelerator on Lustre) and C5 (the fixes).

The setting every comparison uses is fixed by the launch's own parameters before any
value is read: the most DataLoader workers it ran and the guide's buffer
(``prefetch_factor = 1``: num_workers x batch_size samples in flight), cold page cache,
the ``sweep`` phase. A step is one batch (waiting for it plus the emulated compute).

Both claims apply only where the data is on Lustre (the launch's recorded ``storage.filesystem``;
:data:`~hpcbench.experiments.io_formats.claims.APPLICABILITY`).
C4 is about Lustre's metadata server. C5 follows it in the same section of the guide and claims
that its three measures "fix the storage bottleneck": the bottleneck C4 names. Where that
bottleneck is absent (a local file system has no metadata server to overload) a container format
or a deeper buffer has nothing to fix, and a gain or its absence there says nothing about the
claim; so C5 applies exactly where C4 does.

The claims, their figures and the bands it judges with are declared in :mod:`~hpcbench.experiments.io_formats.claims`;
this module reads them.
"""

from __future__ import annotations

import pandas as pd

from hpcbench.core.results import json_object
from hpcbench.experiments.io_formats.claims import (C4_APPLIES, C4_IDLE_LOWER, C5_APPLIES, C5_BUFFER_SHARE,
                                                    C5_FORMATS, C5_SPEEDUP, GUIDE_C4_IDLE, GUIDE_PREFETCH)
from hpcbench.guide.claims import Claim
from hpcbench.judge.evidence import Evidence, Judgement
from hpcbench.judge.rulekit import Comparison, Level, judge_comparisons, judge_levels
from hpcbench.judge.verdict import Reference

SMALL_FILES = "files"


def setting_of(launch: pd.Series) -> tuple[int, int]:
    """(workers, prefetch_factor) compared: the most workers the launch ran, the guide's buffer."""
    params = json_object(launch["params"])
    workers = max(params.get("workers") or [0])
    prefetch = min(params.get("prefetch_factors") or [GUIDE_PREFETCH]) if workers else 0
    return int(workers), int(prefetch)


def rule_c4(claim: Claim, evidence: Evidence) -> Judgement:
    """C4: the accelerator idle share when reading small files (per-step idle share, per launch)."""
    def levels(launch: pd.Series) -> list[Level]:
        workers, prefetch = setting_of(launch)
        return [Level(label=f"small files, accelerator idle (workers={workers}, prefetch_factor={prefetch})",
                      where={"phase": "sweep", "format": SMALL_FILES, "workers": workers,
                             "prefetch_factor": prefetch},
                      reference=Reference(GUIDE_C4_IDLE, lower=C4_IDLE_LOWER, unit="",
                                          source="the guide: GPUs idle 65 % of the time"),
                      column="idle_samples")]

    what = (f"Idle share = 1 - compute / step time per batch with an emulated step (DLIO), cold page cache; "
            f"reference: >= {C4_IDLE_LOWER:.0%} idle (the guide: {GUIDE_C4_IDLE:.0%}); applies only on Lustre.")
    return judge_levels(evidence, levels, applies=C4_APPLIES, what=what)


def _staging_problem(evidence: Evidence, launch: pd.Series) -> str:
    """Staging on the device that already holds the data cannot save a device read: not a test of it."""
    rows = evidence.records
    rows = rows[(rows["run_id"] == launch["run_id"]) & (rows["task_id"] == launch["task_id"])
                & (rows["metric"] == "staging_saved_per_epoch")]
    if rows.empty:
        return "no staging was run"
    if rows["text"].fillna("").str.contains("same device").any():
        return "the staging folder is on the data's own device, so staging cannot save device reads"
    return ""


def rule_c5(claim: Claim, evidence: Evidence) -> Judgement:
    """C5: container formats over small files, the guide's prefetch buffer, node-local staging; on Lustre only."""
    def comparisons(launch: pd.Series) -> list[Comparison]:
        workers, prefetch = setting_of(launch)
        at = {"phase": "sweep", "workers": workers, "prefetch_factor": prefetch}
        params = json_object(launch["params"])
        formats = [f for f in C5_FORMATS if f in (params.get("formats") or [])]
        out = [Comparison(f"{fmt} / small files", {**at, "format": fmt}, {**at, "format": SMALL_FILES},
                          Reference(C5_SPEEDUP, lower=C5_SPEEDUP, source="'container formats fix the bottleneck'"))
               for fmt in formats]
        depths = sorted(params.get("prefetch_factors") or [])
        if workers and GUIDE_PREFETCH in depths and 2 * GUIDE_PREFETCH in depths and formats:
            fmt = formats[0]
            base = {"phase": "sweep", "workers": workers, "format": fmt}
            out.append(Comparison(
                f"{fmt}: buffer num_workers x batch / twice as deep",
                {**base, "prefetch_factor": GUIDE_PREFETCH}, {**base, "prefetch_factor": 2 * GUIDE_PREFETCH},
                Reference(1.0, lower=C5_BUFFER_SHARE, source="'buffer = num_workers x batch_size' is enough")))
        if params.get("stage") and formats:
            fmt = next((f for f in params.get("formats") or [] if f != SMALL_FILES), formats[0])
            out.append(Comparison(
                f"{fmt}: staged node-locally / original", {**at, "phase": "staged", "format": fmt},
                {**at, "format": fmt}, Reference(C5_SPEEDUP, lower=C5_SPEEDUP, source="'a node-local NVMe cache'"),
                not_applicable=_staging_problem(evidence, launch)))
        return out

    what = (f"Paired per launch, per-batch samples/s at the launch's most workers and prefetch_factor=1, cold "
            f"cache: hdf5 and tfrecord each over small files (reference >= {C5_SPEEDUP}x), the guide's buffer over "
            f"one twice as deep (>= {C5_BUFFER_SHARE}x), staged over unstaged (>= {C5_SPEEDUP}x, only where the "
            f"staging folder is another device); the claim needs every part. Applies only on Lustre, like C4: "
            f"the fixes are for C4's metadata-server bottleneck.")
    return judge_comparisons(evidence, comparisons, applies=C5_APPLIES, what=what)


RULES = {"C4": rule_c4, "C5": rule_c5}
