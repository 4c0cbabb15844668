"""The guide's claims, the ledger's contract, and the one-package-per-experiment layout."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pandas as pd
import pytest

import hpcbench
from hpcbench.core import facts, units
from hpcbench.core.errors import HpcbenchError
from hpcbench.experiments import EXPERIMENTS, rule_owners
from hpcbench.experiments import all_claims, get_claim
from hpcbench.guide.claims import KINDS, ClaimError

CLAIMS = all_claims()
from hpcbench.judge.evidence import NO_VALUE, VERDICTS, verdict_words
from hpcbench.report.ledger import evaluate_claim, evaluate_claims

PACKAGE = Path(hpcbench.__file__).parent
#: Not shared: each experiment's own package (``experiments/<name>/``, its benchmark included).
NOT_SHARED = re.compile(r"experiments/[^/]+/")
#: What a shared module may name of one experiment, each with why (matched without the line number).
NAMING_ALLOWED = {
    # the one-GPU check runs the collectives harness (measure_op and its value checks) on NCCL through the launcher
    "bench/gpu_check.py imports hpcbench.experiments.collectives.worker",
}


def test_all_17_claims_in_order_once():
    assert [c.id for c in CLAIMS] == [f"C{i}" for i in range(1, 18)]
    for claim in CLAIMS:
        assert claim.wording and claim.section and claim.figures, claim.id


def test_every_claim_has_a_kind_and_the_ledger_row_speaks_its_words():
    kinds = {c.id: c.kind for c in CLAIMS}
    assert set(kinds.values()) == set(KINDS)
    # the guide's figures, its techniques, its anecdotes and context
    assert [c for c, k in kinds.items() if k == "figure"] == ["C2", "C3", "C4", "C7", "C12"]
    assert [c for c, k in kinds.items() if k == "anecdote"] == ["C1", "C16"]
    rows = {r.claim_id: r for r in evaluate_claims(pd.DataFrame())}
    assert all(rows[c].kind == k for c, k in kinds.items())
    assert verdict_words("figure", "reproduced") == "reproduced"
    assert verdict_words("technique", "reproduced") == "works as described"
    assert verdict_words("technique", "not reproduced") == "does not work as described"
    assert verdict_words("anecdote", "not reproduced") == "inconsistent with the model"
    assert all(verdict_words(k, v) == v for k in KINDS for v in ("inconclusive", "not measured yet", "context"))


def test_a_row_as_data_keeps_every_comparison_its_interval_band_and_why_not_counted():
    from hpcbench.judge.evidence import Judgement, row_of
    from hpcbench.judge.verdict import Interval, Outcome, Reference

    counted = Outcome("reproduced", Interval(1.5, 1.4, 1.6, 5, 10), Reference(1.35, lower=1.28, source="guide"))
    context = Outcome("inconclusive", Interval(1.0, 0.9, float("inf"), 2, 10), Reference(1.35, lower=1.28),
                      "context: a fixed link, original at 85% busy")
    row = row_of(get_claim("C7"), Judgement("reproduced", "m", "d", (counted, context), ("level 1", "level 1 fixed")),
                 "weather_case", regime="guide's regime: original 61% busy")
    data = json.loads(json.dumps(row.as_record(), allow_nan=False))  # strict JSON: no NaN, no Infinity
    assert data["claim"] == "C7" and data["kind"] == "figure" and data["verdict_text"] == "reproduced"
    assert data["regime"].startswith("guide's regime")
    first, second = data["comparisons"]
    assert (first["label"], first["estimate"], first["low"], first["high"], first["launches"], first["steps"]) == (
        "level 1", 1.5, 1.4, 1.6, 5, 10)
    assert first["reference"] == {"value": 1.35, "lower": 1.28, "upper": None, "unit": "x", "source": "guide"}
    assert second["high"] is None and data["not_counted"] == ["context: a fixed link, original at 85% busy"]


def test_get_claim_and_unknown_id_lists_valid_ones():
    assert get_claim("C16").id == "C16"
    with pytest.raises(ClaimError) as info:
        get_claim("C99")
    assert isinstance(info.value, HpcbenchError) and "C1" in str(info.value) and "C17" in str(info.value)


def test_every_ruled_claim_exists_and_has_one_owner():
    owners = rule_owners()
    ids = {c.id for c in CLAIMS}
    assert set(owners) <= ids
    assert all(len(names) == 1 for names in owners.values()), owners
    for name in EXPERIMENTS.names():
        assert set(EXPERIMENTS.get(name).claims.ids) <= ids, name


@pytest.mark.parametrize("records", [pd.DataFrame(columns=["experiment"]), pd.DataFrame()], ids=["schema", "bare"])
def test_empty_records_nothing_fabricated(records):
    rows = evaluate_claims(records if len(records.columns) else records.assign(experiment=[]))
    assert [r.claim_id for r in rows] == [c.id for c in CLAIMS]
    for row in rows:
        assert row.verdict == "not measured yet" and row.measured == NO_VALUE and row.detail
        assert row.verdict in VERDICTS


def _disown(monkeypatch, claim_id: str) -> None:
    """Take ``claim_id``'s rule away from whichever experiment owns it, for this test only."""
    for name in EXPERIMENTS.names():
        rules = EXPERIMENTS.get(name).claims.rules
        if claim_id in rules:
            monkeypatch.delitem(rules, claim_id)


