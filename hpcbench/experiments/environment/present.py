"""The report section of ``environment``."""

from __future__ import annotations

import math

from hpcbench.present.kit import Cell, ExperimentData, Section, Table, fmt_number, label_text, stats_table


def present_environment(data: ExperimentData) -> list[Section]:
    """The inventory: one row per fact, one column per (source, node)."""
    rows_frame = data.raw if data.raw is not None and len(data.raw) else data.text
    section = Section(title="Environment inventory", id="exp-environment")
    if not len(rows_frame):
        section.notes.append(Cell("no inventory records"))
        return [section]
    values: dict[tuple[str, str], dict[tuple[str, str], list[str]]] = {}
    for rec in rows_frame.to_dict("records"):
        fact = (str(rec["metric"]), label_text(rec["labels"]))
        column = (str(rec["source"]), str(rec.get("node", "")))
        text = rec.get("text")
        if isinstance(text, str):
            shown = text
        else:
            value = rec.get("value")
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            shown = f"{fmt_number(value)} {rec['unit']}".strip()
        cell = values.setdefault(fact, {}).setdefault(column, [])
        if shown not in cell:
            cell.append(shown)
    order = {s: i for i, s in enumerate(data.sources)}
    columns = sorted({c for by_col in values.values() for c in by_col}, key=lambda c: (order.get(c[0], 1 << 30), c))
    rows = [[Cell(metric), Cell(labels)] + [Cell(" / ".join(values[(metric, labels)].get(c, [])) or "–")
                                            for c in columns]
            for metric, labels in sorted(values)]
    section.tables.append(Table(columns=["fact", "labels"] + [f"{s} / {n}" for s, n in columns], rows=rows,
                                id="environment-inventory", caption="Inventory (text values as recorded)"))
    if len(data.stats) and data.raw is None:
        section.tables.append(stats_table(data.stats, data.sources, caption="Numeric facts"))
    return [section]
