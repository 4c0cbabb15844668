"""affinity from recorded records, without torch: summary -> cost verdicts per mistake, every outcome reachable."""

import re

import pandas as pd
import pytest
from synthetic import launch, launches, noisy

from hpcbench.experiments import EXPERIMENTS, rule_owners
from hpcbench.experiments.affinity.config import AffinityConfig
from hpcbench.experiments.affinity.rules import MIN_COST, RULES, cost_table, cost_verdicts
from hpcbench.experiments.affinity.summary import costs, findings, summarize, verify_records

STEPS = 12
PARAMS = {"nodes": 1, "ranks_per_node": 2, "steps": STEPS}
MACHINE = {"cluster": "one machine", "infiniband": "absent", "gpus": 0.0}
ONE_NODE = "1 NUMA node (read from the topology): every byte of memory is local, there is no remote node"


def affinity_rows(slowdown: float = 2.0, *, seed: int = 0, spread: float = 0.02, mistakes=("oversubscription",
                  "binding", "loader", "hugepages"), unapplied: str = "", not_applicable: dict | None = None,
                  numa: bool = True):
    """One launch: every timed mistake at ``slowdown`` x the right way's step time; ``unapplied`` names a mistake
    whose right setting rank 1 did not really get; ``not_applicable`` maps mistakes to a recorded reason."""
    rows = []
    for i, mistake in enumerate(mistakes):
        for setting, factor in (("mistake", slowdown), ("right", 1.0)):
            labels = {"mistake": mistake, "setting": setting, "what": f"{mistake} {setting}"}
            rows.append(("step_time", noisy(0.1 * factor, STEPS, spread, seed * 31 + i * 2 + (setting == "right")),
                         "s", labels))
            for rank in (0, 1):
                bad = mistake == unapplied and setting == "right" and rank == 1
                rows.append(("setting_applied", 0.0 if bad else 1.0, "bool",
                             {"mistake": mistake, "setting": setting, "local_rank": rank},
                             "local rank 1: runs on CPUs 0-1, planned 1" if bad else "as planned"))
        if mistake == "hugepages":
            rows += [("huge_page_share", 0.0, "", {"mistake": "hugepages", "setting": "mistake"}),
                     ("huge_page_share", 1.0, "", {"mistake": "hugepages", "setting": "right"})]
    for mistake, why in (not_applicable or {}).items():
        rows.append(("not_applicable", None, "", {"mistake": mistake}, why))
    if numa:
        rows.append(("not_applicable", None, "", {"mistake": "numa"}, ONE_NODE))
    return rows


def verdicts(tmp_path, n=6, **kw):
    records = launches(tmp_path, "affinity", lambda j: affinity_rows(seed=j, **kw), n, params=PARAMS, facts=MACHINE)
    return cost_verdicts(records)


def test_summary_pairs_the_settings_and_keeps_the_steps(tmp_path):
    records = launch(tmp_path, "affinity", affinity_rows(), params=PARAMS, facts=MACHINE)
    s = summarize(records)
    assert list(s["mistake"].unique()) == ["oversubscription", "binding", "loader", "hugepages", "numa"]
    timed = s[s["setting"] != ""]
    assert (timed["steps"] == STEPS).all() and timed["samples"].map(len).eq(STEPS).all() and timed["ok"].all()
    assert timed["applied"].all()
    hp = s[s["mistake"] == "hugepages"].set_index("setting")["huge_page_share"]
    assert hp["right"] == 1.0 and hp["mistake"] == 0.0
    numa = s[s["mistake"] == "numa"].iloc[0]
    assert numa["setting"] == "" and numa["steps"] == 0 and "1 NUMA node" in numa["not_applicable"]
    c = costs(s).set_index("mistake")
    assert c.loc["oversubscription", "slowdown"] == pytest.approx(2.0, rel=0.05)
    assert pd.isna(c.loc["numa", "slowdown"])
    text = "\n".join(findings(s))
    assert "slower by 2" in text and "numa (memory on the remote NUMA node): not timed; not applicable: 1 NUMA" in text
    assert verify_records(records, AffinityConfig.from_dict(PARAMS)).ok


def test_a_setting_not_applied_takes_its_pair_out(tmp_path):
    records = launch(tmp_path, "affinity", affinity_rows(unapplied="binding"), params=PARAMS, facts=MACHINE)
    s = summarize(records).set_index(["mistake", "setting"])
    assert not s.loc[("binding", "right"), "ok"] and not s.loc[("binding", "mistake"), "ok"]
    assert not s.loc[("binding", "right"), "applied"] and s.loc[("binding", "mistake"), "applied"]
    assert "local rank 1: runs on CPUs 0-1, planned 1" in s.loc[("binding", "right"), "problem"]
    assert s.loc[("loader", "right"), "ok"]
    report = str(verify_records(records, AffinityConfig.from_dict(PARAMS)))
    assert "FAIL" in report and "binding, right setting, local rank 1" in report


