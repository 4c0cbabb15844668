"""The advice: C14's pick for a run, with the scale model's predicted gain of every option.

:func:`advise` reads one series of a run's records (:mod:`hpcbench.advise.figures`), gets its
link (:mod:`hpcbench.advise.link`), classifies it (:mod:`hpcbench.advise.classify`) and
predicts, with :func:`hpcbench.scale.predict.predict_step` on that link, the time per
synchronisation interval of the baseline (DDP's flat ring) and of each option of
:data:`TECHNIQUES`. A "unit" is the compute between two synchronisations of the series (its
no-op step / synchronisations per step); the predicted gain is the baseline's time per unit
over the option's, so that accumulation, which spends k units per synchronisation, is compared
per sample like the others.

Assumptions of the predictions (shown in every option's ``inputs``): float32 gradients; the
series' buckets (their count and total bytes) for every option; the overlapped share the
baseline measured, for every option; no codec time for the compression (it is compute the
model does not see: the prediction is an upper bound of its gain).

:func:`advise_tasks` does it for every task of a run, from each task's records and state (it also says
which tasks it skipped and why, one reason once with its tasks; :mod:`hpcbench.report.advice` reads the
run folder); :func:`format_advice` prints it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from hpcbench.advise.classify import Classification, classify
from hpcbench.advise.figures import (GRAD_ELEM_BYTES, AdviceError, Figure, Measured, describe_series, find_series,
                                     measure)
from hpcbench.advise.link import BASELINE_MODE, LinkEstimate, ProbeSet, link_of, probe_sets, terms
from hpcbench.advise.thresholds import THRESHOLDS, Thresholds
from hpcbench.core.registry import Registry
from hpcbench.parallel.overlap import GUIDE_MICRO_STEPS
from hpcbench.scale.predict import Prediction, predict_step, residuals

#: Micro-steps the overlap option accumulates under no_sync() before one synchronisation (the guide's C9).
OVERLAP_MICRO_STEPS = GUIDE_MICRO_STEPS


@dataclass(frozen=True)
class Technique:
    """One option the advisor prices: a scale-model mode and C14's words for it."""

    name: str
    advice: str
    mode: str
    """the :data:`hpcbench.scale.predict.MODE_MODELS` mode (``"no_sync 4"`` sets the micro-steps)"""
    units: int = 1
    """units of compute per predicted step (k for accumulation)"""
    not_applicable: Callable[[Measured], str | None] = lambda m: None


def _needs_two_levels(m: Measured) -> str | None:
    if m.nodes < 2 or m.ranks_per_node < 2:
        return (f"a two-level reduction needs >= 2 nodes x 2 ranks per node; the run had {m.nodes} x "
                f"{m.ranks_per_node}")
    return None


TECHNIQUES: Registry[Technique] = Registry("advisor technique")
TECHNIQUES.register("quant2bit", Technique("quant2bit", "gradient compression (2-bit codes, C8)", "quant2bit"))
TECHNIQUES.register("hierarchical", Technique("hierarchical", "topology optimisation (two-level reduction, C3)",
                                              "hierarchical", not_applicable=_needs_two_levels))
TECHNIQUES.register("no_sync", Technique("no_sync", f"overlap: accumulate {OVERLAP_MICRO_STEPS} micro-steps under "
                                                    f"no_sync(), synchronise once (C9)",
                                         f"no_sync {OVERLAP_MICRO_STEPS}", units=OVERLAP_MICRO_STEPS))


@dataclass(frozen=True)
class Option:
    """One technique's predicted effect on the series."""

    technique: str
    advice: str
    predicted_unit_s: float
    """predicted seconds per unit of compute (baseline: one step of one synchronisation)"""
    predicted_gain: float
    """baseline's predicted time per unit / this option's (> 1: faster)"""
    not_applicable: str | None = None
    inputs: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"technique": self.technique, "advice": self.advice, "predicted_unit_s": self.predicted_unit_s,
                "predicted_gain": self.predicted_gain, "not_applicable": self.not_applicable,
                "inputs": dict(self.inputs)}


