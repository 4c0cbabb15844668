"""One ``scale_model`` task's records -> its summary (read by the notebook, the report, the plot and the rule).

Per phase (link rate), from that phase's records only:

1. the alpha-beta fits of every timed (op, group) (:func:`hpcbench.scale.alpha_beta.fit_from_collectives`,
   plain least squares, or relative weights with the task's ``relative_fit``);
2. the emulated cluster as a platform built from those fits
   (:func:`hpcbench.scale.platforms.emulated_cluster`);
3. per mode, the predicted step (:func:`hpcbench.scale.predict.predict_step`): compute = the
   measured median of the same step under a no-op comm hook, the model's gradient elements,
   DDP's bucket layout as measured, the share the 2-bit hook sent plainly, the hierarchical
   stages as all-reduces where they ran so, and two inputs measured without any communication:
   the **overlap windows** (per bucket, the backward compute left when DDP launches it, from the
   no-op twin's steps; the exposed communication is the bucket timeline's tail,
   :func:`hpcbench.scale.predict.exposed_after_compute`) and, for the modes with a Python comm
   hook (hierarchical, 2-bit), the **hook's own work in a step** (``hook_cpu_ms``: steps with the
   real hook and local stand-ins for its collectives, minus the no-op step next to each; records
   without it fall back on the 2-bit coding timed alone, ``codec_ms``). Records without overlap
   windows are predicted with no overlap (an upper bound). The mode's own step times are never an
   input;
4. the residual ``(predicted - measured median) / measured`` against a 10 % tolerance (:data:`TOLERANCE`);
5. C1's quantity: the inter-node link efficiency (the ``inter_node`` all-reduce fit's per-node
   bandwidth over the shaped rate) and the busy share it gives at the guide's platform
   (:func:`hpcbench.experiments.scale_model.rules.c1_prediction`).

One frame, column ``row`` saying what a row is: ``step`` (per phase and mode), ``fit`` (per
phase, op and group) and ``c1`` (per shaped phase).
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

from hpcbench.core.errors import ConfigError
from hpcbench.core.results import expand_labels
from hpcbench.core.sanity import Verification
from hpcbench.experiments.scale_model.config import RUN_MODES, UNSHAPED, ScaleModelConfig
from hpcbench.experiments.scale_model.rules import C1_MIN_R2, c1_prediction, pct

EXPERIMENT = "scale_model"
#: The tolerance: every (link rate, mode) predicted within 10 % of the measured median. The model
#: predicts DDP's overlap and each Python hook's own work from what the launch measured, so what is
#: left of the residual is run-to-run noise of a few percent; a wider band would hide a missing term.
TOLERANCE = 0.10
#: Bytes per gradient element of the models trained here (float32).
GRAD_BYTES = 4
STEP_COLUMNS = ["row", "phase", "link_rate", "rate_bps", "mode", "steps", "measured_p50_ms", "measured_ci_low_ms",
                "measured_ci_high_ms", "compute_ms", "codec_ms", "hook_cpu_ms", "first_window_ms", "hidden_share",
                "predicted_ms", "predicted_comm_ms", "residual", "within_tolerance", "samples", "ok", "problem"]
FIT_COLUMNS = ["op", "group", "group_ranks", "alpha_s", "alpha_err_s", "beta_s_per_byte", "beta_err", "bandwidth_Bps",
               "r2", "sizes", "efficiency"]
#: ``link_efficiency`` (only where the fit holds) is what the guide-scale predictions read as a measured input
#: (:class:`hpcbench.scale.guide_scale.MeasuredInputs`).
C1_COLUMNS = ["c1_busy_share", "c1_busy_share_8nics", "c1_comm_s", "c1_compute_s", "link_efficiency"]
COLUMNS = STEP_COLUMNS + FIT_COLUMNS + C1_COLUMNS


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval of the median: order statistics x(k), x(n-k+1) with binomial coverage.

    Needs no assumption on the steps' distribution (Conover, "Practical nonparametric statistics",
    3rd ed., sec. 3.2). ``(nan, nan)`` when the samples are too few for the coverage (n < 6 at 95 %).
    """
    x = sorted(float(v) for v in samples if math.isfinite(float(v)))
    n = len(x)
    tail, k, cdf = (1 - confidence) / 2, 0, 0.0
    for j in range(n + 1):
        cdf += math.comb(n, j) / 2**n
        if cdf > tail:
            break
        k = j + 1  # x(1)..x(k) may be dropped from each end and the coverage still holds
    if k == 0 or n == 0:
        return math.nan, math.nan
    return x[k - 1], x[n - k]


