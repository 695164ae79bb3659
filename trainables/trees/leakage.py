"""What each tree / Paillier model reveals to whom, and the passive party's attack view.

Why a table in code: the record's ``extra['reveals']`` and the README's table must say the
same thing, and both must follow the protocol as implemented (read off ``models.py``,
``builder.py``, ``xgb_federated.py``/``xgb_tap.py`` and ``paillier_lr.py``), not the
intent. ``*_view`` turn what a passive party logged (its ``received`` payloads) into the
``TreeView`` of ``trainables/attacks/tree_grad_li.py``, adding only public protocol facts
(row count, packing layout, the boosting schedule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trainables.trees.crypto import Ciphertext, Packer, PublicKey

if TYPE_CHECKING:
    from trainables.attacks.tree_grad_li import TreeView
    from trainables.trees.paillier_lr import LRReceived
    from trainables.trees.xgb_tap import Sent

_NODES = "row ids of every open node per level (instance spaces)"
_OWN = "which of its own (feature, bin) splits were chosen"
_TREE_ACTIVE = (
    "per-bin sums over each passive feature's bins (g,h sums or class counts), "
    "left-row ids of the passive's chosen splits, test-row routing bits"
)

_REVEALS: dict[tuple[str, bool], dict[str, str]] = {
    ("xgboost", False): {
        "to_passive": "plaintext per-row gradients g=p-y and hessians h=p(1-p) every round; "
        "the base score (label mean or class log-priors); the whole model, split values of "
        "every party",
        "to_active": "each passive's best split per node with its threshold (the shared model)",
        "labels_to_passive": "exact (sign of g)",
    },
    ("secureboost", True): {
        "to_passive": f"Paillier-encrypted packed per-row (g,h); {_NODES}; {_OWN}",
        "to_active": _TREE_ACTIVE,
        "labels_to_passive": "encrypted; node row sets still correlate with labels",
    },
    ("secureboost", False): {
        "to_passive": f"plaintext packed per-row (g,h) (encrypt=0); {_NODES}; {_OWN}",
        "to_active": _TREE_ACTIVE,
        "labels_to_passive": "exact (sign of g)",
    },
    ("forest", False): {
        "to_passive": f"plaintext packed one-hot labels of each tree's sampled rows; {_NODES}; "
        f"{_OWN}",
        "to_active": _TREE_ACTIVE,
        "labels_to_passive": "exact (the labels themselves)",
    },
    ("forest", True): {
        "to_passive": f"Paillier-encrypted packed one-hot labels of each tree's sampled rows; "
        f"{_NODES}; {_OWN}",
        "to_active": _TREE_ACTIVE,
        "labels_to_passive": "encrypted; node row sets still correlate with labels",
    },
    ("paillier_lr", True): {
        "to_passive": "Paillier-encrypted per-row 4dL/dz = z+2-4y; its own batch gradient "
        "X_k^T d in plaintext (after the key holder opens it, masked)",
        "to_active": "Paillier-encrypted per-row H_k = X_k theta_k",
        "labels_to_passive": "encrypted per row; batch-aggregated gradients in plaintext",
    },
    ("paillier_lr", False): {
        "to_passive": "plaintext per-row dL/dz (Taylor: (z+2-4y)/4; exact: sigmoid(z)-y)",
        "to_active": "plaintext per-row H_k = X_k theta_k",
        "labels_to_passive": "exact (sign of dL/dz)",
    },
}


def reveals(model: str, encrypted: bool) -> dict[str, str]:
    """The ``extra['reveals']`` entry of a tree / Paillier trial."""
    family = "forest" if model in ("rf", "secure_rf") else model
    return dict(_REVEALS[(family, encrypted and model != "xgboost")])


def xgb_view(party_id: int, n_classes: int, X: np.ndarray, received: list[Sent]) -> TreeView:
    """A passive xgboost worker's view: each round's broadcast g (the base score unused)."""
    from trainables.attacks.tree_grad_li import Received, TreeView

    rows = np.arange(len(X))
    got = tuple(
        Received("gradient", rows, np.asarray(r["g"]).reshape(len(X), -1))
        for r in received
        if "g" in r
    )
    return TreeView(party_id, "passive", "xgboost", n_classes, X, 0, got)


def tree_view(
    party_id: int,
    model: str,
    n_classes: int,
    X: np.ndarray,
    log: tuple[PublicKey, list[list[list[Ciphertext | None]]]],
) -> TreeView:
    """A passive ``TreeParty``'s view: each tree's packed per-row statistics (or ciphertexts)."""
    from trainables.attacks.tree_grad_li import Kind, Received, TreeView
    from trainables.trees.secureboost import FRAC_BITS, OFFSET

    key, trees = log
    n = len(X)
    boost = model == "secureboost"
    kind: Kind = "packed_gh" if boost else "packed_onehot"
    if boost:
        packer, offset = Packer(2, n.bit_length() + FRAC_BITS + 3, key.plaintext_bits), OFFSET
    else:
        packer, offset = Packer(n_classes, n.bit_length() + 1, key.plaintext_bits), 0
    layout = (packer.slot_bits, packer.per_int, packer.n_slots, offset)
    width = 1 if n_classes == 2 else n_classes
    got = []
    for t, packed in enumerate(trees):
        rows = np.array([i for i, v in enumerate(packed[0]) if v is not None], dtype=np.int64)
        values = [[chunk[i] for chunk in packed] for i in rows]
        got.append(Received(kind, rows, values, t % width if boost else 0, layout))
    return TreeView(party_id, "passive", model, n_classes, X, key.n, tuple(got))


def lr_view(
    party_id: int, n_classes: int, X: np.ndarray, log: tuple[PublicKey, list[LRReceived]]
) -> TreeView:
    """A passive Paillier-LR party's view: each batch's per-row [[4 dL/dz]] (or dL/dz)."""
    from trainables.attacks.tree_grad_li import Kind, Received, TreeView

    key, batches = log
    kind: Kind = "fixed_gradient" if key.encrypted else "gradient"
    got = tuple(Received(kind, np.asarray(rows), values) for rows, values in batches)
    return TreeView(party_id, "passive", "paillier_lr", n_classes, X, key.n, got)
