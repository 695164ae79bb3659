"""Packs: trainings of one shape that one Tune trial runs on one warm set of party actors.

Why: a Tune trial costs a placement group, a trainable start and a report round trip —
about 0.4 s here, ten times a tiny training. A pack pays that once for several trainings
and still reports each training's records as it finishes, so the sink, resume, retries
and progress stay per training.

A pack holds trainings of one *shape*: the same trial kind, dataset (and its parameters)
and party count, so they share the dataset in memory and the placement group's bundles.
``run.pack`` fixes the size; ``auto`` (the default) sizes packs from ``cost``
to last about ``run.pack_seconds`` each (``cost``): one pack if the whole group fits
that, else never so few packs that a slot stays idle. Plain NN packs on the ``ray``
transport run stacked (one actor call per round for the whole pack), so ``auto``
gives them at least ``STACK_MIN`` trainings even when each is longer than the target.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainables.attacks.tuning import fold_count, runs
from trainables.attacks.tuning_trained import budget, trainings
from trainables.data import load_dataset
from trainables.errors import ConfigError, MissingDataError
from trainables.jobs import Job
from trainables.kinds import kind_of
from trainables.kinds.nn import plain_nn
from trainables.trial import actor_count
from trainables.vfl.twins import baseline_attack, unattacked

if TYPE_CHECKING:
    from sweep_engine.plan import Plan, Training
    from trainables.spec import TrialSpec

# Cost model constants, from benchmarks.sweep_scale / benchmarks.attack_speed on the 2-core
# dev machine (one torch thread per party): only the pack size and the dry run's estimate
# read them; ``sweep.py --dry-run --estimate`` measures instead of trusting them.
ROUND_S = 1.5e-3  # one round of actor calls (ray transport), on top of the arithmetic
LOCAL_ROUND_S = 1.5e-3  # one round in-process (with its share of evaluation)
ROW_S = 6e-10  # one row x one input feature x one hidden unit, forward + backward
# One pretraining epoch in one process (the parties one after the other, as the probe
# runs it), per FedHSSL stage: the local step per training row (a + b x input features:
# the towers' hidden layers cost more than the input layer), the cross-party step per
# aligned row. Fitted on ssl_iso's classes on the actors (issue 45, 2026-12-05: adult local
# SimSiam 2.8 s an epoch over 32,561 x 108, mnist 0.8-0.95 s over 8,000 x 784, the cross
# step 1.6 and 0.6 s over 6,512 and 1,600 aligned rows), doubled back to one process: on
# the actors the parties pretrain side by side (``estimate``'s ``parallel``). The old
# rows x features constant said 138 s for a mnist class that took 8-16 s.
PRETRAIN_ROW_S = 1.64e-4
PRETRAIN_FEATURE_S = 7.1e-8  # per row x input feature
PRETRAIN_CROSS_ROW_S = 6.0e-4  # per aligned row, the cross-party step (exchanges included)
TRAINING_S = 0.03  # fixed cost of one training on warm actors (load, evaluate, record)
DIGITS_ROWS = 1437  # the attack table's rows: digits' training split
ATTACK_S = {  # median CPU seconds of one evaluation on digits: benchmarks.attack_speed
    # (completion's and BLI's fast paths, 2026-12-01); GRN, TBM: attack_seconds in records
    "bli": 1.1, "grn": 0.5, "amc": 2.0, "pmc": 2.0, "mc": 2.0, "tbm": 0.2,
    "dli": 0.01, "lrb": 0.01, "nsb": 0.01, "mf": 0.01, "ns": 0.01, "ds": 0.01,
}  # fmt: skip
OTHER_ATTACK_S = 1.0
# Model completion runs ``epochs`` x ``steps_per_epoch`` steps of a fixed batch
# (completion.py) however many rows a training has, so its cost does not scale with rows:
# breast_cancer's PMC took 3.6 s against digits' 4.0 s (attacks.yaml, 2026-12-04), where
# scaling by rows said 0.6 s
FIXED_STEPS = frozenset({"pmc", "mc", "amc", "mc_pretrained"})
# ... but their steps push the jittered and mixed rows through the attacker's bottom, so
# they cost more with more input columns: (COMPLETION_FEATURES + its columns) / (the same
# for digits' 32). Fitted on ssl_iso (2026-12-05): MC took 3.4-4.5 s on adult's 54
# columns and 7.7-12.3 s on mnist's 392
COMPLETION_FEATURES = 145.0
DIGITS_FEATURES = 32  # the attacker's columns in the digits profile (2 parties)
# Why a floor for stacked packs on actors: on the ray transport every round of a training
# is an actor round trip, ~2-3 ms of CPU on the two actors once they sleep between rounds
# (``benchmarks.transport``); a heavy FedBCD training has 756 of them. A stacked pack of K
# pays one trip per round for all K, so a pack of one, the time target's choice for a
# training over ``pack_seconds``, pays K times the trips (issue 17: 6 heavy trainings on
# 2 CPUs).
STACK_MIN = 4
# A stacked (vectorized) pack trains K same-shape trainings about this many times faster
# than one after another (``benchmarks.vectorized``, 2026-12-02: 2.4-5.1x over lockstep,
# 2.5-3.5x over the in-process loop at K = 4-64): ``auto`` sizes such packs by it.
STACKED_SPEEDUP = 3.0
# What a stacked training costs its trial beyond its share of the stack's arithmetic: its
# records and its MP (250 tiny breast_cancer trainings stacked in one process took 3.8 ms
# each, of which the cost model's arithmetic over the speedup is 2.3 ms; 2026-12-07).
# ``TRAINING_S`` over the speedup counted 10 ms: a group of 500 such trainings looked like
# 6 s, was cut into two packs, and the second pack's start (a Tune trial and two party
# actors importing torch, ~5 CPU-s) cost more than the ~1 s it saved.
STACKED_TRAINING_S = 0.002


@dataclass(frozen=True)
class Pack:
    """Trainings of one shape, run in order by one Tune trial."""

    trainings: tuple[Training, ...]

    @property
    def n_parties(self) -> int:
        """Party bundles the pack's placement group needs (``TrialKind.actors``)."""
        return actor_count(self.trainings[0].spec)

    @property
    def pack_id(self) -> str:
        first = self.trainings[0].trial_id
        return first if len(self.trainings) == 1 else f"{first}+{len(self.trainings) - 1}"


