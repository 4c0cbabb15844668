"""Publishing reports into a site: report.json, unique slugs, one report published once (unless replaced),
only the report and nothing private (no logs, lock or publisher paths), the index page, bad input, the claims
page across reports and ``hpcbench report --compare``, Chromium.

The reports are real: built by ``build_report`` from run directories made by
``test_report.make_run``, with a fake claims module whose verdicts are known per run, so
the counts the index must show are worked out by hand below. One report uses the real
claims to check that report.json counts every claim of the ledger exactly once. The claims page and
``--compare`` read report.json files written by the same code from real ledger rows whose numbers are
chosen so that exactly two claims move (:func:`write_ledger_report`).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import shutil
import subprocess
import types
import urllib.parse
from pathlib import Path

import pandas as pd
import pytest

from hpcbench.cli import main
from hpcbench.core.errors import HpcbenchError
from hpcbench.report import build_report, ledger
from hpcbench.report.publish import (CLAIMS_HTML, DIFFERS, PUBLICATIONS_JSON, REPORT_JSON, load_publications,
                                     publish_report, report_manifest, report_sha256, site_lock_path,
                                     write_report_manifest)
from hpcbench.report.report_folder import FILES_SUBDIR

from conftest import CHROMIUM_FLAGS, render_in_chromium
from test_report import (EXPECTED_CLAIMS, LINKED_NOTEBOOK_COPY, FakeRow, _table, add_linked_files, linked_hrefs,
                         make_run)

#: The fake claims' verdicts per run; beta disagrees with alpha on C2 only.
ALPHA = {"C1": "reproduced", "C2": "reproduced", "C3": "not reproduced", "C4": "inconclusive",
         "C5": "not measured yet", "C6": "context"}
BETA = {**ALPHA, "C2": "not reproduced"}
#: alpha alone: C1 C2 reproduced, C3 not reproduced, C4 inconclusive, C5 not measured yet, C6 context.
ALPHA_COUNTS = {"reproduced": 2, "not reproduced": 1, "inconclusive": 1, "not measured yet": 1, "context": 1}
#: alpha + beta: C2 differs, so it leaves "reproduced" and counts once under DIFFERS.
PAIR_COUNTS = {"reproduced": 1, "not reproduced": 1, "inconclusive": 1, "not measured yet": 1, "context": 1,
               DIFFERS: 1}
DAY1 = dt.datetime(2025, 3, 1, 10, 0, tzinfo=dt.timezone.utc)
DAY2 = dt.datetime(2025, 3, 2, 9, 30, tzinfo=dt.timezone.utc)


def fake_evaluate_claims(records, **_context):
    """Stands in for the ledger's evaluate_claims: verdicts known per run (by the records' run_id)."""
    table = BETA if set(records["run_id"]) == {"beta"} else ALPHA
    return [FakeRow(cid, "1.1", f"claim {cid}", None, None, None, verdict, "", "collectives")
            for cid, verdict in table.items()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("runs")
    alpha, beta = make_run(root, "alpha"), make_run(root, "beta", scale=0.5)
    info = json.loads((beta / "run.json").read_text())
    (beta / "run.json").write_text(json.dumps({**info, "suite": "nightly"}))
    return alpha, beta


@pytest.fixture(scope="module")
def reports(runs, cluster, tmp_path_factory) -> tuple[Path, Path]:
    """Two report folders: ``alpha`` (one run) and ``pair`` (alpha and beta side by side)."""
    out = tmp_path_factory.mktemp("reports")
    alpha, beta = runs
    with pytest.MonkeyPatch.context() as mp:
        # The report looks evaluate_claims up in the ledger module at each build.
        mp.setattr(ledger, "evaluate_claims", fake_evaluate_claims)
        build_report([alpha], out / "alpha", scheduler=cluster.scheduler_address, progress=lambda _: None)
        build_report([alpha, beta], out / "pair", scheduler=cluster.scheduler_address,
                     title="alpha & beta <compared>", progress=lambda _: None)
    return out / "alpha", out / "pair"


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def index_rows(html: str) -> list[dict]:
    """The rows of the site index's table, in page order."""
    body = re.search(r'<table id="publications">.*?<tbody>(.*?)</tbody>', html, re.S).group(1)
    rows = []
    for slug, row in re.findall(r'<tr id="pub-([^"]+)">(.*?)</tr>', body, re.S):
        def cell(cls: str) -> str:
            return re.search(rf'<td class="{cls}">(.*?)</td>', row, re.S).group(1)

        rows.append({
            "slug": slug,
            "title": re.sub(r"<span.*", "", cell("title"), flags=re.S).strip(),
            "suite": cell("suite"), "hosts": cell("hosts"), "published": cell("published"),
            "counts": {c.replace("-", " "): n for c, n in re.findall(r'<td class="count ([a-z-]+)">(.*?)</td>', row)},
            "links": re.findall(r'<a href="([^"]+)">', row),
        })
    return rows


