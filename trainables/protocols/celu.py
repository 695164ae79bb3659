"""CELU-VFL (Fu et al., VLDB 2022): FedBCD whose local updates reuse a cache of exchanges.

FedBCD spends its Q local steps on the batch just exchanged, with ever staler values.
CELU-VFL instead keeps a workset of the W most recent exchanges at every party and
spends the extra steps on batches sampled from it, weighting each sample by how stale its
cached values look. The exact rule implemented here (VFLAIR's settings: Q=5, W=5,
xi=0.5 on MNIST, 0.8 on NUSWIDE):

Per round t, each party k first takes the ordinary FedSGD step on batch t with the fresh
exchange, then caches the entry (rows_t, H~_k, V~_k), dropping the oldest beyond W, where
H~_k = G_k(X_k[rows_t]) is its own embedding as it was at the exchange and V~_k the values
it received: dL/dH_k for a passive party, every passive embedding H~_j for the active
party. Then, Q - 1 times, it draws one entry uniformly from its workset (its own RNG,
seeded by trial seed and party id, so both transports agree), recomputes its fresh
embedding H = G_k(X_k[rows]) and weights sample i by

    w_i = cos(H_i, H~_k,i)  if  cos(H_i, H~_k,i) >= xi  else  0

(VFLAIR's ``ins_weight``: the party compares its own fresh and cached outputs, the only
staleness signal it can see without communicating). A passive party then steps with the
cached gradient scaled per sample, H.backward(w[:, None] * dL/dH~_k); the active party
steps on mean_i w_i * CE(F(H~_1..H~_{K-1}, H)_i, y_i) (bottom and top model). No message
is sent for any of these steps, so a round costs exactly FedSGD's bytes.

Design notes: the workset is a hook of the ``codec`` family (every party stacks it) whose
stacked form (``StackedWorkset``) the party's stack hands each exchange: a passive stack
after its exchanged step (``after_backward``), the active one after its update
(``after_update``), where it takes the cached steps. The original system also retires
an entry after R uses and samples without immediate repeats; a uniform draw over a FIFO
of W is the simplification. The active party's cached steps weight the per-sample
cross-entropy (or a defense's soft targets) and add its defenses' batch-level loss terms
unweighted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar
from typing import Protocol as TypingProtocol

import numpy as np
import torch
import torch.nn.functional as F

from trainables.defenses.stacked import Index, StackedHook
from trainables.errors import ConfigError
from trainables.messages import Message
from trainables.protocols.base import HookEntry, Protocol, Value
from trainables.roles import HookHost

if TYPE_CHECKING:
    from trainables.vfl.stacked_party import StackedParty


def staleness_weights(fresh: torch.Tensor, stale: torch.Tensor, xi: float) -> torch.Tensor:
    """(..., B, C), (..., B, C) -> (..., B): row cosine similarity, zeroed below ``xi``."""
    cos = F.cosine_similarity(fresh, stale, dim=-1)
    return torch.where(cos >= xi, cos, torch.zeros_like(cos))


@dataclass(frozen=True)
class CacheEntry:
    rows: torch.Tensor  # (B,) int64 row positions in the party's training rows
    own: torch.Tensor  # (B, C) this party's embedding when the batch was exchanged
    received: tuple[torch.Tensor, ...]  # passive: (dL/dH,) (B, C); active: K-1 x (B, C)


def _check_params(q: object, w: object, xi: object) -> None:
    for key, value in (("q", q), ("w", w)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"protocol 'celu': {key}={value!r} must be an integer >= 1")
    if isinstance(xi, bool) or not isinstance(xi, int | float) or not -1 <= float(xi) <= 1:
        raise ConfigError(f"protocol 'celu': xi={xi!r} must be a number in [-1, 1]")


class StackedWorkset(StackedHook):
    """K trainings' worksets at a stacked party (``vfl/stacked_party.py``): one cache of stacked
    exchanges (rows (K, B), H (K, B, C), received), and each cached step draws every
    training's entry from that training's own workset stream, as it would alone."""

    messages = False  # the stack hands it each exchange; it changes no message
    model = True

    def __init__(self, members: Sequence[CeluWorkset], device: torch.device) -> None:
        super().__init__(members, device)
        self.q, self.xi = members[0].q, members[0].xi  # one value per stack (its key)
        self.cache: deque[CacheEntry] = deque(maxlen=members[0].w)

    def _sample(self) -> list[tuple[Index, CacheEntry]]:
        """Each training's drawn entry, restacked by batch size: (which trainings, rows
        (K', B), own and received (K', B, C)) per size; one group of all (None) when every
        drawn batch has one size (always, when every batch of the schedule does)."""
        picks = [self.cache[int(m.rng.integers(len(self.cache)))] for m in self.members]
        sizes: dict[int, list[int]] = {}
        for j, entry in enumerate(picks):
            sizes.setdefault(int(entry.rows.shape[1]), []).append(j)
        groups = []
        for js in sizes.values():
            index = None if len(sizes) == 1 else torch.tensor(js, device=self.device)
            entry = CacheEntry(
                torch.stack([picks[j].rows[j] for j in js]),
                torch.stack([picks[j].own[j] for j in js]),
                tuple(
                    torch.stack([picks[j].received[i][j] for j in js])
                    for i in range(len(picks[0].received))
                ),
            )
            groups.append((index, entry))
        return groups

    def _fresh(
        self, stack: StackedParty, index: Index, entry: CacheEntry
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The party's fresh H (K', B, C) on the entry's rows and each row's weight (K', B)."""
        ks = stack.k if index is None else index[:, None]
        h = stack.bottom.forward(stack.X_train[ks, entry.rows], index)
        weights = staleness_weights(h.detach(), entry.own, self.xi)
        for member, w in zip(self.at(index), weights.mean(dim=1).tolist(), strict=True):
            member.weights_seen.append(float(w))
        return h, weights

    # ``stack`` below: the ``StackedParty``, left untyped: the base names it ``StackHost``,
    # which lacks the ``k``, ``logits`` and ``objective`` that the cached steps use
    def after_backward(
        self, stack: Any, rows: torch.Tensor, h_sent: torch.Tensor, grad: torch.Tensor
    ) -> None:
        self.cache.append(CacheEntry(rows, h_sent, (grad,)))
        for _ in range(self.q - 1):
            outs, grads = [], []
            for index, entry in self._sample():
                h, weights = self._fresh(stack, index, entry)  # (K', B, C), (K', B)
                outs.append(h)
                grads.append(entry.received[0] * weights[..., None])
            stack.optimizer.zero_grad()
            torch.autograd.backward(outs, grads)
            stack.optimizer.step()

    def after_update(
        self, stack: Any, rows: torch.Tensor, own: torch.Tensor, received: list[torch.Tensor]
    ) -> None:
        self.cache.append(CacheEntry(rows, own, tuple(received)))
        for _ in range(self.q - 1):
            sums: list[torch.Tensor] = []  # one per batch-size group, on the stack's device
            for index, entry in self._sample():
                h_own, weights = self._fresh(stack, index, entry)
                ks = stack.k if index is None else index[:, None]
                y = stack.y_train[ks, entry.rows]  # (K', B)
                logits = stack.logits([*entry.received, h_own], index=index)
                losses = stack.objective(logits, y, list(entry.received), weights, index)
                sums.append(losses.sum())
            stack.optimizer.zero_grad()
            torch.stack(sums).sum().backward(inputs=stack.params)
            stack.optimizer.step()