def shape_key(spec: TrialSpec) -> str:
    """What trainings of one pack share: kind, dataset and its parameters, party bundles."""
    kind = kind_of(spec).name
    params = json.dumps(dict(spec.dataset_params), sort_keys=True, default=str)
    return f"{kind}|{spec.dataset}|{params}|{actor_count(spec)}"


def _rows_and_features(spec: TrialSpec, data_dir: str | None) -> tuple[int, int]:
    try:
        ds = load_dataset(spec.dataset, data_dir, **spec.dataset_params)
    except (MissingDataError, ConfigError):
        return 10_000, 100  # a dry run without the file: a middling guess
    return len(ds.y_train), int(ds.X_train.shape[1])


@dataclass(frozen=True)
class Cost:
    """A training's estimated seconds by part: ``local`` is what one in-process run of its
    epochs costs (what ``estimate.calibrate`` measures instead), ``transport`` the actor
    round trips on top, ``attacks`` its evaluations, ``fixed`` the per-training rest."""

    local: float
    transport: float
    attacks: float
    fixed: float = TRAINING_S
    pretrain: float = 0.0  # FedHSSL pretraining, in one process (the parties in turn)

    @property
    def total(self) -> float:
        return self.local + self.transport + self.attacks + self.fixed + self.pretrain

    def training(self, parallel: float = 1.0) -> float:
        """Seconds without the attacks, pretraining ``parallel`` times faster: on actors
        with a CPU each the parties pretrain side by side."""
        return self.local + self.transport + self.fixed + self.pretrain / parallel