# -- report.json -------------------------------------------------------------------

def test_report_json_holds_runs_and_verdict_counts(reports, runs):
    alpha_report, pair_report = reports
    alpha = json.loads((alpha_report / REPORT_JSON).read_text())
    assert alpha["title"] == "hpcbench report: alpha"  # the page's default title
    assert "<title>hpcbench report: alpha</title>" in (alpha_report / "index.html").read_text()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", alpha["generated"])
    assert alpha["claims"] == 6 and alpha["verdicts"] == ALPHA_COUNTS
    [run] = alpha["runs"]
    # The run dir's name, never the building machine's absolute path (the report is published).
    assert (run["label"], run["suite"], run["host"], run["run_dir"]) == ("alpha", "smoke", "alpha-login",
                                                                          runs[0].name)
    assert str(runs[0]) not in (alpha_report / REPORT_JSON).read_text()
    pair = json.loads((pair_report / REPORT_JSON).read_text())
    assert pair["title"] == "alpha & beta <compared>"
    assert pair["claims"] == 6 and pair["verdicts"] == PAIR_COUNTS
    assert [(r["label"], r["suite"], r["host"]) for r in pair["runs"]] == [
        ("alpha", "smoke", "alpha-login"), ("beta", "nightly", "beta-login")]
    assert pair["runs"][1]["verdicts"] == {**ALPHA_COUNTS, "reproduced": 1, "not reproduced": 2}


def test_report_json_counts_every_real_claim_once(runs, cluster, tmp_path):
    """With the real claims module: the counts add up to the ledger's rows."""
    index = build_report([runs[0]], tmp_path / "real", scheduler=cluster.scheduler_address,
                         progress=lambda _: None)
    manifest = json.loads((tmp_path / "real" / REPORT_JSON).read_text())
    ledger = _table(index.read_text(), "claims-ledger")
    n_rows = re.search(r"<tbody>(.*?)</tbody>", ledger, re.S).group(1).count("<tr")
    assert manifest["claims"] == n_rows == EXPECTED_CLAIMS
    assert sum(manifest["verdicts"].values()) == EXPECTED_CLAIMS
    assert DIFFERS not in manifest["verdicts"]  # one run cannot disagree with itself
    # the ledger as data: one row per claim, with its kind and what a team tracks across runs
    rows = manifest["ledger"]
    assert [r["claim"] for r in rows] == [f"C{i}" for i in range(1, EXPECTED_CLAIMS + 1)]
    assert {r["kind"] for r in rows} == {"figure", "technique", "anecdote"}
    assert all({"verdict", "verdict_text", "regime", "comparisons", "not_counted", "run"} <= set(r) for r in rows)
    assert all(isinstance(r["comparisons"], list) for r in rows)  # their fields: tests/test_ledger.py


# -- publishing --------------------------------------------------------------------

