"""One ``weather_case`` launch's records -> its summary (read by the notebook, the report and the rules)."""

from __future__ import annotations

import math
from typing import Any

from hpcbench.core.results import expand_labels
from hpcbench.core.sanity import Verification, expected_rows
from hpcbench.diag.report import breakdown_columns
from hpcbench.experiments.weather_case.config import LOSS_TOLERANCE, WeatherCaseConfig
from hpcbench.experiments.weather_case.stages import BASELINE, STAGE_ORDER, STAGES

EXPERIMENT = "weather_case"
METRICS = ("micro_steps", "loss_initial", "loss_final", "ranks_agree", "sync_bytes", "bytes_across_nodes",
           "wire_ratio", "bucket_count", "step_time", "micro_step_time", "busy_share", "step_phase_seconds",
           "step_jitter")
#: Step phases summarised as ``<phase>_p50_ms`` (:mod:`hpcbench.diag.step_breakdown`).
BREAKDOWN_PHASES = ("data_wait", "forward", "backward", "comm_wait", "optimizer", "other")
COLUMNS = ["stage", "order", "setup", "micro_steps", "guide_ms", "guide_util", "guide_speedup",
           "micro_step_p50_ms", "step_p50_ms", "noop_step_p50_ms", "busy_share_p50", "speedup_vs_original",
           "bytes_across_nodes", "sync_bytes", "wire_ratio", "loss_initial", "loss_final", "loss_vs_original",
           "loss_ok", "ranks_agree", *(f"{p}_p50_ms" for p in BREAKDOWN_PHASES), "jitter_max", "steps", "samples",
           "ok", "problem"]


def _median(values: Any) -> float:
    return float(values.median()) if len(values) else math.nan


def _first(values: Any) -> float:
    return float(values.iloc[0]) if len(values) else math.nan


