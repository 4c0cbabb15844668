"""The alpha-beta (latency-bandwidth) model of one link level, fitted from measured collectives.

A collective that takes ``steps`` latency-bound steps and makes one rank (or node) send ``x``
bytes takes ``t = alpha * steps + beta * x`` (Hockney's model as Thakur, Rabenseifner & Gropp,
"Optimization of collective communication operations in MPICH", IJHPCA 19(1), 2005, use it for
every MPICH algorithm; NCCL's own tuner, ``src/graph/tuning.cc`` ``ncclTopoTuneModel``, prices
an algorithm as ``latency + bytes / bandwidth`` the same way). :func:`fit_alpha_beta` fits one
level by least squares with the standard errors of both coefficients; :func:`fit_from_collectives`
fits every (op, process-group kind) of a sweep of timed collectives, whichever experiment ran it.

Units: ``alpha_s`` is seconds per latency step, ``beta_s_per_byte`` seconds per byte of the
quantity ``algorithm_bytes`` returns (per rank for intra-node and world groups, per node for
inter-node groups: see :mod:`hpcbench.scale.algorithms`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from hpcbench.core.errors import ConfigError

MIN_DISTINCT_SIZES = 3
"""Two coefficients and their errors need at least one residual degree of freedom."""

GROUP_LEVEL = {"intra_node": "intra", "inter_node": "inter", "world": "world"}
"""Process-group kind of timed collectives' records -> the link level its fit describes."""


@dataclass(frozen=True)
class LinkFit:
    """One fitted ``t = alpha * steps + beta * bytes`` with its uncertainty."""

    alpha_s: float
    """latency per step, seconds (the fitted intercept divided by the algorithm's steps)"""
    beta_s_per_byte: float
    """seconds per byte moved (1 / sustained bandwidth)"""
    alpha_err: float
    """standard error of ``alpha_s`` (same units)"""
    beta_err: float
    """standard error of ``beta_s_per_byte``"""
    r2: float
    """coefficient of determination of the fit (of the weighted fit when weighted)"""
    n: int
    """points fitted (one per message size)"""
    level: str
    """``intra``, ``inter`` or ``world`` (see :data:`GROUP_LEVEL`)"""
    op: str = ""
    """the collective the fit came from (``all_reduce`` ...), when fitted from records"""
    group_ranks: int = 0
    """ranks in the measured group (0: unknown)"""
    steps: int = 1
    """latency steps per call the intercept was divided by"""

    @property
    def bandwidth_Bps(self) -> float:
        """1 / beta in bytes per second (inf when beta is 0)."""
        return 1.0 / self.beta_s_per_byte if self.beta_s_per_byte > 0 else math.inf

    def time(self, nbytes: float, steps: int | None = None) -> float:
        """Predicted seconds for ``nbytes`` in ``steps`` latency steps (default: the fitted algorithm's)."""
        return self.alpha_s * (self.steps if steps is None else steps) + self.beta_s_per_byte * nbytes


