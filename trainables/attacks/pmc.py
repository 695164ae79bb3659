"""PMC, passive model completion (Fu et al., USENIX Security 2022; VFLAIR's PMC).

After training, the passive party's bottom model already maps its features towards the
labels (the VFL task trained it to). The attacker completes it: a new linear head on the
frozen trained bottom, trained with MixMatch (``completion.py``) on the few labeled
training rows it is assumed to know (4 per class) and its own unlabeled training rows.
The completed model then labels the test rows from the attacker's features alone.
AP: accuracy of the inferred test labels.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

import numpy as np

from trainables.attacks.base import Attack, AttackInfo, LabelGuess, PartyView, Range
from trainables.attacks.completion import (
    COMPLETION_DEFAULTS,
    CONVERGE,
    FAST,
    check_params,
    complete_models,
    predict,
)


class PassiveModelCompletion(Attack):
    name = "pmc"
    info = AttackInfo(type="LI", role="passive", training_time=False, aux_labels_per_class=4)
    defaults: ClassVar[dict[str, object]] = dict(COMPLETION_DEFAULTS)
    presets: ClassVar[dict[str, dict[str, object]]] = {  # completion.py
        "fast": dict(FAST),
        "converge": dict(CONVERGE),
    }
    # what an adaptive attacker tunes (tuning.py): the completion's optimisation and
    # MixMatch's knobs. The head, the frozen bottom, the batch and the steps per epoch
    # stay: a trial never costs more than the default run (epochs <= 25), so the budget
    # is ``trials`` default runs
    search: ClassVar[dict[str, Range]] = {
        "lr": Range(1e-4, 3e-2, log=True),
        "epochs": Range(5, 25, integer=True),
        "T": Range(0.3, 1.0),
        "alpha": Range(0.25, 2.0),
        "lambda_u": Range(1.0, 100.0, log=True),
        "noise": Range(0.0, 0.2),
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        check_params(self.params)

    def completion_params(self) -> dict[str, object]:
        return {k: v for k, v in self.params.items() if k in COMPLETION_DEFAULTS}

    def run(self, view: PartyView) -> LabelGuess:
        return self.run_many([view])[0]

    def stack_key(self) -> Hashable:
        """MC's and PMC's views at the same completion settings train as one stack."""
        return ("completion", tuple(sorted(self.completion_params().items())))

    def run_many(self, views: Sequence[PartyView]) -> list[LabelGuess]:
        """The completions of a stack's views trained together (``complete_models``)."""
        jobs = [
            (
                view.bottom,
                view.X_train[view.aux.label_rows],  # (n_aux, d)
                view.aux.labels,  # (n_aux,)
                view.X_train,  # (n_train, d): its own rows, used unlabeled
                view.seed,
            )
            for view in views
        ]
        classes = {view.n_classes for view in views}
        if len(classes) != 1:
            raise ValueError(f"a stack's views have different class counts: {sorted(classes)}")
        models = complete_models(jobs, classes.pop(), self.completion_params())
        return [
            LabelGuess(split="test", rows=np.arange(len(v.X_test)), labels=predict(m, v.X_test))
            for v, m in zip(views, models, strict=True)
        ]


ATTACK = PassiveModelCompletion
