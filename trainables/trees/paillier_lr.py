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

Where things run: ``PaillierLR`` is a ``Protocol``; it runs at the active party (inside its
actor under the ray transport) and reaches the passive parties and the key holder through
one ``Transport`` whose peers are ``[passive 0, ..., passive K-2, key holder]`` (the
parties are opened as ``[passives..., KeyHolderInit, active]``). The key holder is built
in its own process and is the only object that ever holds the secret key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trainables.endpoint import Endpoint
from trainables.messages import BatchRef, BatchSchedule, Message
from trainables.protocols.base import PartyRounds, TrainResult
from trainables.transport.base import Transport
from trainables.trees.crypto import Ciphertext, KeyPair, PublicKey

H_BITS = 20  # fixed point of H and z
X_BITS = 16  # fixed point of features in X^T [[d]]
KEY_HOLDER = -2  # message src/dst id of the key holder (the active party is -1)
# what a party is sent per batch: (its rows, per-row [[4 dL/dz]] ciphertexts or plain dL/dz)
LRReceived = tuple[np.ndarray, list[Ciphertext] | np.ndarray]


@dataclass(frozen=True)
class LRParams:
    max_rows: int = 1_000_000_000  # subsample the training rows (Paillier is slow)
    taylor: int = 1  # 1: Taylor-approximated loss; 0: exact logistic loss (plaintext only)


@dataclass(frozen=True)
class LRPartyInit:
    """One LR party's start: its scaled columns; labels (and the loss) at the active only."""

    party_id: int
    X_train: np.ndarray  # (N, d_k) scaled
    X_test: np.ndarray  # (M, d_k)
    width: int  # C' outputs: 1 (binary) or n_classes
    batch_size: int
    lr: float
    seed: int
    keep_received: bool = False  # log the per-row gradients it is sent (for attacks)
    y_train: np.ndarray | None = None  # (N,) the active party's labels; None: passive
    y_test: np.ndarray | None = None  # (M,) the active party's test labels (its MP)
    taylor: bool = True  # the active party's loss: Taylor (HE-friendly) or exact logistic

    def build(self) -> LRParty:
        return LRParty(self) if self.y_train is None else ActiveLR(self)


class LRParty(Endpoint):
    """A bottom theta_k (d_k, C'); encrypted forward, masked encrypted backward. Its
    messages pass no hooks (no defense applies to Paillier LR); ``kept``: what it was sent,
    for the attacks."""

    def __init__(self, init: LRPartyInit) -> None:
        super().__init__()
        self.party_id, self.lr = init.party_id, init.lr
        self.X_train, self.X_test = init.X_train, init.X_test
        self.theta = np.zeros((init.X_train.shape[1], init.width))
        self.schedule = BatchSchedule(len(init.X_train), init.batch_size, init.seed)
        self.key = PublicKey(encrypted=False)
        self._mask: list[int] = []
        self.kept: list[LRReceived] | None = [] if init.keep_received else None

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
        if self.kept is not None:
            self.kept.append((self.schedule.rows(ref), grad.payload))
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
        nbytes = len(out) * self.key.ciphertext_bytes
        return Message("masked_grad", self.party_id, KEY_HOLDER, out, nbytes)

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

    def received(self) -> tuple[PublicKey, list[LRReceived]]:
        """What it was sent per batch: (batch rows, per-row [[4 dL/dz]] ciphertexts or plain
        dL/dz); the public key. Empty unless built with ``keep_received``."""
        return self.key, list(self.kept or [])

    def test_logits(self) -> Message:
        return Message.of("test_embedding", self.party_id, -1, self.X_test @ self.theta)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))


