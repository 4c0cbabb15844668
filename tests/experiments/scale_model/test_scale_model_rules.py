"""scale_model from recorded records, without torch: fits, predictions, residuals, C1 and its every outcome.

Named apart from tests/test_scale_model.py (the model core): pytest imports test modules by basename."""

import math

import matplotlib
import numpy as np
import pytest
from synthetic import LOOPBACK, SHAPED, launch, launches

from hpcbench.cluster.network import parse_rate
from hpcbench.core.errors import ConfigError
from hpcbench.experiments import EXPERIMENTS
from hpcbench.experiments.scale_model.config import RUN_MODES, UNSHAPED, ScaleModelConfig
from hpcbench.experiments.scale_model.rules import (C1_REFERENCE, c1_prediction, naive_estimate, pct, sensitivity_at,
                                                    sensitivity_findings)
from hpcbench.experiments.scale_model.summary import (COLUMNS, TOLERANCE, findings, fit_table, median_ci,
                                                      residual_table, summarize, verify_records)
from hpcbench.report.ledger import evaluate_claim
from hpcbench.scale.predict import MODE_MODELS

matplotlib.use("Agg")

RATES = ("1gbit", "200mbit")
SIZES = [4096 * 4**k for k in range(6)]  # 4 KiB .. 4 MiB, the config's default sweep
PARAMS = {"nodes": 2, "ranks_per_node": 2, "link_rates": list(RATES), "modes": ["ddp", "hierarchical"],
          "ops": ["all_reduce"], "steps": 12}
#: weather_tiny: 372,800 float32 gradients in DDP's two buckets (1 MiB first, the rest).
GRAD_ELEMS, LAYOUT = 372_800, [1_048_576, 442_624]
COMPUTE_S, ALPHA_S, INTRA_BPS = 0.05, 100e-6, 2e9


def _beta_inter(rate: str, eff: float) -> float:
    return 8.0 / (eff * parse_rate(rate))


def ddp_expected(rate: str, eff: float) -> float:
    """The world ring all-reduce of each bucket on the synthetic world fit: 6 alpha + 1.5 x bytes x beta."""
    return COMPUTE_S + sum(6 * ALPHA_S + 1.5 * b * _beta_inter(rate, eff) for b in LAYOUT)


def scale_rows(*, rates=RATES, eff=0.9, residual=0.05, seed=0, poor_fit=False, agree=1.0, shaped=True,
               windows=None, hook=None):
    """One launch's rows: the driver's phases, each phase's all-reduce sweep (exact alpha-beta times, or noise
    with ``poor_fit``), and per mode 12 steps at (1 + residual) x the ddp prediction plus its no-op twin; with
    ``windows`` / ``hook`` the measured overlap windows per bucket and the hook's CPU work per mode."""
    rng = np.random.default_rng(seed)
    rows = []
    if shaped:
        rows.append(("link_rate_original", parse_rate("1gbit"), "bit/s", {}, "1gbit"))
        rows.append(("link_restored", 1.0, "bool", {}, "links back at 1gbit"))
    for p, rate in enumerate(rates if shaped else [UNSHAPED]):
        phase = {"phase": p, "link_rate": rate}
        rows.append(("link_rate_bps", parse_rate(rate) if shaped else None, "bit/s", phase, "reshaped"))
        rows.append(("topology", None, "", {"nodes": 2, "ranks_per_node": 2, "emulated": False, **phase}, "2 x 2"))
        beta = _beta_inter(rate if shaped else "1gbit", eff)
        for group, n, steps, per_byte, b in (("world", 4, 6, 1.5, beta), ("intra_node", 2, 2, 1.0, 1 / INTRA_BPS),
                                             ("inter_node", 2, 2, 2.0, beta)):
            for size in SIZES:
                t = ALPHA_S * steps + b * per_byte * size
                times = list(rng.uniform(1e-3, 1.0, 3)) if poor_fit and group == "inter_node" else [t] * 3
                labels = {"op": "all_reduce", "size_bytes": size, "group": group, "group_index": 0, "group_ranks": n,
                          "dtype": "float32", **phase}
                rows.append(("time", times, "s", labels))
        rows.append(("gradient_elements", float(GRAD_ELEMS), "", phase))
        measured = ddp_expected(rate if shaped else "1gbit", eff) * (1 + residual)
        for mode in ("ddp", "hierarchical"):
            labels = {"mode": mode, **phase}
            rows += [("step_time", list(measured * (1 + 0.01 * rng.standard_normal(12))), "s",
                      {**labels, "comm": "mode"}),
                     ("step_time", list(COMPUTE_S * (1 + 0.01 * rng.standard_normal(12))), "s",
                      {**labels, "comm": "noop"}),
                     ("bucket_bytes", [float(b) for b in LAYOUT], "B", labels),
                     ("plain_fraction", 0.0, "fraction", labels),
                     ("intra_via_allreduce", float(mode == "hierarchical"), "bool", labels),
                     ("params_agree", agree if mode == "ddp" else 1.0, "bool", labels)]
            if windows is not None:
                rows.append(("overlap_window", list(windows), "s", labels))
            if hook is not None:
                rows.append(("hook_cpu_time", hook, "s", labels))
    return rows


