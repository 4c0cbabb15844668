"""The report section of ``overlap``: the launches' summaries (what the rule reads), per model."""

from __future__ import annotations

import pandas as pd

from hpcbench.diag.report import diagnostics_tables, without_diagnostics
from hpcbench.experiments.overlap.summary import SUMMARY_KEYS, series_name
from hpcbench.present.kit import (Cell, ExperimentData, Figure, Section, Table, check_note, evidence_tables, fmt_number,
                                  image_of, ordered, pick, slug, source_variants, summary_presenter, text_table)

#: Summary column -> table heading; each cell is the median over the launches of a source and variant.
COLUMNS = {"throughput_total_p50": "samples/s p50 (total)", "step_p50_ms": "step p50 (ms)",
           "sample_p50_ms": "per sample p50 (ms)", "syncs_per_sample": "syncs per sample",
           "exposed_comm_ms": "exposed comm (ms/step)", "total_comm_ms": "total comm (ms/step)",
           "overlapped_share": "overlapped share"}


@summary_presenter(*SUMMARY_KEYS)
def present_overlap(data: ExperimentData, s: pd.DataFrame) -> list[Section]:
    """Per model: k, no_sync, times, counted synchronisations, exposed / total communication; the figure; checks."""
    section = Section(title="Overlap: no_sync() accumulation, synchronisations and exposed communication",
                      id="exp-overlap")
    keys = ["source", "variant", *SUMMARY_KEYS]
    med = (s.groupby(keys, sort=True)
           .agg(**{c: (c, "median") for c in [*COLUMNS, "compute_sample_p50_ms"]}, launches=("run_id", "size"),
                unit=("unit", "first"))
           .reset_index())
    order = {src: i for i, src in enumerate(data.sources)}
    med = med.assign(_o=med["source"].map(order)).sort_values(["_o", "variant", "model", "no_sync", "micro_steps"],
                                                              ascending=[True, True, True, False, True])
    for model in ordered(med["model"]):
        g = med[med["model"] == model]
        rows = [[Cell(str(r["source"])), Cell(str(r["variant"])), Cell(str(r["micro_steps"])),
                 Cell("yes" if r["no_sync"] else "no (sync each micro-step)"), Cell(str(r["launches"])),
                 *(Cell(fmt_number(r[c], 3 if c == "overlapped_share" else 4)) for c in COLUMNS)]
                for r in g.to_dict("records")]
        section.tables.append(Table(
            columns=["source", "variant", "k", "no_sync", "launches", *COLUMNS.values()], rows=rows,
            id=f"overlap-{slug(model)}",
            caption=f"{model}: median over launches of each launch's p50; syncs counted by the all-reduce hook; "
                    f"exposed = step - no-op step, total = one synchronisation's buckets all-reduced alone x syncs "
                    f"per step, overlapped share = 1 - exposed / total ({g['unit'].iloc[0]} for samples/s)"))
    section.figures.append(_figure(med))
    checks = pd.concat([pick(data.stats, m) for m in ("grad_match", "params_agree", "loss_match")]) \
        if len(data.stats) else data.stats
    check_note(section, checks, fail="some series failed a check (gradients, ranks' parameters or loss): they do "
                                     "not count", ok="every series passed its checks")
    if len(data.stats):
        section.tables += diagnostics_tables(
            data.stats, data.text, source_variants(data.stats, data.sources), ["model", "micro_steps", "no_sync"],
            prefix="overlap", caption="where an optimizer step's time goes: extra, untimed steps with "
                                      "communication after the measurements (the timed steps cannot be wrapped "
                                      "without changing them), each phase summed over the k micro-steps, every "
                                      "rank's; no data wait: the micro-batches are synthetic, made on the device")
    section.add(text_table(without_diagnostics(data.text), caption="Text records"))
    section.tables += evidence_tables(data, ["model", "micro_steps", "no_sync", "throughput_total_p50",
                                             "syncs_per_sample", "overlapped_share", "steps", "ok"])
    return [section]


def _figure(med: pd.DataFrame) -> Figure:
    from matplotlib.figure import Figure as MplFigure

    from hpcbench.experiments.overlap.plot import draw_time_per_sample

    several = med[["source", "variant"]].drop_duplicates().shape[0] > 1
    split = pd.DataFrame({
        "label": [(f"{src} · {var}\n" if several else "") + f"{m}\n{series_name(k, ns)}"
                  for src, var, m, k, ns in zip(med["source"], med["variant"], med["model"], med["micro_steps"],
                                                med["no_sync"])],
        "compute_ms": list(med["compute_sample_p50_ms"]),
        "exposed_ms": list(med["sample_p50_ms"] - med["compute_sample_p50_ms"]),
    })
    fig = MplFigure(figsize=(max(6.0, 1.4 * len(split)), 3.8))
    draw_time_per_sample(fig.subplots(), split)
    fig.tight_layout()
    return Figure(title="time per sample by series: compute and exposed communication", data=image_of(fig),
                  alt="stacked bars per series of compute time per sample and exposed communication per sample")
