"""advisor from recorded records, without torch: summary (the pick from the baseline's records only) -> rule C14,
every outcome reachable; the config's refusals."""

import json

import pytest
from synthetic import LOOPBACK, SHAPED, launches, noisy

from hpcbench.core.errors import ConfigError
from hpcbench.experiments.advisor.config import AdvisorConfig
from hpcbench.experiments.advisor.summary import baseline_records, summarize, verify_records
from hpcbench.report.ledger import evaluate_claim

STEPS, B = 12, 2
#: The config's default layout: with gloo a two-level reduction saves no latency step there.
PARAMS = {"nodes": 2, "ranks_per_node": 2, "steps": STEPS}
#: A layout where it saves intra-node steps on gloo too (ring 2 x 3 x 1 = 6 against 4): every regime is judged.
JUDGED = {"nodes": 3, "ranks_per_node": 2, "steps": STEPS}
#: The baseline's measured figures per regime: (step s, no-op step s, one sync alone s, buckets, link bit/s),
#: built so that the advisor sees bandwidth-bound, latency-sensitive and compute-dominated runs.
BASELINES = {"bandwidth": (1.0, 0.05, 1.0, [1 << 20, 1 << 19], 20e6),
             "latency": (0.06, 0.025, 0.04, [2048] * 40, 1e9),
             "compute": (1.01, 1.0, 0.02, [1_500_000], 1e9)}
PICKS = {"bandwidth": "quant2bit", "latency": "hierarchical", "compute": "no_sync"}
#: Gains per sample over the baseline where C14's order is right in every regime.
AGREE = {"bandwidth": {"quant2bit": 3.0, "hierarchical": 1.3, "no_sync": 2.0},
         "latency": {"quant2bit": 0.9, "hierarchical": 2.5, "no_sync": 1.5},
         "compute": {"quant2bit": 0.9, "hierarchical": 1.0, "no_sync": 1.2}}


def advisor_rows(gains=AGREE, *, seed=0, shaped=True, spread=0.02):
    rows = []
    for i, (regime, (step, compute, alone, layout, rate)) in enumerate(BASELINES.items()):
        base = {"regime": regime, "technique": "baseline", "model": "weather_tiny", "batch_size": B}
        s = seed * 101 + i * 13
        rows += [("step_time", noisy(step, STEPS, spread, s), "s", {**base, "comm": "mode"}),
                 ("step_time", noisy(compute, STEPS, spread, s + 1), "s", {**base, "comm": "noop"}),
                 ("time_per_sample", noisy(step / B, STEPS, spread, s + 2), "s", {**base, "comm": "mode"}),
                 ("sync_alone_time", noisy(alone, 5, spread, s + 3), "s", base),
                 ("bucket_count", len(layout), "", base, "bucket bytes in reduction order: "
                  + ",".join(map(str, layout))),
                 ("params_agree", 1.0, "bool", base),
                 ("link_shaped", 1.0 if shaped else 0.0, "bool", {"regime": regime})]
        if shaped:
            rows.append(("link_rate_bps", rate, "bit/s", {"regime": regime}))
        for j, (technique, gain) in enumerate(gains[regime].items()):
            lab = {**base, "technique": technique}
            rows += [("time_per_sample", noisy(step / B / gain, STEPS, spread, s + 4 + j), "s",
                      {**lab, "comm": "mode"}),
                     ("step_time", noisy(step / gain, STEPS, spread, s + 8 + j), "s", {**lab, "comm": "mode"}),
                     ("params_agree", 1.0, "bool", lab)]
    return rows


def runs(tmp_path, n=5, gains=AGREE, facts=SHAPED, params=JUDGED, backend="gloo", **kw):
    return launches(tmp_path, "advisor", lambda k: advisor_rows(gains, seed=k, **kw), n, params=params, facts=facts,
                    backend=backend)


def test_summary_reads_the_pick_from_the_baselines_records_only(tmp_path):
    df = runs(tmp_path, n=1)
    s = summarize(df).set_index(["regime", "technique"])
    assert len(s) == 12 and s["ok"].all()
    for regime, pick in PICKS.items():
        assert (s.loc[regime, "pick"] == pick).all()
        assert s.loc[(regime, "baseline"), "gain_p50"] == 1.0
        for technique, gain in AGREE[regime].items():
            assert s.loc[(regime, technique), "gain_p50"] == pytest.approx(gain, rel=0.05)
    assert s.loc[("bandwidth", "quant2bit"), "predicted_gain"] > 1 and s["link_fit"].eq("inferred").all()
    # a technique's records never reach the advisor: make quant2bit's look compute-bound, the pick stays
    kept = baseline_records(df, "bandwidth")
    assert {json.loads(t).get("technique", "baseline") for t in kept["labels"]} == {"baseline"}
    assert {json.loads(t).get("regime", "bandwidth") for t in kept["labels"]} == {"bandwidth"}
    assert summarize(df).equals(summarize(df.sample(frac=1.0, random_state=1)))
    assert verify_records(df, AdvisorConfig.from_dict({"steps": STEPS})).ok


def test_c14_reproduced_when_the_pick_measures_best_in_all_three(tmp_path):
    row = evaluate_claim("C14", runs(tmp_path))
    assert row.verdict == "reproduced", row.detail
    assert row.measured.startswith("3 of 3 regime(s) with a distinguishable best agree")
    assert "bandwidth: advisor's pick quant2bit (launches: quant2bit 5)" in row.measured
    assert "best hierarchical (distinguishable) -> agrees" in row.measured
    assert len(row.outcomes) == 6 and all(o.verdict == "reproduced" for o in row.outcomes)