class ActiveLR(LRParty):
    """The active party: its bottom (with a bias column of ones) and the labels.

    It combines the passives' [[H_k]] with its own H_K into [[4 dL/dz]] (or dL/dz in plain).
    """

    def __init__(self, init: LRPartyInit) -> None:
        super().__init__(init)
        assert init.y_train is not None
        width, y = init.width, init.y_train
        self.y = (np.eye(width)[y] if width > 1 else y[:, None]).astype(np.float64)  # (N, C')
        self.y_test = init.y_test  # (M,)
        self.taylor = init.taylor

    def combine(self, ref: BatchRef, uploads: Sequence[Message]) -> Message:
        rows = self.schedule.rows(ref)
        own = self.X_train[rows] @ self.theta  # (B, C')
        y = self.y[rows]
        if not self.key.encrypted:
            z = own + sum(m.payload for m in uploads)
            d = (z + 2 - 4 * y) / 4 if self.taylor else _sigmoid(z) - y
            return Message.of("gradient", -1, 0, d)
        shift = np.rint((own + 2 - 4 * y).ravel() * (1 << H_BITS)).astype(np.int64)
        out = []
        for i, s in enumerate(shift):
            acc = self.key.total([m.payload[i] for m in uploads])
            out.append(self.key.add_plain(acc, int(s)))
        return Message("enc_gradient", -1, 0, out, len(out) * self.key.ciphertext_bytes)


@dataclass(frozen=True)
class KeyHolderInit:
    """The TTP's start: only the key size; the key pair is generated where it is built."""

    key_length: int
    encrypted: bool

    def build(self) -> KeyHolder:
        return KeyHolder(self.key_length, self.encrypted)


class KeyHolder(Endpoint):
    """The TTP: holds the secret key, decrypts masked values only; never sees data."""

    party_id = KEY_HOLDER

    def __init__(self, key_length: int, encrypted: bool) -> None:
        super().__init__()
        self.keys = KeyPair.generate(key_length, encrypted)

    def public_key(self) -> PublicKey:
        return self.keys.public

    def open(self, *masked: Message) -> Message:
        """Decrypt each party's masked gradient; one message, payload per party in order."""
        plain = [self.keys.decrypt(m.payload) for m in masked]
        nbytes = sum(_opened_bytes(self.keys.public, len(p)) for p in plain)
        return Message("opened", KEY_HOLDER, -1, plain, nbytes)

    def crypto_stats(self) -> dict[str, float | int]:
        return self.keys.stats.as_dict()


def _opened_bytes(key: PublicKey, count: int) -> int:
    """Bytes of ``count`` decrypted values (residues mod n), as this protocol has always
    counted them: ``count * (bits + 7) // 8``, i.e. the bits of all values rounded up once
    per message (not per value); kept so that records stay comparable."""
    return count * (key.n.bit_length() + 7) // 8


def _opened(key: PublicKey, plain: list[int], dst: int) -> Message:
    """The key holder's answer to party ``dst``: its decrypted masked gradient."""
    return Message("opened", KEY_HOLDER, dst, plain, _opened_bytes(key, len(plain)))


def _peer_split(transport: Transport) -> tuple[Transport, Transport]:
    """Transports to the passive parties and to the key holder (the last peer) that count
    into ``transport.stats``."""
    return transport.subset(0, -1), transport.subset(-1)


