"""Trial kinds, by name: which code runs a spec. A new kind is one file plus one line here.

``kind_of(spec)`` is the only dispatch: each registered kind says whether it ``takes`` a
spec (plain NN VFL: ``ssl_variant: none`` with an NN model; FedHSSL family and FedCVT: their
``ssl_variant`` names; trees: a tree / Paillier ``model``), and exactly one does.
"""

from __future__ import annotations

from trainables.errors import ConfigError
from trainables.jobs import AttackSpec
from trainables.kinds.base import TrialKind
from trainables.kinds.fedcvt import FedCVTKind
from trainables.kinds.fedssl import FedSSLKind
from trainables.kinds.hssl import HSSLKind
from trainables.kinds.nn import NNKind
from trainables.kinds.paillier_lr import PaillierLRKind
from trainables.kinds.tree import TreeKind
from trainables.plugins import Refused, named, overrides, same_call
from trainables.registry import Registry
from trainables.spec import TrialSpec


def check_kind(obj: object, name: str) -> TrialKind:
    """The rules every trial kind obeys (``tests/test_kind_conformance.py``): a
    ``TrialKind`` (class or instance) named ``name`` with ``run``, its other methods taking
    the base's arguments, taking some spec (``ssl_variants`` or ``takes``) but no spec
    another registered kind takes: neither its ``ssl_variants`` nor plain NN VFL."""
    kind = obj() if isinstance(obj, type) and issubclass(obj, TrialKind) else obj
    if not isinstance(kind, TrialKind):
        raise Refused("it is neither a subclass nor an instance of trainables.kinds.TrialKind")
    named(kind.name, name)
    if not overrides(type(kind), TrialKind, "run"):
        raise Refused("it is missing method run(spec, ds, placement, attacks)")
    for method in KIND_METHODS:
        if overrides(type(kind), TrialKind, method):
            same_call(type(kind), TrialKind, method)
    if not kind.ssl_variants and not overrides(type(kind), TrialKind, "takes"):
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


# The methods a kind may override; each must take the base's arguments (``check_kind``)
KIND_METHODS = ("takes", "actors", "check", "incompatibility", "attack_incompatibility", "run")


TRIAL_KINDS: Registry[TrialKind] = Registry(
    "trial kind", "vflsweep.kinds", "trainables.kinds", check=check_kind
)
TRIAL_KINDS.register("nn", NNKind())
TRIAL_KINDS.register("hssl", HSSLKind())
TRIAL_KINDS.register("fedcvt", FedCVTKind())
TRIAL_KINDS.register("fedssl", FedSSLKind())
TRIAL_KINDS.register("tree", TreeKind())
TRIAL_KINDS.register("paillier_lr", PaillierLRKind())


def ssl_variant_names() -> list[str]:
    """Every ``ssl_variant`` some kind serves (``none`` first)."""
    names = {v for k in TRIAL_KINDS for v in TRIAL_KINDS.get(k).ssl_variants} - {"none"}
    return ["none", *sorted(names)]


def kind_of(spec: TrialSpec) -> TrialKind:
    """The kind that runs ``spec``; ConfigError naming the bad ``ssl_variant`` or ``model``."""
    taken = [TRIAL_KINDS.get(k) for k in TRIAL_KINDS if TRIAL_KINDS.get(k).takes(spec)]
    if len(taken) == 1:
        return taken[0]
    if len(taken) > 1:
        raise ConfigError(
            f"model={spec.model!r} with ssl_variant={spec.ssl_variant!r} fits several trial "
            f"kinds ({', '.join(k.name for k in taken)}); tree / Paillier models run with "
            "ssl_variant: none"
        )
    if spec.ssl_variant not in ssl_variant_names():
        allowed = ", ".join(ssl_variant_names())
        raise ConfigError(f"unknown ssl_variant={spec.ssl_variant!r}; allowed: {allowed}")
    from trainables.models import BOTTOMS

    BOTTOMS.get(str(spec.model))  # unknown model: lists the NN bottoms
    raise ConfigError(
        f"model={spec.model!r} does not run with ssl_variant={spec.ssl_variant!r}; "
        f"tree / Paillier models run with ssl_variant: none"
    )


__all__ = ["TRIAL_KINDS", "AttackSpec", "TrialKind", "kind_of", "ssl_variant_names"]
