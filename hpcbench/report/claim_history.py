"""Claims across reports: each claim's estimate, interval and verdict in every report, and what moved.

A report states each claim once (:func:`claim_states`, from its ``report.json``): the verdict, the
comparison the ledger's summary row shows (its ``primary``: estimate, 95 % interval, launches) and
the platform of the launches behind it (nodes, ranks, link, regime reached). Two states of one
claim are compared by :func:`moved`: the claim *moved* when its verdict changed, or when the later
estimate lies outside the earlier 95 % interval of the same comparison (same label and unit; an
estimate of another comparison is not comparable, only the verdicts are). A report whose runs
disagree on a claim states it as :data:`~hpcbench.report.report_json.DIFFERS`, with the numbers of
its first run that measured it.

``hpcbench report --compare A B`` prints the claims that moved from A to B (:func:`compare_reports`);
``hpcbench publish`` rebuilds the site's ``claims.html`` at every publication
(:func:`render_claims_page`): one table row per claim and report, newest first, each row flagged
"moved" against the report before it, and one small panel per claim drawing every report's
estimate with its interval.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from hpcbench.present.kit import Figure, fmt_number, image_of, mark_empty
from hpcbench.report.ledger_page import verdict_tone
from hpcbench.report.report_json import DIFFERS
from hpcbench.report.templates import page_template

#: The word a moved claim carries, on the page and in ``--compare``'s lines.
MOVED = "moved"
#: Panels per row of the small multiples.
PANEL_COLUMNS = 4


@dataclass(frozen=True)
class ClaimState:
    """One claim as one report states it."""

    claim: str
    title: str = ""
    kind: str = ""
    verdict: str = ""
    """One of :data:`hpcbench.judge.evidence.VERDICTS`, or :data:`DIFFERS` when the report's runs disagree."""
    verdict_text: str = ""
    """The verdict in the words of the claim's kind ("works as described")."""
    comparison: str = ""
    """The label of the comparison whose numbers follow ("" when none was measured)."""
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    unit: str = ""
    launches: int | None = None
    platform: str = ""
    """What the launches ran on, in a few words (:func:`platform_text`)."""
    runs: tuple[str, ...] = ()

    def estimate_text(self) -> str:
        """``1.22x [0.97, 1.53] n=5``, or ``–`` without an estimate."""
        if self.estimate is None:
            return "–"
        text = f"{fmt_number(self.estimate, 3)}{self.unit}"
        if self.low is not None and self.high is not None:
            text += f" [{fmt_number(self.low, 3)}, {fmt_number(self.high, 3)}]"
        return text + (f" n={self.launches}" if self.launches is not None else "")


