"""What a run measured, read back for the advisor: one data-parallel series' step, communication and link.

A *series* is a set of labels under which a run recorded ``step_time`` twice: with its
communication (label ``comm=mode``) and the same step under the no-op comm hook
(``comm=noop``), as the ``overlap`` and ``advisor`` workers write them. Every other record
the advisor reads belongs to the series when its labels agree with the series' labels on
every key both have (a fact record has no labels and belongs to every series):

=========================  ==================================================================
record                     what the advisor takes from it
=========================  ==================================================================
``step_time`` comm=mode    the step with communication (median over steps)
``step_time`` comm=noop    the step's compute: the same step, no gradient communication
``sync_alone_time``        one synchronisation's buckets all-reduced alone (total communication)
``syncs``                  synchronisations per step (default 1)
``bucket_count``           DDP's buckets; its text lists their bytes in reduction order
``gradient_bytes``         bytes of one synchronisation (else the sum of the buckets)
``time`` op/size/group     collectives-style probe rows: fitted with
                           :func:`hpcbench.scale.alpha_beta.fit_from_collectives`
``link_rate_bps``          the shaped inter-node link of the series (else ``fact.link_rate_bps``)
``plain_fraction``         share of gradient elements a compression hook leaves uncompressed
``backend``                gloo or nccl (gloo: the two-level hook's intra stages are all-reduces)
=========================  ==================================================================

Nothing is guessed: a figure the run lacks is either not needed or named in an
:class:`AdviceError`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from hpcbench.core.errors import HpcbenchError
from hpcbench.core.results import json_object

#: The label that tells a series' step with communication from its no-op twin, and its two values.
COMM_LABEL, WITH_COMM, NO_COMM = "comm", "mode", "noop"
STEP_METRIC = "step_time"
ALONE_METRIC = "sync_alone_time"
SYNCS_METRIC = "syncs"
LAYOUT_METRIC = "bucket_count"
GRAD_BYTES_METRIC = "gradient_bytes"
PROBE_METRIC = "time"
PROBE_LABELS = ("op", "size_bytes", "group", "group_ranks")
LINK_RATE_METRIC = "link_rate_bps"
FACT_LINK_RATE = "fact.link_rate_bps"
PLAIN_FRACTION_METRIC = "plain_fraction"
BACKEND_METRIC = "backend"
#: Bytes per gradient element the advisor assumes (float32 gradients, DDP's default).
GRAD_ELEM_BYTES = 4


class AdviceError(HpcbenchError):
    """A run (or one of its series) holds nothing the advisor can use; the message says what is missing, where.

    Args:
        where: the records at fault (a task folder, a file, a run folder).
        reason: what is missing, worded the same for every series it applies to, so that a run's
            refusals can be grouped by it.
        series: the series' labels, when the reason is one series'.
    """

    def __init__(self, where: str, reason: str, series: Mapping[str, Any] | None = None):
        self.where, self.reason = where, reason
        self.series = dict(series) if series is not None else None
        name = where if series is None else f"{where} (series {describe_series(series)})"
        super().__init__(f"{name}: {reason}")


@dataclass(frozen=True)
class Figure:
    """One number behind an advice: its value, unit and where it came from."""

    name: str
    value: float
    unit: str
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "unit": self.unit, "source": self.source}


def compatible(labels: Mapping[str, Any], series: Mapping[str, Any]) -> bool:
    """Whether a record with ``labels`` belongs to ``series``: equal on every key both have."""
    return all(labels[k] == series[k] for k in labels.keys() & series.keys())


def describe_series(series: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(series.items())) or "(no labels)"


def find_series(records: Any) -> list[dict[str, Any]]:
    """Label sets (less ``comm``) that have ``step_time`` rows both with and without communication.

    Args:
        records: rows of the one results schema.

    Returns:
        One dict per series, in a stable order.
    """
    if records is None or records.empty:
        return []
    rows = records[(records["metric"] == STEP_METRIC) & records["value"].notna()]
    seen: dict[str, set[str]] = {}
    for text in rows["labels"]:
        labels = json_object(text)
        comm = labels.pop(COMM_LABEL, None)
        if comm in (WITH_COMM, NO_COMM):
            seen.setdefault(json.dumps(labels, sort_keys=True, default=str), set()).add(comm)
    return [json.loads(k) for k, comms in sorted(seen.items()) if comms == {WITH_COMM, NO_COMM}]


def _masked(rows: Any, keep: Callable[[dict[str, Any]], bool]) -> Any:
    """The rows whose parsed labels pass ``keep`` (an index-aligned mask: an empty frame stays a frame)."""
    import pandas as pd

    return rows[pd.Series([keep(json_object(t)) for t in rows["labels"]], index=rows.index, dtype=bool)]


def rows_of(records: Any, series: Mapping[str, Any], metric: str) -> Any:
    """The ``metric`` rows of ``records`` that belong to ``series`` (see :func:`compatible`)."""
    return _masked(records[records["metric"] == metric], lambda labels: compatible(labels, series))


@dataclass(frozen=True)
class Measured:
    """One series' measured figures (seconds, bytes), each with its source in ``sources``."""

    series: Mapping[str, Any]
    step_s: float
    """median step with communication"""
    compute_s: float
    """median of the same step under the no-op hook"""
    steps: int
    """timed steps behind the medians"""
    syncs_per_step: float
    sync_alone_s: float | None
    """one synchronisation's buckets all-reduced alone (None: not recorded)"""
    layout: tuple[int, ...]
    """bytes of every bucket of one synchronisation, in reduction order"""
    nodes: int
    ranks_per_node: int
    backend: str
    link_rate_bps: float | None
    plain_fraction: float
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def exposed_comm_s(self) -> float:
        """Communication the step did not hide: step - no-op step."""
        return self.step_s - self.compute_s

    @property
    def comm_share(self) -> float:
        """Exposed communication / step (C12's communication share)."""
        return self.exposed_comm_s / self.step_s

    @property
    def comm_per_sync_s(self) -> float:
        """One synchronisation's communication: alone if measured, else the exposed part per sync."""
        if self.sync_alone_s is not None:
            return self.sync_alone_s
        return max(self.exposed_comm_s, 0.0) / self.syncs_per_step

    @property
    def overlap_share(self) -> float:
        """Share of the communication DDP hid behind backward, 1 - exposed / total, within [0, 1] (0 unmeasured)."""
        if self.sync_alone_s is None or not self.sync_alone_s > 0:
            return 0.0
        return min(1.0, max(0.0, 1.0 - self.exposed_comm_s / (self.sync_alone_s * self.syncs_per_step)))

    @property
    def grad_bytes(self) -> int:
        return int(sum(self.layout))

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    def figures(self) -> list[Figure]:
        """The measured figures as shown with an advice."""
        s = self.sources
        out = [Figure("step", self.step_s, "s", s["step"]), Figure("compute", self.compute_s, "s", s["compute"]),
               Figure("exposed communication", self.exposed_comm_s, "s", "step - compute"),
               Figure("communication share", self.comm_share, "fraction", "exposed communication / step"),
               Figure("synchronisations per step", self.syncs_per_step, "", s["syncs"])]
        if self.sync_alone_s is not None:
            out += [Figure("one synchronisation alone", self.sync_alone_s, "s", s["alone"]),
                    Figure("overlapped share", self.overlap_share, "fraction",
                           "1 - exposed / (one synchronisation alone x synchronisations per step)")]
        out += [Figure("buckets", float(len(self.layout)), "", s["layout"]),
                Figure("gradient bytes per synchronisation", float(self.grad_bytes), "B", s["layout"]),
                Figure("mean bucket", self.grad_bytes / len(self.layout), "B", "gradient bytes / buckets"),
                Figure("nodes x ranks per node", float(self.world_size), "ranks",
                       f"{self.nodes} x {self.ranks_per_node} ({s['layout_of_ranks']})")]
        if self.link_rate_bps is not None:
            out.append(Figure("shaped link rate", self.link_rate_bps, "bit/s", s["link_rate"]))
        return out