def test_summary_fits_predicts_and_scores_each_rate_and_mode(tmp_path):
    records = launch(tmp_path, "scale_model", scale_rows(residual=0.05), params=PARAMS, backend="gloo")
    s = summarize(records)
    assert list(s.columns[:len(COLUMNS)]) == COLUMNS
    fits = fit_table(s).set_index(["link_rate", "group"])
    for rate in RATES:
        inter = fits.loc[(rate, "inter_node")]
        assert inter["beta_s_per_byte"] == pytest.approx(_beta_inter(rate, 0.9), rel=1e-6)
        assert inter["alpha_s"] == pytest.approx(ALPHA_S, rel=1e-4) and inter["r2"] > 0.999
        assert inter["efficiency"] == pytest.approx(0.9, rel=1e-6)
        assert math.isnan(fits.loc[(rate, "world"), "efficiency"])
    table = residual_table(s).set_index(["link_rate", "mode"])
    for rate in RATES:
        ddp = table.loc[(rate, "ddp")]
        # the prediction is the no-op median + the world fit's price of DDP's measured buckets
        assert ddp["predicted_ms"] == pytest.approx(1e3 * ddp_expected(rate, 0.9), rel=0.02)
        assert ddp["residual"] == pytest.approx(1 / 1.05 - 1, abs=0.01) and ddp["within_tolerance"]
        assert ddp["measured_ci_low_ms"] <= ddp["measured_p50_ms"] <= ddp["measured_ci_high_ms"]
        hier = table.loc[(rate, "hierarchical")]
        assert hier["compute_ms"] < hier["predicted_ms"] and hier["predicted_comm_ms"] > 0
    # the slower link costs more communication in every mode
    assert (table.xs("200mbit")["predicted_comm_ms"] > table.xs("1gbit")["predicted_comm_ms"]).all()
    c1 = s[s["row"] == "c1"]
    assert list(c1["link_rate"]) == list(RATES) and c1["ok"].all()
    assert c1["c1_busy_share"].iloc[0] == pytest.approx(c1_prediction(0.9).busy_share, rel=1e-6)
    assert c1["c1_busy_share_8nics"].iloc[0] == pytest.approx(c1_prediction(0.9, nics=8).busy_share, rel=1e-6)
    assert verify_records(records, ScaleModelConfig.from_dict(PARAMS)).ok
    assert any(f"within {pct(TOLERANCE)}" in line for line in findings(s))


