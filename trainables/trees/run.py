"""What tree and Paillier-LR trials share: party data, model parameters, checks, records.

Tree trials (``trainables/kinds/tree.py``) and Paillier LR (``kinds/paillier_lr.py``)
evaluate only attacks whose class says ``family = "trees"`` (they read a passive party's
``TreeView``, ``trainables/attacks/tree_grad_li.py``); NN-VFL attacks read bottom models
and embeddings these models do not have, and NN defenses hook NN messages these models
do not send. ``refusal`` and ``attack_refusal`` say so with the reason, so the planner
drops such cells before running.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from trainables.data import Dataset, load_dataset, split_refusal
from trainables.errors import ConfigError
from trainables.jobs import AttackSpec
from trainables.records import Record
from trainables.rounds import TrainResult
from trainables.spec import TrialSpec
from trainables.transport.placement import LOCAL, Placement
from trainables.trees import models  # noqa: F401  (the runners register in TREE_MODELS)
from trainables.trees.common import (
    PARAMS,
    TREE_MODELS,
    encrypt_flag,
    model_params,
    tree_data,
)

if TYPE_CHECKING:
    from trainables.attacks.base import LabelGuess
    from trainables.attacks.chance import Score
    from trainables.attacks.harness import AttackOutcome


def refusal(spec: TrialSpec, messages: str) -> str | None:
    """Why ``spec``'s defense, training-time attack or SSL variant cannot run on a model
    whose ``messages`` are as described, or None."""
    if spec.defense != "none" or spec.stack:
        return (f"model={spec.model!r}: defenses are defined for NN-VFL models only (they "
                f"hook NN embeddings and gradients); {messages}; use defense: none")  # fmt: skip
    if spec.train_attack != "none":
        return (f"model={spec.model!r}: training-time attacks are defined for NN-VFL models "
                "only; use train_attack: none")  # fmt: skip
    if spec.ssl_variant != "none":
        return f"model={spec.model!r}: ssl_variant must be none"
    return None


def checked_rows_refusal(
    check: Callable[[TrialSpec], None], spec: TrialSpec, data_dir: str | Path | None
) -> str | None:
    """A tree kind's ``incompatibility``: its ``check``'s refusal, else ``split_refusal``."""
    try:
        check(spec)
    except ConfigError as err:
        return str(err)
    return split_refusal(spec, load_dataset(spec.dataset, data_dir, **spec.dataset_params))


def attack_refusal(spec: TrialSpec, name: str) -> str | None:
    """Why attack ``name`` cannot be evaluated on a tree / Paillier model, or None."""
    from trainables.attacks import ATTACKS

    if ATTACKS.get(name).family != "trees":
        return (f"attack {name!r} reads NN-VFL models and embeddings; model={spec.model!r} "
                "is a tree / Paillier model (its attacks: tree_grad_li)")  # fmt: skip
    return None


TREE_MESSAGES = (
    "its messages are (encrypted) per-row statistics, per-bin sums, row ids "
    "and routing bits, not NN embeddings or gradients"
)


def tree_check(spec: TrialSpec) -> None:
    """ConfigError if ``spec`` names a tree model with bad parameters or unsupported parts."""
    TREE_MODELS.get(str(spec.model))
    model_params(spec, PARAMS[str(spec.model)][0])
    encrypt_flag(spec, True)
    reason = refusal(spec, TREE_MESSAGES)
    if reason is not None:
        raise ConfigError(reason)


def run_tree_trial(
    spec: TrialSpec,
    placement: Placement = LOCAL,
    *,
    attacks: Sequence[AttackSpec] = (),
    dataset: Dataset | None = None,
    data_dir: str | Path | None = None,
) -> list[Record]:
    """A tree model's trial: the clean record, then one record per tree attack."""
    tree_check(spec)
    ds = dataset if dataset is not None else load_dataset(spec.dataset, data_dir,
                                                          **spec.dataset_params)  # fmt: skip
    data = tree_data(spec, ds)
    runner = TREE_MODELS.get(str(spec.model))
    return records(spec, len(data.y_train), lambda observe: runner(spec, data, placement, observe),
                   attacks, y_test=data.y_test)  # fmt: skip


def records(
    spec: TrialSpec,
    n_labeled: int,
    run: Callable[[bool], TrainResult],
    attacks: Sequence[AttackSpec],
    y_test: np.ndarray | None = None,
) -> list[Record]:
    """The clean record of ``run(observe)`` and one record per tree attack on its view.

    ``y_test`` (n_test,): the rows the MP (an accuracy) is measured on, for ``mp_se``."""
    for name, _ in attacks:
        reason = attack_refusal(spec, name)
        if reason is not None:
            raise ConfigError(reason)
    start = time.perf_counter()
    out = run(bool(attacks))
    wall = time.perf_counter() - start
    extra = {"wall_seconds": round(wall, 4), **out.extra}
    clean = Record.trained(
        spec, n_labeled, out, y_test=y_test, extra=json.dumps(extra, sort_keys=True)
    )
    return [clean, *(clean.attacked(o) for o in _attack(clean, out, attacks))]


def _attack(clean: Record, out: TrainResult, attacks: Sequence[AttackSpec]) -> list[AttackOutcome]:
    """The tree attacks on passive party 0's view, through the one harness; the common
    label rule scores each, with its baseline from the labels of the scored view rows
    (``chance.score_labels``). The MP and its SE stay the clean record's: the attack reads
    the view, it tampers nothing."""
    from trainables.attacks.chance import score_labels
    from trainables.attacks.harness import evaluate

    if not attacks:
        return []
    view, view_labels = out.outputs["view"], out.outputs["view_labels"]

    def score_of(guess: LabelGuess, who: int) -> tuple[Score, dict[str, object]]:
        score = score_labels(guess, view_labels, np.zeros(0, dtype=np.int64))
        score = dataclasses.replace(  # the clean record's MP: the judge's, as the NN kinds'
            score, mp=cast("float", clean.mp), mp_se=cast("float", clean.mp_se)
        )
        return score, {"attack_rows": len(guess.rows)}

    return evaluate(attacks, lambda info: (view.party_id, view), score_of)