def pretrain_epochs(spec: TrialSpec) -> int:
    """Pretraining epochs of a FedHSSL-family class (``model_params.pretrain_epochs``), else
    0: the cost model counts them (``pretrain_cost``), and the estimate's probe pretrains
    one epoch and scales it (a whole pretraining per probe run let 20 s of probing measure
    none of ssl_iso.yaml's 18 classes)."""
    if kind_of(spec).name != "hssl" or spec.ssl_variant == "splitnn":
        return 0
    from trainables.ssl.hssl.variants import OPTIONS

    return int(spec.model_params.get("pretrain_epochs", OPTIONS["pretrain_epochs"]))


def evaluations(training: Training) -> list[tuple[str, int]]:
    """(attack, runs) per attack record a training writes: its kind's stages (FedHSSL's
    ``mc_pretrained``), an adaptive attacker's tuning runs, a training-time attack."""
    spec = training.spec
    runs_of = {name: runs(params) for name, params in training.attacks}  # runs: tuning
    asked = [name for name, _ in training.attacks]
    out = [(name, runs_of.get(name, 1)) for name in kind_of(spec).evaluations(spec, asked)]
    if spec.train_attack != "none":  # an adapted one: each trial judged and self-scored
        adapt = budget(spec)
        folds = 0 if adapt is None else fold_count(adapt)
        out.append((spec.train_attack, trainings(spec) * (1 + folds)))
    return out


def _rows(spec: TrialSpec, data_dir: str | None) -> tuple[int, int, int]:
    """(training rows, rows a training step reads: labeled or aligned, input features)."""
    every, features = _rows_and_features(spec, data_dir)
    rows = every
    if spec.n_labeled:
        rows = min(rows, int(spec.n_labeled))
    elif spec.aligned_ratio < 1:
        rows = int(rows * spec.aligned_ratio)
    return every, rows, features


def attack_cost(name: str, spec: TrialSpec, data_dir: str | None = None) -> float:
    """The cost model's seconds of one evaluation of ``name``: its digits profile, by rows
    (model completion's fixed steps: by the attacker's columns instead)."""
    _, rows, features = _rows(spec, data_dir)
    return _attack_s(name, rows, features / max(1, spec.n_parties))


def _attack_s(name: str, rows: int, columns: float) -> float:
    seconds = ATTACK_S.get(name, OTHER_ATTACK_S)
    if name in FIXED_STEPS:
        return seconds * (COMPLETION_FEATURES + columns) / (COMPLETION_FEATURES + DIGITS_FEATURES)
    return seconds * rows / DIGITS_ROWS


def pretrain_cost(spec: TrialSpec, every: int, features: int) -> float:
    """One process's seconds of a FedHSSL-family class's pretraining (0 without one):
    per epoch, the local step over every training row and the cross-party step over the
    aligned ones, as the variant runs them."""
    epochs = pretrain_epochs(spec)
    if not epochs:
        return 0.0
    from trainables.ssl.hssl.variants import parse_variant

    stages = parse_variant(spec.ssl_variant).stages
    per_epoch = 0.0
    if stages is not None and stages.local:
        per_epoch += every * (PRETRAIN_ROW_S + features * PRETRAIN_FEATURE_S)
    if stages is not None and stages.cross:
        per_epoch += every * float(spec.aligned_ratio) * PRETRAIN_CROSS_ROW_S
    return epochs * per_epoch


