"""What every benchmark returns: side-by-side measurements and their ratios, printed one way.

A benchmark puts two ways of doing one thing side by side in one run; its answer is a
:class:`BenchResult`: the measured ``rows`` (one dict per measured configuration, the same keys
within a table), the ``ratios`` between them (each a :class:`Ratio`, with its target where the
benchmark has one), ``notes`` (the setup and what to read the figures against) and ``params``
(the resolved options, so that a figure always travels with what produced it, as nanoGPT saves
its config with every result). :func:`format_result` prints it as a table for people;
:meth:`BenchResult.to_json` is the same result as one JSON object for scripts
(``hpcbench bench NAME --json``).

An experiment's ``bench.py`` sits below this package's layer and cannot import it: it returns the
result in its JSON form (a dict), which :meth:`BenchResult.from_dict` checks key by key.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterator, Mapping

from hpcbench.core.errors import HpcbenchError
from hpcbench.core.registry import did_you_mean


def _reject_unknown(data: Mapping[str, Any], cls: type, where: str) -> None:
    """Unknown keys are refused with the valid ones listed: a misspelt ``targt`` must not vanish silently."""
    valid = [f.name for f in fields(cls)]
    if unknown := sorted(set(data) - set(valid)):
        hint = did_you_mean(unknown, valid)
        raise HpcbenchError(f"{where}: unknown keys {unknown}; valid: {valid}" + (f"; {hint}" if hint else ""))


@dataclass(frozen=True)
class Ratio:
    """One ratio of two measurements taken side by side, and the target it is judged against (if any)."""

    name: str
    """what is compared, e.g. ``"warm cache, hdf5, zero-copy runs"``"""
    numerator: str
    """the measurement on top, in words (``"reader MB/s"``)"""
    denominator: str
    """the measurement it is divided by (``"plain sequential read MB/s"``)"""
    value: float
    """the ratio; a median of paired per-round ratios where the benchmark pairs rounds, so not always
    the quotient of two printed medians"""
    target: float | None = None
    """the bound the benchmark aims for; None: reported, not judged"""
    higher_is_better: bool = True
    """True: the target is met at ``value >= target``; False: at ``value <= target`` (an overhead)"""

    def __post_init__(self) -> None:
        if not self.name:
            raise HpcbenchError("Ratio.name: empty; say what is compared")
        object.__setattr__(self, "value", float(self.value))
        if self.target is not None:
            object.__setattr__(self, "target", float(self.target))

    @property
    def met(self) -> bool | None:
        """Whether the target is met; None without a target or without a finite value."""
        if self.target is None or not math.isfinite(self.value):
            return None
        return self.value >= self.target if self.higher_is_better else self.value <= self.target

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "met": self.met}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ratio:
        data = {k: v for k, v in data.items() if k != "met"}  # derived: to_dict writes it, nobody sets it
        _reject_unknown(data, cls, f"ratio {data.get('name', '?')!r}")
        return cls(**data)


@dataclass
class BenchResult:
    """One benchmark run: its measured rows, their ratios, notes and the options that produced them."""

    name: str
    """the benchmark's registered name"""
    rows: list[dict[str, Any]] = field(default_factory=list)
    """one dict per measured configuration; keys are column names (units in the name: ``step_ms``);
    list values (per-round samples) go to the JSON and are left out of the printed table"""
    ratios: list[Ratio] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """the setup and how to read the figures, one line each"""
    params: dict[str, Any] = field(default_factory=dict)
    """the resolved options of the run"""
    ok: bool = True
    """False when the run finished without a measurement to show (a failed task, a dry run that
    would not start): the command then exits 1"""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "rows": self.rows, "ratios": [r.to_dict() for r in self.ratios],
                "notes": self.notes, "params": self.params}

    def to_json(self) -> str:
        # paths and numpy scalars in rows or params must not fail a run of minutes at its last line;
        # NaN (a figure that does not apply, e.g. no shaped link) is null: strict readers (jq) refuse NaN
        return json.dumps(_finite(self.to_dict()), indent=1, default=_plain, allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, name: str | None = None) -> BenchResult:
        """The result from its JSON form; ``name`` fills it in when the dict has none (an experiment's bench)."""
        data = dict(data)
        if name is not None:
            data.setdefault("name", name)
        _reject_unknown(data, cls, f"benchmark {data.get('name', '?')!r} result")
        ratios = [r if isinstance(r, Ratio) else Ratio.from_dict(r) for r in data.pop("ratios", [])]
        return cls(ratios=ratios, **data)


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, inf) replaced by None, through dicts and lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if hasattr(value, "item") and hasattr(value, "dtype"):  # numpy scalar
        return _finite(value.item())
    return value


def _plain(value: Any) -> Any:
    """JSON for what ``json`` does not know: numpy scalars as numbers, anything else as its text."""
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else "n/a"
    if hasattr(value, "item"):  # numpy scalar
        return _cell(value.item())
    return str(value)


def _tables(rows: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Runs of consecutive rows with the same keys: one printed table each (a benchmark may measure
    two things, e.g. a link's busbw per size and a backend's overhead)."""
    run: list[dict[str, Any]] = []
    for row in rows:
        if run and list(row) != list(run[0]):
            yield run
            run = []
        run.append(row)
    if run:
        yield run


def format_table(rows: list[dict[str, Any]]) -> str:
    """Rows as aligned columns (numbers right-aligned); list-valued columns are left out."""
    keys = [k for k in rows[0] if not any(isinstance(r.get(k), (list, tuple, dict)) for r in rows)]
    cells = [[_cell(r.get(k)) for k in keys] for r in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    numeric = [all(r.get(k) is None or (isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool))
                   for r in rows) for k in keys]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()
    return "\n".join([line(keys), *(line(c) for c in cells)])


def format_ratio(ratio: Ratio) -> str:
    text = f"{ratio.name}: {_cell(ratio.value)}  ({ratio.numerator} / {ratio.denominator})"
    if ratio.target is not None:
        verdict = {True: "MET", False: "MISSED", None: "n/a"}[ratio.met]
        text += f"  target {'>=' if ratio.higher_is_better else '<='} {ratio.target:.4g}: {verdict}"
    return text


def format_result(result: BenchResult) -> str:
    """The result for people: notes, each table of rows, then the ratios with their targets."""
    parts = [f"== {result.name}" + ("" if result.ok else "  (did not produce a measurement)")]
    if result.notes:
        parts.append("\n".join(result.notes))
    parts += [format_table(t) for t in _tables(result.rows)]
    if result.ratios:
        parts.append("ratios:\n" + "\n".join("  " + format_ratio(r) for r in result.ratios))
    return "\n\n".join(parts)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout, by Python or by child processes, to stderr for the duration.

    A benchmark's stdout is its result alone (``--json``: one JSON object a script parses): progress
    lines, a library's prints and a subprocess's output must not land before it. The file descriptor
    is redirected, not only ``sys.stdout``, because child processes inherit descriptor 1.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)