def test_measured_overlap_windows_and_hook_work_enter_the_prediction(tmp_path):
    from hpcbench.scale.predict import exposed_after_compute

    windows, hook = [0.004, 0.0], 0.003
    records = launch(tmp_path, "scale_model", scale_rows(windows=windows, hook=hook), params=PARAMS)
    s = summarize(records)
    table = residual_table(s).set_index(["link_rate", "mode"])
    for rate in RATES:
        buckets = [6 * ALPHA_S + 1.5 * b * _beta_inter(rate, 0.9) for b in LAYOUT]
        exposed = exposed_after_compute(windows, buckets)
        ddp = table.loc[(rate, "ddp")]
        # without either term the prediction would be COMPUTE_S + sum(buckets) (test above)
        assert ddp["predicted_ms"] == pytest.approx(1e3 * (COMPUTE_S + hook + exposed), rel=0.02)
        assert ddp["predicted_comm_ms"] == pytest.approx(1e3 * exposed, rel=0.02) and exposed < sum(buckets)
        assert ddp["hook_cpu_ms"] == pytest.approx(1e3 * hook)
        assert ddp["hidden_share"] == pytest.approx(1 - exposed / sum(buckets), rel=0.05) and ddp["hidden_share"] > 0
    steps = s[s["row"] == "step"]
    assert steps["first_window_ms"].tolist() == pytest.approx([4.0] * len(steps))
    # a hook time below zero (noise) charges nothing; a window list that does not match the buckets is not used
    s = summarize(launch(tmp_path, "scale_model", scale_rows(windows=[0.004], hook=-0.001), params=PARAMS,
                         task_id="scale_model.other"))
    ddp = residual_table(s).set_index(["link_rate", "mode"]).loc[("1gbit", "ddp")]
    assert ddp["hook_cpu_ms"] == 0.0 and ddp["hidden_share"] == 0.0
    assert ddp["predicted_ms"] == pytest.approx(1e3 * ddp_expected("1gbit", 0.9), rel=0.02)


def test_a_residual_beyond_15_percent_is_flagged(tmp_path):
    records = launch(tmp_path, "scale_model", scale_rows(residual=0.4), params=PARAMS)
    table = residual_table(summarize(records))
    ddp = table[table["mode"] == "ddp"]
    assert (ddp["residual"] < -TOLERANCE).all() and not ddp["within_tolerance"].any()


def test_failed_checks_and_poor_fits_are_named(tmp_path):
    records = launch(tmp_path, "scale_model", scale_rows(agree=0.0, poor_fit=True), params=PARAMS)
    s = summarize(records)
    ddp = s[(s["row"] == "step") & (s["mode"] == "ddp")]
    assert not ddp["ok"].any() and ddp["problem"].str.contains("different parameters").all()
    c1 = s[s["row"] == "c1"]
    assert not c1["ok"].any() and c1["problem"].str.contains("r2").all() and c1["c1_busy_share"].isna().all()
    text = str(verify_records(records, ScaleModelConfig.from_dict(PARAMS)))
    assert "FAIL" in text and "different parameters" in text


def test_an_unshaped_phase_has_no_c1_row_and_says_why(tmp_path):
    records = launch(tmp_path, "scale_model", scale_rows(shaped=False), params=PARAMS, facts=LOOPBACK)
    s = summarize(records)
    assert set(s["link_rate"]) == {UNSHAPED} and not (s["row"] == "c1").any()
    assert s[s["row"] == "step"]["predicted_ms"].notna().all() and math.isnan(s["rate_bps"].iloc[0])
    row = evaluate_claim("C1", records)
    assert row.verdict == "inconclusive" and "shaped link" in row.detail


def _c1(tmp_path, effs, n=6, **kw):
    records = launches(tmp_path, "scale_model", lambda k: scale_rows(eff=effs[k % len(effs)], seed=k, **kw), n,
                       params=PARAMS, facts=SHAPED, backend="gloo")
    return evaluate_claim("C1", records)


NIC_LABELS = ("busy share, 1 NIC per node", "busy share, 2 NICs per node", "busy share, 4 NICs per node",
              "busy share, 8 NICs per node")


