"""One small registry per family (datasets, models, protocols, ...).

Why: a YAML space and the CLI refer to every algorithm by name only, and an unknown name
must fail with the list of known ones. Adding an algorithm is one new file plus one
``register`` call; nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from trainables.errors import ConfigError, did_you_mean

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to factories (classes or functions) of one family."""

    def __init__(self, family: str) -> None:
        self.family = family
        self._entries: dict[str, T] = {}

    def register(self, name: str, entry: T | None = None) -> Callable[[T], T] | T:
        """Register ``entry`` under ``name``; usable as a decorator when ``entry`` is None."""

        def add(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.family} {name!r} is already registered")
            self._entries[name] = obj
            return obj

        return add if entry is None else add(entry)

    def get(self, name: str) -> T:
        """The entry for ``name``; a ConfigError listing the known names otherwise."""
        try:
            return self._entries[name]
        except KeyError:
            hint = did_you_mean(name, self.names())
            raise ConfigError(
                f"unknown {self.family} {name!r}; {hint}known: {', '.join(self.names())}"
            ) from None

    def create(self, name: str, *args: object, **kwargs: object) -> object:
        """Call the factory registered under ``name``."""
        factory = self.get(name)
        return factory(*args, **kwargs)  # type: ignore[operator]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
