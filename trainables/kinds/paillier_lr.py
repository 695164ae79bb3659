"""Paillier LR (VFLAIR's HE logistic regression): a ``Protocol`` at the active party, with a
key holder (TTP) that is a party of its own (its own actor under the ray transport).

Parties are opened as ``[passive 0, ..., passive K-2, key holder, active]``; the protocol
(``trainables/trees/paillier_lr.py``) runs at the active party with a transport to the
others, so its rounds and bytes are that transport's counters.

Why no defense: Paillier LR's training messages are Paillier ciphertexts (per-row [[H_k]]
up, per-row [[4 dL/dz]] down), masked ciphertexts of each party's batch gradient to the key
holder and their masked openings back. The NN defenses hook a party's plaintext embeddings
and gradients at NN bottoms; here there is no such hook, and noise on a ciphertext or a
mask is not what any defense is defined as. Only with ``encrypt=0`` would a plaintext
per-row dL/dz exist that a gradient defense could perturb; it stays refused anyway (no
party here runs the defense stack, and a defense that is accepted must be applied).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import cast

import numpy as np

from trainables.data import Dataset, Scaler
from trainables.errors import ConfigError
from trainables.jobs import AttackSpec
from trainables.kinds.tree import TreeFamilyKind
from trainables.records import Record
from trainables.rounds import TrainResult
from trainables.spec import TrialSpec
from trainables.transport.open import open_parties
from trainables.transport.placement import Placement
from trainables.trees import common as tree_common
from trainables.trees import run as tree_run
from trainables.trees.crypto import PublicKey
from trainables.trees.leakage import lr_view, reveals
from trainables.trees.paillier_lr import (
    KeyHolderInit,
    LRParams,
    LRParty,
    LRPartyInit,
    LRReceived,
    PaillierLR,
)

LR_MESSAGES = ("its messages are Paillier ciphertexts (per-row [[H_k]], per-row [[4 dL/dz]]) "
               "and masked gradients the key holder opens, with no NN hook")  # fmt: skip


def lr_inits(spec: TrialSpec, data: tree_common.TreeData, observe: bool) -> list[LRPartyInit]:
    """One init per party on a seeded row subsample (``max_rows``); min-max scaled columns
    ([0, 1] keeps the fixed point small); the active party (last) adds a bias column and
    gets the labels. ``observe``: passive party 0 logs what it is sent."""
    params = tree_common.model_params(spec, LRParams)
    encrypted = tree_common.encrypt_flag(spec, True)
    n = min(len(data.y_train), int(params.max_rows))
    rows = np.sort(np.random.default_rng(spec.seed).permutation(len(data.y_train))[:n])
    width = 1 if data.n_classes == 2 else data.n_classes
    last = len(data.X_train) - 1
    inits = []
    for p, (X_tr, X_te) in enumerate(zip(data.X_train, data.X_test, strict=True)):
        scaler = Scaler.fit(X_tr, "minmax")
        X_tr, X_te = scaler.transform(X_tr[rows]), scaler.transform(X_te)
        if p == last:  # the active party's bias: a column of ones
            X_tr = np.hstack([X_tr, np.ones((len(X_tr), 1))])
            X_te = np.hstack([X_te, np.ones((len(X_te), 1))])
        inits.append(LRPartyInit(
            p, X_tr.astype(np.float64), X_te.astype(np.float64), width,
            int(spec.required("batch_size")),
            float(spec.required("lr")), spec.seed, observe and p == 0,
            y_train=data.y_train[rows] if p == last else None,
            y_test=data.y_test if p == last else None,
            taylor=bool(params.taylor) or encrypted,  # encryption needs the polynomial loss
        ))  # fmt: skip
    return inits


def train_lr(
    spec: TrialSpec, data: tree_common.TreeData, placement: Placement, observe: bool
) -> TrainResult:
    """Open ``[passives..., key holder, active]``, run ``PaillierLR`` at the active party."""
    inits = lr_inits(spec, data, observe)
    encrypted = tree_common.encrypt_flag(spec, True)
    holder = KeyHolderInit(spec.key_length, encrypted)
    with open_parties([*inits[:-1], holder, inits[-1]], placement) as group:
        result = group.train(PaillierLR(), int(spec.required("epochs")))
        log = group.call(0, LRParty.received) if observe else None
    rows = len(inits[0].X_train)
    extra = {**result.extra, "rows": rows, "reveals": reveals("paillier_lr", encrypted)}
    outputs = {}
    if observe:
        outputs = {
            "view": lr_view(
                0, data.n_classes, inits[0].X_train, cast("tuple[PublicKey, list[LRReceived]]", log)
            ),
            "view_labels": inits[-1].y_train,
        }
    return dataclasses.replace(result, extra=extra, outputs=outputs)


class PaillierLRKind(TreeFamilyKind):
    name = "paillier_lr"

    def takes(self, spec: TrialSpec) -> bool:
        return str(spec.model) == "paillier_lr"

    def actors(self, spec: TrialSpec) -> int:
        """Every party and the key holder: decrypting is real work, so it reserves a CPU."""
        return spec.n_parties + 1

    def check(self, spec: TrialSpec) -> None:
        from trainables.data import DATASETS

        DATASETS.get(spec.dataset)
        tree_common.model_params(spec, LRParams)
        tree_common.encrypt_flag(spec, True)
        reason = tree_run.refusal(spec, LR_MESSAGES)
        if reason is not None:
            raise ConfigError(reason)

    def run(
        self, spec: TrialSpec, ds: Dataset, placement: Placement, attacks: Sequence[AttackSpec]
    ) -> list[Record]:
        data = tree_common.tree_data(spec, ds)
        return tree_run.records(
            spec, len(data.y_train), lambda observe: train_lr(spec, data, placement, observe),
            attacks, y_test=data.y_test,
        )  # fmt: skip