def _median(values: Sequence[float]) -> float:
    vals = sorted(float(v) for v in values if math.isfinite(float(v)))
    if not vals:
        return math.nan
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def _phases(wide: Any) -> list[tuple[int, str, float, str]]:
    """(phase, link rate, shaped rate in bit/s or NaN, the driver's text) in phase order."""
    out = {}
    driver = wide[wide["metric"] == "link_rate_bps"]
    for r in driver.itertuples(index=False):
        out[int(r.phase)] = (str(r.link_rate), float(r.value), str(r.text or ""))
    if "phase" in wide.columns:  # phases the ranks ran that the driver did not record (a direct launch)
        for p, g in wide[wide["phase"].notna()].groupby("phase"):
            out.setdefault(int(p), (str(g["link_rate"].iloc[0]), math.nan, "no driver record of the phase"))
    return [(p, *out[p]) for p in sorted(out)]


def _params(rows: Any) -> dict[str, Any]:
    """The task's parameters as its records carry them ({} when unreadable)."""
    try:
        params = json.loads(rows["params"].iloc[0])
    except (TypeError, ValueError, IndexError, KeyError):
        return {}
    return params if isinstance(params, dict) else {}


def _layout(rows: Any) -> dict[str, Any]:
    """What the prediction of one topology needs from the lead rank's rows: nodes and ranks per node."""
    topo = rows[rows["metric"] == "topology"]
    if len(topo):
        r = topo.iloc[0]
        return {"nodes": int(r["nodes"]), "ranks_per_node": int(r["ranks_per_node"])}
    params = _params(rows)
    return {"nodes": int(params.get("nodes", 2)), "ranks_per_node": int(params.get("ranks_per_node", 2))}


def _value(rows: Any, metric: str, **where: Any) -> float:
    sel = rows[rows["metric"] == metric]
    for col, val in where.items():
        sel = sel[sel[col] == val] if col in sel.columns else sel.iloc[0:0]
    sel = sel[sel["value"].notna()]
    return float(sel["value"].iloc[0]) if len(sel) else math.nan


def _fit_rows(fits: dict, base: dict[str, Any], rate_bps: float) -> list[dict[str, Any]]:
    out = []
    for (op, group), f in sorted(fits.items()):
        shaped = group == "inter_node" and math.isfinite(rate_bps) and rate_bps > 0
        eff = f.bandwidth_Bps * 8 / rate_bps if shaped and f.beta_s_per_byte > 0 else math.nan
        out.append({**base, "row": "fit", "op": op, "group": group, "group_ranks": f.group_ranks,
                    "alpha_s": f.alpha_s, "alpha_err_s": f.alpha_err, "beta_s_per_byte": f.beta_s_per_byte,
                    "beta_err": f.beta_err, "bandwidth_Bps": f.bandwidth_Bps, "r2": f.r2, "sizes": f.n,
                    "efficiency": eff})
    return out


def _c1_row(fits: dict, base: dict[str, Any], rate_bps: float) -> dict[str, Any] | None:
    """C1's quantity from this phase's inter-node all-reduce fit; None without a shaped rate."""
    if not (math.isfinite(rate_bps) and rate_bps > 0):
        return None
    fit = fits.get(("all_reduce", "inter_node"))
    row = {**base, "row": "c1", "efficiency": math.nan, "c1_busy_share": math.nan, "ok": False}
    if fit is None:
        return {**row, "problem": f"{base['link_rate']}: no inter_node all_reduce fit, so no link efficiency"}
    eff = fit.bandwidth_Bps * 8 / rate_bps if fit.beta_s_per_byte > 0 else math.nan
    if not (fit.beta_s_per_byte > 0 and fit.r2 >= C1_MIN_R2):
        return {**row, "efficiency": eff, "r2": fit.r2,
                "problem": f"{base['link_rate']}: the inter_node all_reduce fit has r2 {fit.r2:.3f} < {C1_MIN_R2} or "
                           f"no positive beta: alpha and beta do not describe this link"}
    pred = c1_prediction(eff)
    return {**row, "efficiency": eff, "link_efficiency": eff, "r2": fit.r2, "c1_busy_share": pred.busy_share,
            "c1_busy_share_8nics": c1_prediction(eff, nics=8).busy_share,
            "c1_comm_s": pred.comm_s["total"], "c1_compute_s": pred.compute_s, "ok": True, "problem": ""}