def _non_negative(x: np.ndarray, t: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``(a, beta)`` minimising ``sum w (t - a - beta x)^2`` over ``a, beta >= 0`` when the unconstrained
    minimum lies outside: the minimum of a convex quadratic over the quadrant then lies on one of its edges,
    ``a = 0`` (a line through the origin) or ``beta = 0`` (a constant)."""
    through_origin = np.array([0.0, max(float(np.sum(w * x * t) / np.sum(w * x * x)), 0.0)])
    constant = np.array([max(float(np.sum(w * t) / np.sum(w)), 0.0), 0.0])
    X = np.column_stack([np.ones_like(x), x])
    return min((through_origin, constant), key=lambda c: float(np.sum(w * (t - X @ c) ** 2)))


def fit_alpha_beta(sizes_bytes: Sequence[float], times_s: Sequence[float], *,
                   algorithm_bytes: Callable[[float], float] = float, steps: int = 1,
                   relative: bool = False, level: str = "", op: str = "", group_ranks: int = 0) -> LinkFit:
    """Least squares of ``t = a + beta * algorithm_bytes(size)``; ``alpha = a / steps``.

    Args:
        sizes_bytes: message sizes as the collective is called with them (nccl-tests' S).
        times_s: one time per size (e.g. the median over iterations).
        algorithm_bytes: size -> bytes the algorithm makes the measured unit send (default: the
            size itself). E.g. ``lambda s: 2 * (n - 1) / n * s`` for a ring all-reduce.
        steps: latency steps per call (e.g. ``2 (n - 1)`` for a ring all-reduce).
        relative: weight each point by ``1 / t**2`` (minimise relative rather than absolute
            errors), so that small messages shape alpha as much as large ones shape beta.
        level, op, group_ranks: copied into the result.

    Returns:
        :class:`LinkFit`; errors are ``sqrt(diag(s^2 (X^T W X)^-1))`` with ``s^2`` the
        (weighted) residual variance on ``n - 2`` degrees of freedom. Neither coefficient is
        negative: where the plain least squares gives a negative one (noise on small messages
        below a link's burst), the fit is the least squares over ``a, beta >= 0``, which then
        holds that coefficient at 0. A negative latency would make the smallest buckets' predicted
        communication negative, and with it the share of communication hidden behind compute.

    Raises:
        ConfigError: fewer than 3 distinct sizes (``sizes_bytes``), lengths differ (``times_s``),
            a time that is not positive and finite (``times_s``), or ``steps < 1``.
    """
    sizes = np.asarray(sizes_bytes, dtype=float)
    times = np.asarray(times_s, dtype=float)
    if sizes.shape != times.shape or sizes.ndim != 1:
        raise ConfigError(f"{times.shape} values for {sizes.shape} sizes; give one time per size",
                          field="times_s", config="fit_alpha_beta")
    distinct = len(np.unique(sizes))
    if distinct < MIN_DISTINCT_SIZES:
        raise ConfigError(f"{distinct} distinct size(s); a fit with errors needs at least {MIN_DISTINCT_SIZES}",
                          field="sizes_bytes", config="fit_alpha_beta")
    if not np.all(np.isfinite(times)) or np.any(times <= 0):
        raise ConfigError("every time must be positive and finite", field="times_s", config="fit_alpha_beta")
    if steps < 1:
        raise ConfigError(f"{steps} is out of range; allowed: >= 1", field="steps", config="fit_alpha_beta")
    x = np.array([float(algorithm_bytes(s)) for s in sizes])
    X = np.column_stack([np.ones_like(x), x])
    w = 1.0 / times**2 if relative else np.ones_like(times)
    XtW = X.T * w
    cov_unscaled = np.linalg.inv(XtW @ X)
    coef = cov_unscaled @ (XtW @ times)
    if coef.min() < 0:
        coef = _non_negative(x, times, w)
    resid = times - X @ coef
    dof = len(times) - 2
    s2 = float(np.sum(w * resid**2) / dof)
    err = np.sqrt(np.maximum(np.diag(cov_unscaled) * s2, 0.0))
    mean = np.sum(w * times) / np.sum(w)
    ss_tot = float(np.sum(w * (times - mean) ** 2))
    r2 = 1.0 - float(np.sum(w * resid**2)) / ss_tot if ss_tot > 0 else 1.0
    return LinkFit(alpha_s=float(coef[0]) / steps, beta_s_per_byte=float(coef[1]), alpha_err=float(err[0]) / steps,
                   beta_err=float(err[1]), r2=r2, n=len(times), level=level, op=op, group_ranks=group_ranks,
                   steps=steps)


def fit_from_collectives(frame, *, relative: bool = False) -> dict[tuple[str, str], LinkFit]:
    """One :class:`LinkFit` per (op, group kind) of timed collectives' records.

    Reads the rows of a sweep of timed collectives (metric ``time``, unit s, one row per
    timed iteration and group, labels ``op``, ``size_bytes``, ``group``, ``group_ranks``; the
    ``world_size`` column), takes the median over iterations and groups of a kind per size,
    and fits it with that op's ring byte count and steps
    (:func:`hpcbench.scale.algorithms.collective_cost`): per rank for ``world`` and
    ``intra_node`` groups; per *node* for ``inter_node`` groups, whose ``ranks_per_node`` groups
    run at the same time and share each node's link.

    Args:
        frame: records (``hpcbench.core.results.read_records``); other experiments' rows are ignored.
        relative: see :func:`fit_alpha_beta`.

    Returns:
        ``{(op, group): LinkFit}``; series with fewer than 3 sizes are left out.

    Raises:
        ConfigError: no per-iteration ``time`` rows in ``frame`` (field ``frame``).
    """
    from hpcbench.core.results import expand_labels
    from hpcbench.scale.algorithms import collective_cost

    # The rows say op, group and size, not which experiment timed them: any sweep of collectives fits.
    rows = frame[(frame["metric"] == "time") & frame["value"].notna()]
    if rows.empty:
        raise ConfigError("holds no per-iteration 'time' rows of timed collectives", field="frame",
                          config="fit_from_collectives")
    wide = expand_labels(rows)
    wide["size_bytes"] = wide["size_bytes"].astype(float)
    fits: dict[tuple[str, str], LinkFit] = {}
    for (op, group), g in wide.groupby(["op", "group"], sort=True):
        n = int(g["group_ranks"].iloc[0])
        world = int(g["world_size"].max())
        medians = g.groupby("size_bytes")["value"].median()
        if len(medians) < MIN_DISTINCT_SIZES:
            continue
        if group == "inter_node":
            # a ring over n nodes, one rank each; the node's ranks_per_node groups run at once
            probe = collective_cost(op, 1.0, nodes=n, ranks_per_node=1)
            per_byte, steps = probe.inter_bytes * max(1, world // n), max(1, probe.inter_steps)
        else:  # intra_node, or the world group counted per rank as nccl-tests counts it
            probe = collective_cost(op, 1.0, nodes=1, ranks_per_node=n)
            per_byte, steps = probe.intra_bytes, max(1, probe.intra_steps)
        fits[(op, group)] = fit_alpha_beta(medians.index.to_numpy(), medians.to_numpy(),
                                           algorithm_bytes=lambda s, k=per_byte: k * s, steps=steps,
                                           relative=relative, level=GROUP_LEVEL.get(group, group), op=op,
                                           group_ranks=n)
    return fits


__all__ = ["GROUP_LEVEL", "LinkFit", "MIN_DISTINCT_SIZES", "fit_alpha_beta", "fit_from_collectives"]