def test_c14_not_reproduced_when_a_distinguishable_best_disagrees(tmp_path):
    gains = {**AGREE, "latency": {"quant2bit": 0.9, "hierarchical": 1.0, "no_sync": 2.5}}
    row = evaluate_claim("C14", runs(tmp_path, gains=gains))
    assert row.verdict == "not reproduced", row.detail
    assert row.measured.startswith("2 of 3") and "best no_sync (distinguishable) -> DISAGREES" in row.measured


@pytest.mark.parametrize("case", ["few launches", "no distinguishable best", "loopback", "not shaped"])
def test_c14_inconclusive(tmp_path, case):
    if case == "few launches":
        row = evaluate_claim("C14", runs(tmp_path, n=2))
        assert "n = 2 launches" in row.detail
    elif case == "no distinguishable best":
        gains = {**AGREE, "compute": {"quant2bit": 0.9, "hierarchical": 1.2, "no_sync": 1.2}}
        row = evaluate_claim("C14", runs(tmp_path, gains=gains))
        assert "2 of 2 regime(s)" in row.measured and "no distinguishable best" in row.measured
    elif case == "loopback":
        row = evaluate_claim("C14", runs(tmp_path, facts=LOOPBACK))
        assert "loopback" in row.detail
    else:
        row = evaluate_claim("C14", runs(tmp_path, shaped=False))
        assert "not shaped" in row.detail
    assert row.verdict == "inconclusive", row.measured


LATENCY_BEST_NO_SYNC = {**AGREE, "latency": {"quant2bit": 0.9, "hierarchical": 1.0, "no_sync": 2.5}}


@pytest.mark.parametrize("gains", [AGREE, LATENCY_BEST_NO_SYNC])
def test_c14_a_pick_that_cannot_win_on_the_layout_is_not_applicable(tmp_path, gains):
    # 2 nodes x 2 ranks on gloo: the two-level reduction takes the flat ring's latency steps and adds
    # stages, so the latency regime's pick (topology optimisation) cannot win whatever the values:
    # neither agreement nor disagreement, and C14 cannot be reproduced on this layout
    row = evaluate_claim("C14", runs(tmp_path, gains=gains, params=PARAMS))
    assert row.verdict == "inconclusive", row.measured
    why = "not applicable: hierarchical saves no latency step on 2 nodes x 2 ranks (gloo)"
    assert f"latency: advisor's pick hierarchical (launches: hierarchical 5)" in row.measured
    assert why in row.measured and row.measured.startswith("2 of 2 regime(s) with a distinguishable best agree")
    latency = [o for o, label in zip(row.outcomes, row.labels) if label.startswith("latency:")]
    assert latency and all(o.verdict == "inconclusive" and o.why == why for o in latency)
    assert len(why.removeprefix("not applicable: ").split()) <= 12


def test_c14_a_pick_that_cannot_win_does_not_hide_another_regimes_disagreement(tmp_path):
    gains = {**AGREE, "compute": {"quant2bit": 0.9, "hierarchical": 1.0, "no_sync": 0.8}}
    row = evaluate_claim("C14", runs(tmp_path, gains=gains, params=PARAMS))
    assert row.verdict == "not reproduced", row.measured
    assert "compute: advisor's pick no_sync" in row.measured and "DISAGREES" in row.measured


@pytest.mark.parametrize("params, backend", [(PARAMS, "nccl"), (JUDGED, "gloo")])
@pytest.mark.parametrize("gains, verdict", [(AGREE, "reproduced"), (LATENCY_BEST_NO_SYNC, "not reproduced")])
def test_c14_judges_the_latency_regime_where_the_two_level_reduction_saves_steps(tmp_path, params, backend, gains,
                                                                               verdict):
    # nccl's intra stages are a reduce-scatter and an all-gather (2 steps against the ring's 4 in the
    # node); on 3 gloo nodes the ring has 6 intra steps against the two all-reduces' 4
    row = evaluate_claim("C14", runs(tmp_path, gains=gains, params=params, backend=backend))
    assert row.verdict == verdict, row.measured
    assert "not applicable" not in row.measured


@pytest.mark.parametrize("nodes, per_node, backend, saves", [
    (2, 2, "gloo", False), (2, 8, "gloo", False), (2, 2, None, False), (2, 2, "nccl", True),
    (3, 2, "gloo", True), (4, 8, "nccl", True),
])
def test_hierarchical_cannot_win_reads_the_layout_and_backend(nodes, per_node, backend, saves):
    import pandas as pd

    from hpcbench.experiments.advisor.rules import hierarchical_cannot_win

    launch = pd.Series({"params": json.dumps({"nodes": nodes, "ranks_per_node": per_node}), "backend": backend})
    why = hierarchical_cannot_win(launch)
    assert (why is None) == saves, why
    if not saves:
        assert why == f"hierarchical saves no latency step on {nodes} nodes x {per_node} ranks (gloo)"
    assert hierarchical_cannot_win(pd.Series({"params": "{}", "backend": "gloo"})) == \
        "nodes and ranks per node not recorded"


def test_config_refuses_what_cannot_run():
    for values, field in [({"regimes": ["latency", "latency"]}, "regimes"),
                          ({"bandwidth_link_rate": "100kbit"}, "bandwidth_link_rate"),
                          ({"latency_link_rate": "fast"}, "latency_link_rate"),
                          ({"compute_model": "resnet18"}, "compute_model"),
                          ({"ranks_per_node": 1}, "ranks_per_node"),
                          ({"probe_sizes": [4096, 4096, 8192]}, "probe_sizes")]:
        with pytest.raises(ConfigError, match=f"AdvisorConfig.{field}"):
            AdvisorConfig.from_dict(values)
    cfg = AdvisorConfig()
    assert cfg.settings("latency").bucket_cap_mb < 0.001 and cfg.settings("bandwidth").link_rate == "40mbit"