@pytest.mark.parametrize("effs, condition, below", [
    ([0.28, 0.3, 0.32], "consistent at every NIC count, 1-8", 4),  # so slow a link that even 8 NICs stay below
    ([0.88, 0.9, 0.92], "consistent at <= 4 NICs per node", 3),
    ([1.35, 1.4, 1.45], "consistent at <= 2 NICs per node", 2),
])
def test_c1_is_context_stating_up_to_which_nic_count_the_busy_share_stays_below_40_percent(tmp_path, effs,
                                                                                          condition, below):
    # an anecdote gets the condition, not a verdict word: "inconsistent with the model" could never come out
    row = _c1(tmp_path, effs)
    assert row.verdict == "context" and row.verdict_text == "context", row.measured
    assert row.reason == condition and len(row.reason.split()) <= 8
    assert row.measured.endswith(f"-> {condition}") and "6 launches" in row.measured
    assert row.labels == NIC_LABELS
    assert [o.verdict for o in row.outcomes] == ["reproduced"] * below + ["not reproduced"] * (4 - below)
    assert all(o.interval.high < C1_REFERENCE.upper for o in row.outcomes[:below])
    assert all(o.interval.low > C1_REFERENCE.upper for o in row.outcomes[below:])
    assert "consistent with the model" not in row.measured and "inconsistent" not in row.measured


def test_c1_detail_states_every_assumption_and_every_nic_count(tmp_path):
    row = _c1(tmp_path, [0.88, 0.9, 0.92])
    one, eight = (f"{c1_prediction(0.9, nics=n).busy_share * 100:.0f} %" for n in (1, 8))
    assert f"busy share {one}" in row.detail and f"busy share {eight}" in row.detail
    # the detail states every assumption, every NIC count, where < 40 % does and does not arise, the misestimate,
    # the efficiency each NIC count would need, and the memory caveat
    for words in ("anecdote", "1, 2, 4, 8 NICs per node", "(1, 2, 4, 8)",
                  "2048 tokens per GPU per step", "link efficiency measured", "8 NIC(s), 32-bit gradients",
                  "only for tokens <=", "x line rate", "planner", "ZeRO", "160 GB",
                  "1 NIC: compute", "2 NICs: compute", "4 NICs: compute", "8 NICs: compute"):
        assert words in row.detail, words


def test_c1_says_where_the_next_nic_count_is_undecided(tmp_path):
    row = _c1(tmp_path, [1.7, 2.3])  # 1 NIC below 40 %, 2 NICs straddle it, 4 and 8 above
    assert row.verdict == "context", row.measured
    assert row.reason == "consistent at <= 1 NIC, undecided at 2"
    assert [o.verdict for o in row.outcomes][:2] == ["reproduced", "inconclusive"]
    assert "straddles" in row.outcomes[1].why and "0.40 [0.3" in row.measured


def test_c1_not_consistent_even_at_one_nic_where_the_link_would_be_fast_enough(tmp_path):
    row = _c1(tmp_path, [9.0, 10.0, 11.0])  # a transport 10x faster than its line rate: synthetic, on purpose
    assert row.verdict == "context" and row.reason == "not consistent even at 1 NIC per node", row.measured
    assert all(o.interval.low > C1_REFERENCE.upper for o in row.outcomes)


def test_c1_an_interval_straddling_40_percent_at_one_nic_is_not_called_not_consistent(tmp_path):
    row = _c1(tmp_path, [3.5, 5.5])  # 1 NIC straddles 40 %, 2-8 NICs above it
    assert row.outcomes[0].verdict == "inconclusive" and "straddles" in row.outcomes[0].why
    assert "not consistent" not in row.reason


def test_c1_inconclusive_with_too_few_launches(tmp_path):
    row = _c1(tmp_path, [0.9], n=3)
    assert row.verdict == "inconclusive" and "n = 3 launches" in row.measured and "n = 3 launches" in row.reason


