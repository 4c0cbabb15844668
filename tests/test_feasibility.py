"""Arithmetic first, then measurement (hpcbench.judge.feasibility): each part on its own, then the rules' property.

The property every figure-claim must have: no "reproduced" beyond what the platform can show, and no
regime taken from the figure it judges. It is checked over a grid of inputs a platform could produce
(busy shares a calibration could reach, topologies of the emulated cluster, measured gains around the
band), never over the one fixture a test happens to use.
"""

import json
import math

import numpy as np
import pandas as pd
import pytest

from hpcbench.judge.evidence import IMPLAUSIBLE, NOT_TESTABLE, Evidence, Judgement
from hpcbench.judge.feasibility import (Consistency, Reach, accumulation_cap, amdahl_cap, decide, partial_cap,
                                        read_parts)
from hpcbench.judge.rulekit import Comparison, judge_comparisons
from hpcbench.judge.verdict import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, Reference, gain_reference


# -- the arithmetic ------------------------------------------------------------------------------------

def test_amdahl_and_its_partial_and_accumulation_forms():
    assert amdahl_cap(0.61) == pytest.approx(1.639, abs=1e-3)  # C7: 61 % busy caps a communication gain
    assert partial_cap(0.25, 0.0) == pytest.approx(amdahl_cap(0.25)) and partial_cap(0.25, 1.0) == pytest.approx(1.0)
    # C3 on 2 x 2: the two-level mode keeps 2/3 of the bytes, at 16 % busy: 1.39x
    assert partial_cap(0.158, 2 / 3) == pytest.approx(1.39, abs=0.005)
    # C2: 4x accumulation of a step 1/12 busy gives the guide's 3.2x; a busy step gives nothing
    assert accumulation_cap(1 / 12, 4) == pytest.approx(3.2) and accumulation_cap(1.0, 8) == pytest.approx(1.0)
    for bad in (lambda: amdahl_cap(0.0), lambda: amdahl_cap(1.5), lambda: accumulation_cap(0.5, 0.5),
                lambda: partial_cap(0.5, -0.1)):
        with pytest.raises(ValueError):
            bad()


def test_a_reach_blocks_only_a_band_whose_lower_edge_lies_above_it():
    reach = Reach(1.39, "2 x 2 topology", needs="2 nodes x 4 ranks per node")
    assert reach.blocks(gain_reference(1.496, "C3"))  # band 1.397x
    assert not reach.blocks(gain_reference(1.35, "C7 level 1"))  # band 1.28x
    assert not reach.blocks(Reference(1.0, upper=0.4))  # an upper bound alone is never out of reach
    assert "needs 2 nodes x 4 ranks per node" in reach.describe(gain_reference(1.496, "C3"))


def test_a_consistency_reason_stays_within_eight_words():
    with pytest.raises(AssertionError):
        Consistency(False, "one two three four five six seven eight nine", "x")


@pytest.mark.parametrize("verdicts, expected", [
    ([REPRODUCED, NOT_TESTABLE], NOT_TESTABLE), ([NOT_REPRODUCED, NOT_TESTABLE], NOT_REPRODUCED),
    ([INCONCLUSIVE, NOT_TESTABLE], NOT_TESTABLE), ([REPRODUCED, REPRODUCED], REPRODUCED),
    ([REPRODUCED, INCONCLUSIVE], INCONCLUSIVE), ([], INCONCLUSIVE)])
def test_required_parts_read_together(verdicts, expected):
    assert read_parts(verdicts) == expected


@pytest.mark.parametrize("measured", [REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_TESTABLE])
def test_decide_says_which_decided(measured):
    judged = Judgement(measured, "m", "how")
    implausible = decide(judged, Consistency(False, "61 % busy caps it at 1.64x", "the sum"))
    assert implausible.verdict == IMPLAUSIBLE and implausible.decided_by == "arithmetic"
    assert implausible.measured == "m" and "Measured here, shown and not deciding: how" in implausible.detail
    consistent = decide(judged, Consistency(True, "fits", "the sum"))
    assert consistent.verdict == measured and consistent.detail.startswith("Guide's statements: consistent")
    assert consistent.decided_by == ("arithmetic" if measured == NOT_TESTABLE else "measurement")


# -- the rule kit reads a reach before the values --------------------------------------------------------

def _evidence(ratio: float, launches: int = 6) -> Evidence:
    rng = np.random.default_rng(1)
    rows, launch_rows = [], []
    for k in range(launches):
        launch_rows.append({"run_id": "r", "task_id": f"t{k}", "experiment": "x", "variant": "v", "repetition": k,
                            "params": json.dumps({"nodes": 2})})
        for arm, level in (("new", ratio), ("old", 1.0)):
            rows.append({"run_id": "r", "task_id": f"t{k}", "arm": arm,
                         "samples": list(level * (1 + 0.01 * rng.standard_normal(8)))})
    return Evidence("x", pd.DataFrame(rows), pd.DataFrame(launch_rows), pd.DataFrame())


