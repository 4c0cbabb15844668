"""The report section of ``advisor``: per regime, the advisor's pick beside each technique's measured gain."""

from __future__ import annotations

from collections import Counter

import pandas as pd

from hpcbench.experiments.advisor.config import BASELINE, REGIME_NAMES
from hpcbench.experiments.advisor.summary import SERIES, SUMMARY_KEYS
from hpcbench.present.kit import (Cell, ExperimentData, Figure, Section, Table, check_note, evidence_tables, fmt_number,
                                  image_of, pick, summary_presenter, text_table)

#: Summary column -> heading; each cell is the median over the launches of a source and variant.
COLUMNS = {"sample_p50_ms": "per sample p50 (ms)", "gain_p50": "measured gain", "predicted_gain": "predicted gain",
           "comm_share": "comm share", "byte_share": "byte share", "latency_share": "latency share"}


def _mode(values: pd.Series) -> str:
    counts = Counter(v for v in values if isinstance(v, str) and v)
    return ", ".join(f"{k} ({n})" for k, n in counts.most_common()) or "–"


@summary_presenter(*SUMMARY_KEYS)
def present_advisor(data: ExperimentData, s: pd.DataFrame) -> list[Section]:
    """Per source, variant and regime: the advisor's regime and pick, each series' time per sample and gain."""
    section = Section(title="Advisor: C14's pick against the measured best, per regime", id="exp-advisor")
    keys = ["source", "variant", *SUMMARY_KEYS]
    med = (s.groupby(keys, sort=False)
           .agg(**{c: (c, "median") for c in COLUMNS}, link_rate_bps=("link_rate_bps", "median"),
                advisor_regime=("advisor_regime", _mode), pick=("pick", _mode),
                predicted_best=("predicted_best", _mode), launches=("run_id", "size"))
           .reset_index())
    order = {src: i for i, src in enumerate(data.sources)}
    med = med.assign(_o=med["source"].map(order), _r=med["regime"].map(REGIME_NAMES.index),
                     _t=med["technique"].map(SERIES.index)).sort_values(["_o", "variant", "_r", "_t"])
    rows = [[Cell(str(r["source"])), Cell(str(r["variant"])), Cell(str(r["regime"])),
             Cell(fmt_number(r["link_rate_bps"] / 1e6, 4) if pd.notna(r["link_rate_bps"]) else "not shaped"),
             Cell(str(r["advisor_regime"])), Cell(str(r["pick"])), Cell(str(r["predicted_best"])),
             Cell(str(r["technique"])),
             Cell(str(r["launches"])), *(Cell(fmt_number(r[c], 3)) for c in COLUMNS)]
            for r in med.to_dict("records")]
    section.tables.append(Table(
        columns=["source", "variant", "regime", "link (Mbit/s)", "advisor's regime (launches)",
                 "advisor's pick (launches)", "scale model's best (launches)", "series", "launches",
                 *COLUMNS.values()], rows=rows, id="advisor-gains",
        caption="median over launches; gain = the baseline's time per sample / the series' (no_sync: 4 micro-steps "
                "per step); predicted = the scale model on the link the advisor fitted from the baseline's probe; "
                "the advisor reads the baseline's records only"))
    section.figures.append(_figure(med))
    if len(data.stats):
        check_note(section, pick(data.stats, "params_agree"),
                   fail="some technique's ranks ended with different parameters: it does not count",
                   ok="every technique's ranks ended with identical parameters")
    table = text_table(data.text, caption="Text records (link phases, advice problems)")
    if table is not None:
        section.tables.append(table)
    section.tables += evidence_tables(data, ["regime", "technique", "pick", "advisor_regime", "gain_p50",
                                             "predicted_gain", "steps", "ok"])
    return [section]


def _figure(med: pd.DataFrame) -> Figure:
    from matplotlib.figure import Figure as MplFigure

    from hpcbench.experiments.advisor.plot import draw_gains

    first = med[["source", "variant"]].drop_duplicates().iloc[0]
    one = med[(med["source"] == first["source"]) & (med["variant"] == first["variant"])].copy()
    # the most frequent pick names the bar to mark
    one["pick"] = one["pick"].map(lambda text: str(text).split(" (")[0])
    fig = MplFigure(figsize=(8, 4))
    draw_gains(fig.subplots(), one[one["technique"] != BASELINE])
    fig.tight_layout()
    return Figure(title=f"measured and predicted gain per technique and regime ({first['source']} · "
                        f"{first['variant']})", data=image_of(fig),
                  alt="bars of each technique's gain per sample over the baseline in each regime, the advisor's "
                      "pick marked, the predicted gain as diamonds")
