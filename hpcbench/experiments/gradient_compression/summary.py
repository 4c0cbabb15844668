"""One ``gradient_compression`` launch's records -> its summary (read by the notebook, the report and the rules)."""

from __future__ import annotations

import math
import statistics
from typing import Any

from hpcbench.core.sanity import Verification, expected_rows
from hpcbench.experiments.gradient_compression.config import BASELINE, NO_FEEDBACK, TECHNIQUE, CompressionConfig

SUMMARY_KEYS = ["model", "mode", "compression"]
#: The loss after the same samples may differ from the float32 baseline's by at most this share (C8's
#: check: a compression that saves bytes but trains a worse model is no optimisation).
LOSS_TOLERANCE = 0.05
#: Series whose loss is checked: the guide's technique (the ablation shows what dropping feedback costs).
LOSS_CHECKED = (TECHNIQUE,)
METRICS = ("throughput", "step_time", "comm_time", "wire_bytes", "fp32_bytes", "wire_ratio", "intra_node_bytes",
           "final_loss", "grad_rel_err", "params_agree", "skip_exact", "wire_bits", "codec_time",
           "compressed_elements", "plain_elements", "step_phase_seconds", "step_jitter")
#: Step phases summarised as ``<phase>_p50_ms`` (:mod:`hpcbench.diag.step_breakdown`; no data wait here).
BREAKDOWN_PHASES = ("forward", "backward", "comm_wait", "optimizer", "other")
ORDER = ("none", "fp16", "bf16", "powersgd", TECHNIQUE, NO_FEEDBACK)


def _nan() -> float:
    return float("nan")


def summarize(records: Any) -> Any:
    """One row per (model, mode, compression) series; the no-op run gives ``noop_step_p50_ms``.

    Per-step figures are medians over the timed steps; bytes are what one rank sent per step
    (``compressed_bytes_step`` + ``plain_bytes_step`` = ``bytes_step``; ``fp32_bytes_step`` is
    what a float32 ring all-reduce of the same elements sends). ``wire_ratio`` is the compressed
    part's bytes over its float32 bytes, ``reduction`` its inverse; ``*_vs_none`` divide by the
    ``none`` series of the same model and mode. ``samples`` holds the per-step total throughput
    and ``reduction_samples`` the per-step reduction (the rules' inputs). ``ok`` is False where
    the ranks' parameters differ, the skipped gradients are not a plain reduction's bits, or
    (quant2bit) the loss is more than :data:`LOSS_TOLERANCE` off ``none``'s: such a row never counts.

    The step breakdown (T-diag) adds ``<phase>_p50_ms`` for :data:`BREAKDOWN_PHASES` (median
    over every rank's timed steps; ``comm_wait`` is the exposed communication wait) and
    ``jitter_max`` (the largest rank's step-time std / mean).
    """
    import json

    import pandas as pd

    columns = SUMMARY_KEYS + ["throughput_p50", "samples", "ok"]
    rows = records[(records["experiment"] == "gradient_compression") & records["metric"].isin(METRICS)]
    # One pass in plain Python: (model, mode, compression) -> (metric, part or phase) -> values in step order.
    # Filtering the frame per metric costs ~1 s per launch on string columns; the ledger summarises
    # every launch of every run.
    series: dict[tuple, dict[tuple, list[float]]] = {}
    notes: dict[tuple, set[str]] = {}
    units: dict[tuple, str] = {}
    ordered = rows.sort_values("step", kind="stable")
    for metric, value, unit, labels, text in zip(ordered["metric"], ordered["value"], ordered["unit"],
                                                 ordered["labels"], ordered["text"]):
        try:
            lab = json.loads(labels)
        except (TypeError, ValueError):
            continue
        if not isinstance(lab, dict) or not all(k in lab for k in SUMMARY_KEYS):
            continue
        key = tuple(lab[k] for k in SUMMARY_KEYS)
        values = series.setdefault(key, {})
        if isinstance(text, str) and text.startswith("not applicable"):
            notes.setdefault(key, set()).add(text)
        if value == value:
            values.setdefault((metric, lab.get("part", lab.get("phase"))), []).append(float(value))
        if metric == "throughput":
            units[key] = str(unit)

    def p50(values: list[float], scale: float = 1.0) -> float:
        return statistics.median(values) * scale if values else _nan()

    out = []
    for key in sorted(k for k in series if k[2] != "noop"):
        got = series[key]

        def pick(metric: str, part: str | None = None) -> list[float]:
            return got.get((metric, part), [])

        def one(metric: str) -> float:
            return pick(metric)[0] if pick(metric) else _nan()

        def flag(metric: str) -> bool | None:
            return min(pick(metric)) == 1.0 if pick(metric) else None

        tput, ratio = pick("throughput"), pick("wire_ratio")
        comp, plain = pick("wire_bytes", "compressed"), pick("wire_bytes", "plain")
        fp32 = p50(pick("fp32_bytes", "compressed")) + p50(pick("fp32_bytes", "plain"))
        bytes_step = p50(comp) + p50(plain)
        noop = series.get((key[0], key[1], "noop"), {}).get(("step_time", None), [])
        note = sorted(notes.get(key, ()))
        out.append({
            **dict(zip(SUMMARY_KEYS, key)),
            "unit": units.get(key, ""),
            "steps": len(pick("step_time")),
            "step_p50_ms": p50(pick("step_time"), 1e3),
            "noop_step_p50_ms": p50(noop, 1e3),
            "comm_time_p50_ms": p50(pick("comm_time"), 1e3),
            "throughput_p50": p50(tput),
            "compressed_bytes_step": p50(comp),
            "plain_bytes_step": p50(plain),
            "bytes_step": bytes_step,
            "fp32_bytes_step": fp32,
            "total_ratio": bytes_step / fp32 if fp32 > 0 else _nan(),
            "wire_ratio": p50(ratio),
            "reduction": 1.0 / p50(ratio) if ratio and p50(ratio) > 0 else _nan(),
            "intra_node_bytes_step": p50(pick("intra_node_bytes")),
            "wire_bits": one("wire_bits"),
            "codec_ms": one("codec_time") * 1e3,
            "compressed_elements": one("compressed_elements"),
            "plain_elements": one("plain_elements"),
            "final_loss": one("final_loss"),
            "grad_rel_err": one("grad_rel_err"),
            "params_agree": flag("params_agree"),
            "skip_exact": flag("skip_exact"),
            **{f"{p}_p50_ms": p50(pick("step_phase_seconds", p), 1e3) for p in BREAKDOWN_PHASES},
            "jitter_max": max(pick("step_jitter")) if pick("step_jitter") else _nan(),
            "note": note[0] if note else "",
            "samples": tuple(tput),
            "reduction_samples": tuple(1.0 / v for v in ratio if v > 0),
        })
    return pd.DataFrame(_relative(out)) if out else pd.DataFrame(columns=columns)


