"""One ``practice`` launch's records -> its summary: per fault phase, the gate's values and whether it failed.

Read by the notebook, the report and the C12 rule alike. A phase's row says:

* whether the fault was really applied (``injected``: its node part applied and undone, and its
  rank part applied on every rank of the faulty node; ``injection``: what was done or why not);
  None for the baseline;
* what it did to training: the step time p50 (slowest rank per step) and its ratio to the
  baseline's (``slowdown``), so a reader sees the fault was real;
* the gate (:func:`hpcbench.practice.gates.evaluate_gate` on the phase's rows, ``labels={"fault":
  ...}``): each check's value (``step_time_cv``, ``comm_share``, ``read_p99_s``; NaN when not
  measurable), ``gate_passed`` (True / False / None when no check could be measured),
  ``failed`` (the failed checks) and ``gate`` (the gate's one-line explanation);
* ``caught``: for an applied fault, whether the gate failed on it (True) or passed it (False);
  None for the baseline, a fault not applied, or a gate that measured nothing. The baseline's
  own failure is ``gate_passed`` False: a false alarm.
"""

from __future__ import annotations

import math
from typing import Any

from hpcbench.core.results import expand_labels, json_object
from hpcbench.core.sanity import Verification
from hpcbench.experiments.practice.config import NO_FAULT, PracticeConfig
from hpcbench.fault.phases import NO_INJECTION_RECORD, phase_problems

EXPERIMENT = "practice"
#: The rows the summary reads (the gate reads step_time, comm_time and read_time among them).
METRICS = ("step_time", "comm_time", "read_time", "fault_injected", "fault_rank_part", "fault_tcp_retransmitted")
#: Gate check name -> summary column.
CHECK_COLUMNS = {"step_time_cv": "step_time_cv", "comm_share": "comm_share", "read_p99": "read_p99_s"}


def _injection(fault: str, g: Any) -> tuple[bool | None, str]:
    """Whether ``fault`` was applied in its phase (None: the baseline), and the records' words on it."""
    node = g[g["metric"] == "fault_injected"]
    rank = g[g["metric"] == "fault_rank_part"]
    text = "; ".join(str(t) for t in [*node["text"].dropna(), *rank["text"].dropna()])
    if fault == NO_FAULT:
        return None, text or "baseline: no fault"
    if not len(node):
        return False, NO_INJECTION_RECORD
    applied = bool((node["value"] == 1.0).all()) and bool((rank["value"] == 1.0).all())
    return applied, text


def summarize(records: Any) -> Any:
    """One row per fault phase, in run order (see the module docstring for the columns)."""
    import pandas as pd

    from hpcbench.practice.gates import evaluate_gate

    rows = records[records["experiment"] == EXPERIMENT] if "experiment" in records.columns else records.iloc[0:0]
    rows = rows[rows["metric"].isin(METRICS)]
    if rows.empty:
        return pd.DataFrame(columns=["fault", "injected", "caught", "gate_passed"])
    order = list(json_object(rows["params"].iloc[0]).get("faults") or []) if "params" in rows.columns else []
    # the few columns read here and by the gate: every selection copies the rows, and the schema's strings are wide
    rows = rows[[c for c in ("metric", "value", "unit", "step", "rank", "labels", "text", "task_id", "repetition")
                 if c in rows.columns]]
    labels = expand_labels(rows[["labels"]])  # the one label parser; positional, its index is reset
    rows = rows.assign(fault=labels["fault"].to_numpy() if "fault" in labels.columns else None)
    rows = rows[rows["fault"].notna()]
    faults = order + sorted(set(rows["fault"]) - set(order))
    base_step = math.nan
    out = []
    for fault in faults:
        g = rows[rows["fault"] == fault]
        if g.empty:
            continue
        injected, injection = _injection(fault, g)
        steps = g[(g["metric"] == "step_time") & g["value"].notna()]
        slowest = steps.groupby("step")["value"].max() if len(steps) else pd.Series(dtype=float)
        step_p50 = float(slowest.median()) * 1e3 if len(slowest) else math.nan
        if fault == NO_FAULT:
            base_step = step_p50
        gate = evaluate_gate(g.drop(columns="fault"), labels={"fault": fault})
        values = {column: (math.nan if gate.check(name).value is None else float(gate.check(name).value))
                  for name, column in CHECK_COLUMNS.items()}
        measured = gate.passed is not None
        retrans = g[(g["metric"] == "fault_tcp_retransmitted") & g["value"].notna()]["value"]
        out.append({
            "fault": fault, "injected": injected, "injection": injection,
            "steps": int(slowest.size), "step_p50_ms": step_p50,
            "slowdown": step_p50 / base_step if base_step and math.isfinite(base_step) else math.nan,
            **values,
            "gate_passed": gate.passed, "failed": gate.failed, "gate": gate.explain(),
            "caught": (not gate.passed) if injected and measured else None,
            "tcp_retransmitted": float(retrans.iloc[0]) if len(retrans) else math.nan,
            "samples": tuple(float(v) for v in slowest),
            "ok": True, "problem": "",
        })
    return pd.DataFrame(out)


def verdict_line(row: Any) -> str:
    """One phase in words: the gate's values and what it said."""
    values = (f"cv {row.step_time_cv:.3f}, comm share {row.comm_share:.2f}, read P99 "
              f"{row.read_p99_s * 1e3:.0f} ms")
    if row.fault == NO_FAULT:
        said = {True: "passes (no false alarm)", False: f"FAILS: a false alarm ({', '.join(row.failed)})",
                None: "measured nothing"}[row.gate_passed]
        return f"baseline: step p50 {row.step_p50_ms:.0f} ms; {values}; the gate {said}"
    if not row.injected:
        return f"{row.fault}: not injected here ({row.injection})"
    said = ("measured nothing: neither caught nor missed" if row.caught is None
            else f"caught by {', '.join(row.failed)}" if row.caught else "MISSED: the gate passes it")
    return f"{row.fault}: step p50 {row.step_p50_ms:.0f} ms ({row.slowdown:.2f}x the baseline); {values}; {said}"


def findings(summary: Any) -> list[str]:
    """One sentence per phase (:func:`verdict_line`)."""
    return [verdict_line(r) for r in summary.itertuples(index=False)]


_PASSED = "every phase trained its steps, the gate measured it, and every fault was applied or its reason recorded"


def verify_records(records: Any, cfg: PracticeConfig) -> Verification:
    """Every phase measured its steps and the gate; every fault injected or recorded as not injectable."""
    problems = phase_problems(summarize(records), cfg,
                              lambda r: [f"the gate measured nothing ({r.gate})"] if r.gate_passed is None else [])
    return Verification(problems, passed=_PASSED)
