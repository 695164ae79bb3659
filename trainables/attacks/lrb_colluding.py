"""LRB's colluding batch injection, as VFLAIR's code does it (``lrb`` with
``injection: colluding``; MainTaskVFLwithBackdoor.py:309-326, :107-111, :150-153).

Threat model: **colluding**. The passive attacker alone cannot do this: the active party
puts two rows into every batch and labels one of them as the target. It is here so that
a number can be compared with VFLAIR's published LRB, and a record that ran it says
``threat_model: colluding`` (``Attack.colludes``). The passive attacker still never holds
a label: it learns only that the last row of each batch is the one to replace.

Per epoch e both parties draw, from the training's seed and e alone, one poison sample p
(of the attacker's poison rows) and one target row t (of ``target_rows``). Every batch of
that epoch gets two rows appended, at both parties:
- row B:   the poison sample, triggered at the attacker, its true label at the active party;
- row B+1: row t, labelled as the target class by the active party.
The attacker sends, for row B+1, the embedding of row B (the triggered sample); and
steps its bottom with row B+1's gradient in row B's place. So every batch is one poison
step: its bottom learns "trigger -> target" from a gradient computed against the target
label. Row B+1's own embedding keeps row B+1's gradient, as in VFLAIR.

``target_rows``:
- ``first`` (VFLAIR's code): t is one of the first 10 training rows, whatever its class.
  VFLAIR draws an index into its list of target-class rows but then indexes the training
  data with it (MainTaskVFLwithBackdoor.py:310, :322), so its "target" row is of any class.
  We follow the code, since the published numbers came from it.
- ``known``: t is one of the 10 target-class rows the attacker knows (what the code meant).

Shapes: K trainings of a stack, B rows of a batch, C the width of H, E = P + T extra rows
(P poison samples, T target rows), d the party's feature width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np
import torch

from trainables.defenses.stacked import StackedHook
from trainables.messages import BatchRef, Message
from trainables.roles import HookHost

if TYPE_CHECKING:
    from trainables.vfl.stacked_party import StackedParty


class TrainingHost(HookHost, Protocol):
    """A party as a training-time attack that adds training rows reads it: also its own
    training features (its ``config`` gives the trial's ``seed``)."""

    X_train: torch.Tensor  # (n, d)


def epoch_draw(seed: int, epoch: int, n_poison: int, n_target: int) -> tuple[int, int]:
    """(poison sample, target row) of ``epoch``: both parties draw the same, once per
    epoch as VFLAIR does (MainTaskVFLwithBackdoor.py:309-310)."""
    rng = np.random.default_rng([seed, 4247, epoch])
    return int(rng.integers(n_poison)), int(rng.integers(n_target))


class StackedInjection(StackedHook):
    """The injection at a stacked party (the attacker's or the active one): each training's
    extra rows appended to the stack's training rows (and, at the active party, their
    labels), two of them appended to every batch; at the attacker, the embedding and
    gradient of the last row moved as VFLAIR moves them."""

    messages = False  # the stack changes H and the gradient before they leave / land
    model = True

    def install(self, stack: StackedParty) -> None:
        n = stack.X_train.shape[1]
        self.n_rows, self.n_poison = n, len(self.members[0].poison_rows)
        self.n_target = len(self.members[0].target_rows)
        extra = torch.stack([m.extra_x for m in self.members]).to(stack.X_train)  # (K, E, d)
        stack.X_train = torch.cat([stack.X_train, extra], dim=1)  # (K, n + E, d)
        if stack.is_active:  # the poison samples' true labels, then the target class
            y = torch.stack([
                torch.cat([stack.y_train[j, torch.from_numpy(m.poison_rows)],
                           torch.full((self.n_target,), m.target, dtype=stack.y_train.dtype)])
                for j, m in enumerate(self.members)
            ]).to(stack.y_train.device)  # (K, E)  # fmt: skip
            stack.y_train = torch.cat([stack.y_train, y], dim=1)  # (K, n + E)

    def batch_rows(self, stack: StackedParty, ref: BatchRef, rows: torch.Tensor) -> torch.Tensor:
        extra = []
        for m in self.members:  # each training its own draw
            p, t = epoch_draw(m.seed, ref.epoch, self.n_poison, self.n_target)
            extra.append([self.n_rows + p, self.n_rows + self.n_poison + t])
        return torch.cat([rows, torch.tensor(extra, device=rows.device)], dim=1)  # (K, B+2)

    def on_forward(
        self, stack: StackedParty, rows: torch.Tensor, h: torch.Tensor, payload: np.ndarray
    ) -> tuple[torch.Tensor, np.ndarray]:
        if stack.is_active:
            return h, payload
        payload = np.array(payload, copy=True)  # (K, B+2, C): a view of h's storage
        payload[:, -1] = payload[:, -2]  # the target row's slot carries the poison embedding
        return h, payload

    def on_gradient(
        self, stack: StackedParty, rows: torch.Tensor, grad: torch.Tensor
    ) -> torch.Tensor:
        grad = grad.clone()  # (K, B+2, C)
        grad[:, -2] = grad[:, -1]  # the poison sample steps on the target label's gradient
        return grad


@dataclass
class InjectionHook:
    """One training's injection at one party: the rows it appends (E, d) (at the active
    party labelled by the stack: ``StackedInjection.install``); the seed both parties
    draw each epoch's rows from."""

    poison_rows: np.ndarray  # (P,) the poison samples' training rows
    target_rows: np.ndarray  # (T,) the rows that may be relabelled as the target
    extra_x: torch.Tensor  # (E, d): P poison samples (triggered at the attacker), T rows
    target: int  # the class the active party gives the target rows
    seed: int
    stacked: ClassVar[type[StackedHook]] = StackedInjection

    def on_send(self, party: HookHost, msg: Message) -> Message:
        return msg  # the stack moves the rows (StackedInjection)

    def on_receive(self, party: HookHost, msg: Message) -> Message:
        return msg


def injection_hook(
    party: TrainingHost,
    poison_rows: np.ndarray,
    target_rows: np.ndarray,
    poison_x: torch.Tensor | None,
    target: int,
) -> InjectionHook:
    """The hook of ``party``: at the attacker ``poison_x`` (P, d) are its triggered poison
    samples; at the active party (``poison_x`` None) its own halves of those rows."""
    x = party.X_train  # (n, d)
    own_poison = x[torch.from_numpy(poison_rows)] if poison_x is None else poison_x
    extra_x = torch.cat([own_poison, x[torch.from_numpy(target_rows)]])  # (P + T, d)
    return InjectionHook(poison_rows, target_rows, extra_x, target, int(party.config.seed))
