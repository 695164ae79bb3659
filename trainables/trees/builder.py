"""Growing and applying one vertically split tree (VFLAIR's tree algorithm, level-wise).

The active party sends (encrypted) packed per-row statistics once per tree; per level it
sends each passive party the row ids of the open nodes and gets back per-bin sums for the
passive's features; it decrypts, scores every (party, feature, bin) with a ``SplitRule``
and asks the winning party to split. Only bin sums, counts and left-row ids cross back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np

from trainables.messages import Message
from trainables.transport.base import Transport
from trainables.trees.crypto import KeyPair, Packer
from trainables.trees.parties import SplitRequest, TreeParty

ACTIVE = -1  # owner id of a split made on the active party's own features
R = TypeVar("R")  # what the asked method returns
# a node's best split: (gain, owner, feature, last left bin); feature -1: none with gain > 0
Candidate = tuple[float, int, int, int]


class SplitRule(Protocol):
    """What the active party scores splits with (gain for boosting, Gini for forests)."""

    @property
    def packer(self) -> Packer: ...

    def decode(self, slots: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """(B, n_slots) per-bin slot sums, (B,) counts -> (B, n_stats) statistics."""
        ...

    def gains(self, left: np.ndarray, total: np.ndarray) -> np.ndarray:
        """(B, n_stats) cumulative left stats, (n_stats,) node total -> (B,) gain (-inf: no)."""
        ...


@dataclass
class Node:
    rows: np.ndarray  # training row ids in this node
    depth: int
    owner: int = ACTIVE  # passive index, or ACTIVE
    split_id: int = -1
    left: int = -1
    right: int = -1

    @property
    def is_leaf(self) -> bool:
        return self.left < 0


@dataclass
class Tree:
    nodes: list[Node] = field(default_factory=list)
    values: dict[int, np.ndarray] = field(default_factory=dict)  # leaf -> value

    def structure(self) -> list[tuple[int, int, int, int]]:
        """(owner, split id, left, right) per node: what 'the same trees' compares."""
        return [(n.owner, n.split_id, n.left, n.right) for n in self.nodes]


@dataclass
class Wire:
    """The passive parties behind a transport; rounds and bytes are the transport's."""

    transport: Transport | None

    def ask(
        self, method: Callable[..., R], args: Sequence[tuple[object, ...]], new_round: bool
    ) -> list[R]:
        if self.transport is None or not args:
            return []
        pending = self.transport.submit(method, args, training=True, new_round=new_round)
        return self.transport.gather(pending)


def _rows_message(nodes: Sequence[np.ndarray]) -> Message:
    arrays = [np.asarray(r, dtype=np.int32) for r in nodes]
    return Message("node_rows", ACTIVE, 0, arrays, sum(a.nbytes for a in arrays))


def _best_in(rule: SplitRule, keys: KeyPair | None, hist: Message, owner: int) -> list[Candidate]:
    """Best (gain, owner, feature, bin) per node of one party's histogram answer.

    ``keys`` decrypts a passive party's sums; None for the active party's own plaintext sums.
    """
    packer = rule.packer
    best = []
    for per_feature in hist.payload:
        top: Candidate = (0.0, owner, -1, -1)
        for feature, sums, counts in per_feature:
            flat = [v for b in sums for v in b]
            flat = keys.decrypt(flat) if keys is not None else [int(v) for v in flat]
            step = packer.n_ints
            per_bin = [packer.unpack(flat[i : i + step]) for i in range(0, len(flat), step)]
            slots = np.array(per_bin, dtype=np.float64)  # (B, n_slots)
            stats = rule.decode(slots, counts)  # (B, n_stats)
            cum = np.cumsum(stats, axis=0)
            gains = rule.gains(cum[:-1], cum[-1])
            if len(gains) and np.max(gains) > top[0] + 1e-12:
                b = int(np.argmax(gains))
                top = (float(gains[b]), owner, feature, b)
        best.append(top)
    return best


