"""One ``overlap`` launch's records -> its summary (read by the notebook, the report and the rules)."""

from __future__ import annotations

import math
from typing import Any, Iterator

from hpcbench.core.results import expand_labels
from hpcbench.core.sanity import Verification, expected_rows
from hpcbench.diag.report import breakdown_columns
from hpcbench.experiments.overlap.config import OverlapExperimentConfig
from hpcbench.parallel.overlap import summarize_overlap, syncs_per_step

SUMMARY_KEYS = ["model", "micro_steps", "no_sync"]
METRICS = ["step_time", "time_per_sample", "exposed_comm", "throughput", "allreduce_calls", "allreduce_bytes",
           "syncs", "syncs_per_sample", "bytes_per_sample", "sync_alone_time", "bucket_count", "grad_match",
           "params_agree", "loss_after", "loss_match", "step_phase_seconds", "step_jitter"]
#: Step phases summarised as ``<phase>_p50_ms`` (:mod:`hpcbench.diag.step_breakdown`; no data wait here).
BREAKDOWN_PHASES = ("forward", "backward", "comm_wait", "optimizer", "other")
#: The checks whose failure takes a series out of every verdict, and what the failure means.
CHECKS = {"grad_match": "its accumulated gradients differ from one big step's",
          "params_agree": "its ranks held different parameters after a synchronisation",
          "loss_match": "its loss after the same samples is not within 5 % of k=1's"}


def _nan_median(values: Any) -> float:
    return float(values.median()) if len(values) else math.nan


def summarize(records: Any) -> Any:
    """One row per (model, micro_steps, no_sync), in milliseconds where times.

    Columns: total throughput p50; optimizer step and per-sample time p50 with the mode's
    communication and with the no-op hook (``compute``); exposed communication (step - no-op
    step, medians), total communication (one synchronisation's buckets all-reduced alone x
    synchronisations per step) and the overlapped share (1 - exposed / total, as
    :func:`hpcbench.parallel.overlap.summarize_overlap` computes it); the counted
    synchronisations, all-reduces and bytes; the checks and the loss.

    ``samples`` holds the per-step total throughput and ``sync_samples`` the per-step
    synchronisations per sample (the rules' inputs); ``ok`` is False where a check failed
    (``problem`` says which): such a series never counts.

    The step breakdown (T-diag) adds ``<phase>_p50_ms`` for :data:`BREAKDOWN_PHASES` (median
    over every rank's extra, untimed phase-timed steps with communication; each phase summed
    over the step's k micro-steps; ``comm_wait`` is the exposed communication wait) and
    ``jitter_max`` (the largest rank's step-time std / mean over those steps).
    """
    import pandas as pd

    rows = records[(records["experiment"] == "overlap") & records["metric"].isin(METRICS)]
    if rows.empty:
        return pd.DataFrame(columns=SUMMARY_KEYS + ["throughput_total_p50"])
    wide = expand_labels(rows)
    wide = wide[wide["micro_steps"].notna()].assign(micro_steps=lambda f: f["micro_steps"].astype(int),
                                                    no_sync=lambda f: f["no_sync"].astype(bool))
    out = []
    for key, g in wide.groupby(SUMMARY_KEYS, sort=True):
        measured = g[g["value"].notna()]
        model, k, no_sync = key

        def pick(metric: str, **where: str):
            sel = measured[measured["metric"] == metric]
            for col, val in where.items():
                sel = sel[sel[col] == val] if col in sel.columns else sel.iloc[0:0]
            return sel.sort_values("step")["value"]

        tput, step, noop = pick("throughput", scope="total"), pick("step_time", comm="mode"), pick("step_time", comm="noop")
        alone, syncs = pick("sync_alone_time"), pick("syncs")
        per_sample = pick("syncs_per_sample")
        overlap = None
        if len(step) and len(noop) and len(alone) and len(syncs) and syncs.median() > 0:
            overlap = summarize_overlap(list(step), list(noop), list(alone), int(round(syncs.median())))
        checks = {name: pick(name) for name in CHECKS}
        failed = [name for name, v in checks.items() if len(v) and v.min() < 1.0]
        # A sanity check of the run, not a verdict: no_sync() for k micro-steps then one
        # synchronisation is k x fewer by definition; a count that differs (any step) means the run
        # did not do what it says, and the series does not count.
        expected = syncs_per_step(int(k), bool(no_sync))
        wrong_count = [v for v in syncs if v != expected]
        loss = pick("loss_after")
        unit = g[g["metric"] == "throughput"]["unit"].iloc[0] if (g["metric"] == "throughput").any() else ""
        out.append({
            "model": model, "micro_steps": int(k), "no_sync": bool(no_sync), "unit": unit,
            "throughput_total_p50": _nan_median(tput),
            "step_p50_ms": _nan_median(step) * 1e3,
            "step_p99_ms": step.quantile(0.99) * 1e3 if len(step) else math.nan,
            "noop_step_p50_ms": _nan_median(noop) * 1e3,
            "sample_p50_ms": _nan_median(pick("time_per_sample", comm="mode")) * 1e3,
            "compute_sample_p50_ms": _nan_median(pick("time_per_sample", comm="noop")) * 1e3,
            "exposed_comm_ms": overlap.exposed_s * 1e3 if overlap else math.nan,
            "total_comm_ms": overlap.total_s * 1e3 if overlap else math.nan,
            "overlapped_share": overlap.overlapped_share if overlap else math.nan,
            "syncs_per_step": _nan_median(syncs),
            "syncs_per_sample": _nan_median(per_sample),
            "allreduces_per_step": _nan_median(pick("allreduce_calls")),
            "bytes_per_sample": _nan_median(pick("bytes_per_sample")),
            "buckets": int(pick("bucket_count").iloc[0]) if len(pick("bucket_count")) else None,
            "loss_after": float(loss.iloc[0]) if len(loss) else math.nan,
            **{name: (bool(v.min() == 1.0) if len(v) else None) for name, v in checks.items()},
            **breakdown_columns(g, BREAKDOWN_PHASES),
            "steps": len(step),
            "samples": tuple(float(v) for v in tput),
            "sync_samples": tuple(float(v) for v in per_sample),
            "sync_count_ok": not wrong_count if len(syncs) else None,
            "ok": not failed and not wrong_count,
            "problem": "; ".join([f"{model} k={k} no_sync={no_sync}: {CHECKS[name]}" for name in failed]
                                 + ([f"{model} k={k} no_sync={no_sync}: {len(wrong_count)} of {len(syncs)} steps "
                                     f"counted {wrong_count[0]:g} synchronisations, expected {expected}"]
                                    if wrong_count else [])),
        })
    # k ascending, no_sync() before the sync-every-micro-step baseline of the same k
    return pd.DataFrame(out).sort_values(["model", "micro_steps", "no_sync"], ascending=[True, True, False],
                                         ignore_index=True)


