"""A small named registry, the extension point for experiments, readers, hooks...

Modelled on papermill's engine registry: ``register(name, obj)`` and ``get(name)``,
whose error lists what is registered, so a typo is answered with the valid names.
"""

from __future__ import annotations

import difflib
from typing import Generic, Iterable, Iterator, TypeVar

from hpcbench.core.errors import RegistryError

T = TypeVar("T")


def did_you_mean(names: object | list, valid: Iterable[str]) -> str:
    """``"did you mean 'iters'?"`` when a name is close to one of ``valid``, else ``""``.

    Added to "unknown ..." messages that also list every valid name: a typo is answered
    with its likely fix, and the full list stays for everything else. For several names,
    each suggestion says which name it is for.
    """
    names = names if isinstance(names, list) else [names]
    valid = [str(v) for v in valid]
    pairs = [(n, close[0]) for n in names if (close := difflib.get_close_matches(str(n), valid, n=1))]
    if not pairs:
        return ""
    if len(names) == 1:
        return f"did you mean {pairs[0][1]!r}?"
    return "did you mean " + ", ".join(f"{fix!r} for {n!r}" for n, fix in pairs) + "?"


class Registry(Generic[T]):
    """Maps names to objects of one kind (``kind`` is used in error messages)."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str, obj: T, *, replace: bool = False) -> T:
        if not replace and name in self._items:
            raise RegistryError(f"{self.kind} {name!r} is already registered")
        self._items[name] = obj
        return obj

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "(none)"
            hint = did_you_mean(name, self._items)
            raise RegistryError(f"unknown {self.kind} {name!r}; registered: {known}"
                                + (f"; {hint}" if hint else "")) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)
