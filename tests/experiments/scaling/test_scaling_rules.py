"""scaling from recorded records, without torch: stages -> the gate per stage -> summary -> rule C13.

Every outcome is reachable: reproduced (cleared stages keep >= 0.8 per-node efficiency; stages the gate
would have stopped fall below it), not reproduced (a cleared stage scales badly; a stopped configuration
scales well), inconclusive (too few launches; one loopback; more ranks than the host's CPUs; no gate ran in
C12's regime). Only launches whose gate is C12's (no gate_limits) and ran in C12's regime count.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from synthetic import LOOPBACK, SHAPED, noisy

from hpcbench.core.errors import ConfigError
from hpcbench.core.results import RecordContext, RecordWriter, read_records
from hpcbench.experiments import EXPERIMENTS
from hpcbench.experiments.scaling.config import ScalingConfig
from hpcbench.experiments.scaling.rules import C13_MIN_EFFICIENCY, HOST_CPUS_FACT
from hpcbench.experiments.scaling.summary import (HEALTHY_CV, OUTCOME, findings, launch_spread, stage_gate,
                                                  stage_spread, summarize, verify_records)
from hpcbench.practice.gates import gate_thresholds
from hpcbench.practice.regime import FACT_HEALTHY_CV, FACT_HEALTHY_STEPS
from hpcbench.report.ledger import evaluate_claim
from hpcbench.system.facts import write_facts

STEPS, ITEMS, STEP_S = 12, 8, 0.1
STAGES = [1, 2, 4]
#: The emulated cluster's facts on a host with enough CPUs for 4 nodes x 1 rank.
ROOMY = {**SHAPED, "host_cpus": 16.0}
#: A healthy calibration spread inside C12's regime (< 2.5 %) and one outside it (a noisy, shared machine).
QUIET, NOISY = 0.01, 0.06


def scaling_launch(tmp_path, *, run_id="run1", k=0, eff=None, comm=None, stages=STAGES, continue_past_gate=False,
                   facts=ROOMY, spread=0.01, gate_limits=None, healthy_cv=QUIET):
    """One launch as run_scaling writes it: per stage every rank's step rows, the lead's throughput, the outcome.

    ``eff``: nodes -> per-node efficiency against 1 node; ``comm``: nodes -> communication share (the gate fails
    at > 0.3). The run stops after the first stage whose gate fails unless ``continue_past_gate``.
    ``healthy_cv``: every rank's healthy calibration spread before each stage but the last (a number, or nodes ->
    number), and the launch's regime fact from them as the driver writes it; None: no calibration recorded (a
    launch of before the calibration).
    """
    eff, comm = {1: 1.0, **(eff or {})}, comm or {}
    params = {"stages": stages, "ranks_per_node": 1, "steps": STEPS, "continue_past_gate": continue_past_gate,
              "gate_limits": gate_limits or {}}
    cfg = ScalingConfig.from_dict(params)
    ctx = RecordContext(run_id=run_id, experiment="scaling", task_id=f"scaling.r{k}", repetition=k,
                        params=cfg.to_dict())
    frames, stopped, outcome = [], None, f"ran every stage ({', '.join(map(str, stages))} node(s))"
    spreads = []
    with RecordWriter(tmp_path / f"{run_id}-{k}-facts.parquet", ctx.for_rank(node="n1", rank=0, world_size=1)) as w:
        write_facts(w, {**facts, "host_cpus": facts.get("host_cpus")} if "host_cpus" in facts else facts)
    frames.append(read_records(w.path))
    for i, nodes in enumerate(stages):
        labels = {"model": "weather_tiny", "nodes": nodes, "ranks_per_node": 1}
        share = comm.get(nodes, 0.1)
        step = STEP_S / eff.get(nodes, 1.0)  # weak scaling: per-node throughput falls as the step grows
        for rank in range(nodes):
            path = tmp_path / f"{run_id}-{k}-n{nodes}-rank{rank}.parquet"
            with RecordWriter(path, ctx.for_rank(node=f"n{rank + 1}", rank=rank, world_size=nodes)) as w:
                seed = 1000 * k + 10 * nodes + rank
                if healthy_cv is not None and i < len(stages) - 1:
                    cv = healthy_cv.get(nodes) if isinstance(healthy_cv, dict) else healthy_cv
                    w.add(HEALTHY_CV, cv, "fraction", labels={**labels, "phase": "calibration"})
                for s, (t, t0) in enumerate(zip(noisy(step, STEPS, spread, seed),
                                                noisy(step * (1 - share), STEPS, spread, seed + 5))):
                    w.add("step_time", t, "s", step=s, labels={**labels, "comm": "mode"})
                    w.add("step_time", t0, "s", step=s, labels={**labels, "comm": "noop"})
                    w.add("comm_time", t - t0, "s", step=s, labels=labels)
                if rank == 0:
                    for s, t in enumerate(noisy(step, STEPS, spread, seed + 7)):
                        w.add("throughput", nodes * ITEMS / t, "samples/s", step=s, labels=labels)
            frames.append(read_records(path))
        records = pd.concat(frames, ignore_index=True)
        gate = stage_gate(records, nodes, cfg.thresholds())
        if i < len(stages) - 1:
            spreads.append(stage_spread(records, nodes))
        if gate.passed is not True and i < len(stages) - 1 and not continue_past_gate:
            stopped, outcome = nodes, f"stopped after stage {i + 1} ({nodes} node(s)): gate {gate.explain()}"
        if stopped is not None or i == len(stages) - 1:
            path = tmp_path / f"{run_id}-{k}-outcome.parquet"
            with RecordWriter(path, ctx.for_rank(node="n1", rank=0, world_size=1)) as w:
                w.add(OUTCOME, float(nodes), "nodes", labels={"stopped": stopped is not None}, text=outcome)
                if launch_spread(spreads) is not None:
                    write_facts(w, {FACT_HEALTHY_CV: launch_spread(spreads), FACT_HEALTHY_STEPS: 20.0})
            frames.append(read_records(path))
            break
    return pd.concat(frames, ignore_index=True)


def scaling_launches(tmp_path, n=6, start=0, **kw):
    return pd.concat([scaling_launch(tmp_path, k=k, **kw) for k in range(start, start + n)], ignore_index=True)


# -- config and summary -------------------------------------------------------------------------------

@pytest.mark.parametrize("values, field", [({"stages": [2, 4]}, "stages"), ({"stages": [1, 4, 2]}, "stages"),
                                           ({"stages": []}, "stages"), ({"model": "resnet18"}, "model"),
                                           ({"gate_limits": {"jitter": 0.1}}, "gate_limits"),
                                           ({"steps": 5}, "steps"),
                                           ({"model": "gpt2_tiny", "seq_len": 999}, "seq_len")])
def test_bad_config_is_refused_naming_the_field(values, field):
    with pytest.raises(ConfigError, match=f"ScalingConfig.{field}"):
        ScalingConfig.from_dict(values)


def test_resources_hold_the_largest_stage_and_the_estimate_counts_every_stage():
    spec = EXPERIMENTS.get("scaling")
    cfg = ScalingConfig.from_dict({"stages": [1, 2, 4], "ranks_per_node": 2})
    res = spec.resources(cfg)
    assert (res.nodes, res.ranks_per_node) == (4, 2)
    est, small = spec.estimate(cfg), spec.estimate(ScalingConfig.from_dict({"stages": [1, 2]}))
    assert est.ranks == 8 and est.seconds > small.seconds > 0 and "3 stage launch(es)" in est.basis
    assert cfg.thresholds()[1].limit == 0.30
    assert ScalingConfig.from_dict({"gate_limits": {"comm_share": 0.5}}).thresholds() == \
        gate_thresholds({"comm_share": 0.5})


def test_summary_per_stage_efficiency_and_gate(tmp_path):
    records = scaling_launch(tmp_path, eff={2: 0.9, 4: 0.75})
    s = summarize(records)
    assert list(s["nodes"]) == STAGES and s["ran"].all() and list(s["steps"]) == [STEPS] * 3
    assert s["efficiency"].iloc[0] == 1.0
    assert s["efficiency"].iloc[1] == pytest.approx(0.9, rel=0.05)
    assert s["efficiency"].iloc[2] == pytest.approx(0.75, rel=0.05)
    assert list(s["gate"]) == [True, True, True] and list(s["cleared"]) == [True, True, True]
    assert s["comm_share"].iloc[0] == pytest.approx(0.1, abs=0.03) and s["step_time_cv"].max() < 0.05
    assert s["read_p99"].isna().all() and "read_p99 not measured" in s["gate_text"].iloc[0]
    assert len(s["samples"].iloc[2]) == STEPS and not s["stopped_here"].any()
    assert list(s["ranks"]) == STAGES and s["per_node_p50"].iloc[0] == pytest.approx(ITEMS / STEP_S, rel=0.05)
    assert verify_records(records, ScalingConfig.from_dict({"steps": STEPS})).ok
    assert findings(s)[-1] == "ran every stage (1, 2, 4 node(s))"
    # C12's regime: each stage that gates a step out calibrated its healthy spread; the last stage gates nothing
    assert list(s["healthy_cv"].iloc[:2]) == [QUIET, QUIET] and math.isnan(s["healthy_cv"].iloc[2])
    assert "healthy calibration spread 1.0% (in regime: C12's < 2.5%)" in findings(s)[1]


def test_a_failed_gate_stops_the_run_and_the_summary_says_why(tmp_path):
    records = scaling_launch(tmp_path, comm={2: 0.5})
    s = summarize(records)
    assert list(s["ran"]) == [True, True, False]
    two = s.iloc[1]
    assert two["gate"] is False and two["gate_failed"] == "comm_share" and two["stopped_here"]
    assert two["comm_share"] == pytest.approx(0.5, abs=0.05)
    assert s.iloc[2]["gate_text"].startswith("not run: stopped after stage 2 (2 node(s)): gate fails: comm_share")
    assert math.isnan(s.iloc[2]["efficiency"]) and not s.iloc[2]["cleared"]
    assert verify_records(records, ScalingConfig.from_dict({"steps": STEPS})).ok


def test_verify_catches_a_run_that_ignored_its_gate_or_lost_steps(tmp_path):
    cfg = ScalingConfig.from_dict({"steps": STEPS})
    ignored = scaling_launch(tmp_path, comm={2: 0.5}, continue_past_gate=True)  # ran 4 nodes past a failed gate
    problems = verify_records(ignored, cfg).problems
    assert any("yet the run went on to 4" in p for p in problems)
    assert verify_records(ignored, ScalingConfig.from_dict({"steps": STEPS, "continue_past_gate": True})).ok
    lost = scaling_launch(tmp_path, run_id="run2")
    lost = lost[~((lost["metric"] == "step_time") & (lost["rank"] == 3) & (lost["step"] == 0))]
    assert any("4 node(s): step rows per (rank, series)" in p for p in verify_records(lost, cfg).problems)
    no_end = scaling_launch(tmp_path, run_id="run3")
    assert any("scaling_outcome" in p for p in verify_records(no_end[no_end["metric"] != OUTCOME], cfg).problems)


def test_summary_of_nothing_is_empty():
    assert summarize(pd.DataFrame(columns=["experiment", "params", "metric"])).empty


# -- the rule -----------------------------------------------------------------------------------------

def test_c13_reproduced_when_cleared_stages_keep_scaling(tmp_path):
    row = evaluate_claim("C13", scaling_launches(tmp_path, eff={2: 0.95, 4: 0.9}))
    assert row.verdict == "reproduced", row.detail
    assert "2 nodes, gate passed before" in row.measured and "4 nodes, gate passed before" in row.measured
    assert f">= {C13_MIN_EFFICIENCY:.2f}" in row.measured


def test_c13_not_reproduced_when_a_cleared_stage_scales_badly(tmp_path):
    row = evaluate_claim("C13", scaling_launches(tmp_path, eff={2: 0.95, 4: 0.5}))
    assert row.verdict == "not reproduced", row.detail


def test_c13_reproduced_when_the_gate_stopped_what_would_not_scale(tmp_path):
    # past the failed gate at 2 nodes (continue_past_gate), 4 nodes scales badly: the stop was right
    row = evaluate_claim("C13", scaling_launches(tmp_path, eff={2: 0.9, 4: 0.5}, comm={2: 0.5},
                                                 continue_past_gate=True))
    assert row.verdict == "reproduced", row.detail
    assert "4 nodes, gate failed before" in row.measured and "4 nodes, gate passed before" not in row.measured


def test_c13_not_reproduced_when_the_gate_stopped_what_would_have_scaled(tmp_path):
    row = evaluate_claim("C13", scaling_launches(tmp_path, eff={2: 0.95, 4: 0.95}, comm={1: 0.5},
                                                 continue_past_gate=True))
    assert row.verdict == "not reproduced", row.detail
    assert "2 nodes, gate failed before" in row.measured


def test_c13_stopped_launches_contribute_their_cleared_stages_only(tmp_path):
    # the gate stops every launch after 2 nodes: the 2-node stage is judged, 4 nodes has no data
    row = evaluate_claim("C13", scaling_launches(tmp_path, eff={2: 0.95}, comm={2: 0.5}))
    assert row.verdict == "reproduced", row.detail
    assert "2 nodes" in row.measured and "4 nodes" not in row.measured


def test_c13_inconclusive_with_too_few_launches(tmp_path):
    row = evaluate_claim("C13", scaling_launches(tmp_path, n=3, eff={2: 0.95, 4: 0.9}))
    assert row.verdict == "inconclusive" and "n = 3" in row.measured


def test_c13_inconclusive_on_one_loopback_whatever_the_values(tmp_path):
    row = evaluate_claim("C13", scaling_launches(tmp_path, eff={2: 0.4, 4: 0.3}, facts=LOOPBACK))
    assert row.verdict == "inconclusive" and "one loopback" in row.detail


def test_c13_stage_with_more_ranks_than_host_cpus_is_inconclusive(tmp_path):
    # 2 CPUs: the 2-node stage is judged (reproduced), the 4-node one measures core sharing: not counted
    row = evaluate_claim("C13", scaling_launches(tmp_path, eff={2: 0.95, 4: 0.4}, facts={**SHAPED, "host_cpus": 2.0}))
    assert row.verdict == "reproduced", row.detail
    assert "share the host's 2 CPUs" in row.measured
    unknown = evaluate_claim("C13", scaling_launches(tmp_path / "u", eff={2: 0.95, 4: 0.9}, facts=SHAPED))
    assert unknown.verdict == "inconclusive" and "CPU count was not recorded" in unknown.measured


def test_host_cpus_is_read_as_a_launch_fact(tmp_path):
    from hpcbench.experiments.scaling.summary import summarize
    from hpcbench.judge.evidence import evidence_for

    records = scaling_launch(tmp_path)
    assert (records["metric"] == HOST_CPUS_FACT).any()
    launches = evidence_for("scaling", records, summarize=summarize).launches
    assert launches["host_cpus"].iloc[0] == 16.0
    assert json.loads(launches["params"].iloc[0])["stages"] == STAGES
    assert launches[FACT_HEALTHY_CV].iloc[0] == QUIET  # C12's regime fact, under C12's name


def test_the_regime_fact_is_the_noisiest_calibration_of_the_stages_that_gated(tmp_path):
    def fact(**kw):
        records = scaling_launch(tmp_path / str(len(list(tmp_path.iterdir()))), **kw)
        rows = records[records["metric"] == "fact." + FACT_HEALTHY_CV]
        return float(rows["value"].iloc[0]) if len(rows) else None

    assert fact(healthy_cv={1: 0.01, 2: 0.04, 4: 0.5}) == 0.04  # the last stage's gate decides no step out
    assert fact(healthy_cv={1: 0.01, 2: 0.04}, comm={1: 0.5}) == 0.01  # stopped after 1 node: only its gate ran
    assert fact(healthy_cv=None) is None
    assert launch_spread([0.01, None]) is None and launch_spread([]) is None


# -- C12's regime: only gates that ran in it count ----------------------------------------------------

def test_c13_judges_only_launches_whose_gate_ran_in_c12s_regime(tmp_path):
    # 6 launches in the regime scale well; 3 on a noisy machine (their gates say nothing about C12's) scale badly
    quiet = scaling_launches(tmp_path, eff={2: 0.95, 4: 0.9})
    noisy_ = scaling_launches(tmp_path, n=3, start=6, eff={2: 0.95, 4: 0.3}, healthy_cv=NOISY)
    row = evaluate_claim("C13", pd.concat([quiet, noisy_], ignore_index=True))
    assert row.verdict == "reproduced", row.detail
    assert row.measured == evaluate_claim("C13", quiet).measured  # judged as before, on the launches in the regime
    assert ("Not judged: 3 of 9 launch(es) with the guide's limits: no gate ran in C12's regime (healthy step-time "
            "spread 6.0%, median of 3 calibration(s), vs the guide's < 2.5%)") in row.detail


def test_c13_inconclusive_when_no_gate_ran_in_c12s_regime(tmp_path):
    row = evaluate_claim("C13", scaling_launches(tmp_path, eff={2: 0.95, 4: 0.9}, healthy_cv=NOISY))
    assert row.verdict == "inconclusive", row.detail
    assert ("inconclusive: no gate ran in C12's regime (healthy step-time spread 6.0%, median of 6 calibration(s), "
            "vs the guide's < 2.5%)") in row.measured
    assert "2 nodes, gate passed before" in row.measured  # shown, not counted
    assert row.reason == "no gate ran in C12's regime"
    unrecorded = evaluate_claim("C13", scaling_launches(tmp_path / "u", eff={2: 0.95, 4: 0.9}, healthy_cv=None))
    assert unrecorded.verdict == "inconclusive", unrecorded.detail
    assert ("inconclusive: no gate ran in C12's regime (no launch calibrated the healthy step-time spread, fact "
            "regime.healthy_step_cv") in unrecorded.measured


def test_c13_launches_with_their_own_gate_limits_are_kept_apart_and_not_counted(tmp_path):
    # limits of their own fail every gate, and past it those launches scale well: pooled, they would refute C13
    default = scaling_launches(tmp_path, eff={2: 0.95, 4: 0.9})
    own = scaling_launches(tmp_path, start=6, eff={2: 0.95, 4: 0.9}, gate_limits={"comm_share": 0.05},
                           continue_past_gate=True)
    row = evaluate_claim("C13", pd.concat([default, own], ignore_index=True))
    assert row.verdict == "reproduced", row.detail
    assert "gate failed before" not in row.measured and row.measured == evaluate_claim("C13", default).measured
    assert '6 launch(es) ran the gate with limits of their own (gate_limits {"comm_share": 0.05})' in row.detail
    only = evaluate_claim("C13", own)
    assert only.verdict == "inconclusive", only.detail
    assert ("inconclusive: no gate ran in C12's regime (every launch ran the gate with limits of its own"
            in only.measured)