@pytest.mark.parametrize("ratio", [1.0, 1.3, 2.0])  # below the band, between, above the cap: all not testable
def test_a_band_beyond_reach_is_not_testable_whatever_was_measured(ratio):
    comp = Comparison("new / old", {"arm": "new"}, {"arm": "old"}, gain_reference(1.5, "test"),
                      reach=Reach(1.35, "topology"))
    j = judge_comparisons(_evidence(ratio), [comp], applies=lambda launch: None, what="Test.")
    assert j.verdict == NOT_TESTABLE and j.decided_by == "arithmetic" and j.reason == "this platform caps it at 1.35x"
    assert j.outcomes[0].why.startswith("not testable here: this platform caps it at 1.35x")
    assert math.isfinite(j.outcomes[0].interval.estimate)  # the measurement stays shown


def test_a_reachable_band_leaves_the_measurement_to_decide():
    comp = Comparison("new / old", {"arm": "new"}, {"arm": "old"}, gain_reference(1.5, "test"), reach=Reach(3.0, "x"))
    for ratio, verdict in ((1.6, REPRODUCED), (1.1, NOT_REPRODUCED)):
        j = judge_comparisons(_evidence(ratio), [comp], applies=lambda launch: None, what="Test.")
        assert j.verdict == verdict and j.decided_by == "measurement"


def test_a_failed_part_fails_the_claim_even_beside_an_untestable_one():
    testable = Comparison("a", {"arm": "new"}, {"arm": "old"}, gain_reference(1.5, "test"), reach=Reach(3.0, "x"))
    capped = Comparison("b", {"arm": "new"}, {"arm": "old"}, gain_reference(3.0, "test"), reach=Reach(1.64, "x"))
    j = judge_comparisons(_evidence(1.1), [testable, capped], applies=lambda launch: None, what="Test.")
    assert j.verdict == NOT_REPRODUCED and [o.verdict for o in j.outcomes] == [NOT_REPRODUCED, NOT_TESTABLE]
    j = judge_comparisons(_evidence(1.7), [testable, capped], applies=lambda launch: None, what="Test.")
    assert j.verdict == NOT_TESTABLE


# -- the property, rule by rule --------------------------------------------------------------------------

BUSY = (0.1, 0.17, 0.25, 0.4, 0.61, 0.8)


def test_c2_never_reproduced_beyond_reach_nor_from_a_regime_taken_from_its_figure():
    from hpcbench.experiments.batch_scaling.config import TEST_REGIME
    from hpcbench.experiments.batch_scaling.rules import mechanism_reach

    assert TEST_REGIME.ours  # the guide states no regime independent of its +220 %
    params = {"factors": [1, 4, 8], "regimes": ["larger_batch", "fixed_global_batch"]}
    bands = []
    for busy in BUSY + (0.97, 0.99):
        reach, lower = mechanism_reach(params, busy)
        band = Reference(reach.cap, lower=lower)
        # the band comes from the reached regime (Amdahl), never from the guide's +220 %: it follows the busy
        # share, and a regime with less room than the least gain worth showing is not testable
        assert reach.cap == pytest.approx(accumulation_cap(busy, 8))
        assert reach.blocks(band) == (reach.cap < 1.05)
        bands.append(lower)
    assert bands == sorted(bands, reverse=True) and bands[0] > 3.0 and bands[-1] == 1.05


@pytest.mark.parametrize("nodes, ranks", [(2, 1), (2, 2), (2, 4), (2, 8), (4, 2)])
def test_c3_reach_is_from_topology_and_regime_and_blocks_exactly_below_the_band(nodes, ranks):
    from hpcbench.experiments.comm_modes.rules import topology_reach

    band = gain_reference(18_700 / 12_500, "C3")
    for busy in BUSY:
        reach = topology_reach({"nodes": nodes, "ranks_per_node": ranks}, busy)
        assert reach.cap <= amdahl_cap(busy) + 1e-12  # never more than removing all communication
        assert reach.blocks(band) == (reach.cap < band.lower)
        if ranks == 1:
            assert reach.cap == pytest.approx(1.0)  # one rank per node: nothing to reduce inside the node


def test_c7_level_two_is_out_of_reach_at_the_guides_own_regime():
    from hpcbench.experiments.weather_case.rules import LEVELS, amdahl_reach, guide_consistency

    level1, level2 = (c.reference for c in LEVELS)
    at_guide = amdahl_reach(0.61)
    assert at_guide.blocks(level2) and not at_guide.blocks(level1)
    assert not guide_consistency().holds
    # the other outcome is reachable: a step busy enough less that 2.75x fits
    assert not amdahl_reach(0.3).blocks(level2)


# -- every row that is neither reproduced nor not says why, in at most 8 words ----------------------------

@pytest.mark.parametrize("ratio, launches, expected", [
    (1.6, 3, "n = 3 launches x 8 steps"),
    (1.4, 6, "the interval straddles a bound of the band"),
])
def test_an_inconclusive_row_says_why_in_few_words(ratio, launches, expected):
    from hpcbench.judge.evidence import brief_reason

    comp = Comparison("new / old", {"arm": "new"}, {"arm": "old"}, gain_reference(1.5, "test"))
    j = judge_comparisons(_evidence(ratio, launches), [comp], applies=lambda launch: None, what="Test.")
    reason = brief_reason(j)
    assert j.verdict == INCONCLUSIVE and 0 < len(reason.split()) <= 8, (j.verdict, reason)
    if expected:
        assert reason.startswith(expected)
    not_applicable = judge_comparisons(_evidence(1.6), [comp], applies=lambda launch: "one node: no inter-node link",
                                       what="Test.")
    assert brief_reason(not_applicable) == "one node: no inter-node link"
