"""Attacks, by name (VFLAIR's benchmark plus FedHSSL's model completion).

One file per attack; a new attack is one file plus one line in ``_MODULES``.
"""

from __future__ import annotations

import importlib
import importlib.util

from trainables.attacks.base import (
    ATTACKS,
    Attack,
    AttackInfo,
    AuxData,
    FeatureGuess,
    InferenceTamper,
    LabelGuess,
    PartyView,
)

# Each module defines ``ATTACK``, its attack class, registered under ``ATTACK.name``.
# tests/test_attack_conformance.py checks that every name here is registered.
MODULES: tuple[str, ...] = (
    "ns",
    "ds",
    "dli",
    "bli",
    "pmc",
    "amc",
    "mc",
    "grn",
    "tbm",
    "lrb",
    "nsb",
    "mf",
    "tree_grad_li",
)


def _register_all() -> None:
    for module in MODULES:
        if importlib.util.find_spec(f"trainables.attacks.{module}") is None:
            continue
        mod = importlib.import_module(f"trainables.attacks.{module}")
        cls = mod.ATTACK
        if cls.name not in ATTACKS:
            ATTACKS.register(cls.name, cls)


_register_all()

__all__ = [
    "ATTACKS",
    "MODULES",
    "Attack",
    "AttackInfo",
    "AuxData",
    "FeatureGuess",
    "InferenceTamper",
    "LabelGuess",
    "PartyView",
]
