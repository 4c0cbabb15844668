"""practice from recorded records, without torch: each phase's rows -> the C12 gate -> summary -> rule C12.

Every outcome is reachable: reproduced (quiet baseline, nearly every fault caught), not reproduced
(faults missed; a baseline that fails the gate), inconclusive (too few launches; no fault applied).
Faults not applied, and launches whose baseline already failed, never count.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
from synthetic import SHAPED

from hpcbench.core.errors import ConfigError
from hpcbench.core.results import RecordContext, RecordWriter, read_records
from hpcbench.experiments.practice.config import FAULTS, NO_FAULT, PracticeConfig
from hpcbench.experiments.practice.faults import FAULT_KINDS
from hpcbench.experiments.practice.regime import FACT_HEALTHY_CV, GATE_REGIME
from hpcbench.experiments.practice.rules import CATCH_LOWER, GUIDE_C12_PROBLEMS_AVOIDED
from hpcbench.experiments.practice.summary import findings, summarize, verify_records
from hpcbench.experiments import get_claim
from hpcbench.judge.verdict import clopper_pearson
from hpcbench.report.ledger import evaluate_claim
from hpcbench.system.facts import write_facts

STEPS, READS, BASE_S = 12, 24, 0.1
PARAMS = {"nodes": 2, "ranks_per_node": 1, "faults": list(FAULTS), "min_steps": 10}
#: What each fault does to the rows the gate reads: step spread (std/mean), comm share, read seconds, slowdown.
HEALTHY = {"cv": 0.01, "comm": 0.1, "read": 0.01, "slow": 1.0}
EFFECT = {
    "none": {},
    "slow_link": {"comm": 0.6, "slow": 2.0},
    "lossy_link": {"comm": 0.5, "cv": 0.2, "slow": 1.8},
    "slow_storage": {"read": 0.3, "slow": 2.5},
    "cpu_contention": {"comm": 0.4, "slow": 2.0},
    "unbound_threads": {"cv": 0.15, "slow": 1.3},
    "slow_node": {"comm": 0.45, "slow": 2.2},
    "link_flap": {"cv": 0.5, "slow": 1.4},
}


def write_launch(tmp_path, k: int, effect=EFFECT, *, injected=True, faults=FAULTS,
                 healthy_cv: float | None = HEALTHY["cv"]) -> pd.DataFrame:
    """One launch's records, as two ranks write them: the injector's fault rows on n2, the phases' steps on both.

    ``healthy_cv``: the spread its calibration phase recorded (the regime fact; None: not recorded)."""
    frames = []
    for rank, node in enumerate(("n1", "n2")):
        path = tmp_path / f"p-r{k}-{rank}.parquet"
        ctx = RecordContext(run_id="run1", experiment="practice", task_id=f"practice.r{k}", repetition=k,
                            params={**PARAMS, "faults": list(faults)}, node=node, rank=rank, world_size=2)
        with RecordWriter(path, ctx) as w:
            if rank == 0:
                write_facts(w, {**SHAPED, **({} if healthy_cv is None else {FACT_HEALTHY_CV: healthy_cv})})
                w.add("backend", None, "", text="gloo")
            for fault in faults:
                labels = {"fault": fault}
                if rank == 1:
                    applied = fault != NO_FAULT and (injected is True or fault in (injected or ()))
                    w.add("fault_injected", 1.0 if applied else None, "bool", labels={**labels, "node": node},
                          text="baseline: no fault" if fault == NO_FAULT else
                          (f"{fault} on n2: undone" if applied else "not injected: no emulated cluster"))
                e = {**HEALTHY, **effect.get(fault, {})}
                for s in range(STEPS):
                    step = BASE_S * e["slow"] * (1 + e["cv"] * (1 if (s + k + rank) % 2 else -1))
                    w.add("step_time", step, "s", step=s, labels=labels)
                    w.add("comm_time", step * e["comm"], "s", step=s, labels=labels)
                for r in range(READS):
                    w.add("read_time", e["read"] * (1 + 0.01 * r), "s", step=r, labels=labels)
        frames.append(read_records(path))
    return pd.concat(frames, ignore_index=True)


def c12(tmp_path, n=7, **kw):
    records = pd.concat([write_launch(tmp_path, k, **kw) for k in range(n)], ignore_index=True)
    return evaluate_claim("C12", records)


def test_summary_runs_the_gate_per_phase(tmp_path):
    s = summarize(write_launch(tmp_path, 0)).set_index("fault")
    assert list(s.index) == list(FAULTS)
    assert s.loc["none", "gate_passed"] == True and s.loc["none", "caught"] is None  # noqa: E712
    assert s.loc["none", "step_time_cv"] == pytest.approx(0.01 * math.sqrt(STEPS / (STEPS - 1)), rel=1e-6)
    assert s.loc["none", "comm_share"] == pytest.approx(0.1) and s.loc["none", "read_p99_s"] < 0.02
    assert s.loc["slow_link", "failed"] == ("comm_share",) and s.loc["slow_link", "caught"] == True  # noqa: E712
    assert s.loc["slow_storage", "failed"] == ("read_p99",) and s.loc["slow_storage", "read_p99_s"] > 0.3
    assert s.loc["link_flap", "failed"] == ("step_time_cv",)
    assert s.loc["slow_node", "slowdown"] == pytest.approx(2.2)
    assert s.loc["slow_link", "injected"] == True and s.loc["none", "injected"] is None  # noqa: E712
    assert "caught by comm_share" in " ".join(findings(summarize(write_launch(tmp_path, 1))))
    assert verify_records(write_launch(tmp_path, 2), PracticeConfig.from_dict(PARAMS)).ok


def test_a_fault_not_injected_is_neither_caught_nor_missed(tmp_path):
    s = summarize(write_launch(tmp_path, 0, injected=("slow_storage",))).set_index("fault")
    assert s.loc["slow_link", "injected"] == False and s.loc["slow_link", "caught"] is None  # noqa: E712
    assert "not injected here (not injected: no emulated cluster)" in " ".join(findings(s.reset_index()))
    assert s.loc["slow_storage", "caught"] == True  # noqa: E712


def test_reproduced_when_nearly_every_fault_is_caught_and_the_baseline_passes(tmp_path):
    row = c12(tmp_path)
    assert row.verdict == "reproduced", row.measured
    assert "49/49" in row.measured and "false alarms): 0/7" in row.measured
    assert "No counted fault was missed" in row.detail and "not a census" in row.detail


def test_not_reproduced_when_the_gate_misses_faults(tmp_path):
    # three faults that slow every step alike, without spread, comm or reads: the gate cannot see them
    quiet = {f: {"slow": 1.5} for f in ("cpu_contention", "unbound_threads", "slow_node")}
    row = c12(tmp_path, effect={**EFFECT, **quiet})
    assert row.verdict == "not reproduced", row.measured
    assert "28/49" in row.measured
    assert "Missed at least once: cpu_contention, unbound_threads, slow_node" in row.detail
    assert "cpu_contention: caught 0/7, missed 7" in row.detail


def test_not_reproduced_when_the_baseline_fails_the_gate(tmp_path):
    row = c12(tmp_path, effect={**EFFECT, "none": {"cv": 0.2}})
    assert row.verdict == "not reproduced", row.measured
    assert "false alarms): 7/7" in row.measured
    # the faults of launches whose baseline failed cannot be counted
    assert "every launch's baseline failed the gate" in row.detail and "catch fraction is unknown" in row.detail
    # shown, not counted: which faults broke a check the noisy baseline passed
    assert ("slow_link: in launches whose baseline failed too (not counted) the gate failed 7/7, by a check the "
            "baseline passed 7/7 (comm_share)") in row.detail
    assert "link_flap: in launches whose baseline failed too (not counted) the gate failed 7/7, by a check the " \
           "baseline passed 0/7" in row.detail


def test_outside_the_guides_regime_a_failing_baseline_is_inconclusive_not_a_false_alarm(tmp_path):
    # the calibration found a healthy spread of 9 %, as on two shared CPU cores: the gate's 5 % cannot tell
    row = c12(tmp_path, effect={**EFFECT, "none": {"cv": 0.2}}, healthy_cv=0.09)
    assert row.verdict == "inconclusive", row.measured
    assert "inconclusive: regime: healthy step-time spread 9.0% (median of 7 calibration(s)) vs the guide's < 2.5%" \
        in row.measured
    assert "Not judged: 7 of 7 launch(es)" in row.detail
    assert "Out of the regime, shown and not judged: baseline failed the gate 7/7" in row.detail
    assert "spread < 2.5%: 0/7 in" == row.regime_brief and "0 of 7 launch(es) within it" in row.regime


def test_in_the_regime_a_failing_baseline_still_counts_against_the_claim(tmp_path):
    # the calibration is a phase of its own: steady there, the judged baseline can still fail the gate
    row = c12(tmp_path, effect={**EFFECT, "none": {"cv": 0.2}}, healthy_cv=0.01)
    assert row.verdict == "not reproduced" and "false alarms): 7/7" in row.measured
    assert "7/7 in" in row.regime_brief


def test_only_launches_in_the_regime_are_judged(tmp_path):
    # 7 launches in the regime judge the claim; 3 noisy ones, false alarms and all, are named and left out
    records = pd.concat([write_launch(tmp_path, k, effect={**EFFECT, "none": {"cv": 0.2}} if k >= 7 else EFFECT,
                                      healthy_cv=0.08 if k >= 7 else 0.01) for k in range(10)], ignore_index=True)
    row = evaluate_claim("C12", records)
    assert row.verdict == "reproduced", row.measured
    assert "49/49" in row.measured and "false alarms): 0/7" in row.measured
    assert "Not judged: 3 of 10 launch(es): inconclusive: regime: healthy step-time spread 8.0%" in row.detail


def test_launches_without_a_calibration_are_not_judged(tmp_path):
    row = c12(tmp_path, healthy_cv=None)
    assert row.verdict == "inconclusive" and "regime not recorded" in row.measured


def test_the_regime_is_half_the_gates_limit():
    assert GATE_REGIME.max_cv == pytest.approx(0.025) and GATE_REGIME.status(0.024) == "in regime"
    assert GATE_REGIME.status(0.025) == "out of regime" and GATE_REGIME.status(float("nan")) == "regime not recorded"


def test_only_gates_of_launches_in_the_regime_speak_for_c12s_gate():
    # what a rule that splits its arms by gate decisions (C13) reads: a launch's gates count only where
    # its calibration is in C12's regime; none there -> inconclusive, naming why
    launches = pd.DataFrame({FACT_HEALTHY_CV: [0.01, 0.08, float("nan"), 0.024]})
    assert GATE_REGIME.in_regime(launches) == [True, False, False, True]
    noisy = pd.DataFrame({FACT_HEALTHY_CV: [0.06, 0.08, 0.07]})
    assert GATE_REGIME.in_regime(noisy) == [False, False, False]
    assert GATE_REGIME.no_gate_reason(noisy) == ("inconclusive: no gate ran in C12's regime (healthy step-time "
                                                 "spread 7.0%, median of 3 calibration(s), vs the guide's < 2.5%)")
    unrecorded = pd.DataFrame({"cluster": ["emulated cluster, shaped link"] * 2})
    assert GATE_REGIME.in_regime(unrecorded) == [False, False]
    assert GATE_REGIME.no_gate_reason(unrecorded).startswith(
        "inconclusive: no gate ran in C12's regime (no launch calibrated the healthy step-time spread")


def test_launches_whose_baseline_failed_do_not_count_their_faults(tmp_path):
    records = pd.concat([write_launch(tmp_path, k, effect={**EFFECT, "none": {"cv": 0.2}} if k < 2 else EFFECT)
                         for k in range(6)], ignore_index=True)
    row = evaluate_claim("C12", records)
    assert "28/28" in row.measured and "false alarms): 2/6" in row.measured


def test_inconclusive_with_too_few_launches(tmp_path):
    row = c12(tmp_path, n=3)
    assert row.verdict == "inconclusive" and "n = 3 launches" in row.measured


def test_faults_not_applied_never_count(tmp_path):
    row = c12(tmp_path, injected=False)
    assert row.verdict == "inconclusive" and "no fault was applied in any launch" in row.detail
    assert "slow_link: not injected" in row.detail


def test_exact_bounds_quoted_in_the_rule():
    confidence = 1 - 0.05 / 2  # two members, Bonferroni
    assert clopper_pearson(35, 35, confidence)[0] == pytest.approx(0.88, abs=0.005)
    assert clopper_pearson(30, 35, confidence)[0] == pytest.approx(0.67, abs=0.005)
    assert all(math.isnan(v) for v in clopper_pearson(0, 0))


def test_the_reference_is_the_claims_figure():
    figures = dict(get_claim("C12").figures)
    assert float(figures["problems avoided"].rstrip(" %")) / 100 == GUIDE_C12_PROBLEMS_AVOIDED
    assert CATCH_LOWER < GUIDE_C12_PROBLEMS_AVOIDED


def test_every_fault_has_a_registered_kind():
    assert set(FAULT_KINDS.names()) == set(FAULTS) - {NO_FAULT}
    for name in FAULT_KINDS.names():
        kind = FAULT_KINDS.get(name)
        assert kind.problem and kind.how and (kind.node_part or kind.rank_part)


@pytest.mark.parametrize("values, field, words", [
    ({"faults": ["slow_link"]}, "faults", "lacks 'none'"),
    ({"faults": ["none", "none"]}, "faults", "repeats"),
    ({"faults": ["none", "bad_luck"]}, "faults", "bad_luck"),
    ({"model": "gpt2_tiny"}, "model", "not a weather"),
    ({"slow_link_rate": "fast"}, "slow_link_rate", "not a tc rate"),
    ({"flap_down_s": 5.0, "flap_period_s": 4.0}, "flap_down_s", "not shorter"),
    ({"nodes": 1}, "nodes", "between 2"),
])
def test_config_rejects_bad_values(values, field, words):
    with pytest.raises(ConfigError) as exc:
        PracticeConfig.from_dict(values)
    assert exc.value.field == field and words in str(exc.value)


def test_estimate_grows_with_phases():
    from hpcbench.experiments import EXPERIMENTS

    spec = EXPERIMENTS.get("practice")
    est = lambda **p: spec.estimate(PracticeConfig.from_dict(p))  # noqa: E731
    default = est()
    assert default.ranks == 2 and default.seconds and "neighbour" in default.basis
    assert est(phase_s=60.0).seconds > default.seconds
    assert est(faults=["none"]).seconds < default.seconds and "neighbour" not in est(faults=["none"]).basis


def test_presenter_and_plot_render_synthetic_launches(tmp_path):
    from hpcbench.core.results import expand_labels
    from hpcbench.experiments import EXPERIMENTS
    from hpcbench.experiments.practice.plot import practice_plot
    from hpcbench.judge.evidence import summarize_launches
    from hpcbench.present.kit import ExperimentData
    from hpcbench.report.aggregate import series_stats

    records = pd.concat([write_launch(tmp_path, k, injected=("slow_storage",) if k else True) for k in range(2)],
                        ignore_index=True).assign(source="run")
    stats = expand_labels(series_stats(records[records["value"].notna()]))
    text = expand_labels(records[records["value"].isna() & records["text"].notna()])
    summaries = summarize_launches(records, summarize, "practice").assign(source="run")
    (section,) = EXPERIMENTS.get("practice").present(ExperimentData("practice", ["run"], stats, text, None, summaries))
    table = next(t for t in section.tables if t.id == "practice-faults")
    rows = {r[2].text: r for r in table.rows}
    assert list(rows) == list(FAULTS)
    assert rows["slow_link"][3].text == "1/2" and rows["slow_storage"][3].text == "2/2"
    assert rows["slow_storage"][-2].text == "caught 2/2" and rows["none"][-2].text == "false alarms 0/2"
    assert section.figures and section.figures[0].data
    fig = practice_plot(summarize(write_launch(tmp_path, 0)))
    assert len(fig.axes) == 4
