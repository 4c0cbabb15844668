"""The C12 gate as the report shows it: one row per task, each check's value against its limit."""

from __future__ import annotations

import math

import pandas as pd

from hpcbench.practice.gates import GATE_THRESHOLDS
from hpcbench.present.kit import Cell, Table, fmt_number


#: How the gate's verdict reads in a table, and the row's class.
GATE_STATES = {True: ("passes", ""), False: ("fails", "fail"), None: ("not measured", "")}


def gate_table(gates: pd.DataFrame, *, table_id: str | None = None) -> Table | None:
    """Per task, the gate before scaling out (guide C12): each check's value against its limit, the verdict, and
    how each value was computed or why it is absent (:func:`hpcbench.practice.gates.task_gates` rows)."""
    if gates is None or not len(gates):
        return None
    checks = [t for t in GATE_THRESHOLDS if t.name in gates.columns]
    rows, classes = [], []
    for r in gates.to_dict("records"):
        cells = [Cell(str(r.get("source", ""))), Cell(str(r.get("variant", ""))), Cell(str(r.get("task_id", "")))]
        for t in checks:
            passed = r.get(f"{t.name}_passed")
            passed = None if passed is None or (isinstance(passed, float) and math.isnan(passed)) else bool(passed)
            text = "–" if passed is None else f"{fmt_number(r[t.name], 3)} {'✓' if passed else '✗'}"
            cells.append(Cell(text, "fail" if passed is False else ""))
        state = r.get("gate")
        state = None if state is None or (isinstance(state, float) and math.isnan(state)) else bool(state)
        word, cls = GATE_STATES[state]
        cells.append(Cell(word + (f": {r['gate_failed']}" if r.get("gate_failed") else ""), cls))
        cells.append(Cell(parts=tuple(Cell(f"{t.name}: {r.get(f'{t.name}_detail', '')}") for t in checks)))
        rows.append(cells)
        classes.append(cls)
    limits = [f"{t.name} < {t.limit:g}{' ' + t.unit if t.unit else ''}" for t in checks]
    return Table(columns=["source", "variant", "task", *limits, "gate", "how measured / why absent"], rows=rows,
                 row_classes=classes, id=table_id, collapsed=len(rows) > 20,
                 caption="The gate before scaling out (guide C12), per task that records steps: step-time std / mean "
                         "(the worst series, median rank), communication share (comm_time, else no-op twins) and "
                         "storage read P99, each strictly below its limit (hpcbench.practice.gates)")
