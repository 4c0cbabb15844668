"""The report section of ``gradient_compression``: the launches' summaries, median over launches per source."""

from __future__ import annotations

import pandas as pd

from hpcbench.core.units import approx_bytes
from hpcbench.diag.report import diagnostics_tables, without_diagnostics
from hpcbench.experiments.gradient_compression.summary import ORDER
from hpcbench.present.kit import (Cell, ExperimentData, Figure, Section, Table, evidence_tables, fmt_number, image_of,
                                  rank_in, source_variants, summary_presenter, text_table)

#: (column of the summary, header, digits; None: bytes)
SHOWN = (("bytes_step", "bytes / step", None), ("wire_ratio", "wire ratio (compressed part)", 4),
         ("bytes_vs_none", "bytes / none's", 3), ("comm_time_p50_ms", "comm time p50 (ms)", 4),
         ("comm_vs_none", "comm time / none's", 3), ("step_p50_ms", "step p50 (ms)", 4),
         ("throughput_p50", "throughput p50 (total)", 4), ("loss_vs_none", "loss / none's", 4),
         ("grad_rel_err", "one step's gradient error", 3))
NUMERIC = [c for c, _, _ in SHOWN]


def launch_medians(summaries: pd.DataFrame) -> pd.DataFrame:
    """Median over launches of every shown column, per source, variant, model, mode and compression."""
    keys = [k for k in ("source", "variant", "model", "mode", "compression") if k in summaries.columns]
    ran = summaries[summaries["note"] == ""] if "note" in summaries.columns else summaries
    if not len(ran):
        return pd.DataFrame(columns=keys + NUMERIC + ["unit", "launches"])
    frame = ran.groupby(keys, sort=False).agg(
        **{c: (c, "median") for c in NUMERIC}, unit=("unit", "first"), launches=("compression", "size"))
    return frame.reset_index()


@summary_presenter("compression")
def present_compression(data: ExperimentData, summaries: pd.DataFrame) -> list[Section]:
    """Model x mode x compression: bytes per step, wire ratio, communication time, step, throughput, loss."""
    section = Section(title="Gradient compression: bytes on the wire, communication time, loss",
                      id="exp-gradient-compression")
    medians = launch_medians(summaries)
    medians = medians.assign(_o=[(r.model, r.mode, rank_in(r.compression, ORDER)) for r in medians.itertuples()])
    medians = medians.sort_values(["source", "variant", "_o"], kind="stable").drop(columns="_o")
    rows = []
    for r in medians.to_dict("records"):
        cells = [Cell(str(r["source"])), Cell(str(r["variant"])), Cell(r["model"]), Cell(r["mode"]),
                 Cell(r["compression"]), Cell(str(r["launches"]))]
        for column, _, digits in SHOWN:
            value = r[column]
            text = (approx_bytes(value) if value == value else "–") if digits is None else fmt_number(value, digits)
            cells.append(Cell(text))
        cells.append(Cell(str(r["unit"])))
        rows.append(cells)
    section.tables.append(Table(
        columns=["source", "variant", "model", "mode", "compression", "launches"] + [h for _, h, _ in SHOWN]
        + ["unit"], rows=rows, id="compression-comparison",
        caption="median over launches of each launch's per-step medians; bytes: what one rank sent per step for "
                "gradients; wire ratio: the compressed part's bytes over a float32 all-reduce of the same elements; "
                "communication time = t(series) - t(no-op hook), interleaved step by step; loss on a held-out batch "
                "after the same samples; gradient error = ||g - exact fp32 average|| / ||exact|| for one step"))
    section.add(_figure(summaries))
    bad = summaries[summaries["ok"] == False] if "ok" in summaries.columns else summaries.iloc[0:0]  # noqa: E712
    if len(bad):
        section.notes.append(Cell(f"{len(bad)} series failed a check and do not count: "
                                  + "; ".join(sorted(set(bad["problem"])))[:600], "fail"))
    elif "ok" in summaries.columns:
        section.notes.append(Cell("every series that ran kept the ranks' parameters identical, sent its skipped "
                                  "gradients as a plain reduction would and (quant2bit) trained within 5 % of "
                                  "none's loss", "ok"))
    if len(data.stats):
        section.tables += diagnostics_tables(
            data.stats, data.text, source_variants(data.stats, data.sources), ["model", "mode", "compression"],
            prefix="compression", caption="where a step's time goes (the timed steps, every rank's; noop: the "
                                          "no-op hook's twin); no data wait: the batches are synthetic, made on "
                                          "the device; a compression hook's own work in backward counts in backward")
    section.add(text_table(without_diagnostics(data.text), caption="Not measured, with the reason; skipped parameters"))
    section.tables += evidence_tables(data, ["model", "mode", "compression", "bytes_step", "wire_ratio",
                                             "throughput_p50", "comm_time_p50_ms", "loss_vs_none", "steps"])
    return [section]


def _figure(summaries: pd.DataFrame) -> Figure | None:
    from matplotlib.figure import Figure as MplFigure

    from hpcbench.experiments.gradient_compression.plot import draw_relative

    ran = summaries[summaries["note"] == ""] if "note" in summaries.columns else summaries
    if not len(ran) or not ran["bytes_vs_none"].notna().any():
        return None
    series = [f"{s} · {m} · {d}" for s, m, d in zip(ran["source"] if "source" in ran.columns else [""] * len(ran),
                                                      ran["model"], ran["mode"])]
    fig = MplFigure(figsize=(11, 3.8))
    draw_relative(ran.assign(series=series), tuple(fig.subplots(1, 2)))
    fig.tight_layout()
    return Figure(title="bytes on the wire and communication time per compression, relative to none",
                  data=image_of(fig), alt="bars of bytes per step and communication time relative to the "
                                              "float32 all-reduce, per compression")
