"""Dynamic similarity: the link rate at which a baseline spends the guide's share of its step busy.

The emulated cluster is a scale model of the guide's platform. Like a wind tunnel that matches
the Reynolds number, it speaks for the guide only when the dimensionless quantity that decides
a claim is matched: for a communication technique, the share of the baseline's step spent
computing (the guide's "GPU utilisation"). CPU ranks compute far slower than A100s, so on a link
of fixed rate they sit in another regime (85 % busy where the guide's original was 61 %) and
every technique that spares communication has less to spare.

**The model.** One optimizer step of the baseline takes ``c + a + B / r``: compute ``c``, a
latency term ``a`` and a bytes term ``B / r`` (bits over the link rate ``r``). Its busy share is

    busy(r) = c / (c + a + B / r)   <=>   1 / busy - 1 = a / c + (B / c) x (1 / r)

so ``y = 1 / busy - 1`` is a straight line in ``x = 1 / r``: :func:`fit_regime` fits it by least
squares from 2-3 measured (rate, busy) points (the scale of ``c`` drops out, so no compute time
is needed), and :func:`solve_rate` inverts it for the rate that gives the target busy share,

    r* = (B / c) / (1 / target - 1 - a / c),

clamped to what tc can shape here (:data:`MIN_RATE_BPS`..:data:`MAX_RATE_BPS`). A target above
``1 / (1 + a / c)`` cannot be reached at any rate (the latency alone costs more), a target that
needs a rate outside the clamp is reported unreachable with the clamped rate, and a fit whose
bytes term is not positive (busy does not fall as the link slows) cannot steer anything.

Pure: numbers in, numbers out; :func:`calibrate_on_ranks` at the end is the thin adapter that
measures and shapes inside a launch (:mod:`hpcbench.cluster.link_phase`), the experiments'
workers record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from hpcbench.core.config import param

#: A reached busy share within this many points (absolute) of the guide's counts as the guide's regime.
TOLERANCE = 0.05
#: What tc shapes here: make reproduce's range (hpcbench.reproduce MIN/MAX_LINK_BPS). Below 10 Mbit/s
#: SLURM's own messages and the rendezvous slow down; above 10 Gbit/s tbf on a veth no longer holds the rate.
MIN_RATE_BPS = 10e6
MAX_RATE_BPS = 10e9
#: The ``regime`` parameter's values: calibrate the link to the guide's regime, or keep the link as it is.
REGIMES = ("guide", "fixed")


# -- the config fields of a calibrated experiment ----------------------------------------------------

def regime_param(measure: str, target: str, counts: str, fixed: str = "the link as it is (context rows)") -> Any:
    """The ``regime`` field of an experiment that calibrates its node links: one of :data:`REGIMES`, default guide.

    Args:
        measure: when and what the calibration measures ("before the sweep, measure the 1x step's busy share").
        target: the baseline at the busy share it is shaped to ("the 1x step is 1/12 busy, the guide's regime").
        counts: which launches the verdict counts ("the verdict counts only launches that reached it").
        fixed: what ``fixed`` measures instead.
    """
    return param("guide", f"guide: {measure} at each of calibration_rates, fit busy = c / (c + a + B / rate) "
                          f"(hpcbench.scale.regime) and shape every node link to the rate at which {target} "
                          f"(emulated cluster only; put back afterwards); {counts}. fixed: {fixed}", choices=REGIMES)


def calibration_rates_param(default: list[str], baseline: str, bracketing: str = "the guide's regime") -> Any:
    """The ``calibration_rates`` field: the link rates the baseline's busy share is measured at (2-3, tc syntax).

    The config's ``validate()`` checks them with :func:`calibration_rates_problem`.
    """
    return param(default, f"link rates (tc syntax) at which the calibration measures {baseline}'s busy share; 2-3 "
                          f"rates bracketing {bracketing}", allowed="2-3 distinct tc rates within 10mbit..10gbit")


def calibration_steps_param(baseline: str, cost: str = "") -> Any:
    """The ``calibration_steps`` field: timed steps of the baseline and its no-op twin per calibration rate."""
    return param(3, f"timed steps of {baseline} and its no-op twin per calibration rate (after 1 untimed){cost}",
                 min=2, max=100)


def calibration_rates_problem(rates: Sequence[str]) -> str | None:
    """None when ``rates`` are 2-3 distinct tc rates tc can shape here, else what is wrong (for a config error)."""
    from hpcbench.cluster.network import parse_rate

    parsed = []
    for text in rates:
        try:
            parsed.append(parse_rate(text))
        except ValueError as exc:
            return str(exc)
    if not 2 <= len(set(parsed)) == len(parsed) <= 3:
        return f"{list(rates)}: give 2-3 distinct rates"
    if not all(MIN_RATE_BPS <= r <= MAX_RATE_BPS for r in parsed):
        return f"{list(rates)}: every rate within {MIN_RATE_BPS / 1e6:g}..{MAX_RATE_BPS / 1e6:g} Mbit/s"
    return None


@dataclass(frozen=True)
class GuideRegime:
    """The regime a claim's figures were measured in: the baseline's busy share on the guide's platform."""

    claim: str
    target_busy: float
    """the baseline's share of its step spent computing, in (0, 1)"""
    baseline: str
    """the arm whose busy share is matched (e.g. ``original``, ``1x``, ``ddp``)"""
    arithmetic: str
    """how the share follows from a guide statement independent of the figure judged (or, when ``ours``, why
    we chose it)"""
    tolerance: float = TOLERANCE
    ours: bool = False
    """True when the guide states no regime independent of its figure and the share is our choice for testing
    the mechanism: shown as "test regime (ours)", never as the guide's."""

    def __post_init__(self) -> None:
        if not 0.0 < self.target_busy < 1.0:
            raise ValueError(f"{self.claim}: target_busy {self.target_busy} is not in (0, 1)")

    def matches(self, reached: float | None) -> bool:
        """True when ``reached`` lies within :attr:`tolerance` (absolute) of :attr:`target_busy`."""
        return reached is not None and math.isfinite(reached) and abs(reached - self.target_busy) <= self.tolerance

    def summary(self, launches: Any) -> str:
        """The ledger's sentence on this regime and the launches' (:func:`regime_summary`)."""
        return regime_summary(self, launches)

    def brief(self, launches: Any) -> str:
        """The ledger's few words (:func:`regime_brief`)."""
        return regime_brief(self, launches)