def test_not_measured_detail_names_the_owner_or_says_none(monkeypatch):
    _disown(monkeypatch, "C1")
    rows = {r.claim_id: r for r in evaluate_claims(pd.DataFrame(columns=["experiment"]))}
    assert "comm_modes" in rows["C3"].detail
    assert "No hpcbench experiment" in rows["C1"].detail


def test_raising_rule_is_inconclusive_and_names_the_error(monkeypatch):
    spec = EXPERIMENTS.get("comm_modes")

    def broken(claim, evidence):
        raise ValueError("boom")

    monkeypatch.setitem(spec.claims.rules, "C3", broken)
    records = pd.DataFrame({"run_id": ["r"], "task_id": ["t"], "experiment": ["comm_modes"], "variant": ["v"],
                            "repetition": [0], "params": ["{}"], "metric": ["x"], "value": [1.0], "unit": [""],
                            "labels": ["{}"], "text": [None], "node": ["n"], "step": [0]})
    row = evaluate_claim("C3", records)
    assert row.verdict == "inconclusive" and "ValueError: boom" in row.detail


# -- the predicted column: predictions from any experiment's SPEC ----------------------------------------

PREDICTOR = "zz_predictor"


def _rows(experiment: str, values: dict[str, float], run: str = "r") -> pd.DataFrame:
    """One launch per value: the schema's columns, metric ``link_efficiency``."""
    return pd.DataFrame({"run_id": [run] * len(values), "task_id": list(values), "experiment": experiment,
                         "variant": "v", "repetition": 0, "params": "{}", "metric": "link_efficiency",
                         "value": list(values.values()), "unit": "", "labels": "{}", "text": None, "node": "n",
                         "step": 0})


@pytest.fixture
def predicting_experiment():
    """A registered experiment that rules on nothing and predicts C17 (ruled by another) and C13; removed after."""
    from hpcbench.core.config import Config
    from hpcbench.experiments import ClaimSet, Experiment, register

    seen, summarized = [], []

    def summarize(records):
        summarized.append(len(records))
        return pd.DataFrame({"link_efficiency": records["value"].to_numpy()})

    def c17(claim, evidence):
        seen.append(evidence)
        return f"Model (test): {claim.id} from {evidence.experiment}, {len(evidence.launches)} launch(es)"

    def c13(claim, evidence):
        raise ValueError("boom")

    register(Experiment(name=PREDICTOR, notebook="zz.ipynb", config=Config, description="throw-away",
                        summarize=summarize, claims=ClaimSet(predictions={"C17": c17, "C13": c13})))
    try:
        yield seen, summarized
    finally:
        EXPERIMENTS._items.pop(PREDICTOR, None)


