"""Trial kinds, by name: which code runs a spec. A new kind is one file plus one line here.

``kind_of(spec)`` is the only dispatch: each registered kind says whether it ``takes`` a
spec (plain NN VFL: ``ssl_variant: none`` with an NN model; FedHSSL family and FedCVT: their
``ssl_variant`` names; trees: a tree / Paillier ``model``), and exactly one does.
"""

from __future__ import annotations

from trainables.errors import ConfigError
from trainables.kinds.base import AttackSpec, TrialKind
from trainables.kinds.fedcvt import FedCVTKind
from trainables.kinds.fedssl import FedSSLKind
from trainables.kinds.hssl import HSSLKind
from trainables.kinds.nn import NNKind
from trainables.kinds.paillier_lr import PaillierLRKind
from trainables.kinds.tree import TreeKind
from trainables.registry import Registry
from trainables.spec import TrialSpec

TRIAL_KINDS: Registry[TrialKind] = Registry("trial kind", "vflsweep.kinds", "trainables.kinds")
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
