"""The scale model at the guide's scale (C2, C3, C7, C8, C9): finite, inputs shown, sensible directions.

Each claim's predictor lives in the experiment that rules on it and takes its measured inputs from
the scale model's launches (the SPEC's ``prediction_inputs``).
"""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from hpcbench.core.errors import ConfigError
from hpcbench.experiments.comm_modes.claims import GUIDE_C3_GPT2, GUIDE_C3_RESNET
from hpcbench.experiments import EXPERIMENTS, rule_owners
from hpcbench.experiments.batch_scaling.prediction import predict_c2
from hpcbench.experiments.comm_modes.prediction import predict_c3
from hpcbench.experiments.gradient_compression.prediction import predict_c8
from hpcbench.experiments.overlap.prediction import predict_c9
from hpcbench.experiments.weather_case.prediction import predict_c7
from hpcbench.experiments import get_claim
from hpcbench.guide.claims import ClaimError
from hpcbench.judge.evidence import Evidence
from hpcbench.report.ledger import evaluate_claim, prediction_owners
from hpcbench.scale.guide_scale import (GUIDE_NODES, NIC_COUNTS, MeasuredInputs, params_for_comm, predictor,
                                        weather_params)
from hpcbench.scale.platforms import PUBLISHED_THROUGHPUT, get_platform, published_throughput
from hpcbench.scale.predict import predict_step

#: The claims the scale model predicts at the guide's scale besides its own C1, each by its ruling experiment.
PREDICT = {"C2": predict_c2, "C3": predict_c3, "C7": predict_c7, "C8": predict_c8, "C9": predict_c9}
#: The keyword arguments each claim's SPEC passes its predictor: C3 reads the guide's platform line literally.
SPEC_KWARGS = {"C3": {"nics_per_node": 1}}
CLAIMS = tuple(PREDICT)
#: The experiment whose launches measure the predictions' inputs.
MEASURES_INPUTS = "scale_model"


def _evidence(summaries: pd.DataFrame) -> Evidence:
    return Evidence(experiment="any", summaries=summaries, launches=pd.DataFrame(), records=pd.DataFrame())


def test_each_claims_predictor_is_registered_by_the_experiment_that_rules_on_it():
    predicted, ruled = prediction_owners(), rule_owners()
    assert set(CLAIMS) | {"C1"} <= set(predicted)
    for claim_id, owners in predicted.items():
        assert owners == ruled.get(claim_id), (claim_id, owners, ruled.get(claim_id))
    for claim_id in CLAIMS:
        claims = EXPERIMENTS.get(ruled[claim_id][0]).claims
        assert claims.predictions[claim_id].__name__ == f"predict_{claim_id.lower()}_at_guide_scale"
        assert claims.prediction_inputs == MEASURES_INPUTS
    assert EXPERIMENTS.get(MEASURES_INPUTS).claims.prediction_inputs is None  # C1: its own launches
    # Whatever names whose evidence a SPEC's predictions take is registered.
    assert all(EXPERIMENTS.get(n).claims.prediction_inputs in (None, *EXPERIMENTS.names()) for n in EXPERIMENTS.names())
    with pytest.raises(ClaimError, match="C17"):
        predictor("C99", predict_c3)


def test_the_ledger_gives_an_owners_predictor_the_scale_models_evidence():
    summaries = {MEASURES_INPUTS: pd.DataFrame({"run_id": "r", "task_id": ["t1", "t2", "t3"],
                                                "link_efficiency": [0.5, 0.6, 0.9]})}
    records = pd.DataFrame({"run_id": "r", "task_id": ["t1", "t2", "t3"], "experiment": MEASURES_INPUTS,
                            "variant": "v", "repetition": 0, "params": "{}", "metric": "x", "value": 1.0, "unit": "",
                            "labels": "{}", "text": None, "node": "n", "step": 0})
    for claim_id, predict in PREDICT.items():
        row = evaluate_claim(claim_id, records, summaries=summaries)
        kwargs = SPEC_KWARGS.get(claim_id, {})
        expected = predict(measured=MeasuredInputs(link_efficiency=0.6, launches=3), **kwargs)
        assert row.model_prediction == expected.describe() and row.model_headline == expected.headline
        assert "link efficiency: 0.6 (measured, median of 3 launch(es))" in row.model_prediction
        # The owner's own records carry no inputs: without the scale model's launches, platform data alone.
        bare = evaluate_claim(claim_id, records.assign(experiment=row.experiment))
        assert bare.model_prediction == predict(**kwargs).describe()


