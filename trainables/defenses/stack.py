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
from trainables.spec import TrialSpec


@dataclass(frozen=True)
class StackEntry:
    name: str
    strength: float | None
    params: dict[str, Any]


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


def incompatibility(spec: TrialSpec, sends: dict[str, tuple[str, ...]] = PLAIN_SENDS) -> str | None:
    """Why a defense of ``spec`` could never act in its trial (the planner drops the cell),
    or None; ConfigError for bad names or parameters. A neutral strength acts on nothing
    by definition and trains like no defense: it runs."""
    for defense in build(spec):
        why = defense.inapplicable(sends[defense.party]) if defense.must_apply() else None
        if why is not None:
            given = ", ".join(f"{k}={v}" for k, v in sorted(defense.params.items()))
            given = f" ({given})" if given else ""
            return f"defense {defense.name}{given} would never apply: {why}"
    return None


def build(spec: TrialSpec) -> list[Defense]:
    """Instantiate every defense once (validates names, strengths and parameters)."""
    return [
        DEFENSES.create(e.name, strength=e.strength, seed=spec.seed, index=i, **e.params)  # type: ignore[misc]
        for i, e in enumerate(entries(spec))
    ]


def hook_entries(spec: TrialSpec) -> dict[int, list[tuple[str, str, dict[str, Any]]]]:
    """``PartyInit.hooks`` entries per party index for the spec's defenses."""
    out: dict[int, list[tuple[str, str, dict[str, Any]]]] = {}
    active = spec.n_parties - 1
    for i, (entry, defense) in enumerate(zip(entries(spec), build(spec), strict=True)):
        params = {"strength": entry.strength, "seed": spec.seed, "index": i, **entry.params}
        targets = [active] if defense.party == "active" else list(range(active))
        for k in targets:
            out.setdefault(k, []).append(("defense", entry.name, params))
    return out


def record_fields(spec: TrialSpec, merged: Sequence[Applied], sample_rate: float) -> dict[str, Any]:
    """The record's defense columns: ``defense_party`` (``active``, ``passive``, ``+``-joined
    for a stack, empty without), ``defense_param`` (the primary strength as applied, its
    default filled in) and ``epsilon`` at delta=1e-5 of the accounted defenses (G-DP at the
    active party; summed over a stack by basic composition; None if none accounts), each
    after the releases its mechanism counted (``merged``: ``checked``'s entries)."""
    built = build(spec)
    steps = {entry.key: entry.dp_steps for entry in merged}
    spent = [
        eps
        for d in built
        if hasattr(d, "privacy_spent")
        and (eps := d.privacy_spent(steps.get(d.index) or 0, sample_rate)) is not None
    ]
    return {
        "defense_party": "+".join(d.party for d in built),
        "defense_param": built[0].strength if built and spec.defense != "none" else None,
        "epsilon": float(sum(spent)) if spent else None,
    }


def checked(reports: Sequence[Sequence[dict[str, Any]]], by: str = "index") -> list[Applied]:
    """Each defense's applications and counted releases, merged from the per-party reports
    (``Party.defense_applied``); raises ``DefenseNeverApplied`` if a defense at a
    non-neutral strength never changed anything."""
    merged = applied.merge(reports, by=by)
    applied.check(merged)
    return merged


def extra_json(merged: Sequence[Applied]) -> str:
    """The record's ``extra`` JSON with each defense's application counts."""
    return json.dumps(applied.as_extra(merged), sort_keys=True)
