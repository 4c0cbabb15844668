"""The claims ledger as the report shows it: counts, a summary a team reads at a glance, details on demand.

The page's first screen is the summary: the count of each verdict, then one table row per
claim with at most :data:`ROW_WORD_BUDGET` words (the claim in a few words, the guide's main
figure, the main comparison measured here, named, with its 95 % interval, the scale model's headline at
the guide's scale, the verdict in its kind's words with its reason in at most 8 words and whether
arithmetic or measurement decided it, the kind and the regime reached). Everything
that explains a verdict (the rule's detail, every comparison, the model's inputs, the guide's
arithmetic) is in one folded section per claim that the row links to. Under the summary, a
forest plot draws every comparison against its reference band, each normalised to its band's
edge on a log axis, so that a 3x ratio and 600 s of lost work read on one axis.

The rows come from :func:`hpcbench.report.ledger.evaluate_claims`; rows of another ledger module
(tests plug one in) are read through ``getattr`` with the fields they lack left blank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from hpcbench.judge.evidence import ARITHMETIC, IMPLAUSIBLE, NOT_COUNTED_PREFIXES, NOT_TESTABLE
from hpcbench.present.kit import Cell, Figure, Section, Table, fmt_number, image_of, slug

#: The summary row's word budget: a row a reader takes in at one glance, the verdict's reason (<= 8 words,
#: marked when arithmetic decided) and the measured comparison's name included.
ROW_WORD_BUDGET = 40
#: Verdicts counted at the top, each in its claim kind's words and counted apart ("works as described" is not
#: "reproduced"), in this order (others are counted after them).
COUNT_ORDER = ("reproduced", "works as described", "consistent with the model", "not reproduced",
               "does not work as described", "inconsistent with the model", IMPLAUSIBLE, NOT_TESTABLE, "inconclusive",
               "context", "not measured yet")


@dataclass
class ClaimDetail:
    """One claim's folded section: what the summary row leaves out."""

    id: str
    summary: str
    notes: list[Cell] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)


def verdict_tone(verdict: str) -> str:
    """The badge colour of a verdict (its words may be a kind's: "works as described")."""
    v = verdict.lower()
    if "not measured" in v or "pending" in v or "not testable" in v:
        return "open"
    if "implausible" in v:
        return "bad"
    if any(k in v for k in ("refut", "contradict", "fail", "wrong", "not reproduced", "does not", "inconsistent")):
        return "bad"
    if any(k in v for k in ("partial", "inconclusive", "mixed", "unclear", "differs", "caveat")):
        return "warn"
    if any(k in v for k in ("confirm", "support", "reproduced", "holds", "agree", "consistent", "pass", "works")):
        return "good"
    return "neutral"


def verdict_text(row: Any) -> str:
    """A ledger row's verdict in its claim kind's words (rows from another ledger have no kind)."""
    return str(getattr(row, "verdict_text", None) or row.verdict)


def _verdict_cell(verdict: str, prefix: str = "") -> Cell:
    return Cell(f"{prefix}{verdict}", f"verdict verdict-{slug(verdict)} tone-{verdict_tone(verdict)}")


