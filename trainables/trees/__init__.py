"""Tree-based VFL and Paillier-encrypted VFL.

Tree models (``TrialSpec.model``, trial kind ``tree``): ``xgboost`` (xgboost's federated
column-split training), ``secureboost`` (boosting with Paillier-encrypted g/h), ``rf`` /
``secure_rf`` (Gini random forest without / with encryption). ``paillier_lr`` (VFLAIR's HE
logistic regression NN-VFL) is its own trial kind, a ``Protocol`` with a key-holder party
(``paillier_lr.py``). Tree parameters come from ``model_params``; the Paillier key length
from ``key_length``; ``model_params.encrypt=0`` runs an encrypted model's protocol in
plaintext (the benchmarks' "without encryption" twin).
"""

from __future__ import annotations

from trainables.trees.common import TREE_MODELS
from trainables.trees.run import run_tree_trial, tree_check

__all__ = ["TREE_MODELS", "run_tree_trial", "tree_check"]
