"""``make reproduce``'s plan: the link calibration's arithmetic and the cluster's size, before anything starts."""

import pytest

from hpcbench.core.errors import HpcbenchError
from hpcbench.reproduce import guide_ratio, link_rate_bps, nodes_needed, regime_entries, select_entries
from hpcbench.run.suite import load_suite, parse_suite


def test_guide_ratio_follows_the_nics_per_node():
    # NVLink 3 300 GB/s per GPU against 25 GB/s HDR shared by 8/nics GPUs
    assert guide_ratio(8) == pytest.approx(12.0)
    assert guide_ratio(1) == pytest.approx(96.0)
    with pytest.raises(HpcbenchError, match="nics_per_node"):
        guide_ratio(9)


def test_link_rate_is_the_per_rank_share_times_ranks_and_clamped():
    # 1 GB/s intra per rank / 12 = 83 MB/s per rank, x 2 ranks, in Mbit/s
    assert link_rate_bps(1.0, 8) == round(1.0 / 12 * 2 * 8e3) * 1e6 == 1333e6
    assert link_rate_bps(1e-6, 8) == 10e6 and link_rate_bps(1e6, 1) == 10e9


def test_the_cluster_has_as_many_nodes_as_the_largest_task():
    two = parse_suite({"name": "s", "description": "", "tasks": [
        {"experiment": "collectives", "params": {"nodes": 2, "ranks_per_node": 1}}]})
    assert nodes_needed(two) == 2
    four = parse_suite({"name": "s", "description": "", "tasks": [
        {"experiment": "collectives", "params": {"nodes": 4, "ranks_per_node": 1}},
        {"experiment": "environment"}]})
    assert nodes_needed(four) == 4
    assert nodes_needed(load_suite("reproduce")) >= 2


def test_only_keeps_the_named_entries_and_refuses_an_unknown_one():
    suite = load_suite("reproduce")
    entries = regime_entries(suite)
    # C2, C3, C7 and C8's regime-matched entries; their fixed-link context rows are not
    assert entries == ["comm_modes.modes", "batch_scaling.resnet_tiny_two_nodes", "gradient_compression.weather_tiny",
                       "weather_case.weather_tiny"]
    regime = select_entries(suite, entries)
    assert {f"{t.experiment}.{t.variant}" for t in regime.tasks} == set(entries)
    # every launch of an entry comes along: C7's verdict needs all 9
    assert sum(t.experiment == "weather_case" for t in regime.tasks) == 9
    assert nodes_needed(regime) == 2
    with pytest.raises(HpcbenchError, match="weather_case.nope"):
        select_entries(suite, ["weather_case.nope"])


# -- launching again until a figure has its launches in the regime -------------------------------------------

def _run_dir(tmp_path, reached: list[float | None]):
    """A run dir of comm_modes' calibrated entry: one done task per value of ``reached`` (None: no regime fact)."""
    from synthetic import SHAPED, launch

    from hpcbench.run.rundir import TaskStatus, prepare_run_dir, write_status

    suite = parse_suite({"name": "s", "description": "", "tasks": [
        {"experiment": "comm_modes", "repeat": len(reached),
         "variants": {"modes": {"models": ["resnet_tiny"], "modes": ["ddp", "hierarchical"], "regime": "guide"}}},
        {"experiment": "comm_modes", "variants": {"fixed": {"regime": "fixed"}}},
        {"experiment": "batch_scaling", "variants": {"two": {"nodes": 2, "ranks_per_node": 1}}}]})
    run_dir = tmp_path / "run"
    prepare_run_dir(run_dir, suite, "local")
    values = iter(reached)
    for spec in suite.tasks:
        status = TaskStatus.for_task(spec)
        status.state = "done"
        write_status(run_dir, status)
        busy = next(values) if spec.variant == "modes" else 0.9
        facts = {**SHAPED, **({} if busy is None else {"regime.target_busy": 0.158, "regime.reached_busy": busy})}
        launch(run_dir / "tasks" / spec.task_id, spec.experiment, [], run_id="run", task_id=spec.task_id,
               repetition=spec.repetition, params=spec.params, facts=facts, variant=spec.variant)
    return run_dir


def test_the_shortfall_counts_only_launches_in_a_guide_regime(tmp_path):
    from hpcbench.reproduce import regime_shortfall
    from hpcbench.run.rundir import load_run

    run_dir = _run_dir(tmp_path, [0.16, 0.17, 0.30, None, 0.15, 0.21])  # 0.30 and 0.21 missed, None unrecorded
    suite, _ = load_run(run_dir)
    # The fixed-link entry and batch_scaling's test regime of ours (its band follows any busy share) are never
    # topped up; comm_modes.modes has 3 of 6 in its regime
    assert regime_shortfall(run_dir, suite, need=5) == {"comm_modes.modes": 2}
    assert regime_shortfall(run_dir, suite, need=3) == {}


def test_top_up_adds_the_shortfall_each_round_up_to_its_cap(tmp_path):
    from hpcbench.reproduce import top_up
    from hpcbench.run.rundir import load_run, read_statuses

    run_dir = _run_dir(tmp_path, [0.16, 0.17, 0.30, None, 0.15, 0.21])
    rounds = []

    def run(d):  # each added launch misses the regime again: the cap must end the loop
        rounds.append(sorted(s.task_id for s in read_statuses(d) if s.state == "pending"))
        for s in read_statuses(d):
            if s.state == "pending":
                s.state = "done"
                from hpcbench.run.rundir import write_status
                write_status(d, s)

    added = top_up(run_dir, need=5, cap=3, run=run)
    assert added == ["comm_modes.modes.r6", "comm_modes.modes.r7", "comm_modes.modes.r8"]
    assert rounds == [["comm_modes.modes.r6", "comm_modes.modes.r7"], ["comm_modes.modes.r8"]]
    suite, info = load_run(run_dir)
    assert [t.task_id for t in suite.tasks][-3:] == added and info["tasks"][-3:] == added
    assert suite.tasks[-1].params == suite.tasks[0].params  # the same entry, launched again
    with pytest.raises(HpcbenchError, match="already in the run"):
        from hpcbench.run.rundir import extend_run

        extend_run(run_dir, suite.tasks[-1:])