@dataclass(frozen=True)
class Advice:
    """C14's pick for one series of a run, the figures that led there and every option's predicted gain."""

    where: str
    series: Mapping[str, Any]
    regime: str
    """a name of :data:`hpcbench.advise.classify.REGIMES`"""
    description: str
    """C14's word for the regime"""
    pick: str
    """the technique C14 calls for (a name of :data:`TECHNIQUES`)"""
    reason: str
    figures: tuple[Figure, ...]
    options: tuple[Option, ...]
    thresholds: Mapping[str, float]
    link: str
    """``fitted`` or ``inferred`` (see :mod:`hpcbench.advise.link`)"""

    def option(self, technique: str) -> Option:
        return next(o for o in self.options if o.technique == technique)

    @property
    def predicted_best(self) -> str:
        """The applicable option the scale model predicts the highest gain for (it may differ from C14's pick)."""
        usable = [o for o in self.options if o.not_applicable is None] or list(self.options)
        return max(usable, key=lambda o: o.predicted_gain).technique

    def as_dict(self) -> dict[str, Any]:
        return {"where": self.where, "series": dict(self.series), "regime": self.regime,
                "description": self.description, "pick": self.pick, "predicted_best": self.predicted_best,
                "reason": self.reason, "link": self.link,
                "figures": [f.as_dict() for f in self.figures], "options": [o.as_dict() for o in self.options],
                "thresholds": dict(self.thresholds)}


def _predict(measured: Measured, link: LinkEstimate, mode: str) -> Prediction:
    params = measured.grad_bytes / GRAD_ELEM_BYTES
    # Buckets of equal size, as many as the run had: keeps both what the latency term counts
    # (buckets) and what the byte term counts (bytes); DDP never splits a parameter, predict_step may.
    bucket = math.ceil(params / len(measured.layout)) * GRAD_ELEM_BYTES
    return predict_step(params, platform=link.platform, nodes=measured.nodes, ranks_per_node=measured.ranks_per_node,
                        mode=mode, compute_s=measured.compute_s / measured.syncs_per_step,
                        overlap_share=measured.overlap_share, bucket_bytes=bucket, first_bucket_bytes=0,
                        grad_bytes_per_param=GRAD_ELEM_BYTES, plain_fraction=measured.plain_fraction,
                        intra_via_allreduce=measured.backend != "nccl")


def options(measured: Measured, link: LinkEstimate) -> tuple[Prediction, list[Option]]:
    """The baseline's prediction and every technique's predicted gain over it."""
    base = _predict(measured, link, BASELINE_MODE)
    out = []
    for name in TECHNIQUES:
        tech = TECHNIQUES.get(name)
        pred = _predict(measured, link, tech.mode)
        unit = pred.step_s / tech.units
        out.append(Option(name, tech.advice, unit, base.step_s / unit, tech.not_applicable(measured),
                          {**pred.inputs, "platform_link": link.how,
                           "codec_time": "not modelled (an upper bound of the gain)"}))
    return base, out


def advise_measured(measured: Measured, link: LinkEstimate, *, where: str,
                    thresholds: Thresholds = THRESHOLDS) -> Advice:
    """The advice for figures already measured (:func:`advise` reads them from records)."""
    latency, byte = terms(measured, link.platform)
    decided: Classification = classify(measured, latency, byte, link.how, thresholds)
    base, opts = options(measured, link)
    unit = measured.step_s / measured.syncs_per_step
    model_check = Figure("predicted baseline per synchronisation", base.step_s, "s",
                         f"scale model on the {link.how} link; measured {unit:.4g} s, residual "
                         f"{residuals([base.step_s], [unit])[0]:+.0%}")
    return Advice(where=where, series=dict(measured.series), regime=decided.regime.name,
                  description=decided.regime.description, pick=decided.regime.technique, reason=decided.reason,
                  figures=(*measured.figures(), *link.figures, *decided.figures, model_check), options=tuple(opts),
                  thresholds=thresholds.as_dict(), link=link.how)


