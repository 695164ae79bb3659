"""A defense (or another hook) of K same-shape trainings at a stacked party, declared by
the hook.

Why the defense declares it: a vectorized pack (``vfl/stacked_party.py``) holds the K
trainings' models as stacked parameters and computes one batched loss for all of them.
A defense that reaches into the model, the loss or its gradients (MID, CAE, DCAE, dCor,
GPer) must then act on the stack, which only the defense knows how to do. So each
``Defense`` class names its stacked form (``Defense.stacked``): this base, for a defense
that acts on messages only (the stack sends each training's slice through that
training's own hook chain, nothing else is needed), a subclass in the defense's own file
for one with model hooks, or None for one that does not stack with other trainings (a
plugin's): it then trains as a stack of one, through its own single-training hooks
(``LoopedDefense``). No executor inspects a defense's methods.

What stays per training: its own strength, random stream and application counts (the
members, ``Defense`` objects built at each training's party, are used for all three), so
a stacked training equals the same training alone up to float summation order.

Shapes: K trainings, B rows of the batch, C the width of each H_k, P-1 passive parties.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

import numpy as np
import torch

from trainables.messages import BatchRef

Index = torch.Tensor | None  # (K',) which trainings of the stack a call is about; None: all


class Weighted(Protocol):
    """A member as the base's helpers read it: its strength (a ``Defense``'s)."""

    @property
    def strength(self) -> float: ...


class LoneDefense(Protocol):
    """A defense without a stacked form, as ``LoopedDefense`` calls it: ``Defense``'s
    single-training hooks."""

    def loss_term(self, h_passive: list[torch.Tensor], y: torch.Tensor) -> torch.Tensor | None: ...

    def soft_targets(self, y: torch.Tensor) -> torch.Tensor | None: ...

    def gradients(
        self,
        grads: list[torch.Tensor],
        logits: torch.Tensor,
        h_passive: list[torch.Tensor],
        y: torch.Tensor,
    ) -> list[torch.Tensor]: ...


class StackedHook:
    """Base: the message-only form (identity on every model hook).

    ``stack``, which the hooks below are called with, is the ``StackedParty``
    (``vfl/stacked_party.py``): it builds its hooks from this module, so this one cannot
    name it, and each form that reads it names it in its own signature. ``members`` are
    what each form's own hooks are (a ``Defense`` subclass, an attack's hook, CELU-VFL's
    workset): a form reads its own kind's attributes.
    """

    # whether the defense acts on messages (then each training's messages go through its
    # own hook chain, one ``Message`` per training); a form with model hooks only says no
    messages: ClassVar[bool] = True
    # whether it has model hooks (the stack builds it, and trainings stack only with
    # trainings of the same such defenses); the base has none
    model: ClassVar[bool] = False

    def __init__(self, members: Sequence[Any], device: torch.device) -> None:
        self.members = list(members)  # training j's own Defense (its strength, stream, counts)
        self.device = device
        self.params: list[torch.Tensor] = []  # stacked parameters the party's optimizer steps

    def at(self, index: Index = None) -> list[Any]:
        """The members of the trainings ``index`` (K',) names, in its order (all: None).
        Where the hooks below take ``index``, their tensors hold those K' trainings only
        (CELU-VFL's cached steps group trainings by the size of the batch each drew)."""
        return self.members if index is None else [self.members[int(j)] for j in index]

    def strengths(self, members: Sequence[Weighted]) -> torch.Tensor:
        """(len(members),) each one's strength."""
        return torch.tensor([m.strength for m in members], device=self.device)

    @staticmethod
    def acting(members: Sequence[Weighted]) -> list[int]:
        """Positions of the members whose strength is not zero (0 turns the loss and
        gradient hooks off, as each defense's own hook does)."""
        return [j for j, m in enumerate(members) if m.strength != 0.0]

    def transform(
        self, h_passive: list[torch.Tensor], training: bool, index: Index = None
    ) -> list[torch.Tensor]:
        """(P-1) x (K, B, C) passive embeddings before the top (MID's bottlenecks)."""
        return h_passive

    def loss_terms(
        self, h_passive: list[torch.Tensor], y: torch.Tensor, index: Index = None
    ) -> torch.Tensor | None:
        """(K,) each training's term added to its loss, or None (y: (K, B))."""
        return None

    def soft_targets(self, y: torch.Tensor, index: Index = None) -> torch.Tensor | None:
        """(K, B, C) the labels each training trains on, or None for the true ones."""
        return None

    def gradients(
        self,
        grads: list[torch.Tensor],
        logits: torch.Tensor,
        h_passive: list[torch.Tensor],
        y: torch.Tensor,
    ) -> list[torch.Tensor]:
        """The (P-1) x (K, B, C) gradients before they are sent (logits: (K, B, C))."""
        return grads

    def decode(self, logits: torch.Tensor) -> torch.Tensor:
        """(K, N, C) the released output from the logits (CAE's decoder), at evaluation."""
        return logits

    def install(self, stack: Any) -> None:
        """Once the stack is built, before training (AMC wraps its optimizer here)."""

    def batch_rows(self, stack: Any, ref: BatchRef, rows: torch.Tensor) -> torch.Tensor:
        """(K, B') the row positions the stack trains on in round ``ref``, from its own
        schedule's (K, B): a colluding LRB adds rows to every batch (``lrb_colluding``)."""
        return rows

    def on_gradient(self, stack: Any, rows: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """At a passive stack, the received dL/dH (K, B, C) before the party steps on it."""
        return grad

    def on_forward(
        self, stack: Any, rows: torch.Tensor, h: torch.Tensor, payload: np.ndarray
    ) -> tuple[torch.Tensor, np.ndarray]:
        """At a passive stack, H (K, B, C) with its graph and the (K, B, C) array about to
        be sent, for rows (K, B): what the party keeps and what it sends (LRB swaps rows)."""
        return h, payload

    def after_backward(
        self, stack: Any, rows: torch.Tensor, h_sent: torch.Tensor, grad: torch.Tensor
    ) -> None:
        """At a passive stack, after the exchanged step: rows (K, B), H as sent and the
        received dL/dH (K, B, C) (CELU-VFL's workset takes its cached steps here)."""

    def after_update(
        self, stack: Any, rows: torch.Tensor, own: torch.Tensor, received: list[torch.Tensor]
    ) -> None:
        """At the active stack, after its update: rows (K, B), its own H (K, B, C) and the
        (P-1) x (K, B, C) passive H of the exchange."""

    def write_back(self, slots: Sequence[int]) -> None:
        """Training j's trained slice into ``members[j]``'s own modules (the attack harness
        and the released model read those)."""


def scatter(values: torch.Tensor, index: Sequence[int], k: int) -> torch.Tensor:
    """(len(index),) values at positions ``index`` of a (k,) zero vector, differentiably:
    the trainings outside ``index`` get a term of exactly 0 with no gradient at all."""
    idx = torch.tensor(list(index), dtype=torch.long, device=values.device)
    return torch.zeros(k, dtype=values.dtype, device=values.device).index_add(0, idx, values)


class LoopedDefense(StackedHook):
    """A defense that declares no stacked form (``stacked = None``: a plugin's) at a stack
    of one training: its own hooks (``Defense.loss_term``, ``soft_targets``,
    ``gradients``, ``on_send`` / ``on_receive``) on the training's slice, (1, B, C) as
    (B, C). What it does not see: transforms or a decoder it would add to the top in
    ``attach`` and parameters of its own (a defense that trains some declares a stacked
    form, as MID and CAE do)."""

    messages = True
    model = True

    def __init__(self, members: Sequence[LoneDefense], device: torch.device) -> None:
        if len(members) != 1:
            raise ValueError(f"a defense without a stacked form trains alone, not {len(members)}")
        super().__init__(members, device)
        self.defense = members[0]

    def loss_terms(
        self, h_passive: list[torch.Tensor], y: torch.Tensor, index: Index = None
    ) -> torch.Tensor | None:
        term = self.defense.loss_term([h[0] for h in h_passive], y[0])
        return None if term is None else term.reshape(1)

    def soft_targets(self, y: torch.Tensor, index: Index = None) -> torch.Tensor | None:
        soft = self.defense.soft_targets(y[0])
        return None if soft is None else soft.unsqueeze(0)

    def gradients(
        self,
        grads: list[torch.Tensor],
        logits: torch.Tensor,
        h_passive: list[torch.Tensor],
        y: torch.Tensor,
    ) -> list[torch.Tensor]:
        out = self.defense.gradients(
            [g[0] for g in grads], logits[0], [h[0] for h in h_passive], y[0]
        )
        return [g.unsqueeze(0) for g in out]


def stacked_form(hook: Any) -> type[StackedHook] | None:
    """The stacked form of a party's hook: what its class declares (``stacked``); for a
    defense that declares None, ``LoopedDefense``; None for a hook with no such
    declaration (a message log, a plugin attack's message hook): it acts on messages."""
    if not hasattr(type(hook), "stacked"):
        return None
    return type(hook).stacked or LoopedDefense
