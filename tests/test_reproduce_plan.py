"""``make reproduce``'s plan: the link calibration's arithmetic and the cluster's size, before anything starts."""

import pytest

from hpcbench.core.errors import HpcbenchError
from hpcbench.reproduce import guide_ratio, link_rate_mbit, nodes_needed, regime_entries, select_entries
from hpcbench.run.suite import load_suite, parse_suite


def test_guide_ratio_follows_the_nics_per_node():
    # NVLink 3 300 GB/s per GPU against 25 GB/s HDR shared by 8/nics GPUs
    assert guide_ratio(8) == pytest.approx(12.0)
    assert guide_ratio(1) == pytest.approx(96.0)
    with pytest.raises(HpcbenchError, match="nics_per_node"):
        guide_ratio(9)


def test_link_rate_is_the_per_rank_share_times_ranks_and_clamped():
    # 1 GB/s intra per rank / 12 = 83 MB/s per rank, x 2 ranks, in Mbit/s
    assert link_rate_mbit(1.0, 8) == round(1.0 / 12 * 2 * 8e3) == 1333
    assert link_rate_mbit(1e-6, 8) == 10 and link_rate_mbit(1e6, 1) == 10_000


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