def _value_text(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return fmt_number(value)
    return str(value)


def _num(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1e4 else f"{x:,.0f}"


def primary_outcome(row: Any) -> tuple[str, Any] | None:
    """(label, outcome) the summary shows: the comparison that decided the verdict.

    In order of preference, the first comparison that counts, has an interval (n >= 2) and came out as the
    row's verdict (a "not reproduced" row shows a member that failed, not one that held); then the first that
    counts and has an interval; then the first that counts; then the first with a value. A comparison a rule
    never judges (its reason ends in "not judged": a regime the guide implies but no cluster runs in) does not
    count here, so it never stands in for the ones that do.
    """
    pairs = list(zip(getattr(row, "labels", ()) or [""] * len(getattr(row, "outcomes", ())),
                     getattr(row, "outcomes", ())))
    valued = [(label, o) for label, o in pairs if math.isfinite(o.interval.estimate)]
    counted = [(label, o) for label, o in valued
               if not o.why.startswith(NOT_COUNTED_PREFIXES) and not o.why.rstrip(". ").endswith("not judged")]
    ranged = [(label, o) for label, o in counted if math.isfinite(o.interval.low) and math.isfinite(o.interval.high)]
    deciding = [(label, o) for label, o in ranged if o.verdict == str(getattr(row, "verdict", ""))]
    return (deciding or ranged or counted or valued or [None])[0]


def interval_text(iv: Any) -> str:
    """``6.81x [6.57, 7.06] n=5``: the estimate, its 95 % interval and the launches behind it."""
    unit = iv.unit or ""
    text = f"{_num(iv.estimate)}{unit}"
    if math.isfinite(iv.low) and math.isfinite(iv.high):
        text += f" [{_num(iv.low)}, {_num(iv.high)}]"
    return f"{text} n={iv.launches}"


def comparison_name(label: str) -> str:
    """A comparison's label in a few words for the summary: the ratio after the model or level (``a: x / y``)."""
    name = label.split(" (", 1)[0]  # the launch group, when several, is in the details
    name = name.rsplit(": ", 1)[-1].strip()
    return name if len(name.split()) <= 5 else ""


def measured_brief(row: Any) -> str:
    """The summary's measured cell: the main comparison named, with its interval, else the measured text if short."""
    found = primary_outcome(row)
    if found is not None:
        name = comparison_name(found[0] or "")
        return f"{name} {interval_text(found[1].interval)}".strip()
    text = _value_text(getattr(row, "measured", None))
    # A long measured text (a technique's counts) belongs in the details.
    return text if len(text.split()) <= 6 else "see details"


def summary_words(cells: Sequence[Cell]) -> int:
    """Words a summary row shows (what :data:`ROW_WORD_BUDGET` limits)."""
    def text(c: Cell) -> str:
        return " ".join(text(p) for p in c.parts) if c.parts else c.text
    return sum(len(text(c).split()) for c in cells)


def _counts(rows_by_source: dict[str, dict[str, Any]]) -> list[Cell]:
    """The count of each verdict over every claim of every source, as badges."""
    counts: dict[str, int] = {}
    for rows in rows_by_source.values():
        for row in rows.values():
            counts[verdict_text(row)] = counts.get(verdict_text(row), 0) + 1
    order = [v for v in COUNT_ORDER if v in counts] + sorted(v for v in counts if v not in COUNT_ORDER)
    return [Cell(f"{counts[v]} {v}", f"count verdict tone-{verdict_tone(v)}") for v in order]


def ledger_section(labels: Sequence[str], ledger: dict[str, list | Exception], problem: str | None = None) -> Section:
    """The claims ledger: verdict counts, the one-line-per-claim summary, the forest plot, the details."""
    section = Section(title="Claims ledger", id="claims", figures_first=False)
    if problem:
        section.notes.append(Cell(problem, "warn"))
    per_source: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    first: dict[str, Any] = {}
    for label in labels:
        if label not in ledger:
            break
        rows = ledger[label]
        if isinstance(rows, Exception):
            section.notes.append(Cell(f"{label}: evaluating the claims failed: {type(rows).__name__}: {rows}", "fail"))
            continue
        per_source[label] = {}
        for row in rows:
            cid = str(row.claim_id)
            per_source[label][cid] = row
            if cid not in first:
                first[cid] = row
                order.append(cid)
    section.badges = _counts(per_source)
    several = len(labels) > 1
    measured_cols = [f"measured here ({s})" for s in labels] if several else ["measured here [95 % CI]"]
    columns = ["claim", "guide", *measured_cols, "predicted at the guide's scale", "verdict",
               "kind · regime: launches in it"]
    rows = []
    for cid in order:
        row = first[cid]
        by_src = [per_source.get(s, {}).get(cid) for s in labels]
        rows.append(_summary_row(cid, row, labels, by_src))
        section.details.append(_detail(cid, row, labels, by_src))
    section.tables.append(Table(columns=columns, rows=rows, id="claims-ledger",
                                caption=f"{len(rows)} claims: one row each; the claim links to how its verdict "
                                        f"was reached"))
    figure = interval_figure([(s, r) for s in labels for r in per_source.get(s, {}).values()], several)
    if figure is not None:
        section.figures.append(figure)
    return section


def _summary_row(cid: str, row: Any, labels: Sequence[str], by_src: Sequence[Any]) -> list[Cell]:
    title = str(getattr(row, "title", "") or getattr(row, "wording", "") or "")
    verdicts = [(s, verdict_text(r)) for s, r in zip(labels, by_src) if r is not None]
    if len({v for _, v in verdicts}) <= 1:
        verdict = Cell(parts=(_verdict_cell(verdicts[0][1]), *_why(row)) if verdicts else ())
    else:
        verdict = Cell(parts=tuple(_verdict_cell(v, f"{s}: ") for s, v in verdicts))
    headline = str(getattr(row, "headline", "") or "") or _value_text(getattr(row, "claimed", None))
    models = list(dict.fromkeys(str(getattr(r, "model_headline", "") or "") for r in by_src if r is not None))
    # Without a model only the guide's own arithmetic predicts: it is in the details.
    predicted = " / ".join(m for m in models if m) or "–"
    kind = str(getattr(row, "kind", "") or "")
    regime = str(getattr(row, "regime_brief", "") or "")
    return [Cell(f"{cid} {title}", "claim-link", href=f"#claim-{cid}"),
            Cell(headline, "headline"),
            *(Cell(measured_brief(r) if r is not None else "–", "measured") for r in by_src),
            Cell(predicted, "predicted"),
            verdict,
            Cell(" · ".join(p for p in (kind, regime) if p) or "–", "kind")]


def _why(row: Any) -> tuple[Cell, ...]:
    """The verdict's reason in at most 8 words, marked when arithmetic, not measurement, decided it."""
    reason = str(getattr(row, "reason", "") or "")
    if not reason:
        return ()
    by = " (arithmetic)" if getattr(row, "decided_by", "") == ARITHMETIC else ""
    return (Cell(f"{reason}{by}", "verdict-reason"),)


def _detail(cid: str, row: Any, labels: Sequence[str], by_src: Sequence[Any]) -> ClaimDetail:
    """Everything the summary row leaves out, per source where sources differ."""
    several = len(labels) > 1
    title = str(getattr(row, "title", "") or "")
    detail = ClaimDetail(id=f"claim-{cid}", summary=f"{cid} {title}".strip())
    notes = detail.notes
    kind = str(getattr(row, "kind", "") or "")
    notes.append(Cell(f"{row.wording}", "wording"))
    notes.append(Cell(f"Guide, section {row.section}" + (f"; kind: {kind}" if kind else "") + "."))
    notes.append(Cell(f"The guide's figures: {_value_text(row.claimed)}"))
    for source, r in zip(labels, by_src):
        if r is None:
            continue
        at = f" ({source})" if several else ""
        regime = str(getattr(r, "regime", "") or "")
        if regime:
            notes.append(Cell(f"Regime{at}: {regime[0].upper()}{regime[1:]}", "regime"))
        notes.append(Cell(f"Measured here{at}: {_value_text(r.measured)}"))
        model = str(getattr(r, "model_prediction", "") or "")
        arithmetic = str(getattr(r, "guide_arithmetic", "") or "")
        if model:
            notes.append(Cell(f"Predicted at the guide's scale{at}: {model}", "model-prediction"))
        if arithmetic and (model or not several):
            notes.append(Cell(f"Guide's arithmetic: {arithmetic}", "guide-arithmetic"))
        elif not model and getattr(r, "predicted", None):
            notes.append(Cell(f"Predicted{at}: {_value_text(r.predicted)}"))
        decided = str(getattr(r, "decided_by", "") or "")
        notes.append(Cell(parts=(_verdict_cell(verdict_text(r), f"Verdict{at}: "),
                                 *((Cell(f"decided by {decided}", "decided-by"),) if decided else ()),
                                 Cell(str(r.detail or ""), "detail"))))
    comparisons = [(s, label, o) for s, r in zip(labels, by_src) if r is not None
                   for label, o in zip(getattr(r, "labels", ()) or [""] * len(getattr(r, "outcomes", ())),
                                       getattr(r, "outcomes", ()))]
    if comparisons:
        columns = (["source"] if several else []) + ["comparison", "measured [95 % CI]", "launches x steps",
                                                       "reference", "outcome", "why"]
        detail.tables.append(Table(columns=columns, id=f"comparisons-{cid}", rows=[
            ([Cell(s)] if several else []) + [
                Cell(label or "–"),
                Cell(interval_text(o.interval).rsplit(" n=", 1)[0] if math.isfinite(o.interval.estimate) else "–"),
                Cell(f"{o.interval.launches} x {o.interval.steps}"),
                Cell(o.reference.describe().removeprefix("reference ")),
                _verdict_cell(o.verdict),
                Cell(o.why or "")]
            for s, label, o in comparisons]))
    return detail


# -- the forest plot ------------------------------------------------------------------------------

#: Where values at or below zero are drawn on the log axis (with an arrow: "this far or less").
_FLOOR = 1e-2
_STYLES = {  # verdict -> (colour, line style, marker): told apart in greyscale by line and marker too
    "reproduced": ("#2e7d32", "-", "o"),
    "not reproduced": ("#c62828", "--", "X"),
}
_OTHER_STYLE = ("#b26a00", ":", "s")


def normalise(iv: Any, ref: Any) -> tuple[float, tuple[float, float], tuple[float, float, float]] | None:
    """(divisor, normalised band, normalised (low, estimate, high)), or None where no positive divisor exists.

    A one-sided reference is divided by its bound, so the band's edge sits at 1 (``>= 1`` or ``<= 1``);
    a two-sided one by its value, so the band brackets 1.
    """
    if ref.lower is not None and ref.upper is not None:
        div = ref.value
    else:
        div = ref.lower if ref.lower is not None else ref.upper
    if div is None or not math.isfinite(div) or div <= 0:
        return None
    band = (ref.lower / div if ref.lower is not None else 0.0, ref.upper / div if ref.upper is not None else math.inf)
    low = iv.low if math.isfinite(iv.low) else iv.estimate
    high = iv.high if math.isfinite(iv.high) else iv.estimate
    return div, band, (low / div, iv.estimate / div, high / div)


def interval_figure(rows: list[tuple[str, Any]], several: bool) -> Figure | None:
    """Every judged comparison's 95 % interval against its reference band, normalised (a forest plot)."""
    from matplotlib.figure import Figure as MplFigure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle
    from matplotlib.ticker import NullLocator

    items = []
    for source, row in rows:
        for label, outcome in zip(getattr(row, "labels", ()) or [""] * len(getattr(row, "outcomes", ())),
                                  getattr(row, "outcomes", ())):
            if not math.isfinite(outcome.interval.estimate):
                continue
            scaled = normalise(outcome.interval, outcome.reference)
            if scaled is None:
                continue
            name = f"{row.claim_id} {label}".strip()
            name = name if len(name) <= 44 else name[:43] + "…"
            items.append((name + (f" [{source}]" if several else ""), scaled, outcome.verdict))
    if not items:
        return None
    values = [max(v, _FLOOR) for _, (_, _, trio), _ in items for v in trio if math.isfinite(v)]
    left, right = min(min(values) / 1.5, 0.5), max(max(values) * 1.5, 2.0)
    fig = MplFigure(figsize=(9.5, 0.3 * len(items) + 1.4))
    ax = fig.subplots()
    ax.set_xscale("log")
    ax.set_xlim(left, right)
    for y, (name, (_, band, (low, est, high)), verdict) in enumerate(reversed(items)):
        lo, hi = max(band[0], left), min(band[1], right)
        ax.add_patch(Rectangle((lo, y - 0.38), hi - lo, 0.76, facecolor="#e3f1e4", edgecolor="#7a9a7c",
                               hatch="///", linewidth=0.6, zorder=0))
        colour, style, marker = _STYLES.get(verdict, _OTHER_STYLE)
        ax.plot([max(low, _FLOOR), max(high, _FLOOR)], [y, y], color=colour, linestyle=style, lw=2.2)
        ax.plot([max(est, _FLOOR)], [y], marker=marker, color=colour, markeredgecolor="black", ms=6)
        if est <= _FLOOR:
            ax.annotate("≤", (_FLOOR, y), xytext=(-10, -4), textcoords="offset points", fontsize=9)
    ax.axvline(1.0, color="#555", lw=0.8)
    ax.set_yticks(range(len(items)))
    ax.set_yticklabels([name for name, *_ in reversed(items)], fontsize=9)
    # Plain numbers at 1-2-5 steps: "0.5" reads faster than "5x10^-1".
    ticks = [m * 10.0 ** e for e in range(-3, 4) for m in (1, 2, 5) if left <= m * 10.0 ** e <= right]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.tick_params(axis="x", labelsize=9)
    ax.set_ylim(-0.7, len(items) - 0.3)
    ax.set_xlabel("measured / reference (log): 1 is the band's edge, or its centre when the band has two edges",
                  fontsize=9)
    ax.grid(True, axis="x", which="both", alpha=0.25)
    handles = [Patch(facecolor="#e3f1e4", edgecolor="#7a9a7c", hatch="///", label="reference band")]
    handles += [Line2D([], [], color=c, linestyle=s, marker=m, markeredgecolor="black", label=v)
                for v, (c, s, m) in (*_STYLES.items(), ("inconclusive / other", _OTHER_STYLE))]
    # Above the axes, never over the data.
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.01), ncol=4, fontsize=9, frameon=False)
    fig.tight_layout()
    return Figure(title="Every judged comparison against its reference band, normalised to the band",
                  data=image_of(fig),
                  alt="one line per judged comparison: its 95 % interval over launches divided by the reference "
                      "band's edge, on a log axis, with the band hatched")


__all__ = ["ROW_WORD_BUDGET", "ClaimDetail", "interval_figure", "interval_text", "ledger_section", "measured_brief",
           "normalise", "primary_outcome", "summary_words", "verdict_text", "verdict_tone"]