@dataclass(frozen=True)
class RegimePoint:
    """The baseline's busy share measured at one link rate."""

    link_rate_bps: float
    busy: float


@dataclass(frozen=True)
class RegimeFit:
    """``1 / busy - 1 = latency + bytes_term / rate``: both normalised by the compute ``c``."""

    latency: float
    """``a / c``: communication that no link rate removes, per unit of compute"""
    bytes_term: float
    """``B / c`` in bit/s x (seconds per compute second): the rate at which communication equals compute"""
    points: tuple[RegimePoint, ...]

    def busy_at(self, rate_bps: float) -> float:
        """The fitted busy share at ``rate_bps``."""
        return 1.0 / (1.0 + self.latency + self.bytes_term / rate_bps)

    def residual(self) -> float:
        """Largest |fitted - measured| busy share over the points (absolute, in shares)."""
        return max(abs(self.busy_at(p.link_rate_bps) - p.busy) for p in self.points)


@dataclass(frozen=True)
class RegimeSolution:
    """The link rate for a target busy share, and whether it is reachable."""

    target_busy: float
    link_rate_bps: float | None
    """the rate to shape (clamped to the tc range); None when the fit cannot steer"""
    unclamped_bps: float | None
    """the rate the fit asks for before clamping (inf: no rate is fast enough)"""
    reachable: bool
    predicted_busy: float | None
    """the fit's busy share at :attr:`link_rate_bps`"""
    why: str


class RegimeError(ValueError):
    """The points cannot be fitted (too few distinct rates, a busy share outside (0, 1.5))."""


