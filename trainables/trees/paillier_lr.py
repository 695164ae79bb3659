"""VFLAIR's Paillier NN-VFL for logistic-regression bottoms (Zou et al.'s HE protocol).

Parties 0..K-2 are passive, K-1 active (labels, bias); a key holder (TTP) that is not a
party generates the key pair, hands out the public key and decrypts only masked values.
Per batch: each passive sends [[H_k]] = [[X_k theta_k]]; the active party forms
[[z]] = sum_k [[H_k]] + H_K + b and, with the Taylor expansion sigma(z) ~ 1/2 + z/4 of the
logistic loss (per output; the "logit loss" VFLAIR uses even for several classes),
[[4 dL/dz]] = [[z]] + 2 - 4y, which it sends to every party; each party computes its
encrypted gradient X_k^T [[4 dL/dz]], adds a random mask, has the key holder decrypt it,
removes the mask and takes an SGD step. ``encrypt=False`` runs the same schedule in plain
floats, with the Taylor loss (``taylor=1``) or the exact logistic loss (plaintext LR).
Test predictions are computed in plaintext (evaluation, not training traffic).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainables.messages import BatchRef, BatchSchedule, Message
from trainables.transport.base import Transport
from trainables.trees.crypto import KeyPair, PublicKey

H_BITS = 20  # fixed point of H and z
X_BITS = 16  # fixed point of features in X^T [[d]]


@dataclass(frozen=True)
class LRParams:
    max_rows: int = 1_000_000_000  # subsample the training rows (Paillier is slow)
    taylor: int = 1  # 1: Taylor-approximated loss; 0: exact logistic loss (plaintext only)


@dataclass(frozen=True)
class LRPartyInit:
    party_id: int
    X_train: np.ndarray  # (N, d_k) scaled
    X_test: np.ndarray  # (M, d_k)
    width: int  # C' outputs: 1 (binary) or n_classes
    batch_size: int
    lr: float
    seed: int
    keep_received: bool = False  # log the per-row gradients it is sent (for attacks)

    def build(self) -> LRParty:
        return LRParty(self)


class LRParty:
    """A bottom theta_k (d_k, C'); encrypted forward, masked encrypted backward."""

    def __init__(self, init: LRPartyInit) -> None:
        self.party_id, self.lr = init.party_id, init.lr
        self.X_train, self.X_test = init.X_train, init.X_test
        self.theta = np.zeros((init.X_train.shape[1], init.width))
        self.schedule = BatchSchedule(len(init.X_train), init.batch_size, init.seed)
        self.key = PublicKey(encrypted=False)
        self._mask: list[int] = []
        self.log: list[tuple[np.ndarray, Any]] | None = [] if init.keep_received else None

    def set_key(self, key: PublicKey) -> bool:
        self.key = key
        return True

    def forward(self, ref: BatchRef) -> Message:
        """[[H_k]] of the batch, (B*C') ciphertexts, or H_k in plain (B, C')."""
        h = self.X_train[self.schedule.rows(ref)] @ self.theta
        if not self.key.encrypted:
            return Message.of("embedding", self.party_id, -1, h)
        ints = [int(v) % self.key.n for v in np.rint(h.ravel() * (1 << H_BITS)).astype(np.int64)]
        enc = self.key.encrypt(ints)
        return Message(
            "enc_embedding", self.party_id, -1, enc, len(enc) * self.key.ciphertext_bytes
        )

    def backward(self, ref: BatchRef, grad: Message) -> Message:
        """Masked [[X_k^T 4d]] for the key holder (encrypted); in plain, the step itself."""
        x = self.X_train[self.schedule.rows(ref)]  # (B, d_k)
        if self.log is not None:
            self.log.append((self.schedule.rows(ref), grad.payload))
        if not self.key.encrypted:
            self.theta -= self.lr * x.T @ grad.payload / len(x)
            return Message.of("done", self.party_id, -1, np.zeros(0))
        d = grad.payload  # (B * C') ciphertexts of 4 dL/dz
        width = self.theta.shape[1]
        xi = np.rint(x * (1 << X_BITS)).astype(np.int64)
        out, self._mask = [], []
        bits = H_BITS + X_BITS + 2 * len(x).bit_length() + 16
        for j in range(x.shape[1]):
            for c in range(width):
                acc = self.key.total(
                    [self.key.mul_plain(d[i * width + c], int(xi[i, j])) for i in range(len(x))]
                )
                mask = self.key.mask(bits)
                self._mask.append(mask)
                out.append(self.key.add_plain(acc, mask))
        return Message("masked_grad", self.party_id, -1, out, len(out) * self.key.ciphertext_bytes)

    def unmask_step(self, ref: BatchRef, opened: Message) -> bool:
        """Remove the masks from the key holder's decryption and take the SGD step."""
        n = len(self.schedule.rows(ref))
        vals = [
            self.key.signed((int(v) - m) % self.key.n)
            for v, m in zip(opened.payload, self._mask, strict=True)
        ]
        grad = np.array(vals, dtype=np.float64).reshape(self.theta.shape)
        self.theta -= self.lr * grad / float(1 << (H_BITS + X_BITS)) / 4.0 / n
        return True

    def received(self) -> tuple[PublicKey, list[tuple[np.ndarray, Any]]]:
        """What it was sent per batch: (batch rows, per-row [[4 dL/dz]] ciphertexts or plain
        dL/dz); the public key. Empty unless built with ``keep_received``."""
        return self.key, list(self.log or [])

    def test_logits(self) -> Message:
        return Message.of("test_embedding", self.party_id, -1, self.X_test @ self.theta)


class KeyHolder:
    """The TTP: holds the secret key, decrypts masked values only; never sees data."""

    def __init__(self, key_length: int, encrypted: bool) -> None:
        self.keys = KeyPair.generate(key_length, encrypted)

    def open(self, masked: Message) -> Message:
        plain = self.keys.decrypt(masked.payload)
        nbytes = len(plain) * (self.keys.public.n.bit_length() + 7) // 8
        return Message("opened", -2, masked.src, plain, nbytes)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))


