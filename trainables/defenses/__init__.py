"""Defenses, by name (VFLAIR's eight plus FedHSSL's ISO).

One file per defense; a new defense is one file plus one line in ``MODULES``.
tests/test_defense_conformance.py runs every registered defense through the same checks.
"""

from __future__ import annotations

import importlib

from trainables.defenses.base import DEFENSES, Defense, DefenseInfo

# Each module defines ``DEFENSE``, its class, registered under ``DEFENSE.name``.
MODULES: tuple[str, ...] = ("gdp", "ldp", "gs", "gper", "dcor", "cae", "dcae", "mid", "iso")


def _register_all() -> None:
    for module in MODULES:
        cls = importlib.import_module(f"trainables.defenses.{module}").DEFENSE
        if cls.name not in DEFENSES:
            DEFENSES.register(cls.name, cls)


_register_all()

__all__ = ["DEFENSES", "MODULES", "Defense", "DefenseInfo"]
