"""Named entries of one kind, looked up with a one-line error that lists the valid names (timm's pattern):
methods (:mod:`raysim.core.registry`), data sources, partitioners and backbones. Imports nothing of raysim's but
:mod:`raysim.base.errors`, so every layer may use it.

A registry may name the module whose import fills it (``load=``): the first lookup imports it, so listing the
methods needs no import of them beforehand and no module imports ``raysim.algorithms`` by name.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Generic, TypeVar

from raysim.base.errors import unknown_name

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries of one kind; unknown names raise a one-line error listing the valid ones."""

    def __init__(self, kind: str, load: str | None = None):
        self.kind, self._load, self._entries = kind, load, {}

    def add(self, name: str, entry: T) -> T:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = entry
        return entry

    def _loaded(self) -> dict[str, T]:
        if self._load is not None:
            importlib.import_module(self._load)
        return self._entries

    def get(self, name: str) -> T:
        entries = self._loaded()
        if name not in entries:
            raise unknown_name(self.kind, name, entries)
        return entries[name]

    __getitem__ = get

    def __contains__(self, name: str) -> bool:
        return name in self._loaded()

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._loaded()))

    def items(self) -> list[tuple[str, T]]:
        return sorted(self._loaded().items())
