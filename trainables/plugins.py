"""Third-party plugins: entry points that add attacks, defenses, datasets and trial kinds.

A package declares, in its ``pyproject.toml``, entries in the groups ``vflsweep.attacks``,
``vflsweep.defenses``, ``vflsweep.datasets`` or ``vflsweep.kinds`` (name = the name a space
uses, value = ``module:object``). The family's ``Registry`` reads its group on its first
read (``trainables/registry.py``) and hands every entry to ``load_group``, which checks it
with the family's ``check_*`` below before registering it.

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
from typing import TYPE_CHECKING, Any, get_args

from trainables.errors import ConfigError, MissingDataError

if TYPE_CHECKING:
    from trainables.registry import Registry

# YAML 1.1 reads these bare words as booleans: a parameter of that name cannot be set
YAML_BOOLS = frozenset(
    "y Y yes Yes YES n N no No NO true True TRUE false False FALSE on On ON off Off OFF".split()
)
# The hooks through which a defense changes a training (``Defense``'s identity defaults)
DEFENSE_HOOKS = ("on_send", "on_receive", "loss_term", "soft_targets", "gradients", "attach")
KIND_METHODS = ("takes", "actors", "check", "incompatibility", "attack_incompatibility", "run")


class Refused(Exception):
    """What is wrong with a plugin, in words; ``load_group`` adds which plugin and package."""


class PluginWarning(UserWarning):
    """A refused plugin that no sweep has named yet: shown once, breaks nothing."""


def load_group(registry: Registry[Any]) -> None:
    """Check every entry point of ``registry.group`` and register it, or refuse it.

    An entry already registered from the same package (a second load) is skipped.
    """
    check = CHECKS[str(registry.group)]
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
    registry: Registry[Any], ep: EntryPoint, package: str, check: Callable[[Any, str], Any]
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


# -- the rules, per family --------------------------------------------------------------
def check_defense(cls: Any, name: str) -> Any:
    """The rules every defense obeys (``tests/test_defense_conformance.py``): a ``Defense``
    subclass named ``name`` whose ``DefenseInfo`` is consistent (its party among its
    parties, grid and neutral strength within [low, high], a quantity), whose parameter
    names YAML can write, which overrides at least one hook with the base's arguments and
    which builds at every grid strength and at its neutral one."""
    from trainables.defenses.base import PARTIES, Defense, DefenseInfo

    _subclass(cls, Defense)
    _named(cls.name, name)
    info = cls.info if isinstance(getattr(cls, "info", None), DefenseInfo) else None
    if info is None:
        raise Refused("its info is not a DefenseInfo")
    if info.party not in info.parties or not set(info.parties) <= set(PARTIES):
        raise Refused(
            f"its info.party {info.party!r} is not one of its info.parties {info.parties} "
            f"(each one of {', '.join(PARTIES)})"
        )
    if not info.grid:
        raise Refused("its info.grid is empty (give the strengths a sweep tries by default)")
    bounded = [("info.grid value", s) for s in info.grid]
    if info.neutral is not None:
        bounded.append(("info.neutral", info.neutral))
    for what, value in bounded:
        if not _number(value) or not info.low <= value <= info.high:
            raise Refused(f"its {what} {value!r} lies outside [{info.low}, {info.high}]")
    if not info.quantity:
        raise Refused("its info.quantity is empty (say what the strength moves)")
    _parameters(cls.defaults)
    hooks = [h for h in DEFENSE_HOOKS if _overrides(cls, Defense, h)]
    if not hooks:
        raise Refused(
            f"it is missing method on_send (or another hook: {', '.join(DEFENSE_HOOKS[1:])}); "
            "a defense that overrides none changes nothing"
        )
    for hook in hooks:
        _same_call(cls, Defense, hook)
    for strength in {*info.grid, *([info.neutral] if info.neutral is not None else [])}:
        _builds(lambda s=strength: cls(strength=s), f"at strength {strength}")
    return cls


def check_attack(cls: Any, name: str) -> Any:
    """The rules every attack obeys (``tests/test_attack_conformance.py``): an ``Attack``
    subclass named ``name`` with an ``AttackInfo`` of a known type and role, a known
    ``family``, YAML-writable defaults without ``preset``, presets that change only known
    parameters, ``run(view)`` (and ``install`` when it tampers with training), and which
    builds at its defaults and at each preset."""
    from trainables.attacks.base import Attack, AttackInfo, AttackType

    _subclass(cls, Attack)
    _named(cls.name, name)
    info = cls.info if isinstance(getattr(cls, "info", None), AttackInfo) else None
    if info is None:
        raise Refused("its info is not an AttackInfo")
    _one_of("info.type", info.type, get_args(AttackType))
    _one_of("info.role", info.role, ("passive", "active"))
    _one_of("family", cls.family, ("nn", "trees"))
    _parameters(cls.defaults)
    if "preset" in cls.defaults:
        raise Refused("its defaults name 'preset', the key that carries a preset")
    for preset, values in cls.presets.items():
        unknown = sorted(set(values) - set(cls.defaults))
        if unknown or not any(cls.defaults[k] != v for k, v in values.items()):
            why = f"sets unknown parameters {unknown}" if unknown else "changes no default"
            raise Refused(f"its preset {preset!r} {why}")
    if not _overrides(cls, Attack, "run"):
        raise Refused("it is missing method run(view), which returns its guess")
    _same_call(cls, Attack, "run")
    if info.training_time:
        if not _overrides(cls, Attack, "install"):
            raise Refused(
                "it is missing method install(party, aux): a training-time attack "
                "(info.training_time) tampers with its party there"
            )
        _same_call(cls, Attack, "install")
    for preset in (None, *cls.presets):
        _builds(lambda p=preset: cls(preset=p), f"with preset {preset}")
    return cls


def check_kind(obj: Any, name: str) -> Any:
    """The rules every trial kind obeys (``tests/test_kind_conformance.py``): a
    ``TrialKind`` (class or instance) named ``name`` with ``run``, its other methods taking
    the base's arguments, taking some spec (``ssl_variants`` or ``takes``) but no spec
    another registered kind takes: neither its ``ssl_variants`` nor plain NN VFL."""
    from trainables.kinds import TRIAL_KINDS
    from trainables.kinds.base import TrialKind
    from trainables.spec import TrialSpec

    kind = obj() if isinstance(obj, type) and issubclass(obj, TrialKind) else obj
    if not isinstance(kind, TrialKind):
        raise Refused("it is neither a subclass nor an instance of trainables.kinds.TrialKind")
    _named(kind.name, name)
    if not _overrides(type(kind), TrialKind, "run"):
        raise Refused("it is missing method run(spec, ds, placement, attacks)")
    for method in KIND_METHODS:
        if _overrides(type(kind), TrialKind, method):
            _same_call(type(kind), TrialKind, method)
    if not kind.ssl_variants and not _overrides(type(kind), TrialKind, "takes"):
        raise Refused("it takes no spec: it has no ssl_variants and no method takes(spec)")
    others = {n: TRIAL_KINDS.get(n) for n in TRIAL_KINDS.names() if n != name}
    for other, known in others.items():
        shared = sorted((set(kind.ssl_variants) & set(known.ssl_variants)) - {"none"})
        if shared:
            raise Refused(f"its ssl_variants {shared} are served by the kind {other!r}")
    plain = TrialSpec.build(dataset="breast_cancer")
    takers = [n for n, k in others.items() if k.takes(plain)]
    if takers and kind.takes(plain):
        raise Refused(f"it takes plain NN VFL specs, which the kind {takers[0]!r} runs")
    return kind


def check_dataset(loader: Any, name: str) -> Any:
    """The rules every dataset loader obeys (``tests/test_data.py``,
    ``tests/test_plan_without_data.py``): called as ``loader(data_dir, **params)``, it
    refuses an unknown parameter with a ConfigError (a typo must not pass silently); a
    loader marked ``@builtin`` (needs no files) returns a valid ``Dataset`` named ``name``
    on a call with no parameters; one that reads files declares its class count with
    ``@classes(n)``, so that a dry run plans it without its files."""
    from trainables.data.dataset import Dataset

    if not callable(loader):
        raise Refused("it is not callable as loader(data_dir, **params)")
    try:
        inspect.signature(loader).bind(None, zz_probe=1)
    except TypeError:
        raise Refused("it is not callable as loader(data_dir, **params)") from None
    try:
        loader(None, zz_probe=1)
    except MissingDataError:
        raise Refused("it looks for files before refusing an unknown parameter") from None
    except ConfigError:
        pass
    else:
        raise Refused("it took the unknown parameter zz_probe=1 (call reject_params)")
    if getattr(loader, "ignores_data_dir", False):
        ds = loader(None)
        if not isinstance(ds, Dataset) or ds.name != name:
            got = f"Dataset {ds.name!r}" if isinstance(ds, Dataset) else type(ds).__name__
            raise Refused(f"loader(None) returned {got}, not a Dataset named {name!r}")
        return loader
    n_classes = getattr(loader, "n_classes", None)
    if not isinstance(n_classes, int) or isinstance(n_classes, bool) or n_classes < 2:
        raise Refused(
            "it reads files but declares no class count >= 2 (mark it @classes(n), or "
            "@builtin if it needs no files)"
        )
    return loader


CHECKS: dict[str, Callable[[Any, str], Any]] = {
    "vflsweep.attacks": check_attack,
    "vflsweep.defenses": check_defense,
    "vflsweep.datasets": check_dataset,
    "vflsweep.kinds": check_kind,
}


# -- shared pieces of the rules ---------------------------------------------------------
def _subclass(cls: Any, base: type) -> None:
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise Refused(f"it is not a subclass of {base.__module__}.{base.__name__}")


def _named(declared: object, name: str) -> None:
    if declared != name:
        raise Refused(f"its name {declared!r} differs from its entry-point name {name!r}")


def _one_of(what: str, value: object, allowed: Iterable[object]) -> None:
    allowed = tuple(allowed)
    if value not in allowed:
        raise Refused(f"its {what} {value!r} is not one of {', '.join(map(repr, allowed))}")


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _parameters(defaults: object) -> None:
    """Defaults are a dict of string names that a YAML space can write as keys."""
    if not isinstance(defaults, dict) or not all(isinstance(k, str) for k in defaults):
        raise Refused("its defaults are not a dict of parameter names to values")
    clash = sorted(set(defaults) & YAML_BOOLS)
    if clash:
        raise Refused(f"its parameter names {clash} are booleans in YAML 1.1; rename them")


def _overrides(cls: type, base: type, method: str) -> bool:
    return getattr(cls, method, None) is not getattr(base, method)


def _same_call(cls: type, base: type, method: str) -> None:
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


def _builds(build: Callable[[], object], where: str) -> None:
    try:
        build()
    except Exception as err:
        raise Refused(f"building it {where} failed: {type(err).__name__}: {err}") from None