def test_two_reports_listed_newest_first_with_their_counts(reports, tmp_path):
    alpha_report, pair_report = reports
    site = tmp_path / "site"
    first = publish_report(alpha_report, site, now=DAY1)
    second = publish_report(pair_report, site, now=DAY2)
    assert (first.slug, second.slug) == ("alpha-2025-03-01", "pair-2025-03-02")
    # The whole folder is copied, byte for byte.
    assert _snapshot(site / first.slug) == _snapshot(alpha_report)
    assert _snapshot(site / second.slug) == _snapshot(pair_report)
    # The data: in publication order, with what the index shows.
    data = load_publications(site)
    assert [p.slug for p in data] == [first.slug, second.slug]
    assert data[1].suites == ["smoke", "nightly"] and data[1].hosts == ["alpha-login", "beta-login"]
    assert json.loads((site / PUBLICATIONS_JSON).read_text())["publications"][0]["published"] == \
        "2025-03-01T10:00:00Z"
    html = (site / "index.html").read_text()
    rows = index_rows(html)
    assert [r["slug"] for r in rows] == ["pair-2025-03-02", "alpha-2025-03-01"]
    pair, alpha = rows
    assert pair["title"] == "alpha &amp; beta &lt;compared&gt;"
    assert (pair["suite"], pair["hosts"]) == ("smoke, nightly", "alpha-login, beta-login")
    assert pair["counts"] == {"reproduced": "1", "not reproduced": "1", "implausible as stated": "0",
                              "not testable here": "0", "inconclusive": "1", "not measured yet": "1"}
    assert f"1 claim(s) {DIFFERS}" in html
    assert alpha["title"] == "hpcbench report: alpha" and alpha["published"] == "2025-03-01 10:00:00 UTC"
    assert (alpha["suite"], alpha["hosts"]) == ("smoke", "alpha-login")
    assert alpha["counts"] == {"reproduced": "2", "not reproduced": "1", "implausible as stated": "0",
                               "not testable here": "0", "inconclusive": "1", "not measured yet": "1"}
    assert alpha["links"] == ["alpha-2025-03-01/index.html"]
    assert "<script" not in html.lower() and "<link" not in html


def test_a_new_edition_gets_a_new_slug_and_keeps_the_first(reports, tmp_path):
    report = tmp_path / "alpha"
    shutil.copytree(reports[0], report)
    site = tmp_path / "site"
    first = publish_report(report, site, now=DAY1)
    kept = _snapshot(site / first.slug)
    (report / "index.html").write_text("<!DOCTYPE html><title>second edition</title>")
    second = publish_report(report, site, now=DAY1 + dt.timedelta(hours=1))
    assert (first.slug, second.slug) == ("alpha-2025-03-01", "alpha-2025-03-01-2")
    assert _snapshot(site / first.slug) == kept  # the first publication is untouched
    assert (site / second.slug / "index.html").read_text().endswith("second edition</title>")
    assert [r["slug"] for r in index_rows((site / "index.html").read_text())] == [second.slug, first.slug]


def test_the_same_report_is_published_once_unless_replaced(reports, tmp_path, capsys):
    report = tmp_path / "alpha"
    shutil.copytree(reports[0], report)
    site = tmp_path / "site"
    first = publish_report(report, site, now=DAY1)
    before = _snapshot(site)
    # Unchanged (a copy counts as the same report: same content): refused, naming the publication.
    with pytest.raises(HpcbenchError, match=re.escape(f"{report}: this report is published already, unchanged, "
                                                      f"as {site / first.slug / 'index.html'}")):
        publish_report(report, site, now=DAY2)
    assert main(["publish", str(reports[0]), "--to", str(site)]) == 2
    assert "--replace" in capsys.readouterr().err
    assert _snapshot(site) == before
    # --replace: copied again into the same folder, dated anew; still one publication.
    (site / first.slug / "index.html").write_text("damaged")
    assert main(["publish", str(report), "--to", str(site), "--replace"]) == 0
    [replaced] = load_publications(site)
    assert replaced.slug == first.slug and replaced.published > first.published
    assert replaced.content_sha256 == first.content_sha256 == report_sha256(report)
    assert _snapshot(site / first.slug) == _snapshot(report)
    assert [r["slug"] for r in index_rows((site / "index.html").read_text())] == [first.slug]
    assert not [p for p in site.iterdir() if p.name.startswith(".")]  # no partial or set-aside folder left