def _relative(rows: list[dict]) -> list[dict]:
    """Add the ``*_vs_none`` columns, the loss check and ``ok`` / ``problem``; sort by :data:`ORDER`."""
    base = {(r["model"], r["mode"]): r for r in rows if r["compression"] == BASELINE}
    vs = {"bytes_vs_none": "bytes_step", "comm_vs_none": "comm_time_p50_ms", "loss_vs_none": "final_loss",
          "throughput_vs_none": "throughput_p50"}
    for r in rows:
        ref = base.get((r["model"], r["mode"]))
        for column, source in vs.items():
            r[column] = r[source] / ref[source] if ref is not None and ref[source] else _nan()
        what = f"{r['compression']} ({r['model']}, {r['mode']})"
        problem = []
        if r["params_agree"] is False:
            problem.append(f"{what}: the ranks' parameters differ after training")
        if r["skip_exact"] is False:
            problem.append(f"{what}: the skipped gradients differ from a plain reduction of the same values")
        r["loss_ok"] = None
        if r["compression"] in LOSS_CHECKED and math.isfinite(r["loss_vs_none"]):
            r["loss_ok"] = abs(r["loss_vs_none"] - 1.0) <= LOSS_TOLERANCE
            if not r["loss_ok"]:
                problem.append(f"{what}: the loss after the same samples is {r['loss_vs_none'] - 1:+.1%} off "
                               f"none's (allowed: within {LOSS_TOLERANCE:.0%})")
        r["ok"] = not problem
        r["problem"] = "; ".join(problem)
    order = {name: i for i, name in enumerate(ORDER)}
    return sorted(rows, key=lambda r: (r["model"], r["mode"], order.get(r["compression"], len(order))))


TABLE_COLUMNS = ["model", "mode", "compression", "bytes_step", "compressed_bytes_step", "plain_bytes_step",
                 "wire_ratio", "bytes_vs_none", "comm_time_p50_ms", "comm_vs_none", "step_p50_ms", "throughput_p50",
                 "unit", "loss_vs_none", "grad_rel_err", "codec_ms", "note"]


def findings(summary: Any) -> list[str]:
    """Sentences on what each series sends and costs, read off the summary."""
    lines = []
    for _, r in summary[summary["note"] == ""].iterrows():
        if r["compression"] == BASELINE:
            continue
        text = (f"{r['model']} / {r['mode']} / {r['compression']}: {r['bytes_vs_none']:.3g}x none's bytes per step "
                f"(compressed part {r['wire_ratio']:.4g} of its float32 bytes, i.e. {r['reduction']:.3g}x less), "
                f"communication time {r['comm_vs_none']:.3g}x none's, loss after the same samples "
                f"{r['loss_vs_none']:.3g}x none's, one step's gradient error {r['grad_rel_err']:.3g}")
        if r["codec_ms"] == r["codec_ms"]:
            text += (f"; the codec alone (quantise, encode, decode; no wire) takes {r['codec_ms']:.3g} ms of its "
                     f"{r['comm_time_p50_ms']:.3g} ms communication time")
        lines.append(text)
    return lines


def _is(value: Any, expected: bool) -> bool:
    """A check's flag (True, False, or None / NaN when not checked) equals ``expected``."""
    return value is not None and value == value and bool(value) is expected


_PASSED = ("every series that ran kept the ranks' parameters identical, sent its skipped gradients as a plain "
           "reduction would, and was measured for every step; every model x mode x series was measured or "
           "recorded as not applicable with its reason")


def verify_records(records: Any, cfg: CompressionConfig) -> Verification:
    """The correctness checks passed wherever a series ran, and every combination is measured or explained."""
    problems: list[str] = []
    expected = (((model, mode, name), f"{model} / {mode} / {name}")
                for model in cfg.models for mode in cfg.modes for name in cfg.series())
    for where, r in expected_rows(summarize(records), lambda r: (r.model, r.mode, r.compression), expected,
                                  problems):
        if r.note:
            continue  # not applicable, with the reason
        if r.steps != cfg.steps:
            problems.append(f"{where}: {r.steps} timed steps, expected {cfg.steps}")
        elif not _is(r.params_agree, True):
            problems.append(f"{where}: the ranks' parameters differ after training")
        elif _is(r.skip_exact, False):
            problems.append(f"{where}: skipped gradients differ from a plain reduction")
        elif not math.isfinite(r.bytes_step):
            problems.append(f"{where}: no bytes counted")
    return Verification(problems, passed=_PASSED)