@pytest.mark.parametrize("claim_id", CLAIMS)
def test_each_prediction_is_finite_and_shows_its_inputs(claim_id):
    p = PREDICT[claim_id]()
    assert p.claim_id == claim_id and p.values
    assert all(math.isfinite(v) for v in p.values.values()), p.values
    for nics in NIC_COUNTS:  # the guide does not say how many NICs: both ends are always shown
        assert any(k.endswith(f"@{nics}") for k in p.values), (nics, sorted(p.values))
        assert f"({nics} NIC" in p.text
    text = p.describe()
    assert text.startswith("Model (a100_hdr, inputs: ") and p.text in text
    for shown in ("4 nodes x 8 x NVIDIA A100", "the guide's 32-task job", "NICs per node: 8",
                  "link efficiency: 1 (rated link peak; none measured)", "overlapped share: 0"):
        assert shown in text, shown
    assert GUIDE_NODES == 4


def test_the_chosen_nic_count_is_used_and_shown_with_1_and_8():
    p = predict_c3(nics_per_node=2)
    assert "NICs per node: 2 (the guide does not say; shown at 1, 2, 8)" in p.describe()
    assert p.values["resnet50.gain"] == p.values["resnet50.gain@2"]
    with pytest.raises(ConfigError) as err:
        predict_c3(nics_per_node=0)
    assert err.value.field == "nics_per_node"


def test_c3_compute_comes_from_the_published_figures_and_is_compared_with_the_guide():
    p = predict_c3()
    rn50, gpt2 = PUBLISHED_THROUGHPUT[("a100_hdr", "resnet50")], PUBLISHED_THROUGHPUT[("a100_hdr", "gpt2_124M")]
    assert p.values["resnet50.compute_s"] == pytest.approx(256 / rn50.items_per_s)
    assert p.values["gpt2_124M.compute_s"] == pytest.approx(gpt2.step_s)
    assert "2,470 images/s" in p.describe() and "llm.c" in p.describe()
    assert f"+{GUIDE_C3_RESNET[2]:.1f} %" in p.text and f"+{GUIDE_C3_GPT2[2]:.1f} %" in p.text
    # The predicted gain can never exceed what removing DDP's exposed communication entirely would give.
    for model in ("resnet50", "gpt2_124M"):
        for nics in NIC_COUNTS:
            share = p.values[f"{model}.ddp_comm_share@{nics}"]
            assert p.values[f"{model}.gain@{nics}"] <= share / (1 - share) + 1e-12


def test_a_platform_without_published_figures_falls_back_to_flops_and_says_so():
    assert published_throughput("h100_ndr", "resnet50") is None
    p = predict_c3("h100_ndr")
    assert "FLOPs at the sustained rate" in p.describe() and p.inputs["platform"] == "h100_ndr"
    plat = get_platform("h100_ndr")
    assert p.values["gpt2_124M.compute_s"] == pytest.approx(6 * 124_439_808 * 65_536 / plat.sustained_flops)


@pytest.mark.parametrize("claim_id,key", [("C2", "gpt2_124M.comm_share"), ("C3", "resnet50.ddp_step_s"),
                                          ("C3", "gpt2_124M.hierarchical_step_s"), ("C9", "sync_ms"),
                                          ("C7", "ring_ms[320134656]"), ("C7", "tuned_comm_ms_low[10000000000]")])
def test_more_nics_are_never_slower(claim_id, key):
    values = [PREDICT[claim_id](nics_per_node=n).values[f"{key}@{n}"] for n in (1, 2, 4, 8)]
    assert all(a >= b for a, b in zip(values, values[1:])), values


def test_fewer_bytes_are_never_slower():
    c7 = predict_c7()
    for nics in NIC_COUNTS:
        ring = [v for k, v in sorted(c7.values.items(), key=lambda kv: _size(kv[0]))
                if k.startswith("ring_ms[") and k.endswith(f"@{nics}")]
        assert len(ring) == 4 and all(a <= b for a, b in zip(ring, ring[1:])), ring
    small, large = predict_c9(params=26e6), predict_c9(params=10e9)
    assert all(small.values[f"sync_ms@{n}"] < large.values[f"sync_ms@{n}"] for n in NIC_COUNTS)
    # Where bandwidth dominates (a 10B model over one NIC), 2-bit's 16x fewer bytes cut the time.
    assert predict_c8().values["gpt_10b.comm_ratio_low@1"] < 1


def _size(key: str) -> float:
    match = re.search(r"\[(\d+)\]", key)
    return float(match.group(1)) if match else 0.0


def test_slower_measured_links_never_speed_anything_up():
    default, slow = predict_c8(), predict_c8(measured=MeasuredInputs(link_efficiency=0.5, launches=3))
    assert "link efficiency: 0.5 (measured, median of 3 launch(es))" in slow.describe()
    for nics in NIC_COUNTS:
        assert slow.values[f"gpt2_124M.fp32_comm_share@{nics}"] > default.values[f"gpt2_124M.fp32_comm_share@{nics}"]


