"""Did each defense of a training act? Counts from every party, merged, checked.

Why: a record saying ``defense=iso, defense_param=25`` must mean ISO changed something.
A defense whose hooks never fired (ISO on representations in a trial where the active
party sends none) trains exactly like no defense; DCS would rank it a free, perfect
defense. Each ``Defense`` counts its applications (``Defense.count``); after training the
trial gathers ``party_reports`` from every party (in-process, or from each Ray actor with
the party's ``defense_applied``), ``merge``-s them, and ``check`` raises
``DefenseNeverApplied`` for a defense at a non-neutral strength that never applied. The
sweep records that training as an error record; the counts of a training that passed go
into the record's ``extra`` (``as_extra``) as evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainables.defenses.base import Defense


class DefenseNeverApplied(RuntimeError):
    """A defense at a non-neutral strength changed nothing in a training (not bad input:
    the spec was valid, the training is what it could not honestly be recorded as)."""


@dataclass
class Applied:
    """One defense of the stack, summed over the parties it was installed at."""

    key: int | str  # its place in the stack (or its name, where one spec entry made several)
    name: str
    must_apply: bool
    reasons: list[str] = field(default_factory=list)  # idle reasons of its instances
    counts: dict[str, int] = field(default_factory=dict)  # what changed -> times
    dp_steps: int | None = None  # releases its privacy accounting counted (``Defense.dp_steps``)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def in_training(self) -> int:
        """Applications during training: test-time messages (``test_*``) do not count, a
        defense must have changed what the model learnt from."""
        return sum(n for what, n in self.counts.items() if not what.startswith("test_"))


def party_reports(hooks: Iterable[object]) -> list[dict[str, object]]:
    """Plain-data counts of the defenses among one party's ``hooks`` (sent back by actors)."""
    out, seen = [], set()
    for hook in hooks:
        if isinstance(hook, Defense) and id(hook) not in seen:
            seen.add(id(hook))
            out.append(
                {
                    "index": hook.index,
                    "name": hook.name,
                    "must_apply": hook.must_apply(),
                    "reason": hook.idle_reason(),
                    "counts": dict(hook.applied),
                    "dp_steps": hook.dp_steps(),
                }
            )
    return out


def merge(reports: Sequence[Sequence[dict[str, Any]]], by: str = "index") -> list[Applied]:
    """Per-party reports summed per defense: ``by='index'`` (one stack entry per index; a
    passive-party defense has one instance per passive party) or ``by='name'``."""
    merged: dict[int | str, Applied] = {}
    for party in reports:
        for rep in party:
            key = rep[by]
            entry = merged.setdefault(key, Applied(key, rep["name"], bool(rep["must_apply"])))
            entry.must_apply = entry.must_apply or bool(rep["must_apply"])
            if rep["reason"] not in entry.reasons:
                entry.reasons.append(rep["reason"])
            for what, n in rep["counts"].items():
                entry.counts[what] = entry.counts.get(what, 0) + int(n)
            steps = rep.get("dp_steps")  # one party's (or one training's): they add up
            if steps is not None:
                entry.dp_steps = (entry.dp_steps or 0) + int(steps)
    return [merged[k] for k in sorted(merged, key=str)]


def check(applied: Sequence[Applied]) -> None:
    """DefenseNeverApplied for the first defense that had to act and never did."""
    for entry in applied:
        if entry.must_apply and entry.in_training == 0:
            raise DefenseNeverApplied(
                f"defense {entry.name} never applied: {'; '.join(entry.reasons)}"
            )


def as_extra(applied: Sequence[Applied]) -> dict[str, dict[str, dict[str, int]]]:
    """``{"defense_applied": {name: {what: times}}}`` for the record's ``extra`` JSON; a
    name that occurs twice in the stack is keyed ``name#index``."""
    names = [e.name for e in applied]
    out = {}
    for e in applied:
        key = e.name if names.count(e.name) == 1 else f"{e.name}#{e.key}"
        out[key] = dict(sorted(e.counts.items()))
    return {"defense_applied": out} if out else {}
