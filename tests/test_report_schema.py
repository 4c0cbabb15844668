"""report.json's schema: versioned, documented field by field in hpcbench/report/SCHEMA.md, and read strictly.

A real report (``test_report.make_run`` with a corrupt and a foreign records file, the real claims
ledger) is built once, and a report.json of ledger rows with comparisons and launch facts is written
by the same code (``test_publish.write_ledger_report``); every field they hold must be named in
SCHEMA.md, and the reader must refuse another version or a wrong field with one line naming the file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hpcbench.cli import main
from hpcbench.core.errors import HpcbenchError
from hpcbench.report import build_report
from hpcbench.report.publish import publish_report, read_report_manifest
from hpcbench.report.report_folder import REPORT_JSON
from hpcbench.report.report_json import SCHEMA_VERSION, SchemaError, read_report_json

from test_publish import DAY1, NEW, write_ledger_report
from test_report import make_run

SCHEMA_PAGE = Path(__file__).resolve().parents[1] / "hpcbench" / "report" / "SCHEMA.md"


@pytest.fixture(scope="module")
def real_report(cluster, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("schema")
    run = make_run(root / "runs", "schema-run", broken=True)
    build_report([run], root / "report", scheduler=cluster.scheduler_address, progress=lambda _: None,
                 warn=lambda _: None)
    return root / "report"


def _fields(value, path: str = "") -> set[tuple[str, str]]:
    """(where, field name) of every object key in ``value``; list items share their list's place."""
    out: set[tuple[str, str]] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            out.add((path, key))
            # Facts are named by the records (fact.<name>), counts by the verdicts: their keys are data.
            if key not in ("facts", "verdicts"):
                out |= _fields(item, f"{path}.{key}")
    elif isinstance(value, list):
        for item in value:
            out |= _fields(item, f"{path}[]")
    return out


def test_schema_md_documents_every_field_a_report_writes(real_report, tmp_path):
    data = read_report_json(real_report)
    measured = read_report_json(write_ledger_report(tmp_path / "measured", "measured", NEW, DAY1))
    assert data["schema_version"] == measured["schema_version"] == SCHEMA_VERSION
    assert data["unreadable"] and data["ledger"]
    assert any(r["comparisons"] for r in measured["ledger"]) and any(r["platform"]["facts"] for r in measured["ledger"])
    page = SCHEMA_PAGE.read_text(encoding="utf-8")
    assert page.startswith(f"# report.json, schema version {SCHEMA_VERSION}\n")
    named = set(re.findall(r"`([a-z_]+)`", page))
    undocumented = sorted(f"{where}.{key}".lstrip(".") for where, key in _fields(data) | _fields(measured)
                          if key not in named)
    assert not undocumented, f"{SCHEMA_PAGE.name} does not name {undocumented}"
    assert f"| {SCHEMA_VERSION} |" in page  # the version history has a row for it


def _write(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_another_version_or_a_wrong_field_is_refused_naming_the_file(real_report, tmp_path):
    good = json.loads((real_report / REPORT_JSON).read_text())
    cases = {
        "older": ({"schema": 1, "title": "t", "runs": []}, "schema version 1 (written by an older hpcbench)"),
        "newer": ({**good, "schema_version": SCHEMA_VERSION + 1}, f"schema version {SCHEMA_VERSION + 1} (written "
                                                                   "by a newer hpcbench"),
        "unversioned": ({k: v for k, v in good.items() if k != "schema_version"}, "no integer 'schema_version'"),
        "ledger": ({**good, "ledger": {}}, "field 'ledger' must be a list"),
        "row": ({**good, "ledger": [{"run": "x", "verdict": "reproduced"}]}, "field 'ledger[0]' must be an object "
                                                                              "with string 'run', 'claim', 'verdict'"),
        "unreadable": ({**good, "unreadable": [{"path": 3}]}, "field 'unreadable[0]'"),
    }
    for name, (data, message) in cases.items():
        path = _write(tmp_path / f"{name}.json", data)
        with pytest.raises(SchemaError, match=re.escape(f"{path}: {message}")):
            read_report_json(path)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(HpcbenchError, match=re.escape(f"{tmp_path / 'broken.json'}: report.json is not readable")):
        read_report_json(tmp_path / "broken.json")
    with pytest.raises(HpcbenchError, match=re.escape(f"{tmp_path / REPORT_JSON}: no such file")):
        read_report_json(tmp_path)


def test_publish_refuses_an_older_report_naming_its_report_json(real_report, tmp_path, capsys):
    old = tmp_path / "old-report"
    old.mkdir()
    (old / "index.html").write_text((real_report / "index.html").read_text())
    _write(old / REPORT_JSON, {"schema": 1, "title": "t", "runs": [], "verdicts": {}})
    with pytest.raises(SchemaError, match=re.escape(f"{old / REPORT_JSON}: schema version 1")):
        read_report_manifest(old)
    assert main(["publish", str(old), "--to", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{old / REPORT_JSON}: schema version 1" in err[0]
    assert not (tmp_path / "site").exists()
    # The real report has unreadable inputs: refused for that (exit 1), not for its schema.
    with pytest.raises(HpcbenchError, match="input\\(s\\) of this report were unreadable"):
        publish_report(real_report, tmp_path / "site")
