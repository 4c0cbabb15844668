"""The sanity verdict of a run, as ReFrame's ``sanity`` step gives it: pass, or what is wrong."""

from __future__ import annotations

from dataclasses import dataclass, field


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
