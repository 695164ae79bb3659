"""Adaptive training-time attacks (LRB, AMC): the attacker tunes settings that act during
training, one training per trial setting, on a budget the space states (issue 65).

An inference-time attacker tunes on a trained model (``tuning.py``); a training-time one
changes the training itself, so each trial setting is a training. The budget is
``adapt.trials`` trainings per cell (trial 0 the attack's own setting, the others drawn at
random from its ``search``, seeded by the training's seed): the planner counts them, the
estimate prices them, and the trainings run as one stack in one pack (``vectorized.py``:
a job with this budget becomes ``trials`` jobs). No sampler can learn from the first
trials, since all train at once: ``check_adapt`` allows ``sampler: random`` only.

The attacker then scores each trained trial on its own rows, by the folds and the rule of
the inference-time tuner (``tuning.folds_of``, ``tuning.choose``):

- an attack that guesses labels (AMC) runs its guess on each fold of its auxiliary
  labelled rows (``tuning.masked_view``), as an inference-time attacker does;
- an attack that tampers at inference (LRB, ``Attack.own_probe``) submits its own
  auxiliary rows of other classes, with and without its trigger, to the deployed model
  and counts the answers of the target class: its advantage over the untriggered
  answers (``chance.targeted_score``), per fold. These are training rows whose labels the
  attacker already holds; the judge's test rows and labels are not read.

The chosen trial's training is judged as every training is, and its record becomes
``<label>@adapted``; trial 0's record is the default one. Both keep the cell's spec (its
``adapt`` budget included) and the chosen trial says what it ran (``extra.adapted``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from trainables.attacks import ATTACKS, chance
from trainables.attacks.base import Attack
from trainables.attacks.harness import AttackedParty, nn_view_of
from trainables.attacks.judge import service_answers
from trainables.attacks.tuning import (
    Adapt,
    Tuned,
    check_adapt,
    choose,
    fold_scores,
    folds_of,
    masked_view,
    plan_folds,
)
from trainables.errors import refuse_unknown
from trainables.records import Record, setting_hash
from trainables.results.labels import adapted_label
from trainables.spec import Params, TrialSpec

OWN = "own_scores"  # the key a trial's record carries its own fold scores under


def budget(spec: TrialSpec) -> Adapt | None:
    """The tuning budget of ``spec``'s training-time attack, or None (fixed settings)."""
    if spec.train_attack == "none" or not spec.train_attack_adapt:
        return None
    given: dict[str, Any] = dict(spec.train_attack_adapt)
    refuse_unknown("train_attack_adapt", given, sorted(Adapt.__dataclass_fields__))
    adapt = Adapt(**given)
    check_adapt(ATTACKS.get(spec.train_attack), adapt)
    return adapt


def trainings(spec: TrialSpec) -> int:
    """How many trainings ``spec`` stands for: its attacker's ``trials``, else 1."""
    adapt = budget(spec)
    return 1 if adapt is None else int(adapt.trials)


def settings(spec: TrialSpec) -> list[Params]:
    """The attack parameters of each trial training: trial 0 the given ones, the others
    the given ones with every ``search`` key drawn at random (seeded by the spec's seed,
    so a rerun trains the same settings)."""
    import optuna

    params, adapt = dict(spec.train_attack_params), budget(spec)
    assert adapt is not None, "settings of a training without a tuning budget"
    cls = ATTACKS.get(spec.train_attack)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=spec.seed))
    out = [params]
    for _ in range(int(adapt.trials) - 1):
        trial = study.ask()
        out.append({**params, **{k: r.suggest(trial, k) for k, r in cls.search.items()}})
    return out


def trial_specs(spec: TrialSpec) -> list[TrialSpec]:
    """``spec`` once per trial setting (without the budget: each is a plain training)."""
    return [spec.updated(train_attack_params=p) for p in settings(spec)]


