"""MC (FedHSSL's model completion) on the passive party's pretrained or fine-tuned encoder.

The attacker is passive party 0: it owns its encoder, its features and 80 auxiliary
labeled rows (the threat model's grant, drawn by the harness's ``draw_aux`` from the
labeled aligned rows); it completes its encoder with a new head (``completion.py``, the
same completion as PMC) and labels the test rows from its own features. The judge (here:
the trial, which holds the test labels) scores the guess: AP = label-recovery accuracy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from torch import nn

from trainables.ssl.hssl.parties import SSLPartyInit


@dataclass(frozen=True)
class MCOutcome:
    ap: float
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)  # the preset and changed params


def stage_extra(extra: dict[str, Any], name: str) -> dict[str, Any]:
    """``extra`` with the label of the record's attack ``name`` (``mc_pretrained@fast``):
    the analysis groups by label, and the two stages are two attacks there."""
    suffix = str(extra.get("attack_label", "mc"))[len("mc") :]
    return {**extra, "attack_label": name + suffix}


def run_mc(
    encoder: nn.Module,
    attacker: SSLPartyInit,
    active: SSLPartyInit,
    params: dict[str, Any],
    seed: int,
) -> MCOutcome:
    """Complete ``encoder`` (the attacker's, on clean features) and score its test labels."""
    from trainables.attacks import ATTACKS
    from trainables.attacks.completion import check_params, complete_model, predict
    from trainables.attacks.harness import draw_aux

    assert attacker.labels is None and active.labels is not None
    start = time.perf_counter()
    attack = ATTACKS.create("mc", **params)  # VFLAIR's defaults, a preset, overrides
    info = attack.info  # type: ignore[attr-defined]
    aux = draw_aux(info, active.labels.y_labeled, None, seed)  # rows among the labeled ones
    X_aux = attacker.X_local[attacker.labeled[aux.label_rows]]  # (80, d) its own features
    model = complete_model(
        encoder, X_aux, aux.labels, attacker.X_local, int(attacker.config.n_classes),
        check_params(attack.completion_params()), seed,  # type: ignore[attr-defined]
    )  # fmt: skip
    guess = predict(model, attacker.X_test)  # (n_test,)
    ap = float(np.mean(guess == active.labels.y_test))  # the judge's side
    return MCOutcome(ap, time.perf_counter() - start, attack.record_extra())  # type: ignore[attr-defined]
