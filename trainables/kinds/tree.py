"""Tree models (xgboost, secureboost, rf, secure_rf): their own growing loop, our parties.

No NN defense applies (they hook NN embeddings and gradients; a tree trial sends per-row
statistics, per-bin sums, row ids and routing bits) and only ``trees``-family attacks read
these messages; both are refused with the reason (``trainables/trees/run.py``: ``refusal``,
``attack_refusal``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trainables.data import Dataset
from trainables.jobs import AttackSpec
from trainables.kinds.base import TrialKind
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement
from trainables.trees import run as tree_run


class TreeFamilyKind(TrialKind):
    """What tree models and Paillier LR share: their options are ``model_params``, their
    refusals come from ``check`` (then the rows), and only tree-message attacks apply."""

    takes_model_params = True

    def incompatibility(self, spec: TrialSpec, data_dir: str | Path | None) -> str | None:
        return tree_run.checked_rows_refusal(self.check, spec, data_dir)

    def attack_incompatibility(self, spec: TrialSpec, attack: str) -> str | None:
        return tree_run.attack_refusal(spec, attack)


class TreeKind(TreeFamilyKind):
    name = "tree"

    def takes(self, spec: TrialSpec) -> bool:
        return str(spec.model) in tree_run.TREE_MODELS

    def check(self, spec: TrialSpec) -> None:
        from trainables.data import DATASETS

        DATASETS.get(spec.dataset)
        tree_run.tree_check(spec)

    def run(
        self, spec: TrialSpec, ds: Dataset, placement: Placement, attacks: Sequence[AttackSpec]
    ) -> list[Record]:
        return tree_run.run_tree_trial(spec, placement, attacks=attacks, dataset=ds)
