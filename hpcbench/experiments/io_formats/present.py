"""The report section of ``io_formats``."""

from __future__ import annotations

import pandas as pd

from hpcbench.present.kit import (Cell, ExperimentData, Figure, Section, Table, check_note, evidence_tables, fmt_number,
                                  image_of, legend_below, lookup, ordered, present_stats, rank_in, stats_table,
                                  text_table)

IO_FORMAT_ORDER = ("files", "hdf5", "tfrecord", "tar")
_IO_COLUMNS = (("samples_per_s", "mean", 1.0, "samples/s"), ("mb_per_s", "mean", 1.0, "MB/s"),
               ("read_latency", "p50", 1e3, "read p50 (ms)"), ("read_latency", "p99", 1e3, "read p99 (ms)"),
               ("file_opens", "mean", 1.0, "opens/epoch"), ("accelerator_idle", "mean", 1.0, "accel. idle"),
               ("page_cache_resident", "mean", 1.0, "cached after eviction"))


def present_io_formats(data: ExperimentData) -> list[Section]:
    """Formats side by side: throughput, latency, opens, idle share per DataLoader setting; repairs."""
    stats = data.stats
    needed = {"format", "workers", "prefetch_factor", "phase"}
    if not len(stats) or not needed <= set(stats.columns):
        return present_stats(data)
    section = Section(title="Storage I/O formats (C4, C5)", id="exp-io-formats")
    timed = stats[stats["phase"].isin(["sweep", "staged"]) & stats["workers"].notna()].copy()
    timed["workers"] = timed["workers"].astype(int)
    timed["prefetch_factor"] = timed["prefetch_factor"].astype(int)
    index = ["source", "variant", "phase", "format", "workers", "prefetch_factor"]
    keys = sorted(timed[index].drop_duplicates().itertuples(index=False, name=None),
                  key=lambda k: (data.sources.index(k[0]) if k[0] in data.sources else 99, k[1],
                                 k[2] != "sweep", rank_in(k[3], IO_FORMAT_ORDER), k[4], k[5]))
    by_metric = {m: timed[timed["metric"] == m].set_index(index).sort_index() for m, *_ in _IO_COLUMNS}
    rows = []
    for key in keys:
        row = [Cell(str(k)) for k in key]
        for metric, stat, scale, _ in _IO_COLUMNS:
            row.append(Cell(fmt_number(lookup(by_metric[metric], key, stat) * scale)))
        rows.append(row)
    section.tables.append(Table(columns=[*index, *(c[3] for c in _IO_COLUMNS)], rows=rows, id="io-formats",
                                caption="Cold-cache epochs: means over epochs; read latency percentiles over "
                                        "every sample; idle share = 1 - emulated compute / wall time"))
    figure = _io_figure(timed[(timed["metric"] == "samples_per_s") & (timed["phase"] == "sweep")])
    if figure is not None:
        section.figures.append(figure)
    other = stats[stats["metric"].isin(["repairs", "lost_samples", "staging_time", "staging_saved_per_epoch",
                                        "staging_break_even", "exactly_once"])
                  & ~stats["phase"].isin(["sweep", "staged"])]
    if len(other):
        section.tables.append(stats_table(other, data.sources, caption="Staging and resilience"))
    exact = stats[stats["metric"] == "exactly_once"]
    check_note(section, exact, fail="some epoch lost or repeated samples",
                ok="every epoch delivered every sample exactly once")
    table = text_table(data.text, caption="Facts, repairs and values not measured")
    if table is not None:
        section.tables.append(table)
    section.tables += evidence_tables(data, ["phase", "format", "workers", "prefetch_factor", "samples_per_s", "accel_idle", "steps"], stats=stats)
    return [section]


def _io_figure(sps: pd.DataFrame) -> Figure | None:
    import seaborn as sns
    from matplotlib.figure import Figure as MplFigure

    if not len(sps):
        return None
    plot = sps.assign(setting=[f"{s} · {v} · w={w} pf={p}" for s, v, w, p in
                               zip(sps["source"], sps["variant"], sps["workers"], sps["prefetch_factor"])])
    fig = MplFigure(figsize=(8, 3.6))
    ax = fig.subplots()
    sns.barplot(data=plot, x="format", y="mean", hue="setting", order=ordered(plot["format"], IO_FORMAT_ORDER),
                ax=ax)
    ax.set_ylabel("samples/s (cold cache, mean)")
    ax.grid(True, axis="y", alpha=0.3)
    legend_below(ax)
    fig.tight_layout()
    return Figure(title="samples/s per format and DataLoader setting", data=image_of(fig),
                  alt="bar chart of samples per second for each storage format")