def test_a_claim_ruled_by_one_experiment_is_predicted_by_another(predicting_experiment):
    from hpcbench.judge.evidence import GUIDE_ARITHMETIC
    from hpcbench.report.ledger import prediction_owners

    assert prediction_owners()["C17"] == [PREDICTOR] and PREDICTOR not in rule_owners().get("C17", [])
    row = evaluate_claim("C17", pd.DataFrame(columns=["experiment"]))
    claim = get_claim("C17")
    # No launches at all: the prediction still comes (platform data alone), the rule's owner is unchanged.
    assert row.model_prediction == f"Model (test): C17 from {PREDICTOR}, 0 launch(es)"
    assert row.predicted == f"{row.model_prediction} · {GUIDE_ARITHMETIC}: {claim.predicted}"
    assert row.guide_arithmetic == claim.predicted and row.verdict == "not measured yet"
    assert row.experiment == "comm_modes"
    # Its own experiment's evidence, summarised, whatever else the records hold.
    records = pd.concat([_rows(PREDICTOR, {"t1": 0.5, "t2": 0.7}), _rows("comm_modes", {"t9": 1.0})])
    row = evaluate_claim("C17", records)
    evidence = predicting_experiment[0][-1]
    assert row.model_prediction.endswith("2 launch(es)") and evidence.experiment == PREDICTOR
    assert sorted(evidence.summaries["link_efficiency"]) == [0.5, 0.7]


def test_a_raising_predictor_gives_not_available_and_the_rest_of_the_ledger_stands(predicting_experiment):
    rows = {r.claim_id: r for r in evaluate_claims(pd.DataFrame(columns=["experiment"]))}
    assert len(rows) == 17
    assert rows["C13"].model_prediction == "model: not available (ValueError: boom)"
    assert rows["C13"].predicted == rows["C13"].model_prediction  # C13 has no arithmetic of its own
    assert rows["C17"].model_prediction.startswith("Model (test)")
    for cid in ("C10", "C16"):  # claims nobody predicts keep the guide's arithmetic alone
        assert rows[cid].model_prediction == "" and rows[cid].predicted == get_claim(cid).predicted


def test_the_guide_scale_model_reads_measured_inputs_through_the_extension_point(predicting_experiment):
    from hpcbench.experiments.gradient_compression.prediction import predict_c8
    from hpcbench.scale.guide_scale import predictor

    EXPERIMENTS.get(PREDICTOR).claims.predictions["C8"] = predictor("C8", predict_c8)
    row = evaluate_claim("C8", _rows(PREDICTOR, {"t1": 0.5, "t2": 0.6, "t3": 0.9}))
    assert row.model_prediction.startswith("Model (a100_hdr, inputs: ")
    assert "link efficiency: 0.6 (measured, median of 3 launch(es))" in row.model_prediction
    assert row.predicted.endswith(get_claim("C8").predicted)


def test_a_spec_takes_its_predictions_inputs_from_the_experiment_it_names(predicting_experiment):
    from hpcbench.core.config import Config
    from hpcbench.experiments import ClaimSet, Experiment, register
    from hpcbench.report.ledger import prediction_owners

    seen = []

    def c16(claim, evidence):
        seen.append(evidence)
        return f"Model (test): {claim.id} from {evidence.experiment}, {len(evidence.launches)} launch(es)"

    register(Experiment(name="zz_borrower", notebook="zz.ipynb", config=Config, description="throw-away",
                        claims=ClaimSet(predictions={"C16": c16}, prediction_inputs=PREDICTOR)))
    register(Experiment(name="zz_lender_unknown", notebook="zz.ipynb", config=Config, description="throw-away",
                        claims=ClaimSet(predictions={"C10": c16}, prediction_inputs="zz_nobody")))
    try:
        assert prediction_owners()["C16"] == ["zz_borrower"]
        records = pd.concat([_rows(PREDICTOR, {"t1": 0.5, "t2": 0.7}), _rows("zz_borrower", {"t9": 1.0})])
        row = evaluate_claim("C16", records)
        # The named experiment's evidence, summarised by its own summarize; none of the borrower's launches.
        assert row.model_prediction == f"Model (test): C16 from {PREDICTOR}, 2 launch(es)"
        assert sorted(seen[-1].summaries["link_efficiency"]) == [0.5, 0.7]
        # A name the registry does not hold is that prediction's error, never a broken ledger.
        unknown = evaluate_claim("C10", records)
        assert unknown.model_prediction.startswith("model: not available (RegistryError: ")
        assert "zz_nobody" in unknown.model_prediction
    finally:
        EXPERIMENTS._items.pop("zz_borrower", None)
        EXPERIMENTS._items.pop("zz_lender_unknown", None)