def _step_row(rows: Any, mode: str, base: dict[str, Any], platform: Any, layout: dict[str, Any],
              grad_elems: float, why_no_platform: str) -> dict[str, Any]:
    from hpcbench.parallel.compression import Quant2BitConfig
    from hpcbench.scale.predict import predict_step

    mine = rows[rows["mode"] == mode] if "mode" in rows.columns else rows.iloc[0:0]
    times = mine[(mine["metric"] == "step_time") & mine["value"].notna()]
    step = times[times["comm"] == "mode"].sort_values("step")["value"].tolist()
    noop = times[times["comm"] == "noop"].sort_values("step")["value"].tolist()
    low, high = median_ci(step)
    measured, compute = _median(step), _median(noop)
    codec = _value(mine, "codec_time")
    codec = codec if math.isfinite(codec) else 0.0
    hook = _value(mine, "hook_cpu_time")  # in a step; noise can take it below 0, where nothing is charged
    hook = max(0.0, hook) if math.isfinite(hook) else codec
    windows = mine[(mine["metric"] == "overlap_window") & mine["value"].notna()].sort_values("step")["value"].tolist()
    agree = _value(mine, "params_agree")
    problems = []
    if agree == 0.0:
        problems.append(f"{base['link_rate']} {mode}: its ranks held different parameters after the timed steps")
    row = {**base, "row": "step", "mode": mode, "steps": len(step), "measured_p50_ms": measured * 1e3,
           "measured_ci_low_ms": low * 1e3, "measured_ci_high_ms": high * 1e3, "compute_ms": compute * 1e3,
           "codec_ms": codec * 1e3, "hook_cpu_ms": hook * 1e3,
           "first_window_ms": windows[0] * 1e3 if windows else math.nan, "hidden_share": math.nan,
           "predicted_ms": math.nan, "predicted_comm_ms": math.nan, "residual": math.nan,
           "within_tolerance": None, "samples": tuple(step)}
    buckets = mine[(mine["metric"] == "bucket_bytes") & mine["value"].notna()].sort_values("step")["value"]
    elems = [int(b) // GRAD_BYTES for b in buckets]
    note = ""
    if platform is None:
        note = why_no_platform
    elif not (math.isfinite(compute) and compute > 0 and math.isfinite(grad_elems) and step):
        note = f"{base['link_rate']} {mode}: no step times, no-op steps or gradient count recorded"
    else:
        plain = _value(mine, "plain_fraction")
        measured_layout = sum(elems) == int(grad_elems)
        try:
            pred = predict_step(grad_elems, platform=platform, nodes=layout["nodes"],
                                ranks_per_node=layout["ranks_per_node"], mode=RUN_MODES.get(mode).model,
                                compute_s=compute, hook_cpu_s=hook,
                                bucket_elems=elems if measured_layout else None,
                                overlap_windows_s=(windows if measured_layout and len(windows) == len(elems)
                                                   else None),
                                plain_fraction=plain if math.isfinite(plain) else 0.0,
                                intra_via_allreduce=_value(mine, "intra_via_allreduce") == 1.0,
                                chunk_size=Quant2BitConfig().chunk_size)
        except ConfigError as exc:
            note = f"{base['link_rate']} {mode}: no prediction ({exc})"
        else:
            residual = (pred.step_s - measured) / measured
            row.update(predicted_ms=pred.step_s * 1e3, predicted_comm_ms=pred.exposed_comm_s * 1e3,
                       hidden_share=pred.hidden_share, residual=residual,
                       within_tolerance=bool(abs(residual) <= TOLERANCE))
    return {**row, "ok": not problems, "problem": "; ".join(problems + ([note] if note else []))}


def summarize(records: Any) -> Any:
    """One task's records -> the frame of the module docstring (empty, with :data:`COLUMNS`, without records)."""
    import pandas as pd

    from hpcbench.scale.alpha_beta import fit_from_collectives
    from hpcbench.scale.platforms import emulated_cluster

    mine = records[records["experiment"] == EXPERIMENT] if len(records) else records
    if mine.empty:
        return pd.DataFrame(columns=COLUMNS)
    wide = expand_labels(mine)
    if "phase" not in wide.columns or "link_rate" not in wide.columns:
        return pd.DataFrame(columns=COLUMNS)
    out: list[dict[str, Any]] = []
    relative = bool(_params(mine).get("relative_fit", False))
    for phase, rate, rate_bps, _ in _phases(wide):
        in_phase = wide["phase"] == phase
        rows = wide[in_phase]
        base = {"phase": phase, "link_rate": rate, "rate_bps": rate_bps}
        timed = mine[in_phase.to_numpy() & (mine["metric"] == "time").to_numpy()]
        try:
            fits = fit_from_collectives(timed, relative=relative) if len(timed) else {}
        except ConfigError:
            fits = {}
        out += _fit_rows(fits, base, rate_bps)
        layout = _layout(rows)
        try:
            platform, why = emulated_cluster(fits, ranks_per_node=layout["ranks_per_node"]), ""
        except ConfigError as exc:
            platform, why = None, f"{rate}: no platform from the fits ({exc})"
        grad_elems = _value(rows, "gradient_elements")
        modes = list(dict.fromkeys(rows["mode"].dropna())) if "mode" in rows.columns else []
        for mode in modes:
            out.append(_step_row(rows, mode, base, platform, layout, grad_elems, why))
        c1 = _c1_row(fits, base, rate_bps)
        if c1 is not None:
            out.append(c1)
    frame = pd.DataFrame(out)
    for col in COLUMNS:
        if col not in frame.columns:
            frame[col] = math.nan
    return frame[COLUMNS + [c for c in frame.columns if c not in COLUMNS]]


def residual_table(summary: Any) -> Any:
    """The step rows: link rate, mode, measured median and its CI, predicted, compute, predicted comm, residual."""
    cols = ["link_rate", "mode", "steps", "measured_p50_ms", "measured_ci_low_ms", "measured_ci_high_ms",
            "predicted_ms", "compute_ms", "hook_cpu_ms", "codec_ms", "predicted_comm_ms", "hidden_share", "residual",
            "within_tolerance"]
    return summary[summary["row"] == "step"][cols].reset_index(drop=True)


def fit_table(summary: Any) -> Any:
    """The fit rows: per link rate, op and group, alpha and beta with their errors, r2 and the link efficiency."""
    cols = ["link_rate", "op", "group", "group_ranks", "alpha_s", "alpha_err_s", "beta_s_per_byte", "beta_err",
            "bandwidth_Bps", "r2", "sizes", "efficiency"]
    return summary[summary["row"] == "fit"][cols].reset_index(drop=True)


def findings(summary: Any) -> list[str]:
    """Sentences: per (rate, mode) the residual; per shaped phase the efficiency and C1's busy share."""
    lines = []
    for r in summary[summary["row"] == "step"].itertuples(index=False):
        if math.isfinite(r.residual):
            codec = f" + hook work {r.hook_cpu_ms:.1f}" if r.hook_cpu_ms > 0 else ""
            hidden = f", {pct(r.hidden_share)} of it hidden by backward" if math.isfinite(r.hidden_share) else ""
            lines.append(f"{r.link_rate} {r.mode}: predicted {r.predicted_ms:.1f} ms (compute {r.compute_ms:.1f}"
                         f"{codec} + exposed communication {r.predicted_comm_ms:.1f}{hidden}) vs measured "
                         f"{r.measured_p50_ms:.1f} ms: "
                         f"{pct(r.residual, signed=True)} "
                         f"({'within' if r.within_tolerance else 'outside'} {pct(TOLERANCE)})")
        else:
            lines.append(f"{r.link_rate} {r.mode}: measured {r.measured_p50_ms:.1f} ms, no prediction: {r.problem}")
    for r in summary[summary["row"] == "c1"].itertuples(index=False):
        if r.ok:
            lines.append(f"{r.link_rate}: inter-node link efficiency {r.efficiency:.2f} -> C1 busy share at the "
                         f"guide's platform {pct(r.c1_busy_share, digits=1)} with 1 NIC per node, "
                         f"{pct(r.c1_busy_share_8nics, digits=1)} with 8")
        else:
            lines.append(f"{r.link_rate}: C1 not computed: {r.problem}")
    return lines


_PASSED = ("every phase ran at its link rate with a fit per timed op and group, every mode measured and predicted, "
           "every rank holding the same parameters, and the links put back at the cluster's rate")


def verify_records(records: Any, cfg: ScaleModelConfig) -> Verification:
    """Every phase and mode measured with its steps and predicted, ranks agreeing, the link restored."""
    problems = []
    summary = summarize(records)
    mine = records[records["experiment"] == EXPERIMENT] if len(records) else records
    shaped = (mine["metric"] == "link_rate_original").any() if len(mine) else False
    expected = list(cfg.link_rates) if shaped else [UNSHAPED]
    steps = summary[summary["row"] == "step"]
    fits = summary[summary["row"] == "fit"]
    for rate in expected:
        for op in cfg.ops:
            for group in ("world", "intra_node", "inter_node"):
                if not ((fits["link_rate"] == rate) & (fits["op"] == op) & (fits["group"] == group)).any():
                    problems.append(f"{rate}: no fit of {op} on the {group} groups")
        for mode in cfg.modes:
            got = steps[(steps["link_rate"] == rate) & (steps["mode"] == mode)]
            if got.empty:
                problems.append(f"{rate} {mode}: no records")
                continue
            r = got.iloc[0]
            if r["steps"] != cfg.steps:
                problems.append(f"{rate} {mode}: {r['steps']} timed steps, expected {cfg.steps}")
            if not math.isfinite(r["predicted_ms"]):
                problems.append(f"{rate} {mode}: no prediction ({r['problem']})")
            if not r["ok"]:
                problems.append(r["problem"])
    if shaped:
        restored = mine[mine["metric"] == "link_restored"]
        if restored.empty or restored["value"].min() < 1.0:
            why = restored["text"].iloc[0] if len(restored) else "no record of it"
            problems.append(f"the links were not put back at the cluster's rate: {why}")
    return Verification(problems, passed=_PASSED)