def own_scores(
    name: str, params: Params, adapt: Adapt, parties: Sequence[AttackedParty], seed: int
) -> tuple[list[float], int, str]:
    """The attacker's own score of one trained trial, per fold (the advantage over its
    no-information guess), the fewest held-out rows a fold had, and why there is none."""
    attack: Attack = ATTACKS.create(name, **params)
    who, view = nn_view_of(parties, seed)(attack.view_info())
    probe = attack.own_probe(view)
    if probe is None:  # it guesses labels: each fold of its labelled rows, as it would
        masks, why = plan_folds(view, type(attack).info, adapt)
        folds = [masked_view(view, type(attack).info, m) for m in masks]
        return fold_scores(attack, folds).tolist(), _fewest(masks), why
    rows, groups, x_clean, x_triggered, target = probe
    masks, why = folds_of(groups, adapt, seed)
    clean = service_answers(parties, who, rows, x_clean)  # (m,) the deployed model's answers
    hit = service_answers(parties, who, rows, x_triggered)  # (m,)
    scores = []
    for mask in masks:
        ap = float((hit[mask] == target).mean())
        scored = chance.targeted_score(clean[mask], hit[mask], target, ap).advantage
        scores.append(-1.0 if scored is None or np.isnan(scored) else float(scored))
    return scores, _fewest(masks), why


def _fewest(masks: Sequence[np.ndarray]) -> int:
    return min((int(m.sum()) for m in masks), default=0)


def own_extra(spec: TrialSpec, parties: Sequence[AttackedParty]) -> dict[str, object]:
    """What a trial's record carries for ``combine`` (``OWN``): its fold scores, the
    fewest held-out rows, why it could not score, and the seconds scoring took."""
    import time

    start = time.perf_counter()
    adapt = budget(spec)
    assert adapt is not None
    params = dict(spec.train_attack_params)
    scores, held, why = own_scores(spec.train_attack, params, adapt, parties, spec.seed)
    return {OWN: {"folds": scores, "held": held, "why": why,
                  "seconds": round(time.perf_counter() - start, 4)}}  # fmt: skip


def combine(spec: TrialSpec, trials: Sequence[Sequence[Record]]) -> list[Record]:
    """The cell's records from its trials' (one attack record each, trial 0 the default):
    the default's record, and ``<label>@adapted``, the trial ``tuning.choose`` picks on
    the attacker's own fold scores (the default when none beats its noise), both under the
    cell's spec. Only the attacker's own scores choose; the judge's AP is read after."""
    adapt = budget(spec)
    assert adapt is not None
    ran = [json.loads(t[-1].spec_json)["train_attack_params"] for t in trials]  # each trial's
    params = [ATTACKS.create(spec.train_attack, **p).params for p in ran]  # in full
    own = [json.loads(t[-1].extra)[OWN] for t in trials]
    scored = [np.array(o["folds"]) for o in own]
    default = _as_cell(spec, trials[0][-1])
    why = own[0]["why"]
    best = 0
    if not why:
        best = max(range(len(scored)), key=lambda j: (float(scored[j].mean()), -j))
        replace, noise, kept = choose(scored[0], scored[best], adapt.method)
    else:
        replace, noise, kept = False, 0.0, why
    pick = best if replace else 0
    changed = {k: v for k, v in sorted(params[pick].items()) if v != params[0][k]}
    tuned = Tuned(
        changed, _mean(scored[0]), _mean(scored[best]), len(trials), int(own[0]["held"]),
        sum(float(o["seconds"]) for o in own), len(scored[0]), tuple(scored[0].tolist()),
        tuple(scored[best].tolist()), noise, kept,
    )  # fmt: skip
    chosen = _as_cell(spec, trials[pick][-1])
    label = default.label
    searched = ATTACKS.get(spec.train_attack).search
    adapted = {
        **tuned.record(adapt),
        "default_label": label,
        "trainings": len(trials),
        "trial_params": [{k: p[k] for k in sorted(searched)} for p in params],
        "trial_own_scores": [None if np.isnan(m) else round(m, 6) for m in map(_mean, scored)],
    }
    extra = {**json.loads(chosen.extra), "attack_label": adapted_label(label), "adapted": adapted}
    adapted_record = dataclasses.replace(
        chosen, attack_label=adapted_label(label), attack_adapted=True,
        extra=json.dumps(extra, sort_keys=True),
    )  # fmt: skip
    return [*trials[0][:-1], default, adapted_record]


def _mean(scores: np.ndarray) -> float:
    return float(scores.mean()) if len(scores) else float("nan")


def _as_cell(spec: TrialSpec, record: Record) -> Record:
    """A trial's record under the cell's spec (its ``adapt`` budget included), without
    the trial's own scores (``combine`` moves them into ``extra.adapted``)."""
    extra = {k: v for k, v in json.loads(record.extra).items() if k != OWN}
    return dataclasses.replace(
        record, config_hash=spec.config_hash, setting_hash=setting_hash(spec),
        spec_json=spec.model_dump_json(), trial_id=spec.config_hash,
        extra=json.dumps(extra, sort_keys=True),
    )  # fmt: skip