def test_c7_reads_the_guides_split_and_the_model_size_is_a_parameter():
    p = predict_c7()
    assert "256 ms compute + 164 ms exposed" in p.describe() and "320 M fp32" in p.describe()
    assert weather_params() == 320_134_656
    busy = 420 * 0.61
    for nics in NIC_COUNTS:
        r = p.values[f"ratio_low@{nics}"]
        assert p.values[f"tuned_ms_low@{nics}"] == pytest.approx(busy + (420 - busy) * r)
        assert p.values[f"full_ms_low@{nics}"] == pytest.approx(busy + (420 - busy) * r / 4)
        assert p.values[f"ratio_low@{nics}"] <= p.values[f"ratio_high@{nics}"]
    # The implied gradient size does give the guide's 164 ms on the model's ring.
    plat = get_platform("a100_hdr").with_(nics_per_node=1)
    implied = p.values["implied_params@1"]
    assert predict_step(implied, platform=plat, nodes=4, compute_s=1.0).comm_s["total"] == pytest.approx(0.1638,
                                                                                                       rel=1e-3)
    assert params_for_comm(1e-9, plat, 4) is None
    other = predict_c7(params=1e9)
    assert "1 B fp32" in other.describe() and other.values["ratio_low@8"] != p.values["ratio_low@8"]


def test_c9_gain_shrinks_when_measured_overlap_hides_the_sync():
    base = predict_c9()
    hidden = predict_c9(measured=MeasuredInputs(overlap_share=0.9, launches=2))
    assert base.values["guide_split_gain"] == pytest.approx(420 / (420 * 0.61 + 420 * 0.39 / 4) - 1)
    for nics in NIC_COUNTS:
        assert 0 < hidden.values[f"gain@{nics}"] < base.values[f"gain@{nics}"]


def test_measured_inputs_are_medians_of_the_evidence_columns():
    summaries = pd.DataFrame({"run_id": ["a", "a", "b"], "task_id": ["t1", "t2", "t1"],
                              "link_efficiency": [0.5, 0.6, 0.9], "overlap_share": [-0.2, -0.1, 0.3]})
    m = MeasuredInputs.from_evidence(_evidence(summaries))
    assert m.link_efficiency == pytest.approx(0.6) and m.overlap_share == 0.0 and m.launches == 3
    assert MeasuredInputs.from_evidence(_evidence(pd.DataFrame({"x": [1.0]}))) == MeasuredInputs()
    assert MeasuredInputs.from_evidence(None) == MeasuredInputs()
    with pytest.raises(ConfigError) as err:
        MeasuredInputs(link_efficiency=0.0)
    assert err.value.field == "link_efficiency"


def test_predictor_adapts_to_a_spec_and_reads_the_evidence():
    summaries = pd.DataFrame({"run_id": ["a", "b"], "task_id": ["t", "t"], "link_efficiency": [0.8, 0.8]})
    prediction = predictor("C8", predict_c8)(get_claim("C8"), _evidence(summaries))
    text = prediction.describe()
    assert text.startswith("Model (a100_hdr") and "link efficiency: 0.8 (measured, median of 2 launch(es))" in text
    assert prediction.headline.endswith("GPT-2 124M, 8 NICs/node") and len(prediction.headline.split()) <= 8
    assert predictor("C8", predict_c8)(get_claim("C8"), _evidence(pd.DataFrame())) == predict_c8()
    assert predictor("C8", predict_c8, nics_per_node=1)(get_claim("C8"), None) == predict_c8(nics_per_node=1)
    with pytest.raises(ConfigError, match="C7"):
        predictor("C3", predict_c3)(get_claim("C7"), _evidence(pd.DataFrame()))


def test_a_predictor_that_raises_gives_not_available_in_the_ledger_row():
    from hpcbench.core.config import Config
    from hpcbench.experiments import ClaimSet, Experiment, register

    register(Experiment(name="zz_guide_scale", notebook="zz.ipynb", config=Config, description="test",
                        claims=ClaimSet(predictions={"C3": predictor("C3", predict_c3, nics_per_node=0),
                                                     "C9": predictor("C9", predict_c9)})))
    try:
        records = pd.DataFrame(columns=["experiment"])
        broken, fine = evaluate_claim("C3", records), evaluate_claim("C9", records)
    finally:
        EXPERIMENTS._items.pop("zz_guide_scale", None)
    # The experiments that rule on these claims predict them too: their texts are joined.
    assert "model: not available (ConfigError: guide_scale.nics_per_node: 0 is out of range" in broken.model_prediction
    assert broken.verdict == "not measured yet"
    assert broken.predicted.endswith("Guide's arithmetic: " + get_claim("C3").predicted)
    assert predict_c9().describe() in fine.model_prediction