def test_c1_nic_condition_covers_every_branch():
    from hpcbench.experiments.scale_model.rules import C1_NIC_COUNTS, nic_condition
    from hpcbench.judge.verdict import Interval, Outcome

    def outcome(verdict, value=0.3, launches=5):
        why = "undecided here" if verdict == "inconclusive" else ""
        return Outcome(verdict, Interval(value, value, value, launches, 1, ""), C1_REFERENCE, why)

    R, N, I = "reproduced", "not reproduced", "inconclusive"
    assert C1_NIC_COUNTS == (1, 2, 4, 8)
    cases = {
        (R, R, R, R): ("context", "consistent at every NIC count, 1-8"),
        (R, R, R, N): ("context", "consistent at <= 4 NICs per node"),
        (R, R, N, N): ("context", "consistent at <= 2 NICs per node"),
        (R, N, N, N): ("context", "consistent at <= 1 NIC per node"),
        (R, N, R, R): ("context", "consistent at <= 1 NIC per node"),  # every smaller count must hold too
        (R, R, I, N): ("context", "consistent at <= 2 NICs, undecided at 4"),
        (R, I, N, N): ("context", "consistent at <= 1 NIC, undecided at 2"),
        (R, R, R, I): ("context", "consistent at <= 4 NICs, undecided at 8"),
        (N, N, N, N): ("context", "not consistent even at 1 NIC per node"),
        (N, R, R, R): ("context", "not consistent even at 1 NIC per node"),
    }
    for verdicts, expected in cases.items():
        got = nic_condition({n: outcome(v) for n, v in zip(C1_NIC_COUNTS, verdicts)})
        assert got == expected, (verdicts, got)
        assert len(got[1].split()) <= 8
    # too few launches at any count, or no value, leaves the anecdote undecided, with that outcome's reason
    few = {n: outcome(R) for n in C1_NIC_COUNTS} | {4: Outcome(I, Interval(0.3, 0.2, 0.4, 3, 1, ""), C1_REFERENCE,
                                                                 "n = 3 launches x 1 steps")}
    assert nic_condition(few) == ("inconclusive", "n = 3 launches x 1 steps")
    nan = {n: outcome(R) for n in C1_NIC_COUNTS} | {1: Outcome(I, Interval(math.nan, math.nan, math.nan, 5, 1, ""),
                                                               C1_REFERENCE)}
    assert nic_condition(nan) == ("inconclusive", "too few launches")


def test_c1_leaves_out_launches_whose_fit_failed_and_names_them(tmp_path):
    good = launches(tmp_path, "scale_model", lambda k: scale_rows(seed=k), 4, params=PARAMS, facts=SHAPED)
    bad = launch(tmp_path, "scale_model", scale_rows(poor_fit=True, seed=9), task_id="scale_model.bad",
                 params=PARAMS, facts=SHAPED)
    import pandas as pd

    row = evaluate_claim("C1", pd.concat([good, bad], ignore_index=True))
    assert row.verdict == "inconclusive" and "n = 4 launches" in row.measured
    assert "Not counted" in row.detail and "scale_model.bad" in row.detail and "r2" in row.detail


def test_the_guides_figures_at_the_reference_point():
    p = c1_prediction(1.0)
    # 6 x 10e9 x 2048 FLOPs at 312 TFLOP/s x 0.5; the ring sends 2 x 31/32 x 40 GB per node over 25 GB/s,
    # plus 2 (4 - 1) inter-node latency steps of 9.6 us per 25 MiB bucket
    assert p.compute_s == pytest.approx(6 * 10e9 * 2048 / 156e12, rel=1e-6)
    buckets = 40e9 / (25 << 20)
    assert p.comm_s["inter"] == pytest.approx(2 * 31 / 32 * 40e9 / 25e9 + buckets * 6 * 9.6e-6, rel=0.01)
    assert p.busy_share < 0.40
    naive = naive_estimate()
    assert naive["comm_s"] == pytest.approx(40e9 / 25e9) and naive["busy_share"] > p.busy_share
    assert c1_prediction(0.5).busy_share < p.busy_share  # a worse link, a lower busy share