class PaillierLR(PartyRounds["ActiveLR"]):
    """Zou et al.'s HE LR at the active party; the transport's last peer is the key holder.

    Bytes: each message is counted once, on the hop from its sender. A passive party's
    masked gradient goes to the key holder and its opening comes back; the star transport
    routes both through the active party, and that relay (``extra['relay_bytes']``) is the
    same bytes again, not a message of the protocol, so it is left out of ``comm_bytes``.
    """

    name: ClassVar[str] = "paillier_lr"

    def setup(self, active: ActiveLR, transport: Transport) -> None:
        """The key holder's public key to every party, before the clock starts."""
        super().setup(active, transport)  # nothing pending
        self._passives, self._holder = _peer_split(transport)
        self._pub = self._holder.call(KeyHolder.public_key, [()], training=False)[0]
        active.set_key(self._pub)
        n_p = self._passives.n_peers
        self._passives.call(LRParty.set_key, [(self._pub,)] * n_p, training=False)
        self._ttp_bytes = self._relay_bytes = 0

    def epoch_steps(self, active: ActiveLR, epoch: int) -> Sequence[BatchRef]:
        return active.schedule.refs(epoch)

    def pauses(self) -> bool:
        """No per-epoch evaluation here: ``rounds_to_target`` stays None."""
        return False

    def exchange(
        self, active: ActiveLR, transport: Transport, ref: BatchRef, nxt: BatchRef | None
    ) -> None:
        """One batch: [[H_k]] up, [[4 dL/dz]] down, masked gradients opened by the key
        holder, SGD steps."""
        passives, holder, n_p = self._passives, self._holder, self._passives.n_peers
        pending = passives.submit(LRParty.forward, [(ref,)] * n_p, training=True, new_round=True)
        d = active.combine(ref, passives.gather(pending))
        masked = passives.call(LRParty.backward, [(ref, d)] * n_p, training=True)
        own = active.backward(ref, d)
        if self._pub.encrypted:
            ttp, relay = self._open_and_step(ref, active, masked, own, passives, holder)
            self._ttp_bytes += ttp
            self._relay_bytes += relay

    def result(
        self, active: ActiveLR, transport: Transport, seconds: float, total: int
    ) -> TrainResult:
        return self._result(active, self._passives, self._holder, seconds, self._ttp_bytes,
                            self._relay_bytes)  # fmt: skip

    @staticmethod
    def _open_and_step(ref: BatchRef, active: ActiveLR, masked: list[Message], own: Message,
                       passives: Transport, holder: Transport) -> tuple[int, int]:  # fmt: skip
        """The key holder opens every masked gradient (one call); each party unmasks and
        steps. Returns (the active party's bytes with the key holder, the relayed bytes)."""
        opened = holder.call(KeyHolder.open, [(*masked, own)], training=True)[0]
        per_party = [_opened(active.key, p, m.src)
                     for p, m in zip(opened.payload, [*masked, own], strict=True)]  # fmt: skip
        passives.call(LRParty.unmask_step, [(ref, o) for o in per_party[:-1]], training=True)
        active.unmask_step(ref, per_party[-1])
        relay = sum(m.nbytes + o.nbytes for m, o in zip(masked, per_party[:-1], strict=True))
        return own.nbytes + per_party[-1].nbytes, relay

    def _result(self, active: ActiveLR, passives: Transport, holder: Transport, seconds: float,
                ttp_bytes: int, relay_bytes: int) -> TrainResult:  # fmt: skip
        """Test MP from the summed plaintext logits (evaluation traffic), and the counters."""
        logits = active.test_logits().payload
        others = passives.call(LRParty.test_logits, [()] * passives.n_peers, training=False)
        logits = logits + sum(m.payload for m in others)  # (M, C')
        y_test = active.y_test
        pred = (logits[:, 0] > 0).astype(np.int64) if logits.shape[1] == 1 else logits.argmax(1)
        pub = active.key
        stats = passives.stats
        extra = {
            "encrypted": pub.encrypted,
            "taylor": active.taylor,
            "key_length": pub.key_length if pub.encrypted else None,
            "ciphertext_bytes": pub.ciphertext_bytes,
            "ttp_bytes": ttp_bytes,
            "relay_bytes": relay_bytes,
            **holder.call(KeyHolder.crypto_stats, [()], training=False)[0],
        }
        return TrainResult.from_stats(
            stats,
            comm_bytes=stats.comm_bytes - relay_bytes,
            mp=float((pred == y_test).mean()),
            train_seconds=seconds,
            final_loss=float("nan"),  # the protocol never computes the loss (only dL/dz)
            extra=extra,
            outputs={"test_logits": logits},
        )
