"""Runs attacks after training: draws each attacker's auxiliary knowledge, builds its
``PartyView`` from its own party alone, runs the attack and lets the judge score it."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from trainables.attacks.base import (
    ATTACKS,
    Attack,
    AttackInfo,
    AuxData,
    Guess,
    InferenceTamper,
    PartyView,
)
from trainables.attacks.chance import Score, mean_score
from trainables.attacks.judge import Judge, QueryModel, TrainedParty
from trainables.attacks.tuning import Adapt, split_adapt, tune
from trainables.hooks import MessageLog
from trainables.messages import BatchRef, BatchSchedule
from trainables.results.labels import adapted_label


class PartyShape(Protocol):
    """What the harness reads of a party's configuration (``PartyConfig`` for NN parties)."""

    @property
    def n_parties(self) -> int: ...

    @property
    def n_classes(self) -> int: ...


class AttackedParty(TrainedParty, Protocol):
    """A trained party as the harness reads it (a ``Party``, a stacked party's slice, a
    copy from an actor, FedCVT's party): its data and bottom (``TrainedParty``), its hook
    chain (the message log is one), its schedule and each epoch's weights. ``top`` and
    ``y_train`` are the active party's (K-1): the harness reads them there only."""

    top: nn.Module
    y_train: torch.Tensor  # (n_train,)

    @property
    def party_id(self) -> int: ...

    @property
    def config(self) -> PartyShape: ...

    @property
    def hooks(self) -> Sequence[object]: ...

    @property
    def schedule(self) -> BatchSchedule: ...

    @property
    def epoch_states(self) -> Sequence[Mapping[str, Mapping[str, torch.Tensor]]]:
        """After each epoch but the last: each model's (``bottom``, ``top``) state dict."""
        ...


@dataclass(frozen=True)
class AttackOutcome:
    """One attack's result; ``score`` is the judge's (AP beside its baseline, ``chance.py``)."""

    name: str
    type: str
    attacker: int
    score: Score
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)  # the preset and changed params

    @property
    def ap(self) -> float:
        return self.score.ap

    @property
    def mp(self) -> float:
        return self.score.mp

    def record_fields(self) -> dict[str, Any]:
        """The attack record's scored columns: the AP beside its baseline (advantage, its
        SE, collapse) and the MP under attack with its SE."""
        return {**self.score.ap_fields(), "mp": self.score.mp, "mp_se": self.score.mp_se}


def attacker_index(info: AttackInfo, n_parties: int) -> int:
    """Passive attacks are run by party 0, active ones by the label holder (K-1)."""
    return n_parties - 1 if info.role == "active" else 0