def test_sensitivity_says_where_below_40_percent_arises(tmp_path):
    s = summarize(launch(tmp_path, "scale_model", scale_rows(), params=PARAMS))
    cfg = ScaleModelConfig.from_dict(PARAMS)
    table = sensitivity_at(s, cfg)
    assert list(table.columns) == cfg.c1_tokens and len(table) == len(cfg.c1_nics) * len(cfg.c1_grad_bytes)
    assert table.loc[(1, 4), 2048] < 0.4 and table.loc[(8, 2), 16384] > 0.4
    from hpcbench.experiments.scale_model.rules import c1_sensitivity

    lines = sensitivity_findings(c1_sensitivity(0.9, tokens=[512, 2048, 16384], nics=[1, 8], grad_bytes=[4]))
    assert lines[0].startswith("1 NIC(s), 32-bit gradients") and "below 40 %" in lines[0]
    assert sensitivity_at(s.iloc[0:0], cfg) is None


def test_median_ci_is_distribution_free():
    assert all(math.isnan(v) for v in median_ci([1.0] * 5))  # too few for 95 %
    low, high = median_ci(list(range(1, 11)))
    assert (low, high) == (2, 9)  # n = 10: x(2), x(9), coverage 97.9 %
    assert all(math.isnan(v) for v in median_ci([]))


def test_summary_of_other_records_is_empty():
    import pandas as pd

    s = summarize(pd.DataFrame({"experiment": ["collectives"], "metric": ["time"], "labels": ["{}"]}))
    assert s.empty and list(s.columns) == COLUMNS


@pytest.mark.parametrize("values, field", [
    ({"link_rates": []}, "link_rates"), ({"link_rates": ["1gbit", "1gbit"]}, "link_rates"),
    ({"link_rates": ["fast"]}, "link_rates"), ({"link_rates": ["500kbit"]}, "link_rates"),
    ({"modes": ["ddp", "ddp"]}, "modes"), ({"ops": ["all_gather"]}, "ops"),
    ({"min_bytes": "4M", "max_bytes": "1M"}, "min_bytes"), ({"max_bytes": "64K"}, "step_factor"),
    ({"ranks_per_node": 1}, "ranks_per_node"), ({"model": "gpt2_tiny", "seq_len": 999}, "seq_len"),
    ({"c1_nics": []}, "c1_nics"),
])
def test_config_rejects_bad_values_naming_the_field(values, field):
    with pytest.raises(ConfigError) as err:
        ScaleModelConfig.from_dict(values)
    assert err.value.field == field


def test_every_mode_is_priced_by_a_registered_model():
    assert set(ScaleModelConfig().modes) <= set(RUN_MODES.names())
    for name in RUN_MODES.names():
        assert RUN_MODES.get(name).model in MODE_MODELS


def test_estimate_grows_with_rates_steps_and_the_sweep():
    spec = EXPERIMENTS.get("scale_model")
    est = lambda **p: spec.estimate(ScaleModelConfig.from_dict(p))  # noqa: E731
    default = est()
    assert default.ranks == 4 and 1 < default.seconds < 600 and "phase" in default.basis
    assert est(link_rates=["200mbit", "100mbit", "50mbit"]).seconds > default.seconds
    assert est(steps=50).seconds > default.seconds and est(max_bytes="64M").seconds > default.seconds
    assert est(max_bytes="64M").memory_per_rank > default.memory_per_rank


def test_presenter_and_plot_render_synthetic_launches(tmp_path):
    from hpcbench.core.results import expand_labels
    from hpcbench.experiments.scale_model.plot import scale_model_plot
    from hpcbench.judge.evidence import summarize_launches
    from hpcbench.present.kit import ExperimentData
    from hpcbench.report.aggregate import series_stats

    df = launches(tmp_path, "scale_model", lambda k: scale_rows(seed=k), 2, params=PARAMS).assign(source="run")
    stats = expand_labels(series_stats(df[df["value"].notna()]))
    text = expand_labels(df[df["value"].isna() & df["text"].notna()])
    summaries = summarize_launches(df, summarize, "scale_model").assign(source="run")
    (section,) = EXPERIMENTS.get("scale_model").present(ExperimentData("scale_model", ["run"], stats, text, None,
                                                                         summaries))
    table = next(t for t in section.tables if t.id == "scale-model-residuals")
    assert [(r[2].text, r[3].text) for r in table.rows] == [(r, m) for r in RATES for m in ("ddp", "hierarchical")]
    assert all(r[4].text == "2" for r in table.rows)  # launches
    assert all(r[-1].text == "2/2" and not cls for r, cls in zip(table.rows, table.row_classes) if r[3].text == "ddp")
    assert section.figures and section.figures[0].data
    assert {t.id for t in section.tables} >= {"scale-model-fits", "scale-model-c1"}
    fig = scale_model_plot(summarize(df[df["task_id"] == df["task_id"].iloc[0]]))
    assert len(fig.axes) == 2