def cost(training: Training, remote: bool = True, data_dir: str | None = None) -> Cost:
    """Rough cost of one training with its attack evaluations on one slot.

    Rounds x (round trip + per-round overhead) plus rows x features x width x epochs for
    NN kinds, and pretraining per stage (``pretrain_cost``); a per-attack cost from the
    digits profile scaled by rows (model completion: by the attacker's columns). Kinds
    without epochs (trees) get the fixed cost. Good to a factor of a few: enough to size
    packs; the estimate scales it by what it measured.
    """
    spec = training.spec
    every, rows, features = _rows(spec, data_dir)
    local = transport = 0.0
    if spec.epochs and spec.batch_size:
        rounds = int(spec.epochs) * math.ceil(rows / int(spec.batch_size))
        width = max(spec.hidden or (64,))
        local = rounds * LOCAL_ROUND_S + int(spec.epochs) * rows * features * width * ROW_S
        transport = rounds * ROUND_S if remote else 0.0
    columns = features / max(1, spec.n_parties)
    attacks = sum(_attack_s(n, rows, columns) * k for n, k in evaluations(training))
    k = trainings(spec)  # an adapted training-time attacker's trials: its stated budget
    pretrain = k * pretrain_cost(spec, every, features)
    return Cost(k * local, k * transport, attacks, k * TRAINING_S, pretrain)


def slots(plan: Plan, n_parties: int, cpus: float, gpus: float | None = None) -> int:
    """Trials of ``n_parties`` party bundles that fit ``cpus`` (and ``gpus``; None: do not
    count them) at once, capped by ``run.max_concurrent_trials``; at least one."""
    res, run = plan.space.resources, plan.space.run
    per_trial = res.cpu_per_trial + n_parties * res.cpu_per_party
    fit = math.floor(cpus / per_trial + 1e-9) if per_trial > 0 else max(1, int(cpus))
    if gpus is not None and res.gpu_per_party > 0:
        fit = min(fit, math.floor(gpus / (n_parties * res.gpu_per_party) + 1e-9))
    if run.max_concurrent_trials is not None:
        fit = min(fit, run.max_concurrent_trials)
    return max(1, fit)


def packs_for(
    trainings: Sequence[Training], run: Any, slots: int, data_dir: str | None
) -> list[Pack]:
    """``make_packs`` as a space's ``run`` settings ask (size, seconds, transport,
    vectorize, halving): what the grid runs and what the estimate counts."""
    return make_packs(
        trainings, pack_size(run), slots, run.pack_seconds, run.transport == "ray", data_dir,
        vectorize=run.vectorize, halving=run.halving is not None,
    )  # fmt: skip


def pack_size(run: Any) -> int | str:
    """``run.pack``, except that ``auto`` under ``run.halving`` is every training of a
    stack in one pack (``make_packs``' ``halving``): successive halving decides among the
    trainings of one stack."""
    if run.halving is not None and run.pack == "auto":
        return 10**9
    return run.pack


def stack_group(spec: TrialSpec) -> str:
    """``shape_key`` and what the trainings of one stack share besides (epochs, optimizer,
    model, protocol, defenses by name...): under halving, one pack per such group, so
    packs of different stacks still run side by side."""
    bare = spec.model_copy(update={"lr": 1.0, "seed": 0, "defense_param": None})
    return f"{shape_key(spec)}|{bare.config_hash}"


def make_packs(
    trainings: Sequence[Training],
    size: int | str,
    slots: int,
    target_s: float,
    remote: bool = True,
    data_dir: str | None = None,
    vectorize: bool = False,
    halving: bool = False,
) -> list[Pack]:
    """Group ``trainings`` by shape and cut each group into packs (plan order kept inside).

    ``size``: an int, or ``auto``: as many trainings as fit ``target_s`` by the cost model,
    but no more than the group spread evenly over ``slots`` concurrent trials; with
    ``vectorize``, plain NN trainings count ``STACKED_SPEEDUP`` times cheaper (they stack).
    ``halving``: groups are stacks (``stack_group``), whose cells halving compares.
    With ``vectorize`` a group is in stack order (``_stack_order``), else in plan order.
    """
    groups: dict[str, list[Training]] = {}
    for training in trainings:
        key = stack_group if halving else shape_key
        groups.setdefault(key(training.spec), []).append(training)
    packs: list[Pack] = []
    for group in groups.values():
        if vectorize and not halving:  # trainings that stack side by side (stable)
            group.sort(key=_stack_order)
        n = (
            int(size)
            if size != "auto"
            else _auto_size(group, slots, target_s, remote, data_dir, vectorize)
        )
        packs += [Pack(tuple(cut)) for cut in _cut(group, n)]
    return packs


