"""Third-party plugins: entry points that add attacks, defenses, datasets and trial kinds.

A package declares, in its ``pyproject.toml``, entries in the groups ``vflsweep.attacks``,
``vflsweep.defenses``, ``vflsweep.datasets`` or ``vflsweep.kinds`` (name = the name a space
uses, value = ``module:object``). The family's ``Registry`` reads its group on its first
read (``trainables/registry.py``) and hands every entry to ``load_group``, which checks it
with the family's rules before registering it. The rules live with each family, beside the
base class they test (``check_plugin`` in ``defenses/base.py``, ``attacks/base.py``,
``data/catalog.py`` and ``kinds/__init__.py``), built from the shared pieces here, so this
module imports no family and every family can import it.

Why the checks: a plugin runs beside the built-ins in the same sweeps, so it must obey the
rules the built-ins obey (the structural half of ``tests/test_*_conformance.py``; the
behavioural half trains models and stays in the tests). A plugin that breaks one is
refused as a whole — nothing of it is registered — and the registry keeps the reason: a
space that names it fails at plan time (exit 2) with that reason, while other sweeps run
and only warn once per process.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterable
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Protocol


class Registry(Protocol):
    """What ``load_group`` needs of a family's registry (``trainables/registry.py``): its
    names, check and group, and where accepted and refused plugins go. A protocol, not an
    import: the registry imports this module to load its group."""

    family: str
    group: str | None
    check: Callable[[Any, str], Any] | None

    @property
    def plugins(self) -> dict[str, str]: ...

    @property
    def refused(self) -> dict[str, str]: ...

    def names(self) -> list[str]: ...

    def accept(self, name: str, entry: Any, package: str) -> None: ...


# YAML 1.1 reads these bare words as booleans: a parameter of that name cannot be set
YAML_BOOLS = frozenset(
    "y Y yes Yes YES n N no No NO true True TRUE false False FALSE on On ON off Off OFF".split()
)


class Refused(Exception):
    """What is wrong with a plugin, in words; ``load_group`` adds which plugin and package."""


class PluginWarning(UserWarning):
    """A refused plugin that no sweep has named yet: shown once, breaks nothing."""


def load_group(registry: Registry) -> None:
    """Check every entry point of ``registry.group`` and register it, or refuse it.

    An entry already registered from the same package (a second load) is skipped.
    """
    check = registry.check
    assert check is not None, f"{registry.family} has an entry-point group but no check"
    for ep in entry_points(group=str(registry.group)):
        package = ep.dist.name if ep.dist is not None else "an unknown package"
        if registry.plugins.get(ep.name) == package:
            continue
        try:
            entry = _checked(registry, ep, package, check)
        except Refused as why:
            who = f"plugin {registry.family} {ep.name!r} from package {package}"
            reason = f"{who} is refused: {why}"
            registry.refused[ep.name] = reason
            # explicit: the line that warns is vflsweep's loader, not worth showing a user
            warnings.warn_explicit(
                f"{reason}; a sweep naming it stops at plan time, others run without it",
                PluginWarning,
                filename="vflsweep",
                lineno=0,
            )
            continue
        registry.accept(ep.name, entry, package)


def _checked(
    registry: Registry, ep: EntryPoint, package: str, check: Callable[[Any, str], Any]
) -> Any:
    """The object to register for ``ep``; Refused with the first rule it breaks."""
    if ep.name in registry.names():
        owner = registry.plugins.get(ep.name)
        taken = f"package {owner}" if owner else f"a built-in {registry.family}"
        raise Refused(f"the name {ep.name!r} is taken by {taken}")
    try:
        obj = ep.load()
    except Exception as err:  # any import failure of third-party code is its refusal
        raise Refused(f"importing {ep.value} failed: {type(err).__name__}: {err}") from None
    try:
        return check(obj, ep.name)
    except Refused:
        raise
    except Exception as err:
        raise Refused(f"checking it raised {type(err).__name__}: {err}") from None


# -- shared pieces of the rules ---------------------------------------------------------
def subclass(cls: object, base: type) -> None:
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise Refused(f"it is not a subclass of {base.__module__}.{base.__name__}")


def named(declared: object, name: str) -> None:
    if declared != name:
        raise Refused(f"its name {declared!r} differs from its entry-point name {name!r}")


def one_of(what: str, value: object, allowed: Iterable[object]) -> None:
    allowed = tuple(allowed)
    if value not in allowed:
        raise Refused(f"its {what} {value!r} is not one of {', '.join(map(repr, allowed))}")


def number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def parameters(defaults: object) -> None:
    """Defaults are a dict of string names that a YAML space can write as keys."""
    if not isinstance(defaults, dict) or not all(isinstance(k, str) for k in defaults):
        raise Refused("its defaults are not a dict of parameter names to values")
    clash = sorted(set(defaults) & YAML_BOOLS)
    if clash:
        raise Refused(f"its parameter names {clash} are booleans in YAML 1.1; rename them")


def overrides(cls: type, base: type, method: str) -> bool:
    return getattr(cls, method, None) is not getattr(base, method)


def same_call(cls: type, base: type, method: str) -> None:
    """``cls.method`` accepts the positional arguments ``base.method`` is called with."""
    ours = getattr(cls, method)
    theirs = inspect.signature(getattr(base, method))
    n_args = len(theirs.parameters) - 1  # without self
    try:
        inspect.signature(ours).bind(None, *[None] * n_args)
    except (TypeError, ValueError):
        raise Refused(
            f"its method {method}{inspect.signature(ours)} does not take the arguments "
            f"{method}{theirs} is called with"
        ) from None


def builds(build: Callable[[], object], where: str) -> None:
    try:
        build()
    except Exception as err:
        raise Refused(f"building it {where} failed: {type(err).__name__}: {err}") from None
