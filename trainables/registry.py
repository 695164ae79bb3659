"""One small registry per family (datasets, models, protocols, ...).

Why: a YAML space and the CLI refer to every algorithm by name only, and an unknown name
must fail with the list of known ones. Adding an algorithm is one new file plus one
``register`` call; nothing else changes.

Why plugins load lazily, inside the registry: a family with an entry-point ``group``
(``vflsweep.defenses``, ...) also holds what installed third-party packages declare there
(``trainables/plugins.py`` loads them; the family's own ``check`` says which to accept).
The driver, the planner and every Ray worker reach a registry only by reading it, so
loading on the first read makes a plugin visible in all of them with no start-up code
anywhere; with no plugin installed the cost is one ``importlib.metadata`` scan per family
and process.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from trainables.errors import ConfigError, did_you_mean
from trainables.plugins import load_group

T = TypeVar("T")
Made = TypeVar("Made")  # what a ``ClassRegistry`` makes: ``create``'s type

# One lock for every registry: loading is rare (once per family and process) and a
# registry holds no lock of its own, so it stays a plain picklable object.
_LOADING = threading.RLock()


class Registry(Generic[T]):
    """Maps names to factories (classes or functions) of one family.

    ``group``: the entry-point group whose entries join this family on the first read;
    ``builtins``: the module whose import registers the built-ins, so that a plugin is
    checked against every built-in name (none is registered yet while it is importing);
    ``check``: the family's rules, ``check(obj, name)`` returns what to register or raises
    ``plugins.Refused``. It lives with the family (``check_plugin`` beside its base
    class), so this module needs none of them.
    """

    def __init__(
        self,
        family: str,
        group: str | None = None,
        builtins: str | None = None,
        check: Callable[[object, str], T] | None = None,
    ) -> None:
        if group is not None and check is None:
            raise ValueError(f"{family}: a registry with an entry-point group needs a check")
        self.family = family
        self.group = group
        self.builtins = builtins
        self.check = check
        self._entries: dict[str, T] = {}
        self._plugins: dict[str, str] = {}
        self._refused: dict[str, str] = {}
        self._loaded = group is None  # the group has been read (nothing to read: True)
        self._loading = False  # being read now (a plugin's import may read this registry)

    def register(self, name: str, entry: T | None = None) -> Callable[[T], T] | T:
        """Register ``entry`` under ``name``; usable as a decorator when ``entry`` is None."""

        def add(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.family} {name!r} is already registered")
            self._entries[name] = obj
            return obj

        return add if entry is None else add(entry)

    def get(self, name: str) -> T:
        """The entry for ``name``; a ConfigError listing the known names otherwise, or
        saying why the plugin of that name was refused."""
        self._ensure_plugins()
        try:
            return self._entries[name]
        except KeyError:
            if name in self._refused:
                raise ConfigError(self._refused[name]) from None
            hint = did_you_mean(name, self.names())
            raise ConfigError(
                f"unknown {self.family} {name!r}; {hint}known: {', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        self._ensure_plugins()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        self._ensure_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    # -- plugins ------------------------------------------------------------------------
    @property
    def plugins(self) -> dict[str, str]:
        """Each accepted plugin's name -> the package (distribution) that provides it."""
        self._ensure_plugins()
        return self._plugins

    @property
    def refused(self) -> dict[str, str]:
        """Each refused plugin's name -> why, in words (what ``get`` raises for it)."""
        self._ensure_plugins()
        return self._refused

    def load_plugins(self) -> None:
        """Read this family's entry-point group now: each plugin not yet registered is
        checked and added, or refused with the reason (``trainables/plugins.py``).

        Reads call this once by themselves; call it again after installing a package in a
        running process (``importlib.metadata`` then finds it on ``sys.path``).
        """
        if self.group is None:
            return
        with _LOADING:
            self._loading = True
            try:
                load_group(self)
            finally:
                self._loading = False
                self._loaded = True

    def accept(self, name: str, entry: T, package: str) -> None:
        """Register plugin ``entry`` of ``package`` (checked by the caller)."""
        self.register(name, entry)
        self._plugins[name] = package
        self._refused.pop(name, None)

    @contextmanager
    def isolated(self) -> Iterator[Registry[T]]:
        """Undo on exit whatever is registered, accepted or refused inside.

        Why: training code reaches a defense or dataset by name through the live registry,
        so a test installs a plugin there; the built-ins must then be left exactly as found.
        """
        self._ensure_plugins()
        saved = (dict(self._entries), dict(self._plugins), dict(self._refused))
        try:
            yield self
        finally:
            self._entries, self._plugins, self._refused = saved

    def _ensure_plugins(self) -> None:
        if self._loaded or not self._builtins_ready():
            return
        with _LOADING:  # another thread reading meanwhile waits for the whole group
            if not (self._loaded or self._loading):
                self.load_plugins()

    def _builtins_ready(self) -> bool:
        """Whether every built-in is registered: the ``builtins`` module has been imported
        to its end. While it is importing (its own ``name in REGISTRY`` checks read the
        registry) loading waits for the next read."""
        if self.builtins is None:
            return True
        module = sys.modules.get(self.builtins)
        if module is None:
            importlib.import_module(self.builtins)
            return True
        # CPython marks a module whose import is running (what "partially initialized
        # module" errors test); a finished import has it False or unset
        return not getattr(getattr(module, "__spec__", None), "_initializing", False)


class ClassRegistry(Registry[type[Made]]):
    """A registry of classes of one base (attacks, defenses, protocols): ``create`` is an
    instance of that base, so a caller needs no cast."""

    def create(self, name: str, *args: Any, **kwargs: Any) -> Made:
        return self.get(name)(*args, **kwargs)


class FactoryRegistry(Registry[Callable[..., Made]]):
    """A registry of functions that make one type (bottom models): ``create`` calls the
    one registered under ``name``."""

    def create(self, name: str, *args: Any, **kwargs: Any) -> Made:
        return self.get(name)(*args, **kwargs)