def fit_regime(points: Iterable[RegimePoint]) -> RegimeFit:
    """Least-squares line ``y = latency + bytes_term x`` with ``y = 1/busy - 1``, ``x = 1/rate``.

    Args:
        points: >= 2 points at >= 2 distinct positive rates; busy shares in (0, 1.5) (a measured share
            can exceed 1 a little when the no-op twin is timed slower than the step by noise).

    Returns:
        :class:`RegimeFit` (with 2 points the line passes through both).

    Raises:
        RegimeError: fewer than 2 distinct rates, a rate <= 0 or a busy share outside (0, 1.5).
    """
    pts = tuple(points)
    for p in pts:
        if not (p.link_rate_bps > 0 and math.isfinite(p.link_rate_bps)):
            raise RegimeError(f"link rate {p.link_rate_bps!r} is not a positive rate")
        if not (0.0 < p.busy < 1.5):
            raise RegimeError(f"busy share {p.busy!r} at {p.link_rate_bps:g} bit/s is not in (0, 1.5)")
    if len({p.link_rate_bps for p in pts}) < 2:
        raise RegimeError(f"{len(pts)} point(s) at {len({p.link_rate_bps for p in pts})} distinct rate(s): a line "
                          f"needs 2")
    xs = [1.0 / p.link_rate_bps for p in pts]
    ys = [1.0 / p.busy - 1.0 for p in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return RegimeFit(latency=my - slope * mx, bytes_term=slope, points=pts)


def solve_rate(fit: RegimeFit, target_busy: float, *, min_rate_bps: float = MIN_RATE_BPS,
               max_rate_bps: float = MAX_RATE_BPS) -> RegimeSolution:
    """The link rate at which the fitted baseline is ``target_busy`` busy, clamped to ``[min, max]``.

    Returns:
        :class:`RegimeSolution`; ``reachable`` False (with ``why``) when the fit cannot steer (bytes
        term <= 0), when no rate is fast enough (the latency term alone exceeds the target's
        communication), or when the rate lies outside the range tc can shape.
    """
    if not 0.0 < target_busy < 1.0:
        raise RegimeError(f"target busy share {target_busy!r} is not in (0, 1)")
    if fit.bytes_term <= 0:
        return RegimeSolution(target_busy, None, None, False, None,
                              f"busy share does not fall as the link slows (bytes term {fit.bytes_term:.3g} <= 0): "
                              f"the step is not limited by the link's rate, which cannot steer it")
    needed = 1.0 / target_busy - 1.0 - fit.latency
    if needed <= 0:
        rate = max_rate_bps
        return RegimeSolution(target_busy, rate, math.inf, False, fit.busy_at(rate),
                              f"{target_busy:.0%} busy needs less communication than the latency term alone "
                              f"({fit.latency:.3g} x compute): no link rate reaches it; at the fastest shaped rate "
                              f"the fit gives {fit.busy_at(rate):.0%}")
    want = fit.bytes_term / needed
    rate = min(max(want, min_rate_bps), max_rate_bps)
    reachable = min_rate_bps <= want <= max_rate_bps
    why = (f"{target_busy:.0%} busy at {want / 1e6:.4g} Mbit/s" if reachable else
           f"{target_busy:.0%} busy needs {want / 1e6:.4g} Mbit/s, outside what tc shapes here "
           f"({min_rate_bps / 1e6:g}..{max_rate_bps / 1e6:g} Mbit/s); clamped to {rate / 1e6:.4g} Mbit/s, where the "
           f"fit gives {fit.busy_at(rate):.0%}")
    return RegimeSolution(target_busy, rate, want, reachable, fit.busy_at(rate), why)


@dataclass(frozen=True)
class Calibration:
    """What a calibration measured and decided."""

    points: tuple[RegimePoint, ...]
    fit: RegimeFit | None
    solution: RegimeSolution | None
    why_not: str = ""
    """set when nothing could be steered (no link to shape, a failed fit)"""

    @property
    def link_rate_bps(self) -> float | None:
        """The rate to shape for the judged steps (None: leave the link as it is)."""
        return self.solution.link_rate_bps if self.solution is not None else None

    def describe(self) -> str:
        pts = ", ".join(f"{p.busy:.0%} at {p.link_rate_bps / 1e6:g} Mbit/s" for p in self.points)
        if self.fit is None or self.solution is None:
            return f"calibration measured {pts or 'nothing'}; not steered: {self.why_not}"
        return (f"calibration measured {pts}; fit 1/busy - 1 = {self.fit.latency:.3g} + {self.fit.bytes_term:.3g} "
                f"bit/s / rate (largest residual {self.fit.residual():.1%}); {self.solution.why}")


def calibrate(measure_at: Callable[[float], float], rates_bps: Sequence[float], target_busy: float, *,
              refine: int = 2, tolerance: float = TOLERANCE, min_rate_bps: float = MIN_RATE_BPS,
              max_rate_bps: float = MAX_RATE_BPS) -> Calibration:
    """Measure the baseline's busy share at each rate, fit, and solve for ``target_busy``.

    Args:
        measure_at: shapes the link to the rate and returns the baseline's busy share there.
        rates_bps: 2-3 distinct rates, ideally bracketing the target.
        refine: at most this many times the solved rate is measured too and the fit redone with it
            (when it is a new rate): on a shared machine the few steps per point are noisy, and a
            point next to the target pins the line where it matters. A refinement that measures
            the target within ``tolerance`` ends the refining (one more would only add noise).

    Returns:
        :class:`Calibration`; a failed fit gives ``solution`` None and ``why_not``.
    """
    points = tuple(RegimePoint(float(r), float(measure_at(float(r)))) for r in rates_bps)
    for attempt in range(refine + 1):
        try:
            fit = fit_regime(points)
        except RegimeError as exc:
            return Calibration(points, None, None, why_not=str(exc))
        solution = solve_rate(fit, target_busy, min_rate_bps=min_rate_bps, max_rate_bps=max_rate_bps)
        rate = solution.link_rate_bps
        if attempt == refine or rate is None or any(abs(rate - p.link_rate_bps) <= 1e-3 * rate for p in points):
            return Calibration(points, fit, solution)
        points = (*points, RegimePoint(rate, float(measure_at(rate))))
        if abs(points[-1].busy - target_busy) <= tolerance:
            refine = attempt + 1  # on target: refit with this point and stop
    raise AssertionError("unreachable: the loop returns on its last attempt")


def busy_share(step_times: Sequence[float], noop_times: Sequence[float]) -> float:
    """Median over paired steps of t(no-op twin) / t(step): the busy share of a step (NaN with no pair)."""
    ratios = sorted(t0 / t for t, t0 in zip(step_times, noop_times) if t > 0)
    return ratios[len(ratios) // 2] if len(ratios) % 2 else (
        (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2 if ratios else math.nan)


# -- the records and the rules --------------------------------------------------------------------

#: The facts a calibrated launch records (``fact.<name>``; :mod:`hpcbench.system.facts`).
FACT_TARGET, FACT_REACHED, FACT_RATE = "regime.target_busy", "regime.reached_busy", "regime.link_rate_bps"


def regime_facts(target_busy: float, reached_busy: float, link_rate_bps: float | None) -> dict[str, float]:
    """The launch's regime facts (names without ``fact.``); NaN rate when the link was not shaped."""
    return {FACT_TARGET: float(target_busy), FACT_REACHED: float(reached_busy),
            FACT_RATE: float(link_rate_bps) if link_rate_bps is not None else math.nan}


def finite_number(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (a recorded fact may be missing, NaN or text), else None."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


#: A launch's standing against the guide's regime (:func:`regime_status`).
MATCHED, MISSED, FIXED = "guide regime reached", "guide regime missed", "fixed link"


def regime_status(params: Mapping[str, Any], facts: Mapping[str, Any], regime: GuideRegime,
                  param: str = "regime") -> str:
    """:data:`MATCHED`, :data:`MISSED` or :data:`FIXED`, from the launch's ``param`` parameter and facts.

    A launch without the parameter (recorded before calibration existed) ran on a fixed link.
    """
    if params.get(param, "fixed") != "guide":
        return FIXED
    return MATCHED if regime.matches(finite_number(facts.get(FACT_REACHED))) else MISSED


def regime_reason(status: str, reached: Sequence[float], regime: GuideRegime) -> str | None:
    """None for :data:`MATCHED`, else why the launches' comparison is not judged (shown as not applicable).

    Args:
        reached: the launches' reached busy shares (``fact.regime.reached_busy``), NaN where not recorded.
    """
    if status == MATCHED:
        return None
    got = sorted(v for v in (finite_number(r) for r in reached) if v is not None)
    shown = f"{got[len(got) // 2]:.0%} busy" if got else "busy share not recorded"
    whose = "the test regime's" if regime.ours else "the guide's"
    guide = f"{whose} {regime.target_busy:.0%} (+-{regime.tolerance * 100:.0f} points)"
    if status == FIXED:
        return (f"context: a fixed link, {regime.baseline} at {shown} against {guide}; only launches calibrated "
                f"to {whose[:-2]} regime (regime: guide) are judged")
    return f"inconclusive: regime {shown} ({regime.baseline}) vs {guide}"


def with_measured_busy(launches: Any, measured: Mapping[tuple[str, str], float]) -> Any:
    """``launches`` with :data:`FACT_REACHED` filled from ``measured`` ((run_id, task_id) -> the baseline's
    busy share in its summary) where the launch recorded none: a fixed-link launch's context row then
    says which regime it ran in. A recorded fact is never overwritten."""
    if len(launches) == 0:
        return launches
    recorded = list(launches[FACT_REACHED]) if FACT_REACHED in launches.columns else [None] * len(launches)
    filled = [r if finite_number(r) is not None else measured.get((run, task), math.nan)
              for r, run, task in zip(recorded, launches["run_id"], launches["task_id"])]
    return launches.assign(**{FACT_REACHED: filled})


def key_launches_by_regime(launches: Any, regime: GuideRegime, param: str = "regime") -> Any:
    """``launches`` (the ledger's frame) with each launch's :func:`regime_status` added to its ``params`` JSON.

    The rulekit groups launches by parameters, so calibrated launches that reached the guide's
    regime, those that missed it and fixed-link ones never pool.
    """
    import json

    def keyed(row: Any) -> str:
        try:
            params = json.loads(row["params"])
        except (TypeError, ValueError):
            params = {}
        params = params if isinstance(params, dict) else {}
        facts = {FACT_REACHED: row.get(FACT_REACHED)}
        return json.dumps({**params, "regime_status": regime_status(params, facts, regime, param)}, sort_keys=True)

    if len(launches) == 0:
        return launches
    return launches.assign(params=[keyed(r) for _, r in launches.iterrows()])


def regime_applies(launches: Any, regime: GuideRegime) -> Callable[[Any], str | None]:
    """An ``applies`` for :func:`hpcbench.judge.rulekit.judge_comparisons` over :func:`key_launches_by_regime`'s frame.

    Given a group's first launch, None when its group reached the guide's regime, else the reason,
    with the group's median reached busy share.
    """
    import json

    def applies(first: Any) -> str | None:
        status = json.loads(first["params"]).get("regime_status", FIXED)
        same = launches[launches["params"] == first["params"]]
        reached = list(same[FACT_REACHED]) if FACT_REACHED in same.columns else []
        return regime_reason(status, reached, regime)

    return applies


def group_reached_busy(launches: Any, first: Any) -> float | None:
    """The median reached busy share of the launches keyed like ``first`` (:func:`key_launches_by_regime`'s
    groups), or None when none recorded one: the regime a group's reachable effect is computed in.

    A share outside (0, 1] is left out: above 1 the no-op twin ran slower than the step it mirrors, noise of
    a shared machine that says nothing of the regime (and Amdahl has no cap to give for it)."""
    if FACT_REACHED not in getattr(launches, "columns", ()) or not len(launches):
        return None
    same = launches[launches["params"] == first["params"]]
    got = sorted(v for v in (finite_number(r) for r in same[FACT_REACHED]) if v is not None and 0 < v <= 1)
    return got[len(got) // 2] if got else None


def regime_summary(regime: GuideRegime, launches: Any) -> str:
    """One sentence for the ledger: the guide's regime, and the regime the launches reached.

    Calibrated launches are those that recorded :data:`FACT_TARGET` (the worker writes the regime
    facts only after calibrating); the others ran on a fixed link and are context.
    """
    guide = (f"test regime (ours: the guide states none): {regime.baseline} {regime.target_busy:.0%} busy" if regime.ours
             else f"guide's regime: {regime.baseline} {regime.target_busy:.0%} busy")
    n = len(launches)
    target = launches[FACT_TARGET] if n and FACT_TARGET in launches.columns else None
    calibrated = launches[[finite_number(v) is not None for v in target]] if target is not None else launches.iloc[0:0]
    fixed = n - len(calibrated)
    context = f"; {fixed} fixed-link launch(es) shown as context" if fixed else ""
    if not len(calibrated):
        return f"{guide}; reached: no launch was calibrated to it (regime: guide), so the figure is not judged{context}"
    reached = sorted(v for v in (finite_number(r) for r in calibrated.get(FACT_REACHED, [])) if v is not None)
    within = sum(regime.matches(v) for v in reached)
    rates = sorted(v for v in (finite_number(r) for r in calibrated.get(FACT_RATE, [])) if v is not None)
    shown = (f"median {reached[len(reached) // 2]:.0%} ({reached[0]:.0%}-{reached[-1]:.0%})" if reached
             else "busy share not recorded")
    # A launch that could not shape its link (a real cluster's fabric) measured the regime it was in: the
    # figure is judged where that lies within the guide's, and the sentence says it was the link as it is.
    link = (f", link {rates[len(rates) // 2] / 1e6:.0f} Mbit/s (median)" if rates
            else ", on the cluster's own link (nothing shaped it)")
    return (f"{guide} +-{regime.tolerance * 100:.0f} points; reached: {shown}{link}; {within} of "
            f"{len(calibrated)} calibrated launch(es) within it{context}")


def regime_brief(regime: GuideRegime, launches: Any) -> str:
    """:func:`regime_summary` in a few words for the ledger's summary row: ``61% busy: 4/5 in``."""
    target = launches[FACT_TARGET] if len(launches) and FACT_TARGET in launches.columns else None
    calibrated = launches[[finite_number(v) is not None for v in target]] if target is not None else launches.iloc[0:0]
    guide = f"{regime.target_busy:.0%} busy"  # the guide's baseline busy share
    if not len(calibrated):
        return f"{guide}: not calibrated"
    within = sum(regime.matches(v) for v in (finite_number(r) for r in calibrated.get(FACT_REACHED, [])) if v is not None)
    return f"{guide}: {within}/{len(calibrated)} in"


# -- the adapter: calibration inside a launch ------------------------------------------------------

def calibrate_on_ranks(steer: Any, measure: Callable[[], float], rates: Sequence[float | str],
                       target_busy: float, *, lead: bool, device, baseline: str = "the baseline",
                       progress: Callable[[str], None] | None = None):
    """The guide's regime found inside a launch: the baseline measured at each rate, fitted, the link shaped.

    The thin adapter of this pure core (torch.distributed and the emulated cluster's links,
    imported only when called). Every rank calls it (collective); rank 0 shapes the links
    (``steer``, a :class:`hpcbench.cluster.link_phase.SteeredLink`), every rank runs ``measure``
    (the baseline's steps, returning its busy share from the slowest rank's times, so that every
    rank fits the same numbers and solves the same rate). The links are left at the solved rate
    for the judged steps; the caller's ``with steer`` puts them back.

    Args:
        rates: the calibration's link rates, in bit/s or as the config writes them (``"200mbit"``).
        baseline: how the progress lines name the series measured.
        progress: receives one line per measured rate and the calibration's sentence.

    Returns:
        :class:`Calibration`; without a cluster to shape, nothing is measured and ``why_not`` says
        why (the judged steps then run on the link as it is).
    """
    from hpcbench.cluster.link_phase import agreed, shape_on_ranks
    from hpcbench.cluster.network import parse_rate

    say = progress or (lambda _: None)
    if not agreed(lead and steer.can_shape, device):
        return Calibration((), None, None, why_not=steer.why_not or "rank 0 found no emulated cluster to shape")

    def measure_at(rate_bps: float) -> float:
        shape_on_ranks(steer, rate_bps, lead=lead, device=device)
        busy = measure()
        say(f"calibration: {baseline} {busy:.0%} busy at {steer.current}")
        return busy

    rates_bps = [parse_rate(r) if isinstance(r, str) else float(r) for r in rates]
    found = calibrate(measure_at, rates_bps, target_busy)
    if found.link_rate_bps is not None:
        shape_on_ranks(steer, found.link_rate_bps, lead=lead, device=device)
    else:
        # nothing to steer by: the judged steps run at the cluster's own rate (only rank 0's value is used)
        back = float(steer.original) if steer.original else 0.0
        shape_on_ranks(steer, back, lead=lead, device=device)
    say(found.describe())
    return found


def write_calibration(writer: Any, calibration: Calibration, baseline: str, *, labels: Mapping[str, Any] | None = None,
                      judged_busy: float | None = None, target_busy: float | None = None) -> None:
    """A calibration as records: each measured point (``regime_calibration_busy``) and its sentence
    (``regime_calibration``), with the busy share the judged steps reached when given.

    Args:
        writer: the rank's :class:`hpcbench.core.results.RecordWriter`.
        baseline: the series calibrated, as the texts name it (``"original"``, ``"resnet18 ddp"``).
        labels: labels of every row (e.g. the model it was for).
    """
    labels = dict(labels or {})
    for p in calibration.points:
        writer.add("regime_calibration_busy", p.busy, "fraction", labels={**labels, "link_rate_bps": p.link_rate_bps},
                   text=f"{baseline}'s busy share at {p.link_rate_bps / 1e6:g} Mbit/s (calibration)")
    text = calibration.describe()
    if judged_busy is not None:
        text += f"; judged steps: {baseline} {judged_busy:.0%} busy (the guide's {target_busy:.0%})"
    writer.add("regime_calibration", None, "", labels=labels, text=text)


def judged_rate_bps(steer: Any, calibration: Calibration, judged_at: float | None) -> float | None:
    """The link rate (bit/s) the judged steps ran at when the calibration shaped it (a regime fact); else None."""
    shaped = steer.can_shape and calibration.fit is not None
    return float(judged_at) if shaped and judged_at else None