class ActiveLR:
    """The active party: its bottom (with a bias column of ones) and the labels.

    It combines the passives' [[H_k]] with its own H_K into [[4 dL/dz]] (or dL/dz in plain).
    """

    def __init__(self, init: LRPartyInit, y_train: np.ndarray, taylor: bool) -> None:
        self.party = init.build()
        width = init.width
        self.y = (np.eye(width)[y_train] if width > 1 else y_train[:, None]).astype(np.float64)
        self.taylor = taylor

    def combine(self, ref: BatchRef, uploads: list[Message]) -> Message:
        rows = self.party.schedule.rows(ref)
        own = self.party.X_train[rows] @ self.party.theta  # (B, C')
        y = self.y[rows]
        key = self.party.key
        if not key.encrypted:
            z = own + sum(m.payload for m in uploads)
            d = (z + 2 - 4 * y) / 4 if self.taylor else _sigmoid(z) - y
            return Message.of("gradient", -1, 0, d)
        shift = np.rint((own + 2 - 4 * y).ravel() * (1 << H_BITS)).astype(np.int64)
        out = []
        for i, s in enumerate(shift):
            acc = key.total([m.payload[i] for m in uploads])
            out.append(key.add_plain(acc, int(s)))
        return Message("enc_gradient", -1, 0, out, len(out) * key.ciphertext_bytes)


@dataclass
class LRResult:
    mp: float
    rounds: int
    comm_bytes: int
    seconds: float
    extra: dict[str, Any]
    test_logits: np.ndarray  # (M, C')


def train_lr(
    inits: list[LRPartyInit],
    y_train: np.ndarray,
    y_test: np.ndarray,
    transport: Transport,
    epochs: int,
    key_length: int,
    encrypted: bool,
    taylor: bool,
) -> LRResult:
    """Run the protocol; passives behind ``transport``, the active and the TTP here."""
    start = time.perf_counter()
    ttp = KeyHolder(key_length, encrypted)
    pub = ttp.keys.public
    active = ActiveLR(inits[-1], y_train, taylor)
    active.party.set_key(pub)
    n_p = transport.n_peers
    transport.call("set_key", [(pub,)] * n_p, training=False)
    ttp_bytes = 0
    for epoch in range(epochs):
        for ref in active.party.schedule.refs(epoch):
            ups = transport.gather(transport.submit("forward", [(ref,)] * n_p, training=True,
                                                    new_round=True))  # fmt: skip
            d = active.combine(ref, ups)
            masked = transport.call("backward", [(ref, d)] * n_p, training=True)
            own = active.party.backward(ref, d)
            if encrypted:
                opened = [ttp.open(m) for m in masked]
                transport.call("unmask_step", [(ref, o) for o in opened], training=True)
                own_open = ttp.open(own)
                active.party.unmask_step(ref, own_open)
                ttp_bytes += own.nbytes + own_open.nbytes
    seconds = time.perf_counter() - start
    logits = active.party.test_logits().payload
    logits = logits + sum(m.payload for m in transport.call("test_logits", [()] * n_p,
                                                            training=False))  # fmt: skip
    pred = (logits[:, 0] > 0).astype(np.int64) if logits.shape[1] == 1 else logits.argmax(1)
    stats = transport.stats
    extra = {
        "encrypted": encrypted,
        "taylor": taylor,
        "key_length": key_length if encrypted else None,
        "ciphertext_bytes": pub.ciphertext_bytes,
        "ttp_bytes": ttp_bytes,
        **ttp.keys.stats.as_dict(),
    }
    return LRResult(float((pred == y_test).mean()), stats.rounds, stats.comm_bytes + ttp_bytes,
                    seconds, extra, logits)  # fmt: skip
