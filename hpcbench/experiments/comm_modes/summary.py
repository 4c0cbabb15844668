"""One ``comm_modes`` launch's records -> its summary (read by the notebook, the report and the rules)."""

from __future__ import annotations

from typing import Any

from hpcbench.core.facts import DDP_FIRST_BUCKET_BYTES
from hpcbench.core.results import expand_labels
from hpcbench.core.sanity import Verification, expected_rows
from hpcbench.diag.report import breakdown_columns
from hpcbench.experiments.comm_modes.config import IB_MTU_BUCKET_MB, CommModesConfig

SUMMARY_KEYS = ["model", "mode", "bucket_cap_mb"]
#: Step phases summarised (:mod:`hpcbench.diag.step_breakdown`), as ``<phase>_p50_ms`` columns.
BREAKDOWN_PHASES = ("forward", "backward", "comm_wait", "optimizer", "other")


def summarize(records: Any) -> Any:
    """One row per (model, mode, bucket): throughput p50 (total and per rank), step time p50/p99,
    no-op step p50, communication share p50, gradient check, bucket count; ``note`` holds the
    reason of a combination that could not run.

    ``samples`` holds the per-step total throughput (the rules' input) and ``ok`` is False
    where the mode's gradients differed from plain DDP's: such a series never counts.

    The step breakdown (T-diag) adds ``<phase>_p50_ms`` for :data:`BREAKDOWN_PHASES`
    (median over every rank's timed steps with the mode's communication; ``comm_wait`` is
    the exposed communication wait) and ``jitter_max`` (the largest rank's step-time
    std / mean).
    """
    import pandas as pd

    rows = records[records["experiment"] == "comm_modes"]
    rows = rows[rows["metric"].isin(["throughput", "step_time", "comm_share", "comm_time", "grad_match",
                                     "bucket_count", "first_bucket_bytes", "step_phase_seconds", "step_jitter"])]
    if rows.empty:
        return pd.DataFrame(columns=SUMMARY_KEYS + ["throughput_total_p50"])
    wide = expand_labels(rows)
    out = []
    for key, g in wide.groupby(SUMMARY_KEYS, sort=True):
        measured = g[g["value"].notna()]
        notes = sorted({t for t in g["text"].dropna() if str(t).startswith("not applicable")})

        def pick(metric: str, **where: str):
            sel = measured[measured["metric"] == metric]
            for col, val in where.items():
                sel = sel[sel[col] == val] if col in sel.columns else sel.iloc[0:0]
            return sel["value"]

        tput = pick("throughput", scope="total")
        step = pick("step_time", comm="mode")
        noop = pick("step_time", comm="noop")
        grad = pick("grad_match")
        buckets = pick("bucket_count")
        unit = g[g["metric"] == "throughput"]["unit"].iloc[0] if (g["metric"] == "throughput").any() else ""
        diag = breakdown_columns(g, BREAKDOWN_PHASES, comm="mode")
        out.append({
            **dict(zip(SUMMARY_KEYS, key)),
            "unit": unit,
            "throughput_total_p50": tput.median() if len(tput) else float("nan"),
            "throughput_rank_p50": pick("throughput", scope="rank").median() if len(tput) else float("nan"),
            "step_p50_ms": step.median() * 1e3 if len(step) else float("nan"),
            "step_p99_ms": step.quantile(0.99) * 1e3 if len(step) else float("nan"),
            "noop_step_p50_ms": noop.median() * 1e3 if len(noop) else float("nan"),
            "comm_time_p50_ms": pick("comm_time").median() * 1e3 if len(noop) else float("nan"),
            "comm_share_p50": pick("comm_share").median() if len(noop) else float("nan"),
            "grad_match": bool(grad.min() == 1.0) if len(grad) else None,
            "buckets": int(buckets.iloc[0]) if len(buckets) else None,
            "first_bucket_bytes": int(pick("first_bucket_bytes").iloc[0]) if len(pick("first_bucket_bytes")) else None,
            "steps": len(step),
            **diag,
            "note": notes[0] if notes else "",
            "samples": tuple(float(v) for v in tput),
            "ok": not (len(grad) and grad.min() < 1.0),
            "problem": "" if not (len(grad) and grad.min() < 1.0) else
                       f"{key[1]} gave other gradients than plain DDP ({key[0]}, bucket {key[2]:g} MiB)",
        })
    return pd.DataFrame(out)