def test_only_the_report_is_published_and_nothing_private(reports, tmp_path):
    """Logs, notes, hidden files and links beside a report stay home; the site holds no lock and no
    path of the publisher's machine."""
    report = tmp_path / "private-place" / "alpha"
    shutil.copytree(reports[0], report)
    (report / "dask-slurm").mkdir()
    (report / "dask-slurm" / "hpcbench-dask-17.err").write_text("worker log")
    (report / ".publish.lock").write_text("")
    (report / "notes.txt").write_text("to self")
    (report / FILES_SUBDIR / "t").mkdir(parents=True)
    (report / FILES_SUBDIR / "t" / "trace.json").write_text("{}")
    (report / FILES_SUBDIR / "t" / ".trace.json.tmp").write_text("half")
    (report / FILES_SUBDIR / "t" / "key").symlink_to(tmp_path / "id_rsa")
    site = tmp_path / "site"
    publication = publish_report(report, site, now=DAY1)
    published = sorted(p.relative_to(site / publication.slug).as_posix()
                       for p in (site / publication.slug).rglob("*") if not p.is_dir())
    assert published == [f"{FILES_SUBDIR}/t/trace.json", "index.html", REPORT_JSON]
    assert sorted(p.name for p in site.iterdir()) == ["alpha-2025-03-01", CLAIMS_HTML, "index.html", PUBLICATIONS_JSON]
    assert site_lock_path(site) == tmp_path / ".site.publish.lock" and site_lock_path(site).is_file()
    data = (site / PUBLICATIONS_JSON).read_text()
    assert "private-place" not in data and str(tmp_path) not in data
    [entry] = json.loads(data)["publications"]
    assert (entry["path"], entry["report_name"]) == ("alpha-2025-03-01/index.html", "alpha")
    assert (site / entry["path"]).is_file()


def test_an_older_site_is_cleaned_of_its_lock_and_paths(reports, tmp_path):
    """A site an earlier version wrote: a lock inside it, the publisher's paths in publications.json."""
    site = tmp_path / "site"
    publish_report(reports[0], site, now=DAY1)
    data = json.loads((site / PUBLICATIONS_JSON).read_text())
    for entry in data["publications"]:
        del entry["path"], entry["report_name"], entry["content_sha256"]
        entry["report_dir"] = "/home/someone/private/reports/alpha"
    (site / PUBLICATIONS_JSON).write_text(json.dumps(data))
    (site / ".publish.lock").write_text("")
    # Its publication has no hash recorded: computed from its folder, so it is still found the same.
    with pytest.raises(HpcbenchError, match="published already, unchanged"):
        publish_report(reports[0], site, now=DAY2)
    publish_report(reports[1], site, now=DAY2)
    text = (site / PUBLICATIONS_JSON).read_text()
    assert "report_dir" not in text and "/home/someone" not in text
    assert [p["path"] for p in json.loads(text)["publications"]] == ["alpha-2025-03-01/index.html",
                                                                      "pair-2025-03-02/index.html"]
    assert not (site / ".publish.lock").exists()


def test_folder_without_index_html_is_named_and_nothing_is_written(reports, tmp_path, capsys):
    not_a_report = tmp_path / "notes"
    not_a_report.mkdir()
    (not_a_report / REPORT_JSON).write_text((reports[0] / REPORT_JSON).read_text())
    fresh_site = tmp_path / "fresh-site"
    with pytest.raises(HpcbenchError, match=re.escape(f"{not_a_report}: not a report folder (no index.html)")):
        publish_report(not_a_report, fresh_site)
    assert not fresh_site.exists()
    # A site that already holds a publication is left exactly as it was; the CLI exits 2.
    site = tmp_path / "site"
    publish_report(reports[0], site, now=DAY1)
    before = _snapshot(site)
    assert main(["publish", str(not_a_report), "--to", str(site)]) == 2
    err = capsys.readouterr().err
    assert f"{not_a_report}: not a report folder" in err
    assert _snapshot(site) == before
    missing = tmp_path / "no-such-report"
    with pytest.raises(HpcbenchError, match=re.escape(str(missing))):
        publish_report(missing, site)
    assert _snapshot(site) == before