def _median(values: Any) -> float:
    return float(values.median())


def _layout(records: Any, series: Mapping[str, Any], where: str) -> tuple[tuple[int, ...], str]:
    """Bucket bytes of one synchronisation: listed by ``bucket_count``, else gradient bytes cut into its count."""
    rows = rows_of(records, series, LAYOUT_METRIC)
    rows = rows[rows["value"].notna()]
    grad = rows_of(records, series, GRAD_BYTES_METRIC)
    grad = grad[grad["value"].notna()]
    for text in rows["text"].dropna():
        _, _, listed = str(text).rpartition(":")
        try:
            sizes = tuple(int(x) for x in listed.split(",") if x.strip())
        except ValueError:
            continue
        if sizes and all(b > 0 for b in sizes):
            return sizes, f"{LAYOUT_METRIC} records (DDP's bucket bytes as the no-op hook saw them)"
    if len(rows) and len(grad):
        count, total = int(rows["value"].iloc[0]), int(grad["value"].iloc[0])
        if count >= 1 and total >= count:
            base, extra = divmod(total, count)
            sizes = tuple(base + (1 if i < extra else 0) for i in range(count))
            return sizes, f"{GRAD_BYTES_METRIC} cut into the {LAYOUT_METRIC} buckets (no bucket sizes listed)"
    raise AdviceError(where, f"no bucket layout: needs '{LAYOUT_METRIC}' records listing the bucket bytes, or "
                             f"'{LAYOUT_METRIC}' and '{GRAD_BYTES_METRIC}'", series)


