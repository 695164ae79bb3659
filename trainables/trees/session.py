"""The active party's handles during a tree trial: its own party, the passives, the keys.

The tree growing loop runs in the trial's own process (it holds the labels and the key
pair); the passive ``TreeParty`` objects come from ``open_parties`` (plain objects locally,
one actor each under the ray transport) and are reached through ``group.transport``.
Rounds and bytes are that transport's counters (``Message.nbytes``; ciphertexts at their
serialized size).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainables.messages import Message
from trainables.transport.base import Transport
from trainables.trees.builder import ACTIVE, Wire
from trainables.trees.crypto import Ciphertext, KeyPair, PublicKey
from trainables.trees.parties import TreeParty


@dataclass
class TreeSession:
    """The active party's handles: its own ``TreeParty``, the passives, the key pair."""

    own: TreeParty
    wire: Wire
    n_passive: int
    keys: KeyPair

    @property
    def transport(self) -> Transport:
        assert self.wire.transport is not None
        return self.wire.transport

    def send_stats(self, packed: list[list[int]], rows: np.ndarray) -> None:
        """Encrypt ``rows``' packed statistics once and send them to every passive party.

        packed: (n_ints, N) plaintext packed ints; only ``rows`` are sent (others None).
        """
        n = len(packed[0]) if packed else 0
        payload: list[list[Ciphertext | None]] = []
        for chunk in packed:
            enc = self.keys.public.encrypt([chunk[i] for i in rows], self.keys.stats)
            full: list[Ciphertext | None] = [None] * n
            for i, c in zip(rows, enc, strict=True):
                full[i] = c
            payload.append(full)
        per_item = self.keys.public.ciphertext_bytes or _plain_bytes(packed)
        msg = Message("row_stats", ACTIVE, 0, payload, per_item * len(rows) * len(packed))
        self.wire.ask(TreeParty.receive, [(self.keys.public, msg, None)] * self.n_passive, True)
        own_msg = Message("row_stats", ACTIVE, ACTIVE, packed, 0)
        self.own.receive(PublicKey(encrypted=False), own_msg, None)


def _plain_bytes(packed: list[list[int]]) -> int:
    widest = max((int(v).bit_length() for chunk in packed for v in chunk), default=8)
    return (widest + 7) // 8