def grow(
    rule: SplitRule,
    keys: KeyPair,
    own: TreeParty,
    wire: Wire,
    n_passive: int,
    rows: np.ndarray,
    max_depth: int,
    min_rows: int = 2,
) -> Tree:
    """Grow one tree over ``rows``; the parties already hold this tree's statistics."""
    tree = Tree([Node(rows, 0)])
    frontier = [0]
    while frontier:
        open_ = [i for i in frontier if tree.nodes[i].depth < max_depth]
        open_ = [i for i in open_ if len(tree.nodes[i].rows) >= 2 * min_rows]
        if not open_:
            break
        node_rows = [tree.nodes[i].rows for i in open_]
        answers = wire.ask(TreeParty.histograms, [(_rows_message(node_rows),)] * n_passive, True)
        candidates = [_best_in(rule, keys, h, k) for k, h in enumerate(answers)]
        candidates.append(_best_in(rule, None, own.histograms(node_rows), ACTIVE))
        choice = {}
        for pos, i in enumerate(open_):
            top = max((c[pos] for c in candidates), key=lambda t: t[0])  # first max wins
            if top[2] >= 0:
                choice[i] = top
        frontier = _apply(tree, choice, own, wire, n_passive)
    return tree


def _apply(
    tree: Tree, choice: dict[int, Candidate], own: TreeParty, wire: Wire, n_passive: int
) -> list[int]:
    """Ask each owner to split its chosen nodes; append the children; the new frontier."""
    requests: list[list[SplitRequest]] = [[] for _ in range(n_passive)]
    for i, (_, owner, feature, b) in choice.items():
        if owner != ACTIVE:
            requests[owner].append((i, tree.nodes[i].rows.astype(np.int32), feature, b))
    answers = (
        wire.ask(TreeParty.split_many, [(r,) for r in requests], False) if any(requests) else []
    )
    results: dict[int, tuple[int, np.ndarray]] = {}
    for owner, answer in enumerate(answers):
        for (i, *_), (split_id, left) in zip(requests[owner], answer.payload, strict=True):
            results[i] = (split_id, left)
    frontier = []
    for i, (_, owner, feature, b) in sorted(choice.items()):
        node = tree.nodes[i]
        if owner == ACTIVE:
            split_id, msg = own.split(node.rows, feature, b)
            left = msg.payload
        else:
            split_id, left = results[i]
        node.owner, node.split_id = owner, split_id
        is_left = np.isin(node.rows, left)
        for side in (node.rows[is_left], node.rows[~is_left]):
            tree.nodes.append(Node(side, node.depth + 1))
            frontier.append(len(tree.nodes) - 1)
        node.left, node.right = frontier[-2], frontier[-1]
    return frontier


def leaves_of_test(tree: Tree, own: TreeParty, wire: Wire, n_passive: int, m: int) -> np.ndarray:
    """(M,) the leaf each test row reaches; owners route rows at their own splits."""
    asks: list[list[int]] = [[] for _ in range(n_passive)]
    for node in tree.nodes:
        if not node.is_leaf and node.owner != ACTIVE:
            asks[node.owner].append(node.split_id)
    routes: dict[tuple[int, int], np.ndarray] = {}
    answers = wire.ask(TreeParty.route, [(a,) for a in asks], False) if any(asks) else []
    for owner, answer in enumerate(answers):
        bits = np.unpackbits(answer.payload, axis=1, count=m).astype(bool)
        routes.update({(owner, s): bits[i] for i, s in enumerate(asks[owner])})
    leaf = np.zeros(m, dtype=np.int64)
    stack = [(0, np.arange(m))]
    while stack:
        i, idx = stack.pop()
        node = tree.nodes[i]
        if node.is_leaf:
            leaf[idx] = i
            continue
        if node.owner == ACTIVE:
            go = np.unpackbits(own.route([node.split_id]).payload, axis=1, count=m)[0] > 0
        else:
            go = routes[(node.owner, node.split_id)]
        stack += [(node.left, idx[go[idx]]), (node.right, idx[~go[idx]])]
    return leaf