def advise(records: Any, *, series: Mapping[str, Any] | None = None, where: str = "the records",
           thresholds: Thresholds = THRESHOLDS, run_probes: Sequence[ProbeSet] = ()) -> Advice:
    """C14's advice for the one series of ``records`` (that matches ``series``, when given).

    Args:
        records: rows of the one results schema (one launch).
        series: labels selecting a series when the records hold several (a subset of its labels).
        where: names the records in messages (a task folder, a file).
        thresholds: see :class:`~hpcbench.advise.thresholds.Thresholds`.
        run_probes: probe rows other tasks of the run measured (:func:`hpcbench.advise.link.probe_sets`),
            for a series with neither probe rows nor a link rate of its own.

    Returns:
        The :class:`Advice`.

    Raises:
        AdviceError: no series, several series (listed: pass ``series``), or a series that lacks
            a figure the advice needs (named).
    """
    found = find_series(records)
    if series:
        found = [s for s in found if all(s.get(k) == v for k, v in series.items())]
    if not found:
        wanted = f" matching {describe_series(series)}" if series else ""
        raise AdviceError(where, f"no series{wanted} with 'step_time' records both with communication "
                                 f"(comm=mode) and under the no-op hook (comm=noop); the advisor needs both")
    if len(found) > 1:
        listed = "; ".join(describe_series(s) for s in found)
        raise AdviceError(where, f"{len(found)} series ({listed}); choose one (series=...)")
    measured = measure(records, found[0], where=where)
    return advise_measured(measured, link_of(records, measured, where=where, run_probes=run_probes), where=where,
                           thresholds=thresholds)


def advise_all(records: Any, *, where: str, thresholds: Thresholds = THRESHOLDS,
               run_probes: Sequence[ProbeSet] = ()) -> tuple[list[Advice], list[AdviceError]]:
    """An advice for every usable series of one launch's records, and why the others were not usable."""
    advices, problems = [], []
    found = find_series(records)
    if not found:
        return [], [AdviceError(where, "no series with 'step_time' records both with communication (comm=mode) and "
                                       "under the no-op hook (comm=noop)")]
    for s in found:
        try:
            advices.append(advise(records, series=s, where=where, thresholds=thresholds, run_probes=run_probes))
        except AdviceError as exc:
            problems.append(exc)
    return advices, problems


@dataclass(frozen=True)
class Skipped:
    """A task (or some of its series) the advisor could not use, and why."""

    task: str
    state: str
    reason: str
    series: int = 0
    """series of the task the reason applies to (0: the task as a whole)"""


@dataclass(frozen=True)
class RunAdvice:
    """Everything :func:`advise_tasks` found in a run: the advices, and what it had to skip."""

    run_dir: Path
    advices: list[Advice]
    skipped: list[Skipped]

    def skipped_by_reason(self) -> dict[str, list[Skipped]]:
        """The skipped tasks grouped by their reason, in order of first appearance."""
        out: dict[str, list[Skipped]] = {}
        for s in self.skipped:
            out.setdefault(s.reason, []).append(s)
        return out

    def describe_skipped(self) -> str:
        """One line per distinct reason, then the tasks it applies to, indented under it."""
        lines = []
        for reason, tasks in self.skipped_by_reason().items():
            lines.append(f"  {reason}:")
            for t in tasks:
                series = f", {t.series} series" if t.series else ""
                lines.append(f"    {t.task} (task {t.state}{series})")
        return "\n".join(lines)

    def refused(self) -> AdviceError:
        """The error of a run the advisor can use nothing of: each reason once, its tasks under it."""
        detail = self.describe_skipped() or f"  {self.run_dir / 'tasks'} holds no task folder"
        return AdviceError(str(self.run_dir), "nothing the advisor can use:\n" + detail)