def per_sample_split(summary: Any) -> Any:
    """Per-sample time split into compute (the no-op step) and exposed communication, per series (ms)."""
    import pandas as pd

    if summary.empty:
        return pd.DataFrame(columns=["model", "series", "compute_ms", "exposed_ms"])
    rows = []
    for r in summary.itertuples(index=False):
        exposed = r.sample_p50_ms - r.compute_sample_p50_ms
        rows.append({"model": r.model, "series": series_name(r.micro_steps, r.no_sync),
                     "compute_ms": r.compute_sample_p50_ms, "exposed_ms": exposed})
    return pd.DataFrame(rows)


def series_name(k: int, no_sync: bool) -> str:
    """``k=4 no_sync`` / ``k=4 sync every micro-step`` / ``k=1`` (no_sync has nothing to skip at k=1)."""
    if k == 1:
        return "k=1"
    return f"k={k} no_sync" if no_sync else f"k={k} sync each"


def with_k1_baseline(summary: Any) -> Iterator[tuple[str, Any, Any]]:
    """(model, its k=1 row, all its rows) for each model of ``summary`` that has a k=1 series to compare with."""
    for model, g in summary.groupby("model"):
        base = g[g["micro_steps"] == 1]
        if not base.empty:
            yield model, base.iloc[0], g


def findings(summary: Any) -> list[str]:
    """Sentences on each model's k > 1 series against k=1: synchronisations per sample and samples/s."""
    lines = []
    for model, b, g in with_k1_baseline(summary):
        for r in g[g["micro_steps"] > 1].itertuples(index=False):
            lines.append(f"{model} {series_name(r.micro_steps, r.no_sync)}: synchronisations per sample "
                         f"k=1 / this = {b.syncs_per_sample / r.syncs_per_sample:.3g}x, samples/s this / k=1 = "
                         f"{r.throughput_total_p50 / b.throughput_total_p50:.3g}x; {r.overlapped_share:.0%} of its "
                         f"communication hidden behind backward (exposed {r.exposed_comm_ms:.3g} of "
                         f"{r.total_comm_ms:.3g} ms per step)")
    return lines


_PASSED = ("every series synchronised as often as its k and no_sync say (counted by the hook), "
           "and every check held: accumulated gradients = one big step's, ranks identical after every "
           "synchronisation, loss within 5 % of k=1's")


def verify_records(records: Any, cfg: OverlapExperimentConfig) -> Verification:
    """Every series measured with its steps, its counted synchronisations as expected, every check passed."""
    problems: list[str] = []
    expected = (((model, k, no_sync), f"{model} / {series_name(k, no_sync)}")
                for model in cfg.models for k, no_sync in cfg.series())
    for name, r in expected_rows(summarize(records), lambda r: (r.model, r.micro_steps, r.no_sync), expected,
                                 problems):
        if r.steps != cfg.steps:
            problems.append(f"{name}: {r.steps} timed steps, expected {cfg.steps}")
        if not r.ok:  # the counted synchronisations are one of the summary's checks
            problems.append(r.problem)
        if cfg.check and r.micro_steps > 1 and (r.grad_match is None or r.loss_match is None):
            problems.append(f"{name}: the gradient or loss check has no record")
    return Verification(problems, passed=_PASSED)
