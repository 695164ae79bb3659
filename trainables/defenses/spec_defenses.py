"""From a TrialSpec's defense fields to hook entries per party, and back to the record.

A spec names a primary defense (``defense``, ``defense_param``, ``defense_params``) and
optionally more in ``stack``; they are applied in that order, each at its party. The
active party is party K-1; a passive-party defense is installed at every passive party.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainables.defenses import applied
from trainables.defenses.applied import Applied
from trainables.defenses.base import DEFENSES, Defense
from trainables.spec import Params, TrialSpec


@dataclass(frozen=True)
class StackEntry:
    name: str
    strength: float | None
    params: Params


def entries(spec: TrialSpec) -> list[StackEntry]:
    """The spec's defenses in stack order (none for ``defense='none'`` and no stack)."""
    out = []
    if spec.defense != "none":
        out.append(StackEntry(spec.defense, spec.defense_param, dict(spec.defense_params)))
    out += [StackEntry(e.name, e.strength, dict(e.params)) for e in spec.stack]
    return out


# The message kinds each party of a plain (non-SSL) NN trial sends to another party
# (``trainables.party``): the active party only gradients, a passive one its embeddings.
PLAIN_SENDS: dict[str, tuple[str, ...]] = {
    "active": ("gradient",),
    "passive": ("embedding", "train_embedding", "test_embedding"),
}


HookEntry = tuple[str, str, dict[str, Any]]  # (family, name, params), as in PartyInit.hooks


@dataclass(frozen=True)
class SpecDefenses:
    """A spec's defenses read once: each entry beside its built ``Defense`` (names,
    strengths and parameters validated by building). A trial compiles its stack when it
    prepares its parties, installs their hooks from it and hands the same object to its
    record, so the hooks that ran and the record's defense columns come from one reading
    of the spec. Each party still builds its own hook objects from ``hook_entries``: on a
    remote actor they must be built there, with their own random streams."""

    seed: int
    n_parties: int
    primary: bool  # the spec names a primary defense (``defense != 'none'``)
    entries: tuple[StackEntry, ...]
    defenses: tuple[Defense, ...]  # entries[i] built, ``index=i``

    @classmethod
    def compile(cls, spec: TrialSpec) -> SpecDefenses:
        """ConfigError for a bad name, strength or parameter."""
        found = tuple(entries(spec))
        built = tuple(
            DEFENSES.create(e.name, strength=e.strength, seed=spec.seed, index=i, **e.params)
            for i, e in enumerate(found)
        )
        return cls(spec.seed, spec.n_parties, spec.defense != "none", found, built)

    def incompatibility(self, sends: dict[str, tuple[str, ...]] = PLAIN_SENDS) -> str | None:
        """Why a defense could never act in a trial whose parties send ``sends`` (the
        planner drops the cell), or None. A neutral strength acts on nothing by definition
        and trains like no defense: it runs."""
        for defense in self.defenses:
            why = defense.inapplicable(sends[defense.party]) if defense.must_apply() else None
            if why is not None:
                given = ", ".join(f"{k}={v}" for k, v in sorted(defense.params.items()))
                given = f" ({given})" if given else ""
                return f"defense {defense.name}{given} would never apply: {why}"
        return None

    def hook_entries(self) -> dict[int, list[HookEntry]]:
        """``PartyInit.hooks`` entries per party index: an active-party defense at party
        K-1, a passive-party one at every passive party."""
        out: dict[int, list[HookEntry]] = {}
        active = self.n_parties - 1
        for i, (entry, defense) in enumerate(zip(self.entries, self.defenses, strict=True)):
            params = {"strength": entry.strength, "seed": self.seed, "index": i, **entry.params}
            targets = [active] if defense.party == "active" else list(range(active))
            for k in targets:
                out.setdefault(k, []).append(("defense", entry.name, params))
        return out

    def record_fields(self, merged: Sequence[Applied], sample_rate: float) -> dict[str, Any]:
        """The record's defense columns: ``defense_party`` (``active``, ``passive``,
        ``+``-joined for a stack, empty without), ``defense_param`` (the primary strength
        as applied, its default filled in) and ``epsilon`` at delta=1e-5 of the accounted
        defenses (G-DP at the active party; summed over a stack by basic composition; None
        if none accounts), each after the releases its mechanism counted (``merged``:
        ``checked``'s entries)."""
        built, steps = self.defenses, {entry.key: entry.dp_steps for entry in merged}
        spent = [
            eps
            for d in built
            if hasattr(d, "privacy_spent")
            and (eps := d.privacy_spent(steps.get(d.index) or 0, sample_rate)) is not None
        ]
        return {
            "defense_party": "+".join(d.party for d in built),
            "defense_param": built[0].strength if built and self.primary else None,
            "epsilon": float(sum(spent)) if spent else None,
        }


def checked(reports: Sequence[Sequence[dict[str, object]]], by: str = "index") -> list[Applied]:
    """Each defense's applications and counted releases, merged from the per-party reports
    (``Party.defense_applied``); raises ``DefenseNeverApplied`` if a defense at a
    non-neutral strength never changed anything."""
    merged = applied.merge(reports, by=by)
    applied.check(merged)
    return merged


def extra_json(merged: Sequence[Applied]) -> str:
    """The record's ``extra`` JSON with each defense's application counts."""
    return json.dumps(applied.as_extra(merged), sort_keys=True)
