"""Tree and Paillier models (xgboost, secureboost, rf, secure_rf, paillier_lr): TEMPORARY
adapter over ``trainables.trees.run``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trainables.data import Dataset
from trainables.kinds.base import AttackSpec, TrialKind
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement
from trainables.trees import run as tree_run


class TreeKind(TrialKind):
    name = "tree"
    takes_model_params = True

    def takes(self, spec: TrialSpec) -> bool:
        tree_run._load_models()
        return str(spec.model) in tree_run.TREE_MODELS

    def check(self, spec: TrialSpec) -> None:
        from trainables.data import DATASETS

        DATASETS.get(spec.dataset)
        tree_run.tree_check(spec)

    def incompatibility(self, spec: TrialSpec, data_dir: str | Path | None) -> str | None:
        return tree_run.tree_incompatibility(spec, data_dir)

    def attack_incompatibility(self, spec: TrialSpec, attack: str) -> str | None:
        return tree_run.attack_incompatibility(spec, attack)

    def run(
        self, spec: TrialSpec, ds: Dataset, placement: Placement, attacks: Sequence[AttackSpec]
    ) -> list[Record]:
        return tree_run.run_tree_trial(
            spec, transport=placement.transport, cpu_per_party=placement.cpu_per_party,
            gpu_per_party=placement.gpu_per_party, address=placement.address,
            reuse_actors=placement.reuse_actors, attacks=attacks, dataset=ds,
        )  # fmt: skip
