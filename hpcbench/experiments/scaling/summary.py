"""One ``scaling`` launch's records -> one row per configured stage (read by the notebook, the report, the rule)."""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

import pandas as pd

from hpcbench.core.results import expand_labels
from hpcbench.core.sanity import Verification
from hpcbench.experiments.scaling.config import ScalingConfig
from hpcbench.practice.gates import GATE_METRICS, GATE_THRESHOLDS, GateResult, GateThreshold, evaluate_gate
from hpcbench.practice.regime import GATE_REGIME

SUMMARY_KEYS = ["stage", "nodes"]
#: The driver's record of how the run ended (written by :func:`~hpcbench.experiments.scaling.worker.run_scaling`).
OUTCOME = "scaling_outcome"
#: Every rank's record of its healthy calibration before a stage's timed steps: std / mean of those steps
#: (written by :func:`~hpcbench.experiments.scaling.worker.run_worker`; C12's regime, :mod:`hpcbench.practice.regime`).
HEALTHY_CV = "healthy_step_cv"
#: Summary columns in table order (``samples`` and the texts follow).
COLUMNS = ["stage", "nodes", "ranks", "ran", "steps", "step_p50_ms", "noop_p50_ms", "throughput_p50",
           "per_node_p50", "efficiency", "gate", "gate_failed", "step_time_cv", "comm_share", "read_p99", "healthy_cv",
           "cleared", "stopped_here"]


def stage_gate(records: pd.DataFrame, nodes: int, thresholds: Sequence[GateThreshold] = GATE_THRESHOLDS
               ) -> GateResult:
    """The gate (C12) on the records of the stage on ``nodes`` nodes: its ranks' step rows, labelled ``nodes``.

    The driver decides with it whether to step out; the summary shows the same result.
    """
    return evaluate_gate(records, thresholds, labels={"nodes": str(nodes)})


def stage_spread(records: pd.DataFrame, nodes: int) -> float | None:
    """The healthy step-time spread the stage on ``nodes`` nodes calibrated before its timed steps, None if none.

    As C12's calibration computes it (:mod:`hpcbench.practice.regime`): each rank's std / mean of its healthy
    steps (its :data:`HEALTHY_CV` row), the median over ranks.
    """
    if records.empty or "metric" not in records.columns:
        return None
    rows = expand_labels(records[(records["metric"] == HEALTHY_CV) & records["value"].notna()])
    if rows.empty or "nodes" not in rows.columns:
        return None
    mine = rows[pd.to_numeric(rows["nodes"], errors="coerce") == nodes]
    return float(mine["value"].astype(float).median()) if len(mine) else None


def launch_spread(spreads: Sequence[float | None]) -> float | None:
    """A launch's regime fact from the spreads of the stages whose gate decided a step out: the largest.

    Every gate the launch ran before a step out must have run in C12's regime for its decisions to speak for C12's
    gate, so the noisiest calibration decides; a stage that gated without a calibration leaves it unrecorded (None).
    """
    got = list(spreads)
    return None if not got or any(v is None for v in got) else max(got)


def _config(records: pd.DataFrame) -> ScalingConfig | None:
    """The launch's config from its records' ``params`` (None when unreadable)."""
    if records.empty:
        return None
    try:
        return ScalingConfig.from_dict(json.loads(records["params"].iloc[0]))
    except (TypeError, ValueError):
        return None


def _median(values: Sequence[float]) -> float:
    return float(pd.Series(values, dtype=float).median()) if len(values) else math.nan