def test_other_bad_input_names_the_file_and_writes_nothing(reports, tmp_path):
    old = tmp_path / "old-report"
    old.mkdir()
    (old / "index.html").write_text("<html></html>")
    site = tmp_path / "site"
    with pytest.raises(HpcbenchError, match=re.escape(f"{old / REPORT_JSON}: missing")):
        publish_report(old, site)
    (old / REPORT_JSON).write_text("{not json")
    with pytest.raises(HpcbenchError, match=re.escape(f"{old / REPORT_JSON}: report.json is not readable JSON")):
        publish_report(old, site)
    assert not site.exists()
    site.mkdir()
    (site / PUBLICATIONS_JSON).write_text(json.dumps({"schema": 1, "publications": [{"slug": "x"}]}))
    with pytest.raises(HpcbenchError, match=re.escape(f"{site / PUBLICATIONS_JSON}: publications[0]")):
        publish_report(reports[0], site)
    assert sorted(p.name for p in site.iterdir()) == [PUBLICATIONS_JSON]
    inside = tmp_path / "report-copy"
    shutil.copytree(reports[0], inside)
    with pytest.raises(HpcbenchError, match="inside the report folder"):
        publish_report(inside, inside / "site")
    assert not (inside / "site").exists()


def test_index_escapes_every_text(tmp_path):
    """report.json written by the same code build_report uses, with hostile strings."""
    report = tmp_path / "hostile"
    report.mkdir()
    (report / "index.html").write_text("<html></html>")
    source = types.SimpleNamespace(label="x", run_dir=tmp_path / "run",
                                   info={"suite": "<b>suite</b>", "host": "<img src=x onerror=alert(1)>"})
    write_report_manifest(report, report_manifest("<script>alert(1)</script>", [source],
                                                  {"x": {"C1": "reproduced"}}))
    site = tmp_path / "site"
    publish_report(report, site)
    html = (site / "index.html").read_text()
    assert "<script" not in html.lower() and "<img" not in html and "<b>" not in html
    [row] = index_rows(html)
    assert row["title"] == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert row["suite"] == "&lt;b&gt;suite&lt;/b&gt;"
    assert row["hosts"] == "&lt;img src=x onerror=alert(1)&gt;"
    assert row["counts"] == {"reproduced": "1", "not reproduced": "0", "implausible as stated": "0",
                             "not testable here": "0", "inconclusive": "0", "not measured yet": "0"}


# -- linked files ------------------------------------------------------------------

@pytest.fixture(scope="module")
def linked_site(cluster, tmp_path_factory) -> tuple[Path, bytes]:
    """A report whose failed task links its notebook, published; then the run directory is
    removed, as it would be missing on a colleague's machine.

    Returns:
        The publication's folder and the notebook's bytes.
    """
    root = tmp_path_factory.mktemp("linked")
    run = make_run(root / "runs", "linked")
    notebook = add_linked_files(run)["notebook"].read_bytes()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ledger, "evaluate_claims", fake_evaluate_claims)
        build_report([run], root / "report", scheduler=cluster.scheduler_address, progress=lambda _: None)
    publication = publish_report(root / "report", root / "site", now=DAY1)
    shutil.rmtree(run)
    return root / "site" / publication.slug, notebook


def test_publish_carries_the_linked_files(linked_site):
    page_dir, notebook = linked_site
    html = (page_dir / "index.html").read_text()
    hrefs = linked_hrefs(html)
    assert LINKED_NOTEBOOK_COPY in hrefs
    assert (page_dir / LINKED_NOTEBOOK_COPY).read_bytes() == notebook
    # Every copied file's link resolves in the published folder, with the run directory gone.
    assert hrefs and all((page_dir / h).is_file() for h in hrefs)
    assert 'href="file:' not in html