def test_all_to_all_is_fitted_with_its_n_minus_1_over_n_bytes():
    import pandas as pd

    from hpcbench.scale import algorithms as alg
    from hpcbench.scale.alpha_beta import fit_from_collectives

    rows = [{"experiment": "scale_model", "metric": "time", "unit": "s", "step": 0, "world_size": 4,
             "value": 1e-4 + 3 / 4 * s / 1e8, "labels": f'{{"op": "all_to_all", "size_bytes": {s}, "group": "world", '
                                                       f'"group_ranks": 4}}'} for s in SIZES]
    fit = fit_from_collectives(pd.DataFrame(rows))[("all_to_all", "world")]
    assert fit.beta_s_per_byte == pytest.approx(1e-8) and fit.alpha_s == pytest.approx(1e-4) and fit.steps == 1
    stage = alg.collective_cost("all_to_all", 1000.0, nodes=2, ranks_per_node=2)
    assert (stage.world_bytes, stage.intra_bytes, stage.inter_bytes) == (750.0, 250.0, 1000.0)  # per node: 2 x 2/4


def test_measured_buckets_must_cover_the_gradients():
    from hpcbench.scale.predict import predict_step

    p = predict_step(GRAD_ELEMS, platform="a100_hdr", nodes=2, compute_s=0.1,
                     bucket_elems=[b // 4 for b in LAYOUT])
    assert p.inputs["bucket_elems"] == [262_144, 110_656]
    with pytest.raises(ConfigError) as err:
        predict_step(GRAD_ELEMS, platform="a100_hdr", nodes=2, compute_s=0.1, bucket_elems=[1000])
    assert err.value.field == "bucket_elems"


def test_c1_predicted_column_reads_the_measured_link_efficiency():
    import pandas as pd

    from hpcbench.experiments.scale_model.rules import predict_c1_at_guide_scale
    from hpcbench.experiments import get_claim
    from hpcbench.judge.evidence import Evidence

    def evidence(efficiencies):
        summaries = pd.DataFrame({"run_id": ["r"] * len(efficiencies), "task_id": ["t"] * len(efficiencies),
                                  "link_efficiency": efficiencies})
        return Evidence("scale_model", summaries, pd.DataFrame(), pd.DataFrame())

    rated_prediction = predict_c1_at_guide_scale(get_claim("C1"), evidence([]))
    rated = rated_prediction.describe()
    # The summary row's headline: the busy share's range over the NIC counts the guide leaves open.
    assert rated_prediction.headline == (f"{c1_prediction(1.0).busy_share * 100:.0f} %.."
                                         f"{c1_prediction(1.0, nics=8).busy_share * 100:.0f} % busy, 1-8 NICs/node")
    assert "the rated link" in rated and f"{c1_prediction(1.0).busy_share * 100:.0f} % with 1 NIC per node" in rated
    assert f"{c1_prediction(1.0, nics=8).busy_share * 100:.0f} % with 8 NICs per node" in rated
    assert "2048 tokens per GPU" in rated and "neither the NIC count nor the tokens per GPU" in rated
    slow = predict_c1_at_guide_scale(get_claim("C1"), evidence([0.5, 0.5, 0.7])).describe()
    assert "link efficiency 0.50 (measured, median of 3 phase(s))" in slow
    assert f"{c1_prediction(0.5).busy_share * 100:.0f} %" in slow
    assert c1_prediction(0.5).busy_share < c1_prediction(1.0).busy_share