def _number(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def platform_text(platform: Mapping[str, Any] | None, regime: str | None = None) -> str:
    """``2 nodes x 2 ranks, emulated cluster, shaped link, link 1.36 Gbit/s, 61 % busy, 4/5 in regime``.

    From a ledger row's ``platform`` (:func:`hpcbench.report.report_json.platform_facts`) and its
    ``regime_brief``; a value that differs between launches shows each (``1/2 nodes``).
    """
    platform = platform or {}
    facts = platform.get("facts") or {}

    def joined(values: Sequence[Any]) -> str:
        return "/".join(fmt_number(v, 3) if not isinstance(v, str) else v for v in values)

    parts = []
    nodes, ranks = platform.get("nodes") or [], platform.get("ranks") or []
    if nodes or ranks:
        shape = [f"{joined(nodes)} node{'s' if nodes != [1] else ''}"] if nodes else []
        shape += [f"{joined(ranks)} rank{'s' if ranks != [1] else ''}"] if ranks else []
        parts.append(" x ".join(shape))
    parts += [str(v) for v in facts.get("cluster", [])]
    rates = [r for r in (_number(v) for v in facts.get("link_rate_bps", [])) if r is not None]
    if rates:  # bits/s, as everywhere in hpcbench
        parts.append("link " + "/".join(fmt_number(r / 1e9, 3) for r in rates) + " Gbit/s")
    if "present" in facts.get("infiniband", []):
        parts.append("InfiniBand")
    gpus = [g for g in (_number(v) for v in facts.get("gpus", [])) if g]
    if gpus:
        parts.append(f"{joined(gpus)} GPU(s)")
    if regime:
        parts.append(str(regime))
    return ", ".join(parts)


def _state_of(claim: str, rows: Sequence[Mapping[str, Any]]) -> ClaimState:
    """One claim from its ledger rows in one report (one per run), see the module."""
    verdicts = list(dict.fromkeys(str(r.get("verdict")) for r in rows))
    texts = list(dict.fromkeys(str(r.get("verdict_text") or r.get("verdict")) for r in rows))
    measured = None
    for row in rows:
        comparisons = row.get("comparisons") or []
        index = row.get("primary")
        if isinstance(index, int) and 0 <= index < len(comparisons) and _number(comparisons[index].get("estimate")) \
                is not None:
            measured = (row, comparisons[index])
            break
    first = measured[0] if measured else rows[0]
    state = ClaimState(claim=claim, title=str(first.get("title") or ""), kind=str(first.get("kind") or ""),
                       verdict=verdicts[0] if len(verdicts) == 1 else DIFFERS,
                       verdict_text=texts[0] if len(verdicts) == 1 else DIFFERS,
                       platform=platform_text(first.get("platform"), first.get("regime_brief")),
                       runs=tuple(dict.fromkeys(str(r.get("run")) for r in rows)))
    if measured is None:
        return state
    comparison = measured[1]
    launches = comparison.get("launches")
    return replace(state, comparison=str(comparison.get("label") or ""), estimate=_number(comparison.get("estimate")),
                   low=_number(comparison.get("low")), high=_number(comparison.get("high")),
                   unit=str(comparison.get("unit") or ""), launches=launches if isinstance(launches, int) else None)


def claim_states(manifest: Mapping[str, Any]) -> dict[str, ClaimState]:
    """Each claim of a report (a checked report.json, :func:`hpcbench.report.report_json.read_report_json`),
    in ledger order."""
    rows: dict[str, list[Mapping[str, Any]]] = {}
    for row in manifest.get("ledger") or []:
        rows.setdefault(str(row["claim"]), []).append(row)
    return {claim: _state_of(claim, claim_rows) for claim, claim_rows in rows.items()}


def moved(before: ClaimState | None, after: ClaimState) -> str:
    """Why ``after`` moved from ``before`` (the same claim in an earlier report), or ``""`` when it did not.

    It moved when the verdict changed, or when ``after``'s estimate lies outside ``before``'s 95 %
    interval of the same comparison (label and unit); both reasons are given when both hold.
    """
    if before is None:
        return ""
    reasons = []
    if before.verdict != after.verdict:
        reasons.append(f"verdict {before.verdict_text} -> {after.verdict_text}")
    if (after.estimate is not None and before.low is not None and before.high is not None
            and (before.comparison, before.unit) == (after.comparison, after.unit)
            and not before.low <= after.estimate <= before.high):
        reasons.append(f"estimate {fmt_number(after.estimate, 3)}{after.unit} outside the earlier "
                       f"[{fmt_number(before.low, 3)}, {fmt_number(before.high, 3)}]")
    return "; ".join(reasons)


def compare_reports(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The claims that moved from report ``a`` to report ``b`` (both checked report.json data), one line each.

    A line reads ``C2 title: moved: verdict reproduced -> not reproduced; 1.4x [1.3, 1.5] n=5 -> 0.9x
    [0.8, 1] n=5``. Claims that only one of the two reports states are left out.
    """
    before, after = claim_states(a), claim_states(b)
    lines = []
    for claim in after:
        if claim not in before:
            continue
        why = moved(before[claim], after[claim])
        if why:
            name = f"{claim} {after[claim].title}".strip()
            lines.append(f"{name}: {MOVED}: {why}; {before[claim].estimate_text()} -> {after[claim].estimate_text()}")
    return lines


# -- the site's claims page --------------------------------------------------------------

@dataclass(frozen=True)
class Stated:
    """One claim in one published report, with whether it moved against the report before it."""

    slug: str
    published: str
    """``YYYY-MM-DDTHH:MM:SSZ``."""
    title: str
    state: ClaimState
    moved: str = ""


@dataclass
class History:
    """Every claim across the published reports (newest first), and the publications that could not be read."""

    claims: dict[str, list[Stated]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    """One line per publication left out, with why (its report.json of another version...)."""
    reports: int = 0


def _claim_order(claim: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", claim))


def claim_history(publications: Sequence[tuple[Any, Mapping[str, Any]]], skipped: Sequence[str] = ()) -> History:
    """The history of every claim over ``publications``.

    Args:
        publications: (publication, its checked report.json) pairs, newest first; a publication has
            ``slug``, ``published`` and ``title`` (:class:`hpcbench.report.publish.Publication`).
        skipped: lines naming publications whose report.json could not be read.
    """
    history = History(skipped=list(skipped), reports=len(publications))
    for publication, manifest in publications:
        for claim, state in claim_states(manifest).items():
            history.claims.setdefault(claim, []).append(
                Stated(str(publication.slug), str(publication.published), str(publication.title), state))
    for claim, stated in history.claims.items():
        # Each against the next older report that states the claim: the list is newest first.
        history.claims[claim] = [replace(s, moved=moved(older.state if older else None, s.state))
                                 for s, older in zip(stated, [*stated[1:], None])]
    history.claims = dict(sorted(history.claims.items(), key=lambda kv: _claim_order(kv[0])))
    return history


_TONES = {"good": "#2e7d32", "bad": "#c62828", "warn": "#b26a00", "open": "#777777", "neutral": "#37474f"}


def history_figure(history: History) -> Figure | None:
    """Small multiples: one panel per claim, each report's estimate with its 95 % interval as whiskers, oldest
    to newest left to right, coloured by verdict; a moved one ringed and labelled. None without claims."""
    from matplotlib.figure import Figure as MplFigure

    if not history.claims:
        return None
    order = sorted({(s.published, s.slug) for stated in history.claims.values() for s in stated})
    x_of = {slug: i for i, (_, slug) in enumerate(order)}
    n = len(history.claims)
    cols = min(PANEL_COLUMNS, n)
    rows = math.ceil(n / cols)
    fig = MplFigure(figsize=(3.2 * cols, 2.3 * rows + 0.4))
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, (claim, stated) in zip(axes, history.claims.items()):
        title = f"{claim} {stated[0].state.title}".strip()
        ax.set_title(title if len(title) <= 34 else title[:33] + "…", fontsize=9, loc="left")
        drawn = [s for s in stated if s.state.estimate is not None]
        if not drawn:
            mark_empty([ax], "no estimate")
        for s in drawn:
            x, st = x_of[s.slug], s.state
            colour = _TONES[verdict_tone(st.verdict_text)]
            low = st.estimate - st.low if st.low is not None else 0.0
            high = st.high - st.estimate if st.high is not None else 0.0
            ax.errorbar([x], [st.estimate], yerr=[[max(low, 0.0)], [max(high, 0.0)]], fmt="o", color=colour,
                        ecolor=colour, capsize=3, ms=5)
            if s.moved:
                ax.plot([x], [st.estimate], "o", ms=12, markerfacecolor="none", markeredgecolor="#c62828", mew=1.6)
                ax.annotate(MOVED, (x, st.estimate), xytext=(6, 6), textcoords="offset points", fontsize=8,
                            color="#c62828")
        units = {s.state.unit for s in drawn if s.state.unit}
        if len(units) == 1:
            ax.set_ylabel(units.pop(), fontsize=8)
        ax.set_xlim(-0.5, len(order) - 0.5)
        ax.set_xticks(range(len(order)))
        ax.set_xticklabels([published[:16].replace("T", " ") for published, _ in order], fontsize=7, rotation=30,
                           ha="right")
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(True, axis="y", alpha=0.3)
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.suptitle("Each claim's estimate and 95 % interval in every published report (oldest to newest); "
                 "colour: verdict; ringed: moved", fontsize=10)
    fig.tight_layout()
    return Figure(title="Each claim across the published reports", data=image_of(fig),
                  alt="one panel per claim: every published report's estimate with its 95 % interval as whiskers, "
                      "coloured by verdict, a moved one ringed and labelled")


def render_claims_page(history: History, *, generated: str, index: str = "index.html",
                       title: str = "hpcbench claims across reports") -> str:
    """The site's ``claims.html``: the small multiples, then one table row per claim and report, newest first.

    Every text is escaped (jinja2 autoescape); the figure is an inline SVG (base64), so the page is one file.
    """
    rows = []
    for claim, stated in history.claims.items():
        for k, s in enumerate(stated):
            st = s.state
            rows.append({"id": f"{claim}-{s.slug}", "claim": claim, "first": k == 0, "span": len(stated),
                         "title": st.title, "published": s.published.replace("T", " ").replace("Z", " UTC"),
                         "slug": s.slug, "report": s.title, "verdict": st.verdict_text,
                         "tone": verdict_tone(st.verdict_text), "estimate": st.estimate_text(),
                         "comparison": st.comparison or "–", "platform": st.platform or "–",
                         "runs": ", ".join(st.runs), "moved": s.moved})
    moved_count = sum(1 for stated in history.claims.values() for s in stated if s.moved)
    return page_template("claims.html").render(
        title=title, rows=rows, figure=history_figure(history), skipped=history.skipped, reports=history.reports,
        claims=len(history.claims), moved=moved_count, moved_word=MOVED, generated=generated, index=index)


__all__ = ["MOVED", "ClaimState", "History", "Stated", "claim_history", "claim_states", "compare_reports",
           "history_figure", "moved", "platform_text", "render_claims_page"]