def test_evidence_is_summarised_once_per_experiment_and_one_claim_cannot_change_it_for_another(
        predicting_experiment):
    _, summarized = predicting_experiment

    def mutating(claim, evidence):
        evidence.summaries["added"] = 1.0
        evidence.excluded.append("x")
        return f"{claim.id}: {sorted(evidence.summaries.columns)} {evidence.excluded}"

    EXPERIMENTS.get(PREDICTOR).claims.predictions.update({"C17": mutating, "C13": mutating})
    rows = {r.claim_id: r for r in evaluate_claims(_rows(PREDICTOR, {"t1": 0.5}))}
    assert summarized == [1]
    assert rows["C17"].model_prediction.endswith("['x']") and "'added'" in rows["C17"].model_prediction
    assert rows["C13"].model_prediction == rows["C17"].model_prediction.replace("C17", "C13")


def test_report_shows_the_model_and_the_guides_arithmetic_apart():
    from hpcbench.judge.evidence import Judgement, row_of
    from hpcbench.report.ledger_page import ledger_section

    claim = get_claim("C8")
    row = row_of(claim, Judgement("not measured yet", NO_VALUE, "why"), None, "Model (x): 2x",
                 model_headline="2x, 8 NICs/node")
    section = ledger_section(["a"], {"a": [row]})
    summary = section.tables[0].rows[0]
    assert summary[3].text == "2x, 8 NICs/node"  # the summary: the headline only
    notes = [(n.text, n.cls) for n in section.details[0].notes]
    assert ("Predicted at the guide's scale: Model (x): 2x", "model-prediction") in notes
    assert (f"Guide's arithmetic: {claim.predicted}", "guide-arithmetic") in notes
    other = row_of(claim, Judgement("not measured yet", NO_VALUE, "why"), None, "Model (x): 3x")
    two = ledger_section(["a", "b"], {"a": [row], "b": [other]})
    texts = [n.text for n in two.details[0].notes]
    assert "Predicted at the guide's scale (a): Model (x): 2x" in texts
    assert "Predicted at the guide's scale (b): Model (x): 3x" in texts
    plain = row_of(claim, Judgement("not measured yet", NO_VALUE, "why"), None)
    plain_section = ledger_section(["a"], {"a": [plain]})
    assert plain_section.tables[0].rows[0][3].text == "–"
    assert not any(c == "model-prediction" for _, c in ((n.text, n.cls) for n in plain_section.details[0].notes))


def test_predicted_arithmetic_from_the_guides_figures():
    predicted = get_claim("C3").predicted
    from hpcbench.experiments.comm_modes.claims import GUIDE_C3_GPT2, GUIDE_C3_RESNET

    for base, new, stated in (GUIDE_C3_RESNET, GUIDE_C3_GPT2):
        gain = (new / base - 1) * 100
        assert round(gain, 1) == stated and f"+{gain:.1f} %" in predicted
    assert predicted.count("matches the guide") == 2
    assert f"420/132 = {420 / 132:.2f}x" in get_claim("C7").predicted


def test_guide_figures_quoted_exactly():
    figures = {c.id: dict(c.figures) for c in CLAIMS}
    assert figures["C12"]["step-time standard deviation"] == "< 5 %"
    assert figures["C10"]["NCCL_BUFFSIZE"] == "4194304"
    assert figures["C6"]["storage latency P99 (Lustre monitoring)"] == "< 50 ms"
    assert figures["C2"]["per-GPU throughput"] == "+220 %"


