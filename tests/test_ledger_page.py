"""The claims ledger at a glance, on a report of real records.

The fixture ``tests/fixtures/runs/regime-subset`` is the records, statuses and configs (no traces,
no notebooks) of a real run of the reproduce suite's regime-matched entries on the emulated
cluster (2026-12-01: weather_case, batch_scaling and comm_modes calibrated to the guide's busy
shares, 5 launches each), so C2, C3 and C7 carry real intervals and regimes. Built into a report,
it must show the verdict counts and a one-line-per-claim summary within
:data:`~hpcbench.report.ledger_page.ROW_WORD_BUDGET` words a row, fitting a 1,400 x 1,000 viewport
in headless Chromium, each row linking to its folded details, and a forest plot whose text is
at least 11 px.
"""

from __future__ import annotations

import html as html_lib
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import CHROMIUM_FLAGS, REPO
from hpcbench.experiments import all_claims
from hpcbench.judge.verdict import Interval, Reference
from hpcbench.report.ledger_page import ROW_WORD_BUDGET, interval_text, normalise

FIXTURE = REPO / "tests" / "fixtures" / "runs" / "regime-subset"
VIEWPORT = (1400, 1000)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    from hpcbench.report.html import build_report

    out = tmp_path_factory.mktemp("ledger") / "report"
    return build_report([FIXTURE], out, progress=lambda _: None, warn=lambda _: None)


def _rows(page: str, table_id: str) -> list[list[str]]:
    table = re.search(rf'<table id="{table_id}">.*?</table>', page, re.S).group(0)
    body = re.search(r"<tbody>(.*?)</tbody>", table, re.S).group(1)
    return [[html_lib.unescape(re.sub(r"<[^>]+>", " ", c)).split() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
            for r in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)]


def test_one_row_per_claim_within_the_word_budget(report):
    page = report.read_text()
    rows = _rows(page, "claims-ledger")
    assert [r[0][0] for r in rows] == [c.id for c in all_claims()]
    for row in rows:
        words = sum(len(cell) for cell in row)
        assert words <= ROW_WORD_BUDGET, f"{row[0][0]}: {words} words: {row}"
    by_id = {r[0][0]: r for r in rows}
    # The regime-matched figures show an interval, n and the regime the launches reached.
    for cid in ("C2", "C3", "C7"):
        measured, kind = " ".join(by_id[cid][2]), " ".join(by_id[cid][-1])
        assert re.fullmatch(r"[\w ./]+ [\d.]+x \[[\d.]+, [\d.]+\] n=\d+", measured), measured
        assert re.fullmatch(r"figure · \d+% busy: \d/\d in", kind), kind
    # The scale model's headline: one number and its main assumption.
    assert re.search(r"\d NICs?/node", " ".join(by_id["C3"][3]))


def test_counts_and_details_agree_with_report_json(report):
    page = report.read_text()
    data = json.loads((report.parent / "report.json").read_text())
    verdicts = [r["verdict_text"] for r in data["ledger"]]  # each kind's words counted apart
    badges = re.findall(r'<span class="count verdict tone-\w+">(\d+) ([^<]+)</span>', page)
    assert {v: int(n) for n, v in badges} == {v: verdicts.count(v) for v in set(verdicts)}
    assert page.index('class="badges"') < page.index('id="claims-ledger"')
    for claim in all_claims():
        assert f'href="#claim-{claim.id}"' in page
        details = re.search(rf'<details class="claim" id="claim-{claim.id}">(.*?)</details>', page, re.S)
        assert details, claim.id
        assert claim.wording in html_lib.unescape(details.group(1))
    # The details carry what the row leaves out: every comparison and the regime sentence.
    c3 = re.search(r'<details class="claim" id="claim-C3">(.*?)</details>', page, re.S).group(1)
    assert 'id="comparisons-C3"' in c3 and "guide&#39;s regime" in c3
    rows = {r["claim"]: r for r in data["ledger"]}
    assert rows["C3"]["predicted"].endswith("1 NIC/node") and rows["C3"]["regime_brief"].startswith("16% busy")
    assert rows["C3"]["title"] == "Hybrid parallelism beats plain DDP"


def test_forest_plot_is_svg_normalised_to_the_band(report):
    page = report.read_text()
    figure = re.search(r'<section id="claims">.*?<img src="data:image/svg\+xml;base64,([^"]+)"', page, re.S)
    assert figure, "the ledger's forest plot is an inline SVG"
    import base64

    svg = base64.b64decode(figure.group(1)).decode()
    assert "measured / reference (log)" in svg and "reference band" in svg
    # One row per comparison that has a value; every one of them labelled on the y axis.
    data = json.loads((report.parent / "report.json").read_text())
    judged = [c for r in data["ledger"] for c in r["comparisons"] if c["estimate"] is not None]
    assert judged and all(f"{r['claim']} " in svg for r in data["ledger"] if any(
        c["estimate"] is not None for c in r["comparisons"]))