def advise_tasks(records: Mapping[str, Any], states: Mapping[str, str], *, run_dir: str | Path,
                 task: str | None = None, thresholds: Thresholds = THRESHOLDS) -> RunAdvice:
    """Advice for every task (and series) of one run, and every task or series skipped with its reason.

    A series with neither probe rows nor a link rate of its own is priced on the link the run's
    collectives-style tasks measured on its layout (:func:`hpcbench.advise.link.probe_sets`); with
    ``task``, the other tasks are still read for that. Reading a run folder is the caller's
    (:func:`hpcbench.report.advice.collect_run_advice`): the advisor sees records, not files.

    Args:
        records: task id -> its records (a DataFrame of the results schema), None when it has none;
            in the order the advice lists them.
        states: task id -> its state (``status.json``); a task without one reads "unknown".
        run_dir: the run folder, named in the advice and the errors.
        task: only this task id.

    Raises:
        AdviceError: no task ``task``.
    """
    run_dir = Path(run_dir)
    if task is not None and task not in records:
        known = ", ".join(sorted(states)) or "(none)"
        raise AdviceError(str(run_dir), f"no task {task!r}; tasks: {known}")
    run_probes = probe_sets(records)
    # a task of probe rows only has no series to advise on, but it is not useless: say what it is for
    probe_of = {t: p for p in run_probes for t in p.tasks}
    advices: list[Advice] = []
    skipped: list[Skipped] = []
    for name, frame in records.items():
        if task is not None and name != task:
            continue
        state = states.get(name, "unknown")
        if frame is None:
            skipped.append(Skipped(name, state, "no records"))
            continue
        folder = run_dir / "tasks" / name
        found, problems = advise_all(frame, where=f"{folder} (task {state})", thresholds=thresholds,
                                     run_probes=run_probes)
        advices += found
        if not found and name in probe_of:
            problems = [AdviceError(str(folder), f"no series of its own; its collectives-style rows give the link of "
                                                 f"the run's series on {probe_of[name].layout} ranks")]
        per_reason: dict[str, int] = {}
        for p in problems:
            per_reason[p.reason] = per_reason.get(p.reason, 0) + (p.series is not None)
        skipped += [Skipped(name, state, reason, n) for reason, n in per_reason.items()]
    return RunAdvice(run_dir, advices, skipped)


def _value(f: Figure) -> str:
    if f.unit == "fraction":
        return f"{f.value:.1%}"
    if f.unit in ("s", "B", "B/s", "bit/s"):
        return f"{f.value:.4g} {f.unit}"
    return f"{f.value:.4g}{(' ' + f.unit) if f.unit else ''}"


def format_advice(advices: list[Advice]) -> str:
    """A readable text table per advice: the regime and pick, the figures with sources, every option."""
    from hpcbench.advise.classify import REGIMES

    blocks = []
    for a in advices:
        lines = [a.where, f"  series: {describe_series(a.series)}",
                 f"  regime: {a.description} -> {REGIMES.get(a.regime).advice} ({a.pick})", f"  why: {a.reason}",
                 "  thresholds: " + ", ".join(f"{k} {v:g}" for k, v in a.thresholds.items()), "  figures:"]
        width = max(len(f.name) for f in a.figures)
        for f in a.figures:
            lines.append(f"    {f.name:<{width}}  {_value(f):>14}  {f.source}")
        lines.append(f"  options (scale model on the {a.link} link; gain = baseline time per unit / the option's):")
        lines.append(f"    {'':2}{'technique':<13} {'predicted gain':>14}  advice")
        for o in a.options:
            mark = "->" if o.technique == a.pick else ""
            note = f"  (not applicable: {o.not_applicable})" if o.not_applicable else ""
            lines.append(f"    {mark:2}{o.technique:<13} {o.predicted_gain:>13.3g}x  {o.advice}{note}")
        best = a.predicted_best
        lines.append(f"  the scale model's best option: {best}" + (" (C14's pick)" if best == a.pick else
                                                                    f" (C14's order picks {a.pick})"))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def advice_json(advices: list[Advice]) -> str:
    """The advices as JSON (one object per advice, in a list)."""
    return json.dumps([a.as_dict() for a in advices], indent=2, default=str)


__all__ = ["Advice", "OVERLAP_MICRO_STEPS", "Option", "RunAdvice", "Skipped", "TECHNIQUES", "Technique", "advice_json",
           "advise", "advise_all", "advise_measured", "advise_tasks", "format_advice", "options"]