def summarize(records: Any) -> Any:
    """One row per stage, in the ablation's order.

    * ``micro_step_p50_ms``: median over the timed steps of step time / k (k micro-steps per
      optimizer step in the no_sync stages, 1 elsewhere), so stages compare per micro-batch;
      ``samples`` holds the per-step values in seconds (the rules' input);
    * ``busy_share_p50``: median of t(no-op twin) / t(stage) per step, the guide's utilisation analogue;
    * ``bytes_across_nodes``: bytes leaving one node per micro-step (see ``traffic``);
    * ``loss_vs_original``: final loss / ``original``'s; ``loss_ok`` within :data:`LOSS_TOLERANCE`;
    * ``ok`` is False (with ``problem``) when the loss check failed or the ranks ended with
      different parameters: such a stage never counts in a verdict;
    * ``<phase>_p50_ms`` for :data:`BREAKDOWN_PHASES` and ``jitter_max`` (T-diag): medians over every
      rank's extra, untimed optimizer steps with the loader in the loop (each phase summed over
      the step's k micro-steps; ``data_wait`` is the HDF5 read), and the largest rank's
      step-time std / mean over them.
    """
    import pandas as pd

    rows = records[(records["experiment"] == EXPERIMENT) & records["metric"].isin(METRICS)]
    if rows.empty:
        return pd.DataFrame(columns=COLUMNS)
    wide = expand_labels(rows)
    initial = _first(wide[wide["metric"] == "loss_initial"]["value"].dropna())
    if "stage" not in wide.columns:
        return pd.DataFrame(columns=COLUMNS)
    out = []
    for stage, g in wide[wide["stage"].notna()].groupby("stage", sort=False):
        def pick(metric: str, **where: str) -> Any:
            sel = g[(g["metric"] == metric) & g["value"].notna()]
            for col, val in where.items():
                sel = sel[sel[col] == val] if col in sel.columns else sel.iloc[0:0]
            return sel.sort_values("step")["value"]

        micro = pick("micro_step_time")
        setup = g[g["metric"] == "micro_steps"]["text"].dropna()
        known = stage in STAGES
        guide_ms = STAGES.get(stage).guide_ms if known else None
        agree = pick("ranks_agree")
        out.append({
            "stage": stage,
            "order": STAGE_ORDER.index(stage) if stage in STAGE_ORDER else len(STAGE_ORDER),
            "setup": str(setup.iloc[0]) if len(setup) else "",
            "micro_steps": int(_first(pick("micro_steps"))) if len(pick("micro_steps")) else None,
            "guide_ms": guide_ms,
            "guide_util": STAGES.get(stage).guide_util if known else None,
            "guide_speedup": (STAGES.get(BASELINE).guide_ms / guide_ms) if guide_ms else None,
            "micro_step_p50_ms": _median(micro) * 1e3,
            "step_p50_ms": _median(pick("step_time", comm="stage")) * 1e3,
            "noop_step_p50_ms": _median(pick("step_time", comm="noop")) * 1e3,
            "busy_share_p50": _median(pick("busy_share")),
            "bytes_across_nodes": _first(pick("bytes_across_nodes")),
            "sync_bytes": _first(pick("sync_bytes")),
            "wire_ratio": _first(pick("wire_ratio")),
            "loss_initial": initial,
            "loss_final": _first(pick("loss_final")),
            "ranks_agree": bool(agree.min() == 1.0) if len(agree) else None,
            **breakdown_columns(g, BREAKDOWN_PHASES),
            "steps": len(micro),
            "samples": tuple(float(v) for v in micro),
        })
    frame = pd.DataFrame(out).sort_values(["order", "stage"], kind="stable").reset_index(drop=True)
    base = frame[frame["stage"] == BASELINE]
    base_loss = float(base["loss_final"].iloc[0]) if len(base) else math.nan
    base_micro = float(base["micro_step_p50_ms"].iloc[0]) if len(base) else math.nan
    frame["speedup_vs_original"] = base_micro / frame["micro_step_p50_ms"]
    frame["loss_vs_original"] = frame["loss_final"] / base_loss
    checks, oks, problems = [], [], []
    for r in frame.itertuples(index=False):
        ratio = r.loss_vs_original
        loss_ok = None if not math.isfinite(ratio) else bool(abs(ratio - 1.0) <= LOSS_TOLERANCE)
        why = []
        if loss_ok is False:
            why.append(f"{r.stage}'s final loss {r.loss_final:.4g} is {ratio - 1:+.1%} from original's "
                       f"{base_loss:.4g} (allowed: +-{LOSS_TOLERANCE:.0%}): it learned something else")
        if r.ranks_agree is False:
            why.append(f"{r.stage}: the ranks ended with different parameters")
        checks.append(loss_ok)
        oks.append(not why)
        problems.append("; ".join(why))
    frame["loss_ok"], frame["ok"], frame["problem"] = checks, oks, problems
    return frame[COLUMNS]


def guide_table(summary: Any) -> Any:
    """The guide's table beside ours, one row per stage (the guide's columns empty for the single techniques)."""
    import pandas as pd

    rows = []
    for r in summary.itertuples(index=False):
        rows.append({
            "stage": r.stage,
            "guide step (ms)": r.guide_ms,
            "guide GPU utilisation": r.guide_util,
            "guide speed-up": r.guide_speedup,
            "our time per micro-step p50 (ms)": r.micro_step_p50_ms,
            "our busy share p50": r.busy_share_p50,
            "our speed-up": r.speedup_vs_original,
            "bytes across nodes / micro-step": r.bytes_across_nodes,
            "loss vs original": r.loss_vs_original,
            "counts": "yes" if r.ok else f"no: {r.problem}",
        })
    return pd.DataFrame(rows)


_PASSED = ("every stage was timed for the configured steps, learned what original learned (final loss within "
           f"{LOSS_TOLERANCE:.0%}) and ended with the same parameters on every rank")


def verify_records(records: Any, cfg: WeatherCaseConfig) -> Verification:
    """Every configured stage has its timed steps, its bytes, and passed the loss and rank checks."""
    problems: list[str] = []
    for name, r in expected_rows(summarize(records), lambda r: r.stage, ((s, s) for s in cfg.stages), problems):
        if r.steps != cfg.steps:
            problems.append(f"{name}: {r.steps} timed steps, expected {cfg.steps}")
        if not math.isfinite(r.bytes_across_nodes):
            problems.append(f"{name}: no count of bytes across nodes")
        if r.problem:
            problems.append(r.problem)
        elif r.loss_ok is None and BASELINE in cfg.stages:
            problems.append(f"{name}: no loss to compare with {BASELINE}'s")
    return Verification(problems, passed=_PASSED)