def ranks_of(records: Any, series: Mapping[str, Any]) -> tuple[int, int, str]:
    """(nodes, ranks per node, source): the launch's parameters, else the series' labels, else the world size."""
    for text in records["params"].drop_duplicates():
        try:
            params = json.loads(text)
        except (TypeError, ValueError):
            continue
        if isinstance(params, dict) and "nodes" in params and "ranks_per_node" in params:
            return int(params["nodes"]), int(params["ranks_per_node"]), "the launch's parameters"
    if "nodes" in series and "ranks_per_node" in series:
        return int(series["nodes"]), int(series["ranks_per_node"]), "the series' labels"
    world = int(records["world_size"].max())
    return world, 1, "the records' world size, one rank per node assumed"


def _link_rate(records: Any, series: Mapping[str, Any]) -> tuple[float | None, str]:
    rows = rows_of(records, series, LINK_RATE_METRIC)
    rows = rows[rows["value"].notna() & (rows["value"] > 0)]
    if len(rows):
        return float(rows["value"].iloc[-1]), f"{LINK_RATE_METRIC} record of the series (the link it ran on)"
    facts = records[(records["metric"] == FACT_LINK_RATE) & records["value"].notna() & (records["value"] > 0)]
    if len(facts):
        return float(facts["value"].iloc[0]), f"{FACT_LINK_RATE} (the launch's shaped link)"
    return None, ""


def backend_of(records: Any) -> str:
    """The launch's communication backend as its ``backend`` record names it (gloo when unrecorded)."""
    rows = records[records["metric"] == BACKEND_METRIC]["text"].dropna()
    return str(rows.iloc[0]) if len(rows) else "gloo"


def measure(records: Any, series: Mapping[str, Any], *, where: str = "the records") -> Measured:
    """One series' figures from ``records``.

    Args:
        records: one launch's rows (any experiment's).
        series: the series' labels (:func:`find_series`).
        where: names the records in errors (a task folder, a file).

    Raises:
        AdviceError: naming ``where``, the series and the record that is missing.
    """
    step_rows = rows_of(records, series, STEP_METRIC)
    step_rows = step_rows[step_rows["value"].notna()]
    with_comm = _masked(step_rows, lambda labels: labels.get(COMM_LABEL) == WITH_COMM)["value"]
    no_comm = _masked(step_rows, lambda labels: labels.get(COMM_LABEL) == NO_COMM)["value"]
    if with_comm.empty or no_comm.empty:
        raise AdviceError(where, f"needs '{STEP_METRIC}' records with {COMM_LABEL}={WITH_COMM} and "
                                 f"{COMM_LABEL}={NO_COMM} (the step with and without communication)", series)
    step, compute = _median(with_comm), _median(no_comm)
    if not (step > 0 and compute > 0):
        raise AdviceError(where, f"the median step ({step!r} s) and no-op step ({compute!r} s) must be positive",
                          series)
    syncs_rows = rows_of(records, series, SYNCS_METRIC)["value"].dropna()
    syncs = _median(syncs_rows) if len(syncs_rows) else 1.0
    if not syncs > 0:
        raise AdviceError(where, f"{syncs:g} synchronisations per step; the advisor needs at least one", series)
    alone_rows = rows_of(records, series, ALONE_METRIC)["value"].dropna()
    layout, layout_source = _layout(records, series, where)
    nodes, per_node, ranks_source = ranks_of(records, series)
    rate, rate_source = _link_rate(records, series)
    plain = rows_of(records, series, PLAIN_FRACTION_METRIC)["value"].dropna()
    sources = {"step": f"median of {len(with_comm)} '{STEP_METRIC}' records, {COMM_LABEL}={WITH_COMM}",
               "compute": f"median of {len(no_comm)} '{STEP_METRIC}' records, {COMM_LABEL}={NO_COMM} (no-op hook)",
               "syncs": f"median of '{SYNCS_METRIC}' records" if len(syncs_rows) else "one per step (no "
                                                                                      f"'{SYNCS_METRIC}' records)",
               "alone": f"median of {len(alone_rows)} '{ALONE_METRIC}' records",
               "layout": layout_source, "layout_of_ranks": ranks_source, "link_rate": rate_source,
               "plain_fraction": (f"'{PLAIN_FRACTION_METRIC}' record" if len(plain)
                                  else "0: no record of uncompressed parameters")}
    return Measured(series=dict(series), step_s=step, compute_s=compute, steps=int(min(len(with_comm), len(no_comm))),
                    syncs_per_step=syncs, sync_alone_s=_median(alone_rows) if len(alone_rows) else None,
                    layout=layout, nodes=nodes, ranks_per_node=per_node,
                    backend=backend_of(records), link_rate_bps=rate,
                    plain_fraction=float(plain.iloc[0]) if len(plain) else 0.0, sources=sources)


def probe_rows(records: Any, series: Mapping[str, Any]) -> Any:
    """The series' collectives-style rows (``time`` with op, size_bytes, group and group_ranks labels)."""
    return _masked(rows_of(records, series, PROBE_METRIC), lambda labels: all(k in labels for k in PROBE_LABELS))


def finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


__all__ = ["AdviceError", "Figure", "Measured", "backend_of", "compatible", "describe_series", "find_series",
           "measure", "probe_rows", "ranks_of", "rows_of"]
