"""The sanity verdict of a run, as ReFrame's ``sanity`` step gives it: pass, or what is wrong."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Iterator


@dataclass
class Verification:
    """``ok`` when ``problems`` is empty; ``passed`` says what a pass means for this experiment."""

    problems: list[str] = field(default_factory=list)
    passed: str = "every check passed"

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        if self.ok:
            return f"PASS: {self.passed}"
        return "FAIL:\n" + "\n".join(f"  - {p}" for p in self.problems)


def expected_rows(summary: Any, key: Callable[[Any], Hashable], expected: Iterable[tuple[Hashable, str]],
                  problems: list[str]) -> Iterator[tuple[str, Any]]:
    """The summary's row of every combination a config asks for, in the config's order; a missing one is a problem.

    The first check of a sanity step over a sweep: each combination was measured (or recorded as not
    applicable) before its row's own checks.

    Args:
        summary: one row per combination (a frame; its rows are read with ``itertuples``).
        key: a row -> its combination.
        expected: (combination, its name in the problems) for each one the config asks for.
        problems: "<name> has no records" is appended for each combination without a row, in turn.
    Yields:
        (name, row) of each combination that has a row.
    """
    seen = {key(r): r for r in summary.itertuples(index=False)}
    for combination, name in expected:
        r = seen.get(combination)
        if r is None:
            problems.append(f"{name} has no records")
        else:
            yield name, r