# -- Chromium ----------------------------------------------------------------------

@pytest.mark.integration
def test_published_file_link_resolves_in_headless_chromium(linked_site, chromium, tmp_path):
    """Chromium reads the link from the published page and opens what it points at, resolved
    against the page's own address as a click would."""
    page_dir, _ = linked_site

    def dump_dom(url: str, profile: str) -> str:
        done = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / profile}", "--dump-dom", url],
                              capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    page_url = (page_dir / "index.html").resolve().as_uri()
    href = re.search(rf'href="({re.escape(LINKED_NOTEBOOK_COPY)})"', dump_dom(page_url, "page")).group(1)
    assert "the &lt;linked&gt; notebook" in dump_dom(urllib.parse.urljoin(page_url, href), "target")


@pytest.mark.integration
def test_index_renders_in_headless_chromium(reports, chromium, tmp_path):
    site = tmp_path / "site"
    for report, when in zip(reports, (DAY1, DAY2)):
        publish_report(report, site, now=when)
    page = render_in_chromium(chromium, site / "index.html", tmp_path)
    assert page.pixel_std > 0.02  # not a blank page
    assert page.js_errors == []
    table = re.search(r'<table id="publications">.*?</table>', page.dom, re.S).group(0)
    header = re.findall(r"<th>(.*?)</th>", table)
    assert header == ["published", "report", "suite", "cluster / hosts", "reproduced", "not reproduced",
                      "implausible as stated", "not testable here", "inconclusive", "not measured yet", "link"]
    rows = index_rows(page.dom)
    assert [r["slug"] for r in rows] == ["pair-2025-03-02", "alpha-2025-03-01"]
    assert [r["counts"]["reproduced"] for r in rows] == ["1", "2"]
    for row in rows:
        [href] = row["links"]
        target = site / href
        assert target.is_file() and target.read_bytes() == (reports[row["slug"] == "pair-2025-03-02"] /
                                                             "index.html").read_bytes()


# -- claims across reports -----------------------------------------------------------

#: (verdict, estimate, low, high) per claim: OLD, then NEW. C2's verdict changes (and its estimate leaves OLD's
#: interval), C3's estimate leaves OLD's interval under the same verdict, C4 stays inside it, C5 is measured in neither.
OLD = {"C2": ("reproduced", 1.5, 1.42, 1.58), "C3": ("reproduced", 1.45, 1.41, 1.49),
       "C4": ("inconclusive", 1.3, 1.1, 1.5), "C5": ("not measured yet", None, None, None)}
NEW = {"C2": ("not reproduced", 1.2, 1.1, 1.3), "C3": ("reproduced", 1.55, 1.50, 1.60),
       "C4": ("inconclusive", 1.35, 1.15, 1.55), "C5": ("not measured yet", None, None, None)}
MOVED_CLAIMS = ("C2", "C3")


def _launch_records(run_id: str) -> pd.DataFrame:
    """Two launches of comm_modes on an emulated 2-node cluster, 4 ranks, with their facts."""
    rows = []
    for task in ("comm_modes.a.r0", "comm_modes.a.r1"):
        for node, rank in (("n1", 0), ("n2", 2)):
            rows.append({"experiment": "comm_modes", "run_id": run_id, "task_id": task, "node": node, "rank": rank,
                         "world_size": 4, "metric": "step_time", "value": 0.1, "text": None})
        for metric, value, text in (("fact.cluster", None, "emulated cluster, shaped link"),
                                    ("fact.link_rate_bps", 1.357e9, None), ("fact.cluster_nodes", 2.0, None)):
            rows.append({"experiment": "comm_modes", "run_id": run_id, "task_id": task, "node": "n1", "rank": 0,
                         "world_size": 4, "metric": metric, "value": value, "text": text})
    return pd.DataFrame(rows)