def test_units_readable():
    assert units.format_gbps(1.234) == "1.23 GB/s" and units.format_bytes(4 << 20) == "4 MiB"


# -- the layout ------------------------------------------------------------------------------

def _shared_modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if not NOT_SHARED.match(rel):
            yield rel, path


#: Where a node keeps a name it defines or uses.
_IDENTIFIERS = {ast.Name: "id", ast.Attribute: "attr", ast.FunctionDef: "name", ast.AsyncFunctionDef: "name",
                ast.ClassDef: "name", ast.arg: "arg", ast.keyword: "arg", ast.alias: "asname"}


def _namings(tree: ast.AST, names: list[str]):
    """(line, what) for every way ``tree``'s code names an experiment.

    A string equal to a name (a constant, a dict key, a piece of an f-string); a module path
    ``hpcbench.experiments.<name>`` in a string or an import; and, for the names no English word
    spells (``io_formats``), the name inside any longer string or identifier. Docstrings are
    prose and may name experiments as examples; comments are not code.
    """
    compound = [n for n in names if "_" in n]
    inside = re.compile(r"(?<![A-Za-z0-9/])(%s)(?![A-Za-z0-9])" % "|".join(compound)) if compound else None
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            value = node.value
            if value in names or any(m in names for m in re.findall(r"hpcbench\.experiments\.(\w+)", value)) \
                    or (inside and inside.search(value)):
                yield line, f"names {value[:80]!r}"
        attr = _IDENTIFIERS.get(type(node))
        if attr and inside and getattr(node, attr) and inside.search(getattr(node, attr)):
            yield line, f"names {getattr(node, attr)!r}"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            for module in modules:
                found = re.match(r"hpcbench\.experiments\.(\w+)", module or "")
                if found and found.group(1) in names:
                    yield line, f"imports {module}"


def test_no_shared_module_names_an_experiment():
    names = EXPERIMENTS.names()
    offenders = [f"{rel}:{line} {what}" for rel, path in _shared_modules()
                 for line, what in _namings(ast.parse(path.read_text()), names)
                 if f"{rel} {what}" not in NAMING_ALLOWED]
    assert not offenders, offenders


def test_the_guard_sees_names_in_keys_f_strings_identifiers_and_module_paths():
    code = (
        "import hpcbench.experiments.io_formats.worker\n"
        "HEADERS = {'io_formats': 1}\n"
        "title = f'{n} x comm_modes'\n"
        "def plot_weather_case(): pass\n"
        "importlib.import_module('hpcbench.experiments.overlap')\n"
        "'a docstring may say io_formats'\n"
        "words = 'the environment of a run, hpcbench/experiments/comm_modes/'\n")
    found = [what for _, what in _namings(ast.parse(code), ["io_formats", "comm_modes", "weather_case", "overlap",
                                                                "environment"])]
    assert sorted(found) == sorted(["imports hpcbench.experiments.io_formats.worker", "names 'io_formats'",
                                    "names ' x comm_modes'", "names 'plot_weather_case'",
                                    "names 'hpcbench.experiments.overlap'"]), found


def _module_imports(path: Path) -> set[str]:
    """hpcbench modules imported at module level (function-level imports run late and cannot cycle at import)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hpcbench"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("hpcbench"))
    return found


def test_no_import_cycles():
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = _module_imports(path)

    def edges(name):
        out = set()
        for target in modules.get(name, ()):
            # Importing a.b.c runs a/__init__ and a/b/__init__ first.
            pieces = target.split(".")
            for k in range(1, len(pieces) + 1):
                dep = ".".join(pieces[:k])
                if dep in modules and dep != name and not name.startswith(dep + "."):
                    out.add(dep)
        return out

    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(name):
        state[name] = 1
        stack.append(name)
        for dep in edges(name):
            if state.get(dep) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(dep):] + [dep]))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[name] = 2

    for name in sorted(modules):
        if name not in state:
            visit(name)


def test_facts_match_the_libraries_they_describe():
    import torch.distributed as dist

    assert dist._DEFAULT_FIRST_BUCKET_BYTES == facts.DDP_FIRST_BUCKET_BYTES