def mode_gains(summary: Any, baseline: str = "ddp") -> Any:
    """Throughput of every mode relative to ``baseline`` at the same model and bucket size."""
    import pandas as pd

    if summary.empty:
        return pd.DataFrame(columns=["model", "bucket_cap_mb", "mode", "ratio_vs_ddp"])
    base = summary[summary["mode"] == baseline].set_index(["model", "bucket_cap_mb"])["throughput_total_p50"]
    rows = []
    for r in summary.itertuples(index=False):
        b = base.get((r.model, r.bucket_cap_mb), float("nan"))
        rows.append({"model": r.model, "bucket_cap_mb": r.bucket_cap_mb, "mode": r.mode,
                     "throughput_total_p50": r.throughput_total_p50, "ratio_vs_ddp": r.throughput_total_p50 / b,
                     "comm_time_p50_ms": r.comm_time_p50_ms, "note": r.note})
    return pd.DataFrame(rows)


def _buckets(row: Any) -> str:
    """The bucket count, known only when the no-op run logged the layout (``measure_noop``)."""
    n = row["buckets"]
    return "bucket count not logged (measure_noop off)" if n is None or n != n else f"{n:.0f} buckets"


def bucket_findings(summary: Any) -> list[str]:
    """Sentences on the bucket sweep (C17): where the optimum lies, and the MTU-sized bucket."""
    lines = []
    for (model, mode), g in summary[summary["throughput_total_p50"].notna()].groupby(["model", "mode"]):
        if g["bucket_cap_mb"].nunique() < 2:
            continue
        best = g.loc[g["throughput_total_p50"].idxmax()]
        text = (f"{model} / {mode}: best throughput at bucket_cap_mb={best['bucket_cap_mb']:g} "
                f"({best['throughput_total_p50']:.4g} {best['unit']}, {_buckets(best)})")
        mtu = g[(g["bucket_cap_mb"] - IB_MTU_BUCKET_MB).abs() < 1e-12]
        if len(mtu):
            m = mtu.iloc[0]
            text += (f"; the 4 KiB (IB MTU) bucket reaches {m['throughput_total_p50'] / best['throughput_total_p50']:.0%} "
                     f"of it with {_buckets(m)} (a 4 KiB cap closes a bucket at nearly every "
                     f"parameter tensor, so each pays a collective's latency)")
        lines.append(text)
    lines.append(f"PyTorch's first bucket: DDP caps the first bucket (the last layers' gradients, ready "
                 f"first) at dist._DEFAULT_FIRST_BUCKET_BYTES = {DDP_FIRST_BUCKET_BYTES:,} B when bucket_cap_mb "
                 f"is left at its default; in this torch version an explicit bucket_cap_mb sets the first bucket "
                 f"too (first_bucket_bytes in the records shows the layout each run really had).")
    return lines


_PASSED = ("every mode that ran gave plain DDP's gradients, and every model x mode x bucket "
           "was measured or recorded as not applicable with its reason")


def verify_records(records: Any, cfg: CommModesConfig) -> Verification:
    """Gradients matched plain DDP wherever a mode ran, and every combination is measured or explained."""
    problems: list[str] = []
    expected = (((model, mode, float(bucket)), f"{model} / {mode} / {bucket:g} MiB")
                for model in cfg.models for mode in cfg.modes for bucket in cfg.bucket_cap_mb)
    for where, r in expected_rows(summarize(records), lambda r: (r.model, r.mode, float(r.bucket_cap_mb)), expected,
                                  problems):
        if r.note:
            continue  # not applicable, with the reason
        if r.steps != cfg.steps:
            problems.append(f"{where}: {r.steps} timed steps, expected {cfg.steps}")
        elif cfg.check and r.grad_match is not True:
            problems.append(f"{where}: gradients differ from plain DDP's")
    return Verification(problems, passed=_PASSED)