def test_normalise_puts_the_band_edge_at_one():
    iv = Interval(3.0, 2.0, 4.0, 5, 20)
    div, band, trio = normalise(iv, Reference(1.4, lower=1.32, upper=None))
    assert div == 1.32 and band == (1.0, math.inf) and trio[1] == pytest.approx(3.0 / 1.32)
    div, band, _ = normalise(Interval(120.0, 60.0, 300.0, 5, 1, " s"), Reference(600.0, lower=None, upper=600.0))
    assert div == 600.0 and band == (0.0, 1.0)
    div, band, _ = normalise(iv, Reference(3.2, lower=2.8, upper=3.6))
    assert div == 3.2 and band == pytest.approx((2.8 / 3.2, 3.6 / 3.2))
    assert normalise(iv, Reference(0.0, lower=None, upper=0.0)) is None  # no positive divisor: not drawn
    assert interval_text(Interval(6.81, 6.57, 7.06, 5, 40)) == "6.81x [6.57, 7.06] n=5"
    assert interval_text(Interval(1.0, -math.inf, math.inf, 1, 40)) == "1x n=1"


_PROBE = """<script>
window.addEventListener('load', () => {
  const table = document.getElementById('claims-ledger').getBoundingClientRect();
  const img = document.querySelector('#claims figure img');
  document.body.setAttribute('data-probe', JSON.stringify({
    bottom: table.bottom, right: table.right, height: window.innerHeight, width: window.innerWidth,
    img_width: img ? img.getBoundingClientRect().width : null, natural: img ? img.naturalWidth : null}));
});
</script>"""


@pytest.mark.integration
def test_summary_fits_one_viewport_in_chromium(report, chromium, tmp_path):
    """Screenshot at 1,400 x 1,000: the verdict counts and all 17 rows lie inside it, and the forest
    plot's smallest text is at least 11 px as drawn."""
    probe = tmp_path / "probe"
    shutil.copytree(report.parent, probe)
    page = (probe / "index.html").read_text()
    (probe / "index.html").write_text(page.replace("</body>", _PROBE + "</body>"))
    size = f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}"
    shot = tmp_path / "ledger.png"
    done = subprocess.run([chromium, *CHROMIUM_FLAGS, "--hide-scrollbars", size, f"--user-data-dir={tmp_path / 'a'}",
                           f"--screenshot={shot}", report.resolve().as_uri()], capture_output=True, text=True,
                          timeout=90)
    assert shot.is_file(), done.stderr[-2000:]
    dom = subprocess.run([chromium, *CHROMIUM_FLAGS, size, f"--user-data-dir={tmp_path / 'b'}",
                          "--virtual-time-budget=5000", "--dump-dom", (probe / "index.html").resolve().as_uri()],
                         capture_output=True, text=True, timeout=90)
    found = re.search(r'data-probe="([^"]+)"', dom.stdout)
    assert found, dom.stderr[-2000:]
    geometry = json.loads(html_lib.unescape(found.group(1)))
    assert geometry["bottom"] <= geometry["height"], geometry
    assert geometry["right"] <= geometry["width"], geometry
    # The SVG's smallest font, scaled as the page draws it (matplotlib writes 1 pt per user unit,
    # and the browser draws the image at its natural size of 4/3 px per pt unless it shrinks it).
    import base64

    svg = base64.b64decode(re.search(r'<section id="claims">.*?base64,([^"]+)"', page, re.S).group(1)).decode()
    sizes = [float(s) for s in re.findall(r"font-size: ?([\d.]+)px", svg) + re.findall(r"font: ?([\d.]+)px", svg)]
    assert sizes, "the SVG keeps its text as text"
    scale = geometry["img_width"] / geometry["natural"] * 4 / 3
    assert min(sizes) * scale >= 11, (min(sizes), scale)


def test_the_summary_shows_the_comparison_that_decided_the_verdict():
    """A row's measured cell is its deciding comparison: a member that failed for a "not reproduced" row (not the
    first member, which held), a comparison with an interval before a single launch's value, and never one the
    rule does not judge."""
    from types import SimpleNamespace

    from hpcbench.judge.verdict import Outcome
    from hpcbench.report.ledger_page import measured_brief, primary_outcome

    band = Reference(1.0, upper=1.0, unit=" %")

    def outcome(verdict, estimate, n, why=""):
        low, high = (estimate * 0.9, estimate * 1.1) if n >= 2 else (-math.inf, math.inf)
        return Outcome(verdict, Interval(estimate, low, high, n, 10, " %"), band, why)

    c11 = SimpleNamespace(verdict="not reproduced", labels=("tiny save", "124M stall"),
                          outcomes=(outcome("reproduced", 0.004, 5), outcome("not reproduced", 2.65, 5)))
    assert primary_outcome(c11)[0] == "124M stall" and measured_brief(c11).startswith("124M stall 2.65 % [")
    c3 = SimpleNamespace(verdict="inconclusive", labels=("gpt2 one launch", "gpt2 never judged", "resnet"),
                         outcomes=(outcome("inconclusive", 1.08, 1, "inconclusive: a regime no cluster runs in; "
                                                                     "not judged"),
                                   outcome("inconclusive", 1.02, 4, "inconclusive: ...; not judged"),
                                   outcome("inconclusive", 1.02, 4, "n = 4 launches x 10 steps")))
    assert primary_outcome(c3)[0] == "resnet"
    # with nothing else to show, a lone value still shows
    lone = SimpleNamespace(verdict="inconclusive", labels=("one",), outcomes=(outcome("inconclusive", 1.08, 1),))
    assert primary_outcome(lone)[0] == "one" and measured_brief(lone) == "one 1.08 % n=1"
