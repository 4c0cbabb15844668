"""A small named registry, the extension point for experiments, readers, hooks...

Modelled on papermill's engine registry: ``register(name, obj)`` and ``get(name)``,
whose error lists what is registered, so a typo is answered with the valid names.
"""

from __future__ import annotations

from typing import Generic, Iterator, TypeVar

from hpcbench.core.errors import RegistryError

T = TypeVar("T")


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
            raise RegistryError(f"unknown {self.kind} {name!r}; registered: {known}") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)
