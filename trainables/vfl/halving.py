"""Successive halving inside a stacked pack: the losers leave the stack at each rung.

Why here and not in Tune: a grid runs several trainings per Tune trial (a pack), and the
trainings of one shape train as one stack (``stacked_party.py``), so Tune's schedulers,
which stop trials, cannot stop one of them. The stack can: at each rung (``rungs``:
``grace_epochs``, x ``reduction_factor``, ... below the trainings' epochs) every training
is scored on its validation rows, the cells (a training's spec but its seed: its seeds
are judged together, by their mean) outside the best 1/``reduction_factor`` stop, and
their slices leave every party's stack (``StackedParty.keep``), so the rest trains cheaper.

How it relates to ASHA (Li et al., 2020): the same rungs and the same keep-the-top-1/η
rule, but synchronous within a pack: every training of the stack reaches a rung together
and the cut is taken over all of them at once, which is Successive Halving's own rule
(Jamieson & Talwalkar, 2016), not ASHA's asynchronous promotion. ASHA's guarantee that it
approximates Successive Halving as trials accumulate does not apply, and none is needed:
this is Successive Halving over the pack's trainings of one shape, whose budget is exact
(ceil(n/η^i) cells train past rung i). Cells in other stacks (another epoch count,
another dataset, another pack) are not compared with each other: halving decides among
trainings of one stack only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Halving:
    """``run.halving``: from ``grace_epochs`` on, keep the best 1/``reduction_factor``."""

    grace_epochs: int = 1
    reduction_factor: int = 3

    def rungs(self, epochs: int) -> list[int]:
        """The epoch counts at which a stack of ``epochs``-epoch trainings is cut."""
        out, rung = [], self.grace_epochs
        while rung < epochs:
            out.append(rung)
            rung *= self.reduction_factor
        return out

    def label(self) -> str:
        return f"halving:{self.grace_epochs}x{self.reduction_factor}"


def survivors(cells: Sequence[str], scores: Sequence[float], eta: int) -> list[int]:
    """Positions of the trainings that go on: every training of the best ceil(n/``eta``)
    of the n cells, by the mean of their trainings' ``scores`` (a NaN scores lowest;
    ties keep the cell seen first)."""
    by_cell: dict[str, list[float]] = {}
    for cell, score in zip(cells, scores, strict=True):
        by_cell.setdefault(cell, []).append(-math.inf if math.isnan(score) else score)
    order = list(by_cell)
    ranked = sorted(order, key=lambda c: (-sum(by_cell[c]) / len(by_cell[c]), order.index(c)))
    kept = set(ranked[: max(1, math.ceil(len(ranked) / eta))])
    return [j for j, cell in enumerate(cells) if cell in kept]