def write_ledger_report(folder: Path, name: str, claims: dict, generated: dt.datetime) -> Path:
    """A report folder whose report.json is written by the code build_report uses, from real ledger rows."""
    from hpcbench.judge.evidence import LedgerRow
    from hpcbench.judge.verdict import Interval, Outcome, Reference
    from hpcbench.report.report_json import ledger_record, read_report_json

    rows = []
    for cid, (verdict, estimate, low, high) in claims.items():
        outcomes = () if estimate is None else (
            Outcome(verdict, Interval(estimate, low, high, launches=5, steps=10), Reference(1.4, lower=1.4)),)
        rows.append(LedgerRow(claim_id=cid, section="2.1", wording=f"the guide's {cid}", claimed="1.4x",
                              measured="see comparisons", predicted="", verdict=verdict, detail="",
                              experiment="comm_modes" if outcomes else None, outcomes=outcomes,
                              labels=("hierarchical / ddp",) if outcomes else (), title=f"claim {cid}",
                              regime_brief="61 % busy, 5/5 in regime" if outcomes else ""))
    folder.mkdir(parents=True)
    (folder / "index.html").write_text(f"<!DOCTYPE html><title>{name}</title>")
    source = types.SimpleNamespace(label=name, run_dir=folder.parent / name, info={"suite": "reproduce"})
    records = _launch_records(name)
    write_report_manifest(folder, report_manifest(f"report {name}", [source],
                                                  {name: {r.claim_id: r.verdict for r in rows}}, generated=generated,
                                                  ledger=[ledger_record(name, r, records) for r in rows]))
    read_report_json(folder)  # a real schema instance
    return folder


@pytest.fixture
def claims_site(tmp_path) -> dict:
    old = write_ledger_report(tmp_path / "old", "old", OLD, DAY1)
    new = write_ledger_report(tmp_path / "new", "new", NEW, DAY2)
    site = tmp_path / "site"
    first, second = publish_report(old, site, now=DAY1), publish_report(new, site, now=DAY2)
    return {"site": site, "old": old, "new": new, "slugs": (first.slug, second.slug)}


def claims_rows(html: str) -> list[dict]:
    """The rows of the claims page's table, in page order."""
    body = re.search(r'<table id="claims-history">.*?<tbody>(.*?)</tbody>', html, re.S).group(1)
    return [{"claim": claim, "slug": slug, "moved": "moved" in cls.split(),
             "verdict": re.search(r'<td class="verdict[^"]*">(.*?)</td>', row, re.S).group(1),
             "estimate": re.search(r'<td class="estimate">(.*?)</td>', row, re.S).group(1),
             "platform": re.search(r'<td class="platform">(.*?)</td>', row, re.S).group(1),
             "change": re.search(r'<td class="change">(.*?)</td>', row, re.S).group(1)}
            for claim, slug, cls, row in re.findall(r'<tr id="(C\d+)-([^"]+)" class="([^"]*)">(.*?)</tr>', body, re.S)]