def draw_aux(
    info: AttackInfo,
    y_train: np.ndarray,
    peer_X_train: np.ndarray | None,
    seed: int,
    pool: np.ndarray | None = None,
) -> AuxData:
    """The auxiliary knowledge ``info`` grants, drawn from the training rows by ``seed``
    (the known label rows from ``pool`` alone where given: ``aux_from_first_batch``).

    The same function runs before training (for training-time attacks) and after it, so
    an attacker gets the same knowledge in both places.
    """
    rng = np.random.default_rng([seed, 7919])
    label_rows: list[int] = []
    per_class = info.aux_labels_per_class
    if info.aux_labels_total:
        per_class = max(1, info.aux_labels_total // len(np.unique(y_train)))
    if per_class:
        for c in np.unique(y_train):
            members = np.flatnonzero(y_train == c)  # (n_c,) training rows of class c
            if pool is not None:
                members = np.intersect1d(members, pool)
            take = min(per_class, len(members))
            label_rows += rng.choice(members, size=take, replace=False).tolist()
    rows = np.sort(np.asarray(label_rows, dtype=np.int64))
    feature_rows = np.zeros(0, dtype=np.int64)
    peer = None
    if info.aux_feature_fraction and peer_X_train is not None:
        n = len(y_train)
        k = max(1, round(info.aux_feature_fraction * n))
        feature_rows = np.sort(rng.choice(n, size=k, replace=False)).astype(np.int64)
        peer = peer_X_train[feature_rows]
    return AuxData(rows, y_train[rows], feature_rows, peer)


def peer_index(attacker: int) -> int:
    """The party whose features an attacker targets: party 0, or party 1 if it is party 0."""
    return 0 if attacker != 0 else 1


def make_view(
    party: AttackedParty, info: AttackInfo, aux: AuxData, query: QueryModel | None, seed: int
) -> PartyView:
    """The attacker's own party, copied so that the attack cannot change the trial."""
    log = next((h for h in party.hooks if isinstance(h, MessageLog)), MessageLog())
    is_active = hasattr(party, "y_train")
    return PartyView(
        party_id=party.party_id,
        role="active" if is_active else "passive",
        n_parties=party.config.n_parties,
        n_classes=party.config.n_classes,
        X_train=party.X_train.cpu().numpy().copy(),
        X_test=party.X_test.cpu().numpy().copy(),
        bottom=copy.deepcopy(party.bottom).cpu(),
        top=copy.deepcopy(party.top).cpu() if is_active else None,
        y_train=party.y_train.cpu().numpy().copy() if is_active else None,
        sent=tuple(log.sent),
        received=tuple(log.received),
        schedule=copy.deepcopy(party.schedule),
        aux=aux,
        seed=seed,
        query=query,
    )


# info -> (attacker party, its view); a tree kind passes its ``TreeView`` in the view's
# place, which its attacks take (``TreeGradLI.run``)
ViewOf = Callable[[AttackInfo], tuple[int, PartyView]]
# (guess, attacker party) -> the judge's score, and what the judging adds to the record
# (untyped guess: a kind's scorer may take the one guess type its attacks return)
ScoreOf = Callable[[Any, int], tuple[Score, dict[str, object]]]


def evaluate(
    attacks: Sequence[tuple[str, dict[str, Any]]], view_of: ViewOf, score_of: ScoreOf
) -> list[AttackOutcome]:
    """The one attack harness, for every kind: each attack runs on the view ``view_of``
    gives its attacker (built from that party alone) and ``score_of`` judges the guess.
    An attack's seconds include building its view. An attack with an ``adapt`` budget
    (``tuning.py``) also tunes its settings on that view alone and is judged once more at
    the chosen setting, as ``<label>@adapted``."""
    outcomes = []
    for name, given in attacks:
        params, adapt = split_adapt(given)
        attack: Attack = ATTACKS.create(name, **params)
        start = time.perf_counter()
        who, view = view_of(attack.view_info())
        guess = attack.run(view)
        score, judged = score_of(guess, who)
        seconds = time.perf_counter() - start
        extra = {**attack.record_extra(), **judged}
        outcomes.append(outcome_of(attack, who, score, seconds, extra))
        if adapt is not None:
            outcomes.append(adapted(attack, adapt, view_of, score_of, outcomes[-1]))
    return outcomes


def adapted(
    attack: Attack, adapt: Adapt, view_of: ViewOf, score_of: ScoreOf, default: AttackOutcome
) -> AttackOutcome:
    """``attack`` tuned by its attacker on its own view (never the judge's rows), then
    judged once at the best setting; the default's outcome is reused when it won."""
    start = time.perf_counter()
    who, view = view_of(attack.view_info())
    tuned = tune(attack, view, adapt)
    if tuned.best:
        best = type(attack)(preset=attack.preset, **{**_explicit(attack), **tuned.best})
        score, judged = score_of(best.run(view_of(attack.view_info())[1]), who)
    else:  # the default setting scored best on the attacker's own rows: same guess
        best, score, judged = attack, default.score, {}
    extra = {
        **best.record_extra(),
        **judged,
        "attack_label": adapted_label(attack.label()),
        "adapted": {**tuned.record(adapt), "default_label": attack.label()},
    }
    seconds = time.perf_counter() - start
    return outcome_of(attack, who, score, seconds, extra)


def outcome_of(
    attack: Attack, who: int, score: Score, seconds: float, extra: dict[str, Any]
) -> AttackOutcome:
    """The outcome of ``attack``'s guess; an attack whose baseline is its guess on an
    unattacked twin (``AttackInfo.unattacked_baseline``) leaves it unknown here: this
    training learned the attack, so no score of its own models is that baseline."""
    if attack.info.unattacked_baseline:
        score = score.without_baseline()
    return AttackOutcome(attack.name, attack.info.type, who, score, seconds, extra)


def _explicit(attack: Attack) -> dict[str, Any]:
    """The parameters given beside the preset (so that a rebuild keeps them)."""
    preset = attack.presets.get(attack.preset, {}) if attack.preset else {}
    base = {**attack.defaults, **preset}
    return {k: v for k, v in attack.params.items() if v != base[k]}


def nn_view_of(parties: Sequence[AttackedParty], seed: int) -> ViewOf:
    """The attacker's view of one NN training: from its own party and its drawn auxiliary
    knowledge only."""

    def view_of(info: AttackInfo) -> tuple[int, PartyView]:
        who = attacker_index(info, len(parties))
        y = parties[-1].y_train.cpu().numpy()
        peer_x = parties[peer_index(who)].X_train.cpu().numpy()
        pool = parties[who].schedule.rows(BatchRef(0, 0)) if info.aux_from_first_batch else None
        aux = draw_aux(info, y, peer_x, seed, pool)
        query = QueryModel(parties) if info.query_model else None
        return who, make_view(parties[who], info, aux, query, seed)

    return view_of


def run_attacks(
    parties: Sequence[AttackedParty], attacks: Sequence[tuple[str, dict[str, Any]]], seed: int
) -> list[AttackOutcome]:
    """Every attack in ``attacks`` on the trained NN ``parties`` (order: 0..K-1, active
    last): each attacker's view from its own party and its drawn auxiliary knowledge,
    scored by the ``Judge``, who alone holds the ground truth. Attacks that stack with
    each other (PMC and MC) run as one (``run_attacks_many``)."""
    return run_attacks_many([(parties, attacks, seed)])[0]


# parties, attacks, seed
Trained = tuple[Sequence[AttackedParty], Sequence[tuple[str, dict[str, Any]]], int]


def run_attacks_many(trainings: Sequence[Trained]) -> list[list[AttackOutcome]]:
    """``run_attacks`` of each of a stack's trainings (or of one), each attack's
    evaluations run together (``Attack.run_many``: model completion trains the K heads as
    one), each on its own training's view and scored by its own judge; attacks whose
    ``stack_key``s are equal (PMC and MC at the same settings) join one ``run_many``, run
    where the first of them is asked. An evaluation's seconds are its share of its stack's
    time. Adaptive attackers, attacks not every training asks for, and attacks without
    their own ``run_many`` run one training at a time (``evaluate``: each its own seconds)."""
    scorers = [_scorer(parties, Judge(parties)) for parties, _, _ in trainings]
    views = [nn_view_of(parties, seed) for parties, _, seed in trainings]
    asked = [list(attacks) for _, attacks, _ in trainings]
    stacked: dict[int, Attack] = {}  # attack index -> the attack, where it stacks
    for j, (name, given) in enumerate(asked[0]):
        params, adapt = split_adapt(given)
        own = ATTACKS.get(name).run_many is not Attack.run_many  # its own stacked form
        if own and adapt is None and all(len(a) > j and a[j] == (name, given) for a in asked):
            stacked[j] = ATTACKS.create(name, **params)
    groups: dict[Hashable, list[int]] = {}
    for j, attack in stacked.items():
        groups.setdefault(attack.stack_key() or ("alone", j), []).append(j)
    outcomes: list[dict[int, list[AttackOutcome]]] = [{} for _ in trainings]
    for j in range(max(len(a) for a in asked)):
        if j not in stacked:
            for k, attacks in enumerate(asked):  # one at a time
                if len(attacks) > j:
                    outcomes[k][j] = evaluate([attacks[j]], views[k], scorers[k])
        elif j not in outcomes[0]:  # the first of its group: the whole group runs now
            members = next(g for g in groups.values() if j in g)
            _run_stacked([(i, stacked[i]) for i in members], views, scorers, outcomes)
    return [[o for j in sorted(done) for o in done[j]] for done in outcomes]


def _run_stacked(
    members: Sequence[tuple[int, Attack]],
    views: Sequence[ViewOf],
    scorers: Sequence[ScoreOf],
    outcomes: list[dict[int, list[AttackOutcome]]],
) -> None:
    """The ``members`` (attack index, attack) on every training's view as one
    ``run_many`` of the first, each guess scored by its training's judge."""
    start = time.perf_counter()
    seen = [
        (j, k, *views[k](attack.view_info())) for j, attack in members for k in range(len(views))
    ]
    guesses = members[0][1].run_many([view for *_, view in seen])
    share = (time.perf_counter() - start) / len(seen)
    attacks = dict(members)
    for (j, k, who, _), guess in zip(seen, guesses, strict=True):
        attack = attacks[j]
        score, judged = scorers[k](guess, who)
        extra = {**attack.record_extra(), **judged}
        if len(views) > 1:
            extra["attack_stacked"] = len(views)
        outcome = outcome_of(attack, who, score, share, extra)
        outcomes[k][j] = [outcome]


def _scorer(parties: Sequence[AttackedParty], judge: Judge) -> ScoreOf:
    """The judge's score of a guess; for one scored over epochs
    (``InferenceTamper.over_epochs``) the mean of every epoch's judge's score, the final
    model's last (``Party.epoch_states``: the weights after each earlier epoch)."""

    def score(guess: Guess, who: int) -> tuple[Score, dict[str, object]]:
        tamper = guess if isinstance(guess, InferenceTamper) else None
        judged: dict[str, object] = {}
        if tamper is not None and tamper.target is not None:
            judged["scored_rows"] = len(judge.tamper_rows(tamper))  # what its AP is over
        if tamper is None or not tamper.over_epochs:
            return judge.score(guess, who), judged
        scores = [Judge(at).score(guess, who) for at in epoch_parties(parties)]
        scores.append(judge.score(guess, who))
        return mean_score(scores), {**judged, "scored_epochs": len(scores)}

    return score


def epoch_parties(parties: Sequence[AttackedParty]) -> list[list[AttackedParty]]:
    """The trained parties as they were after each epoch but the last: shallow copies
    (the same data) holding copies of their models with that epoch's weights."""
    out = []
    for e in range(len(parties[0].epoch_states)):
        at = []
        for party in parties:
            state, was = party.epoch_states[e], copy.copy(party)
            for name, weights in state.items():  # "bottom", and "top" at the active party
                module = copy.deepcopy(getattr(party, name))
                module.load_state_dict(weights)
                setattr(was, name, module)
            at.append(was)
        out.append(at)
    return out