def test_verify_flags_missing_steps_and_a_missing_mistake(tmp_path):
    records = launch(tmp_path, "affinity", affinity_rows(mistakes=("oversubscription",), numa=False), params=PARAMS,
                     facts=MACHINE)
    report = str(verify_records(records, AffinityConfig.from_dict({**PARAMS, "steps": 20})))
    assert "oversubscription / mistake: 12 timed steps, expected 20" in report
    assert "binding has no records" in report and "numa has no records" in report


def test_costly_mistakes_are_reproduced_with_an_interval(tmp_path):
    v = verdicts(tmp_path, slowdown=2.0)
    for mistake in ("oversubscription", "binding", "loader", "hugepages"):
        assert v[mistake].verdict == "reproduced", v[mistake].detail
        assert re.search(r": 2\.0\dx \[", v[mistake].measured) and "6 launches x 12 steps" in v[mistake].measured
        assert f">= {MIN_COST:.2f}x" in v[mistake].measured


def test_cheap_mistakes_are_not_reproduced(tmp_path):
    v = verdicts(tmp_path, slowdown=1.0)
    assert {v[m].verdict for m in ("oversubscription", "binding", "loader", "hugepages")} == {"not reproduced"}


def test_a_cost_near_the_bound_is_inconclusive(tmp_path):
    v = verdicts(tmp_path, slowdown=MIN_COST, spread=0.05)
    assert v["loader"].verdict == "inconclusive" and "straddles" in v["loader"].measured


def test_fewer_than_five_launches_is_inconclusive_even_when_costly(tmp_path):
    v = verdicts(tmp_path, n=4, slowdown=3.0)
    assert v["oversubscription"].verdict == "inconclusive" and "n = 4 launches" in v["oversubscription"].measured


def test_one_numa_node_is_not_applicable_whatever_else(tmp_path):
    v = verdicts(tmp_path, slowdown=3.0)
    assert v["numa"].verdict == "inconclusive" and v["numa"].measured == "—"
    assert "Not applicable: 1 NUMA node" in v["numa"].detail and "nothing was timed" in v["numa"].detail


def test_a_recorded_reason_makes_a_timed_pair_not_applicable(tmp_path):
    why = "2 ranks x 1 threads = 2 do not exceed the 2 usable cores: nothing is oversubscribed"
    v = verdicts(tmp_path, slowdown=3.0, not_applicable={"oversubscription": why})
    assert v["oversubscription"].verdict == "inconclusive" and "not applicable" in v["oversubscription"].measured
    assert v["binding"].verdict == "reproduced"


def test_unapplied_settings_do_not_count_and_are_named(tmp_path):
    v = verdicts(tmp_path, slowdown=3.0, unapplied="binding")
    assert v["binding"].verdict == "inconclusive" and v["binding"].measured == "—"
    assert "Not counted" in v["binding"].detail and "runs on CPUs 0-1, planned 1" in v["binding"].detail
    assert v["loader"].verdict == "reproduced"
    table = cost_table(v)
    assert list(table["mistake"]) == ["oversubscription", "binding", "loader", "hugepages", "numa"]


def test_no_ledger_rule_t_affinity_is_a_technique():
    assert RULES == {} and EXPERIMENTS.get("affinity").claims.ids == ()
    assert "affinity" not in {o for owners in rule_owners().values() for o in owners}


def test_presenter_shows_plan_costs_and_what_ranks_got(tmp_path):
    from hpcbench.core.results import expand_labels
    from hpcbench.judge.evidence import summarize_launches
    from hpcbench.present.kit import ExperimentData
    from hpcbench.report.aggregate import series_stats

    def rows(j):
        return affinity_rows(seed=j) + [("plan.table", None, "", {"plan": "ranks"}, "local_rank 0, cpus 0"),
                                        ("plan.srun", None, "", {"plan": "ranks"}, "--cpu-bind=mask_cpu:0x1,0x2")]

    df = launches(tmp_path, "affinity", rows, 5, params=PARAMS, facts=MACHINE).assign(source="run")
    stats = expand_labels(series_stats(df[df["value"].notna()]))
    text = expand_labels(df[df["value"].isna() & df["text"].notna()])
    summaries = summarize_launches(df, summarize, "affinity").assign(source="run")
    sections = EXPERIMENTS.get("affinity").present(ExperimentData("affinity", ["run"], stats, text, df, summaries))
    tables = {t.id: t for t in sections[0].tables}
    cost = tables["affinity-costs"]
    assert [r[0].text for r in cost.rows] == ["oversubscription", "binding", "loader", "hugepages", "numa"]
    assert cost.rows[0][8].text == "reproduced" and "5 launches x 12 steps" in cost.rows[0][7].text
    assert re.search(r": 2\.0\dx \[", cost.rows[0][7].text) and "not applicable: 1 NUMA node" in cost.rows[4][9].text
    assert [r[0].text for r in tables["affinity-plan"].rows] == ["plan (per local rank)", "srun arguments"]
    assert len(tables["affinity-observed"].rows) == 4 * 2 * 2 and sections[0].figures[0].data
