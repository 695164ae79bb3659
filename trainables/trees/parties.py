"""Ray-free tree parties: each holds only its own columns (binned), never another's.

``TreePartyInit.build()`` makes a ``TreeParty``, so the generic ``PartyActor`` of the ray
transport can host a passive party unchanged (``load`` then ``call``). The active party's
extra knowledge (labels, the secret key) lives in the protocol objects that run next to
it (``boosting.py``/``forest.py``), never in a ``TreeParty``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainables.endpoint import Endpoint
from trainables.messages import Message
from trainables.trees.crypto import Ciphertext, PublicKey
from trainables.trees.histogram import Binner, bin_counts, bin_sums

# one split the active party asks for: (node, the node's rows, local feature, last left bin)
SplitRequest = tuple[int, np.ndarray, int, int]


@dataclass(frozen=True)
class TreePartyInit:
    """Everything one party starts with: its own train/test columns and the bin count."""

    party_id: int
    X_train: np.ndarray  # (N, d_k) this party's training columns
    X_test: np.ndarray  # (M, d_k)
    n_bins: int
    columns: tuple[int, ...] = ()
    keep_received: bool = False  # log every per-row statistic it is sent (for attacks)

    def build(self) -> TreeParty:
        return TreeParty(self)


class TreeParty(Endpoint):
    """Answers histogram, split and routing requests about its own features.

    What it learns from the others: the key's public part, per-row (encrypted) statistics,
    the row ids of each node and which of its own (feature, bin) splits was chosen.
    """

    def __init__(self, init: TreePartyInit) -> None:
        super().__init__()  # no hooks: no defense applies to tree messages
        self.party_id = init.party_id
        binner = Binner.fit(init.X_train, init.n_bins)
        self.n_bins = [binner.n_bins(j) for j in range(init.X_train.shape[1])]
        self.bins_train = binner.transform(init.X_train)  # (N, d_k) int16
        self.bins_test = binner.transform(init.X_test)  # (M, d_k) int16
        self.splits: list[tuple[int, int]] = []  # split id -> (local feature, last left bin)
        self.key = PublicKey(encrypted=False)
        self.packed: list[list[Ciphertext | None]] = []
        self.features = np.arange(self.bins_train.shape[1])
        self.kept: list[list[list[Ciphertext | None]]] | None = [] if init.keep_received else None

    @property
    def n_features(self) -> int:
        return int(self.bins_train.shape[1])

    def receive(self, key: PublicKey, stats: Message, features: np.ndarray | None) -> bool:
        """The key, the (encrypted) packed per-row statistics and this tree's features."""
        self.key = key
        self.packed = stats.payload
        self.features = np.arange(self.n_features) if features is None else features
        if self.kept is not None:
            self.kept.append(self.packed)
        return True

    def received(self) -> tuple[PublicKey, list[list[list[Ciphertext | None]]]]:
        """What it was sent: the public key and each tree's (n_ints, N) per-row statistics
        (ciphertexts, or plaintext packed ints; None for rows outside that tree).

        Exactly the payloads of ``receive``, so a label-inference attack built on it reads
        nothing the party did not get; empty unless built with ``keep_received``.
        """
        return self.key, list(self.kept or [])

    def histograms(self, nodes: Message | Sequence[np.ndarray]) -> Message:
        """Per node, per feature in use: (n_bins, n_ints) bin sums and (n_bins,) counts.

        nodes: the open nodes' training row ids (a ``node_rows`` message from the active).
        """
        node_rows = nodes.payload if isinstance(nodes, Message) else nodes
        out = []
        n_items = 0
        for rows in node_rows:
            per_feature = []
            for j in self.features:
                b = self.bins_train[:, j]
                sums = bin_sums(self.key, self.packed, b, rows, self.n_bins[j])
                counts = bin_counts(b, rows, self.n_bins[j])
                per_feature.append((int(j), sums, counts))
                n_items += len(sums) * len(self.packed)
            out.append(per_feature)
        count_bytes = sum(c.nbytes for node in out for _, _, c in node)
        nbytes = n_items * _item_bytes(self.key, self.packed) + count_bytes
        return Message("histograms", self.party_id, -1, out, nbytes)

    def split(self, rows: np.ndarray, feature: int, last_left_bin: int) -> tuple[int, Message]:
        """Record split (feature, bin) as a new id; the node's rows that go left."""
        self.splits.append((int(feature), int(last_left_bin)))
        left = rows[self.bins_train[rows, feature] <= last_left_bin].astype(np.int32)
        return len(self.splits) - 1, Message.of("left_rows", self.party_id, -1, left)

    def split_many(self, requests: Sequence[SplitRequest]) -> Message:
        """Several ``split`` calls in one round: [(node, rows, feature, bin)] -> [(id, left)]."""
        out = [self.split(rows, feature, b) for _, rows, feature, b in requests]
        pairs = [(sid, msg.payload) for sid, msg in out]
        return Message("left_rows", self.party_id, -1, pairs, sum(m.nbytes for _, m in out))

    def route(self, split_ids: Sequence[int]) -> Message:
        """(S, M) bool: does each test row go left at each of this party's splits?"""
        m = len(self.bins_test)
        out = np.zeros((len(split_ids), m), dtype=bool)
        for i, s in enumerate(split_ids):
            feature, last = self.splits[s]
            out[i] = self.bins_test[:, feature] <= last
        return Message.of("routes", self.party_id, -1, np.packbits(out, axis=1))


def _item_bytes(key: PublicKey, packed: Sequence[Sequence[Ciphertext | None]]) -> int:
    """Bytes of one sent sum: a ciphertext, or the packed plaintext's width."""
    if key.encrypted:
        return key.ciphertext_bytes
    widest = max(
        (int(v).bit_length() for chunk in packed for v in chunk[:64] if v is not None), default=8
    )
    return (widest + 7) // 8 + 4  # headroom of a sum over rows