class WorksetHost(HookHost, TypingProtocol):
    """A party as the workset sees it: its hooks and seed (``HookHost``) and its id."""

    party_id: int


class CeluWorkset:
    """One party's workset settings and random stream (its cache and cached steps live in
    its stacked form, ``StackedWorkset``): a message hook that changes no message."""

    stacked: ClassVar[type[StackedHook]] = StackedWorkset

    def __init__(self, q: int = 5, w: int = 5, xi: float = 0.5) -> None:
        _check_params(q, w, xi)
        self.q, self.w, self.xi = q, w, float(xi)
        self.rng = np.random.default_rng(0)
        self.weights_seen: list[float] = []  # mean weight of each cached step (diagnostics)

    def attach(self, party: WorksetHost) -> None:
        party.hooks.append(self)
        self.rng = np.random.default_rng([party.config.seed, party.party_id, 0xCE1])

    def on_send(self, party: object, msg: Message) -> Message:
        return msg

    def on_receive(self, party: object, msg: Message) -> Message:
        return msg


class CELU(Protocol):
    """FedSGD exchanges plus Q-1 cached, similarity-weighted local steps per party."""

    name = "celu"
    replays = True  # its workset replays cached exchanges through the top model
    defaults: ClassVar[dict[str, Value]] = {"q": 5, "w": 5, "xi": 0.5}

    def validate(self) -> None:
        _check_params(self.params["q"], self.params["w"], self.params["xi"])

    @property
    def local_steps(self) -> int:
        return 1  # the exchanged batch gets one step; the workset takes the other Q-1

    def codec_hooks(self) -> tuple[HookEntry, ...]:
        return (("codec", "celu_workset", dict(self.params)),)
