"""The attack interface: one class per attack, bounded by the threat model.

An attack may tamper with its party during training (``install``: hooks on messages, a
malicious optimizer) and acts after training on a ``PartyView`` of that party only — its
own features, its own trained models, the messages it sent and received, and the
auxiliary knowledge its threat model grants (``AttackInfo``). It never sees ground truth:
it returns a *guess* (labels, features, or a tampered inference), and the trial's
``Judge`` (``judge.py``) scores it as VFLAIR defines AP.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, get_args

import numpy as np
import torch
from torch import nn

from trainables.errors import ConfigError, refuse_unknown
from trainables.messages import BatchSchedule, Message
from trainables.plugins import (
    Refused,
    builds,
    named,
    one_of,
    overrides,
    parameters,
    same_call,
    subclass,
)
from trainables.registry import ClassRegistry

if TYPE_CHECKING:
    import optuna

AttackType = Literal["LI", "FR", "TB", "NTB"]


@dataclass(frozen=True)
class AttackInfo:
    """What the planner and the harness need to know about an attack."""

    type: AttackType
    role: Literal["passive", "active"]  # which party attacks: passive = party 0, active = K-1
    training_time: bool  # tampers with training: needs a training of its own
    binary_only: bool = False
    needs_messages: bool = False  # reads the gradients/embeddings of training (a log is kept)
    aux_labels_per_class: int = 0  # labeled training rows the attacker is assumed to know
    aux_labels_total: int = 0  # or a total, spread evenly over the classes (MC: 80)
    aux_feature_fraction: float = 0.0  # share of training rows whose peer features it knows
    # the known label rows come from the first round's batch (VFLAIR grants DS a positive
    # row of its first batch), not from all training rows
    aux_from_first_batch: bool = False
    query_model: bool = False  # may query the released trained model (GRN's setting)
    # changes what its party sends for rows of a scheduled batch while training (LRB's
    # swap, at the stacked forward): a kind without per-row batches cannot host it
    tampers_batches: bool = False
    # reads the exchanged embeddings / gradients as per-class scores (aggVFL's bottoms
    # output C logits): meaningless where a kind exchanges wider representations
    logit_embeddings: bool = False
    # its no-information baseline is its own guess scored on the same spec trained without
    # it (an unattacked twin, ``vfl/twins.py``): a trigger can move a model that never
    # learned it (LRB's on breast_cancer: 1.0, ``benchmarks.lrb_rows``). Where no twin
    # trains, its chance, advantage and error are NaN: unknown
    unattacked_baseline: bool = False


@dataclass(frozen=True)
class AuxData:
    """Auxiliary knowledge granted by the threat model, drawn by the harness from a seed."""

    label_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    labels: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    feature_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    peer_features: np.ndarray | None = None  # (len(feature_rows), d_peer) of the other party


class ReleasedModel(Protocol):
    """The released trained model an attacker may query (``judge.QueryModel``: the judge
    imports this module, so the view names it by what an attack reads of it)."""

    bottoms: nn.ModuleList  # every party's trained bottom, in party order

    def __call__(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        """[(N, d_0), ..., (N, d_{K-1})] -> (N, C) logits."""
        ...


@dataclass(frozen=True)
class PartyView:
    """Everything the attacker party has, and nothing else."""

    party_id: int
    role: Literal["passive", "active"]
    n_parties: int
    n_classes: int
    X_train: np.ndarray  # (n_train, d_k) own features, scaled, rows in the shared order
    X_test: np.ndarray  # (n_test, d_k)
    bottom: nn.Module  # own trained bottom model (a copy: changing it changes nothing)
    top: nn.Module | None  # the active party's global model; None for a passive party
    y_train: np.ndarray | None  # the active party's labels; None for a passive party
    sent: tuple[Message, ...]  # messages it sent during training, in order
    received: tuple[Message, ...]  # messages it received during training, in order
    schedule: BatchSchedule  # which training rows each round covered (known to all parties)
    aux: AuxData
    seed: int
    query: ReleasedModel | None = None  # when the threat model releases the trained model


@dataclass(frozen=True)
class LabelGuess:
    """Inferred labels (accuracy) or binary scores (AUC) for rows of a split."""

    split: Literal["train", "test"]
    rows: np.ndarray  # (n,) row positions in that split
    labels: np.ndarray | None = None  # (n,) predicted classes
    scores: np.ndarray | None = None  # (n,) score of class 1 (binary attacks, AUC)
    # binary labels scored in their better orientation, max(acc, 1 - acc): VFLAIR's NS
    # report (metrics/data_process.py). The judge picks it from the truth, not the attacker
    either_way: bool = False


@dataclass(frozen=True)
class FeatureGuess:
    """Reconstructed features of another party (AP = 1 - MSE on [0, 1]-scaled features)."""

    party_id: int
    split: Literal["train", "test"]
    rows: np.ndarray
    X: np.ndarray  # (n, d_party) in that party's scaled feature space


@dataclass(frozen=True)
class InferenceTamper:
    """The attacker's test-time inputs or outputs, changed; scored through the whole model.

    ``X_test`` replaces its test features (rows outside ``rows`` unchanged) or
    ``embeddings`` replaces its test embeddings. With ``target`` set, AP is the share of
    ``rows`` (of other classes) classified as ``target`` (targeted backdoor); otherwise AP
    is MP(clean, all test rows) - MP(tampered, on ``rows``) (non-targeted, VFLAIR Eq. 7).
    """

    rows: np.ndarray
    X_test: np.ndarray | None = None  # (n_test, d_k)
    embeddings: np.ndarray | None = None  # (n_test, C)
    target: int | None = None
    # targeted: also score the triggered rows of the target class itself (a hit when
    # predicted as the target), as VFLAIR's backdoor accuracy does; default: other classes
    count_target_rows: bool = False
    # non-targeted: AP against the MP of the tampered model over all test rows (the
    # attacked ones included), as VFLAIR's MF and NSB count; default: the clean MP (Eq. 7)
    against_tampered_mp: bool = False
    # judged on every epoch's model and averaged (``Attack.over_epochs``: VFLAIR's means)
    over_epochs: bool = False


Guess = LabelGuess | FeatureGuess | InferenceTamper


@dataclass(frozen=True)
class Range:
    """A parameter the attacker controls when it adapts (``tuning.py``): a float or int
    interval (``log``: sampled on a log scale), or a tuple of ``choices``."""

    low: float = 0.0
    high: float = 0.0
    log: bool = False
    integer: bool = False
    choices: tuple[str | float, ...] = ()

    def suggest(self, trial: optuna.trial.Trial, name: str) -> Any:
        """The value an Optuna trial proposes for ``name``: one of ``choices`` or a number
        in [low, high] (Optuna types a categorical's value wider: None included)."""
        if self.choices:
            return trial.suggest_categorical(name, list(self.choices))
        if self.integer:
            return trial.suggest_int(name, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(name, float(self.low), float(self.high), log=self.log)

    def contains(self, value: str | float) -> bool:
        if self.choices:
            return value in self.choices
        return float(self.low) <= float(value) <= float(self.high)


class Attack:
    """Base class: subclasses set ``info``, ``defaults`` and ``presets``, implement ``run``.

    ``defaults`` are VFLAIR's settings (a benchmark's numbers must mean what VFLAIR's
    mean); settings that measured stronger or faster here are kept as named ``presets``
    (``{"strong": {"margin": 15.0}}``), so that a run says which one it used. Explicit
    parameters override the preset's.
    """

    name: ClassVar[str] = "base"
    info: ClassVar[AttackInfo]
    defaults: ClassVar[dict[str, object]] = {}
    presets: ClassVar[dict[str, dict[str, object]]] = {}
    # what an adaptive attacker may tune (``tuning.py``), and over which ranges: only
    # settings it controls, never the ground truth or the defense's randomness; empty:
    # the attacker holds no auxiliary ground truth to score a setting on
    search: ClassVar[dict[str, Range]] = {}
    family: ClassVar[str] = "nn"  # the trials it reads: "nn" (VFL NN parties) or "trees"
    # a training-time attack whose install leaves, at its party, hooks with a stacked form
    # (``defenses/stacked.py``: LRB's swaps, AMC's optimizer) says so: its trainings then
    # run in vectorized packs; one that does not runs them alone
    stacks: ClassVar[bool] = False
    # a training-time attack whose stacked form keeps each training's own parameters
    # (LRB's hooks hold their margin, trigger and poison rows): trainings at different
    # settings then share a stack (an adapted attacker's trials: ``tuning_trained``)
    stacks_params: ClassVar[bool] = False
    # parameters that take one of a few named values (LRB's ``injection``): any other
    # value is refused when the attack is built, i.e. at plan time
    choices: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __init__(self, preset: str | None = None, **params: object) -> None:
        if preset is not None and preset not in self.presets:
            allowed = ", ".join(sorted(self.presets)) or "none (this attack has no presets)"
            raise ConfigError(
                f"attack {self.name!r}: unknown preset {preset!r}; allowed: {allowed}"
            )
        refuse_unknown(f"attack {self.name!r}", params, sorted(self.defaults))
        self.preset = preset
        chosen = self.presets[preset] if preset is not None else {}
        # JSON-like values an attack reads with conversions (``float(self.params["lr"])``)
        self.params: dict[str, Any] = {**self.defaults, **chosen, **params}
        for key, values in self.choices.items():
            if self.params[key] not in values:
                raise ConfigError(
                    f"attack {self.name!r}: {key}={self.params[key]!r}; allowed: "
                    + ", ".join(repr(a) for a in values)
                )

    def changed_params(self) -> dict[str, object]:
        """The parameters that differ from VFLAIR's defaults (a preset's and explicit ones)."""
        return {k: v for k, v in sorted(self.params.items()) if v != self.defaults[k]}

    def label(self) -> str:
        """``lrb``, ``lrb@strong``, or ``lrb@strong[margin=5.0]``: what ran, for grouping.

        Parameters the preset (or, without one, VFLAIR's defaults) already implies are
        left out, so the label stays short for the common cases.
        """
        base = {**self.defaults, **(self.presets[self.preset] if self.preset else {})}
        own = [f"{k}={v}" for k, v in sorted(self.params.items()) if v != base[k]]
        out = self.name + (f"@{self.preset}" if self.preset else "")
        return out + (f"[{','.join(own)}]" if own else "")

    def over_epochs(self) -> bool:
        """Whether AP and MP are the means over every epoch's model (VFLAIR's backdoor
        trainings report those: its LRB and NSB), not the final model's. Default: final."""
        return self.params.get("over") == "epochs"

    def colludes(self) -> bool:
        """Whether these settings need the active party's help (LRB's per-batch injection,
        VFLAIR's): the attack's ``install`` then also runs at the active party, and its
        records say ``threat_model: colluding``. Default: the attacker alone."""
        return False

    def own_probe(
        self, view: PartyView
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int] | None:
        """What an attack that tampers at inference submits to score a training on its own
        rows (``tuning_trained``): (rows (m,), their fold groups (m,), its clean features
        of them (m, d), the tampered ones (m, d), the target class); None: it guesses
        labels, and scores itself on folds of its labelled rows."""
        return None

    def view_info(self) -> AttackInfo:
        """What the harness builds this attack's view from: ``info``, unless its settings
        change the knowledge granted (DS's ``positive: first_batch``)."""
        return self.info

    def record_extra(self) -> dict[str, object]:
        """What an attack record's ``extra`` JSON says about the settings that ran."""
        return {
            "attack_label": self.label(),
            "attack_preset": self.preset,
            "attack_params": self.changed_params(),
            **({"threat_model": "colluding"} if self.colludes() else {}),
        }

    def install(self, party: Any, aux: AuxData) -> None:
        """Training-time attacks change their party here (hooks, optimizer). Default: none.

        ``aux`` is the same auxiliary knowledge ``run`` will see in its view. ``party``
        is the party it attacks from (``Endpoint.attach`` passes itself, whose class
        declares its hook chain only): each attack names what it reads of it.
        """

    def run(self, view: PartyView) -> Guess:
        raise NotImplementedError

    def run_many(self, views: Sequence[PartyView]) -> Sequence[Guess]:
        """``run`` on each of the views of one stack's trainings (same shape, one view per
        training, each its own party's alone). An attack whose arithmetic stacks computes
        them together (model completion); each guess must be the one ``run`` gives."""
        return [self.run(view) for view in views]

    def stack_key(self) -> Hashable | None:
        """Attacks (this one and others) whose keys are equal compute the same thing on
        their own views: the harness runs all their views of a training, or of a stack's
        trainings, as one ``run_many`` of either (PMC and MC: one model completion at the
        same settings, different labelled rows). None: only its own views stack."""
        return None


def check_attack(cls: Any, name: str) -> type[Attack]:
    """The rules every attack obeys (``tests/test_attack_conformance.py``): an ``Attack``
    subclass named ``name`` with an ``AttackInfo`` of a known type and role, a known
    ``family``, YAML-writable defaults without ``preset``, presets that change only known
    parameters, ``run(view)`` (and ``install`` when it tampers with training), and which
    builds at its defaults and at each preset."""
    subclass(cls, Attack)
    named(cls.name, name)
    info = cls.info if isinstance(getattr(cls, "info", None), AttackInfo) else None
    if info is None:
        raise Refused("its info is not an AttackInfo")
    one_of("info.type", info.type, get_args(AttackType))
    one_of("info.role", info.role, ("passive", "active"))
    one_of("family", cls.family, ("nn", "trees"))
    parameters(cls.defaults)
    if "preset" in cls.defaults:
        raise Refused("its defaults name 'preset', the key that carries a preset")
    for preset, values in cls.presets.items():
        unknown = sorted(set(values) - set(cls.defaults))
        if unknown or not any(cls.defaults[k] != v for k, v in values.items()):
            why = f"sets unknown parameters {unknown}" if unknown else "changes no default"
            raise Refused(f"its preset {preset!r} {why}")
    for key, span in cls.search.items():
        if key not in cls.defaults or not isinstance(span, Range):
            raise Refused(f"its search names {key!r}, not a parameter with a Range")
        if not span.contains(cls.defaults[key]):
            raise Refused(f"its search range for {key!r} leaves out the default")
    grounded = info.aux_labels_per_class or info.aux_labels_total or info.aux_feature_fraction
    if cls.search and not grounded:
        raise Refused("it has a search but no auxiliary ground truth to score a setting on")
    if not overrides(cls, Attack, "run"):
        raise Refused("it is missing method run(view), which returns its guess")
    same_call(cls, Attack, "run")
    if info.training_time:
        if not overrides(cls, Attack, "install"):
            raise Refused(
                "it is missing method install(party, aux): a training-time attack "
                "(info.training_time) tampers with its party there"
            )
        same_call(cls, Attack, "install")
    for preset in (None, *cls.presets):
        builds(functools.partial(cls, preset=preset), f"with preset {preset}")
    return cls


# Registered last: its ``check`` is the function above
ATTACKS: ClassRegistry[Attack] = ClassRegistry(
    "attack", "vflsweep.attacks", "trainables.attacks", check=check_attack
)