def test_the_claims_page_lists_every_report_newest_first_and_flags_what_moved(claims_site):
    site = claims_site["site"]
    old_slug, new_slug = claims_site["slugs"]
    assert 'href="claims.html"' in (site / "index.html").read_text()
    html = (site / CLAIMS_HTML).read_text()
    rows = claims_rows(html)
    assert [(r["claim"], r["slug"]) for r in rows] == [(c, s) for c in OLD for s in (new_slug, old_slug)]
    assert [r["claim"] for r in rows if r["moved"]] == list(MOVED_CLAIMS)
    assert all(r["slug"] == new_slug for r in rows if r["moved"])
    by = {(r["claim"], r["slug"]): r for r in rows}
    c2, c3 = by[("C2", new_slug)], by[("C3", new_slug)]
    assert "⚑ moved" in c2["change"] and "verdict reproduced -&gt; not reproduced" in c2["change"]
    assert "estimate 1.55x outside the earlier [1.41, 1.49]" in c3["change"] and "verdict" not in c3["change"]
    assert by[("C4", new_slug)]["change"].strip() == "" and by[("C2", old_slug)]["change"].strip() == ""
    assert (c2["verdict"], c2["estimate"]) == ("not reproduced", "1.2x [1.1, 1.3] n=5")
    assert by[("C5", new_slug)]["estimate"] == "–"
    assert c2["platform"] == ("2 nodes x 4 ranks, emulated cluster, shaped link, link 1.36 Gbit/s, "
                              "61 % busy, 5/5 in regime")
    # The small multiples: one panel per claim, the moved estimates ringed and labelled.
    svg = base64.b64decode(re.search(r'<img src="data:image/svg\+xml;base64,([^"]+)"', html).group(1)).decode()
    assert all(f"claim {c}" in svg for c in OLD) and svg.count(">moved<") == len(MOVED_CLAIMS)
    assert "<script" not in html.lower() and str(site) not in html


def test_the_claims_page_names_a_publication_it_cannot_read(claims_site, tmp_path):
    site = claims_site["site"]
    old_slug, _ = claims_site["slugs"]
    (site / old_slug / REPORT_JSON).write_text(json.dumps({"schema": 1, "title": "old", "runs": []}))
    third = write_ledger_report(tmp_path / "third", "third", NEW, DAY2)
    publish_report(third, site, now=DAY2 + dt.timedelta(hours=1))
    html = (site / CLAIMS_HTML).read_text()
    assert f"not shown: {old_slug}/{REPORT_JSON}: schema version 1" in html and str(tmp_path) not in html
    assert {r["slug"] for r in claims_rows(html)} == {claims_site["slugs"][1], load_publications(site)[-1].slug}


def test_compare_prints_exactly_the_claims_that_moved(claims_site, capsys):
    old, new = claims_site["old"], claims_site["new"]
    assert main(["report", "--compare", str(old), str(new / REPORT_JSON)]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == list(MOVED_CLAIMS)
    assert lines[0] == ("C2 claim C2: moved: verdict reproduced -> not reproduced; estimate 1.2x outside the earlier "
                        "[1.42, 1.58]; 1.5x [1.42, 1.58] n=5 -> 1.2x [1.1, 1.3] n=5")
    assert lines[1].startswith("C3 claim C3: moved: estimate 1.55x outside the earlier [1.41, 1.49];")
    assert f"2 claim(s) moved from {old} to {new / REPORT_JSON}" in err
    # Nothing moved between a report and itself.
    assert main(["report", "--compare", str(new), str(new)]) == 0
    assert capsys.readouterr().out == ""


def test_compare_names_a_bad_path_in_one_line(claims_site, tmp_path, capsys):
    new = claims_site["new"]
    missing = tmp_path / "no-such-report"
    assert main(["report", "--compare", str(missing), str(new)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(missing) in err[0] and err[0].startswith("hpcbench: error: ")
    old_version = tmp_path / "old-version.json"
    old_version.write_text(json.dumps({"schema": 1, "title": "t", "runs": []}))
    assert main(["report", "--compare", str(new), str(old_version)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{old_version}: schema version 1" in err[0]
    assert main(["report", "--compare", str(new), str(new), str(new)]) == 2  # a RUN_DIR beside --compare
    assert "--compare A B takes two reports" in capsys.readouterr().err


@pytest.mark.integration
def test_claims_page_renders_in_headless_chromium(claims_site, chromium, tmp_path):
    page = render_in_chromium(chromium, claims_site["site"] / CLAIMS_HTML, tmp_path)
    assert page.pixel_std > 0.02  # not a blank page
    assert page.js_errors == []
    rows = claims_rows(page.dom)
    assert len(rows) == 2 * len(OLD) and [r["claim"] for r in rows if r["moved"]] == list(MOVED_CLAIMS)
    assert re.search(r'<img src="data:image/svg\+xml;base64,', page.dom)