def _cut(group: list[Training], n: int) -> list[list[Training]]:
    """``group`` in packs of ``n``, but a training whose attack is scored against an
    unattacked twin (``trainables/vfl/twins.py``: LRB) joins the pack of that twin, the
    cell's clean training, where the group holds it: then no twin trains for it alone
    (vflair_mnist.yaml: 114 MNIST trainings otherwise), and the pack's clean and LRB
    trainings stack as they would apart (each pack holds up to ``2 n``)."""
    clean = {t.spec.config_hash for t in group if t.spec.train_attack == "none"}
    joins = [t for t in group if twin_hash(t) in clean]
    joining = {t.trial_id for t in joins}
    rest = [t for t in group if t.trial_id not in joining]
    cuts = [rest[i : i + n] for i in range(0, len(rest), n)]
    pack_of = {t.spec.config_hash: k for k, cut in enumerate(cuts) for t in cut}
    for t in joins:
        cuts[pack_of[twin_hash(t) or ""]].append(t)
    return cuts


def twin_hash(training: Training) -> str | None:
    """The config hash of the training's unattacked twin, where its attack has one."""
    spec = training.spec
    return unattacked(spec).config_hash if baseline_attack(Job(spec)) is not None else None


def _stack_order(training: Training) -> str:
    """Where a training goes in its shape's pack order under ``run.vectorize``: next to
    those it can stack with (``stack_group``: one defense, protocol, training-time attack
    at any strength and seed), so that a pack's stacks are large. In plan order they
    rarely were: defenses.yaml's packs of 4 held digits trainings without and with a
    training-time attack and of several defenses, which stack with nothing, and their
    attack evaluations ran one at a time."""
    return stack_group(training.spec)


def lone_twins(packs: Sequence[Pack]) -> set[str]:
    """The trainings whose unattacked twin is not in their pack: each trains its twin too
    (``trainables/vfl/twins.py``), so the estimate counts a second training for it."""
    out = set()
    for p in packs:
        clean = {t.spec.config_hash for t in p.trainings if t.spec.train_attack == "none"}
        out |= {t.trial_id for t in p.trainings if twin_hash(t) not in (None, *clean)}
    return out


def trains_stacked(trainings: Sequence[Training], vectorize: bool) -> bool:
    """Whether ``trainings`` of one pack train as one stack (``run.vectorize``, plain NN):
    what the pack sizer and the estimate count at ``STACKED_TRAINING_S`` a training."""
    return vectorize and plain_nn([t.spec for t in trainings])


def _auto_size(
    group: list[Training],
    slots: int,
    target_s: float,
    remote: bool,
    data_dir: str | None,
    vectorize: bool = False,
) -> int:
    """One pack for a group that fits ``target_s`` (a second slot would cost more to start,
    ~4 CPU-s per process, than it saves); else packs of ``target_s``, spread over slots;
    NN packs on actors no smaller than ``STACK_MIN`` where the spread allows it."""
    stacked = trains_stacked(group, vectorize)
    costs = [cost(t, remote, data_dir) for t in group]
    total = sum(c.total for c in costs)
    if stacked:  # the arithmetic stacks; each training's records stay its own
        total = sum(c.total - c.fixed for c in costs) / STACKED_SPEEDUP
        total += len(group) * STACKED_TRAINING_S
    if total <= target_s:
        return len(group)
    per = max(1e-3, total / len(group))
    by_time = max(1, int(target_s / per))
    if remote and plain_nn([t.spec for t in group]):  # one round trip a round for all
        by_time = max(by_time, STACK_MIN)
    spread = max(1, math.ceil(len(group) / max(1, slots)))
    return min(by_time, spread)
