"""Tree-VFL label inference from the per-row statistics a passive party is sent.

Why: gradient boosting and random forests in VFL send every passive party per-row
statistics derived from the labels: xgboost broadcasts ``g = p - y`` (and ``h``) in
plaintext, SecureBoost sends the same ``(g, h)`` Paillier-encrypted, a random forest sends
one-hot labels (encrypted in ``secure_rf``), Paillier LR sends ``dL/dz`` per row. The
attack decodes what it got exactly as the protocol's plaintext encoding would be decoded
(a public protocol detail) and reads the label off it: binary ``y = 1`` iff ``g < 0``;
several classes: the class whose gradient is negative (``p_c - 1 < 0``), or the one-hot's
class. On ciphertexts the same decoding yields bits of a random group element, so the
guess is as good as a coin flip: the difference between the two is what a sweep shows.

It reads only a ``TreeView``: the attacking passive party's own columns and the payloads
it received during training, as that party logged them (``TreeParty.received``,
``LRParty.received``, a passive xgboost worker's ``received``). It holds no labels and no
secret key. The instance spaces (node row sets) a SecureBoost passive also learns are not
used here (README, "Trees and encryption").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, SupportsInt

import numpy as np

from trainables.attacks.base import Attack, AttackInfo, LabelGuess

Kind = Literal["gradient", "fixed_gradient", "packed_gh", "packed_onehot"]


@dataclass(frozen=True)
class Received:
    """One round's per-row statistics, as the passive party got them.

    kind: ``gradient`` (float g per row and output), ``fixed_gradient`` (Paillier LR's
    fixed-point ints, or ciphertexts of them), ``packed_gh`` (SecureBoost's packed g, h),
    ``packed_onehot`` (a forest's packed one-hot labels).
    """

    kind: Kind
    rows: np.ndarray  # (R,) training rows the values are about
    values: Any  # (R, C') floats, or R lists of packed ints / ciphertexts
    output: int = 0  # the output (class) a boosting round is about: a public schedule
    layout: tuple[int, ...] = ()  # public encoding: slot bits and counts, fixed point


@dataclass(frozen=True)
class TreeView:
    """Everything the attacking passive party of a tree trial has, and nothing else."""

    party_id: int
    role: Literal["passive"]
    model: str  # the protocol it took part in
    n_classes: int
    X_train: np.ndarray  # (N, d_k) its own columns
    modulus: int  # the public key's n (0: no encryption)
    received: tuple[Received, ...]
    y_train: None = None  # a passive party holds no labels


def _signed(values: np.ndarray, modulus: int) -> np.ndarray:
    """Residues mod n -> signed ints, as a plaintext protocol's decoder would read them."""
    if not modulus:
        return values.astype(np.float64)
    vals = [int(v) % modulus for v in values]
    return np.array([v - modulus if v > modulus // 2 else v for v in vals], dtype=np.float64)


def _slots(packed: Iterable[SupportsInt], slot_bits: int, per_int: int, n_slots: int) -> list[int]:
    mask = (1 << slot_bits) - 1
    out: list[int] = []
    for i, value in enumerate(packed):
        count = min(per_int, n_slots - i * per_int)
        out.extend((int(value) >> (slot_bits * s)) & mask for s in range(count))
    return out


def _votes(rec: Received, n_classes: int, modulus: int) -> np.ndarray:
    """(R,) inferred label per row of one round; -1 where the round says nothing."""
    if rec.kind in ("gradient", "fixed_gradient"):
        g = np.asarray(rec.values, dtype=np.float64)
        if rec.kind == "fixed_gradient":
            g = _signed(np.asarray(rec.values, dtype=object).ravel(), modulus).reshape(
                len(rec.rows), -1
            )
        g = g.reshape(len(rec.rows), -1)
        return (g[:, 0] < 0).astype(np.int64) if g.shape[1] == 1 else g.argmin(1)
    slot_bits, per_int, n_slots, offset = rec.layout
    slots = np.array([_slots(v, slot_bits, per_int, n_slots) for v in rec.values], dtype=object)
    if rec.kind == "packed_onehot":
        return np.array([int(np.argmax(r)) for r in slots], dtype=np.int64)
    # g is encoded as g * 2^f + 2^f in [0, 2^(f+1)) (offset = 2^f): read those f+1 bits
    negative = np.array([int(r[0]) & (2 * offset - 1) < offset for r in slots])
    if n_classes == 2:
        return negative.astype(np.int64)
    return np.where(negative, rec.output, -1)


class TreeGradLI(Attack):
    """Label of every training row the party was sent statistics for, from the first round."""

    name: ClassVar[str] = "tree_grad_li"
    family: ClassVar[str] = "trees"  # reads tree-VFL messages: tree trials only (planner)
    info = AttackInfo(type="LI", role="passive", training_time=False, needs_messages=True)
    defaults: ClassVar[dict[str, object]] = {}

    def run(self, view: TreeView) -> LabelGuess:  # type: ignore[override]  # a tree party's view
        n = len(view.X_train)
        guess = np.full(n, -1, dtype=np.int64)
        for rec in view.received:
            votes = _votes(rec, view.n_classes, view.modulus)
            rows = np.asarray(rec.rows, dtype=np.int64)
            fresh = (guess[rows] < 0) & (votes >= 0)
            guess[rows[fresh]] = votes[fresh]
        seen = np.zeros(n, dtype=bool)
        for rec in view.received:
            seen[np.asarray(rec.rows, dtype=np.int64)] = True
        rows = np.flatnonzero(seen)
        return LabelGuess(split="train", rows=rows, labels=np.maximum(guess[rows], 0))


ATTACK = TreeGradLI