def summarize(records: pd.DataFrame) -> pd.DataFrame:
    """One row per configured stage, in run order.

    Columns: ``stage`` (1-based), ``nodes``, ``ranks``; ``ran`` (the stage left records);
    ``steps``; ``step_p50_ms`` and ``noop_p50_ms`` (every rank's steps with communication and
    under the no-op hook); ``throughput_p50`` (total, the slowest rank's step per step) and
    ``per_node_p50``; ``efficiency`` (per-node throughput over stage 1's: 1.0 is perfect weak
    scaling); ``gate`` (True / False / None: not measurable), ``gate_failed`` (the failed checks'
    names), ``gate_text`` (:meth:`GateResult.explain`) and the three checks' values
    (``step_time_cv``, ``comm_share``, ``read_p99`` in s); ``healthy_cv`` (the stage's healthy
    calibration before its timed steps, :func:`stage_spread`: C12's regime; NaN where the stage
    gated nothing or did not record it); ``cleared`` (every earlier stage's gate
    passed: progressive scaling would have reached this stage); ``stopped_here`` (the run stopped
    after this stage); ``outcome`` (how the run ended); ``samples`` (per-node throughput per step,
    the rule's input); ``unit``.
    """
    cfg = _config(records)
    rows = records[records["experiment"] == "scaling"] if len(records) else records
    if cfg is None or rows.empty:
        return pd.DataFrame(columns=COLUMNS)
    thresholds = cfg.thresholds()
    gate_rows = rows[rows["metric"].isin(GATE_METRICS)]  # read once per stage: only what the gate reads
    wide = expand_labels(rows)
    outcome = wide[wide["metric"] == OUTCOME]
    outcome_text = str(outcome["text"].iloc[0]) if len(outcome) else "no outcome recorded (the run did not finish)"
    stopped_at = (float(outcome["value"].iloc[0]) if len(outcome) and outcome["stopped"].astype(str).iloc[0] == "True"
                  else math.nan)
    out: list[dict[str, Any]] = []
    cleared = True
    base = math.nan
    stage_of = (pd.to_numeric(wide["nodes"], errors="coerce") if "nodes" in wide.columns
                else pd.Series(math.nan, index=wide.index))
    for index, nodes in enumerate(cfg.stages, start=1):
        mine = wide[stage_of == nodes]
        tput = mine[(mine["metric"] == "throughput") & mine["value"].notna()].sort_values("step")
        steps = mine[(mine["metric"] == "step_time") & mine["value"].notna()]
        ran = len(tput) > 0
        gate = stage_gate(gate_rows, nodes, thresholds) if ran else None
        spread = stage_spread(rows, nodes) if ran else None
        per_node = list(tput["value"] / nodes)
        row = {
            "stage": index, "nodes": nodes, "ranks": nodes * cfg.ranks_per_node, "ran": ran, "steps": len(tput),
            "step_p50_ms": _median(list(steps[steps["comm"] == "mode"]["value"])) * 1e3 if ran else math.nan,
            "noop_p50_ms": _median(list(steps[steps["comm"] == "noop"]["value"])) * 1e3 if ran else math.nan,
            "throughput_p50": _median(list(tput["value"])), "per_node_p50": _median(per_node),
            "gate": None if gate is None else gate.passed,
            "gate_failed": ", ".join(gate.failed) if gate is not None else "",
            "gate_text": gate.explain() if gate is not None else f"not run: {outcome_text}",
            "healthy_cv": math.nan if spread is None else spread,
            "cleared": cleared, "stopped_here": ran and stopped_at == nodes,
            "unit": str(tput["unit"].iloc[0]) if ran else "", "samples": per_node, "outcome": outcome_text,
        }
        for t in thresholds:
            check = gate.check(t.name) if gate is not None else None
            row[t.name] = math.nan if check is None or check.value is None else check.value
        if index == 1:
            base = row["per_node_p50"]
        row["efficiency"] = row["per_node_p50"] / base if ran and base > 0 else math.nan
        out.append(row)
        cleared = cleared and gate is not None and gate.passed is True
    frame = pd.DataFrame(out)
    return frame[[*COLUMNS, *(c for c in frame.columns if c not in COLUMNS)]]


def verify_records(records: pd.DataFrame, cfg: ScalingConfig) -> Verification:
    """The run's sanity: stages in order, each with its steps from every rank, and a stop only where the gate failed.

    Checks: every stage that ran has ``steps`` throughput rows and ``steps`` step rows from each of
    its ranks (with communication and under the no-op hook); stages ran as a prefix of
    ``cfg.stages``; the run ended with a ``scaling_outcome``; it stopped exactly after the first
    stage whose gate did not pass (or ran every stage under ``continue_past_gate``).
    """
    v = Verification(passed="stages ran in order with every rank's steps; stopped exactly where the gate failed")
    s = summarize(records)
    if s.empty:
        v.problems.append("no stage left records")
        return v
    ran = list(s["ran"])
    if ran != sorted(ran, reverse=True):
        v.problems.append(f"stages did not run as a prefix of {cfg.stages}: ran = {ran}")
    wide = expand_labels(records[records["metric"] == "step_time"])
    for r in s[s["ran"]].itertuples(index=False):
        if r.steps != cfg.steps:
            v.problems.append(f"{r.nodes} node(s): {r.steps} throughput rows, expected {cfg.steps}")
        mine = wide[pd.to_numeric(wide["nodes"], errors="coerce") == r.nodes] if "nodes" in wide.columns else wide
        counts = mine.groupby(["rank", "comm"]).size() if len(mine) else pd.Series(dtype=int)
        if len(counts) != 2 * r.ranks or (counts != cfg.steps).any():
            v.problems.append(f"{r.nodes} node(s): step rows per (rank, series) {dict(counts)}, expected "
                              f"{cfg.steps} for each of {r.ranks} rank(s) x 2")
    if not (records["metric"] == OUTCOME).any():
        v.problems.append("no scaling_outcome record: the driver did not finish")
    first_fail = next((r.nodes for r in s.itertuples(index=False) if r.ran and r.gate is not True), None)
    last_ran = int(s[s["ran"]]["nodes"].max())
    if not cfg.continue_past_gate and first_fail is not None and first_fail != cfg.stages[-1] \
            and last_ran != first_fail:
        v.problems.append(f"the gate did not pass at {first_fail} node(s), yet the run went on to {last_ran}")
    if (first_fail is None or cfg.continue_past_gate) and last_ran != cfg.stages[-1]:
        v.problems.append(f"the run stopped at {last_ran} node(s) although no gate stopped it")
    return v


def findings(summary: pd.DataFrame) -> list[str]:
    """One line per stage: throughput, efficiency and the gate, then how the run ended."""
    lines = []
    for r in summary.itertuples(index=False):
        if not r.ran:
            lines.append(f"stage {r.stage} ({r.nodes} node(s)): not run")
            continue
        spread = getattr(r, "healthy_cv", math.nan)
        healthy = (f"; healthy calibration spread {spread:.1%} ({GATE_REGIME.status(spread)}: C12's < "
                   f"{GATE_REGIME.max_cv:.1%})" if isinstance(spread, float) and math.isfinite(spread) else "")
        lines.append(f"stage {r.stage} ({r.nodes} node(s), {r.ranks} rank(s)): {r.throughput_p50:.4g} {r.unit} "
                     f"in all, {r.per_node_p50:.4g} per node, efficiency {r.efficiency:.2f}; gate {r.gate_text}"
                     f"{healthy}")
    if len(summary):
        lines.append(str(summary["outcome"].iloc[0]))
    return lines
