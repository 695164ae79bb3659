"""The defense interface: one strength, applied at one party, as middleware.

A defense is built at the party that applies it (from ``PartyInit.hooks``) and
``attach``-es itself there. What it may touch, by hook:

- ``on_send`` / ``on_receive``: the messages of its party (noise, sparsification,
  discretization, perturbation) — Flower's "mod" idea: the party's code never changes;
- the model, the loss and its gradients, over the stacked trainings of a party
  (``stacked.py``: a term added to each training's loss (dCor, MID's KL), the labels it
  trains on (CAE's disguise), the per-passive gradients before they are sent (GPer),
  transforms before the global model (MID's bottleneck) and an output decoder (CAE)):
  the defense's ``stacked`` form. The released model (``DefendedTop``) gets the same
  transforms and decoder in ``attach``;
- ``loss_term``, ``soft_targets``, ``gradients``: the same for one training, for a
  defense that declares no stacked form (``stacked = None``, a plugin's; it then trains
  alone, ``LoopedDefense``); CAE's ``soft_targets`` is the math its stacked form calls.

Why each defense has its own ``torch.Generator``: noise is drawn from a stream seeded by
the trial seed and the defense's place in the stack, so the same seed gives the same
noise on any transport, and a defense at its neutral strength leaves every other random
draw of the trial untouched (training is then bit-identical to no defense).

Why every defense counts its applications (``applied``, by what it changed): a defense
whose hooks never fire in a trial (ISO on representations where none is sent) would
otherwise be recorded as acting while training equals no defense. The trial reads the
counts back after training (``applied.py``) and fails such a training.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
import torch

from trainables.defenses.stacked import StackedHook
from trainables.errors import ConfigError, refuse_unknown
from trainables.messages import Message
from trainables.plugins import (
    Refused,
    builds,
    named,
    number,
    overrides,
    parameters,
    same_call,
    subclass,
)
from trainables.registry import ClassRegistry

if TYPE_CHECKING:
    from trainables.roles import HookHost


PARTIES = ("active", "passive")
# The hooks through which a defense changes a training (``Defense``'s identity defaults)
DEFENSE_HOOKS = ("on_send", "on_receive", "loss_term", "soft_targets", "gradients", "attach")
# The hooks that reach past the messages: a defense overriding one declares its stacked form
MODEL_HOOKS = ("attach", "loss_term", "soft_targets", "gradients")


@dataclass(frozen=True)
class DefenseInfo:
    """What the registry knows about a defense without building it."""

    party: Literal["active", "passive"]  # where the literature applies it by default
    grid: tuple[float, ...]  # VFLAIR's strengths (ALGORITHMS.md)
    neutral: float | None  # strength at which training equals no defense; None: no such point
    parties: tuple[str, ...] = ("active",)  # where it may be applied
    quantity: str = ""  # what the strength moves, for docs and the conformance test
    low: float = 0.0  # strengths below this are rejected
    high: float = float("inf")  # ... and above this


class Defense:
    """Base: identity on every hook. Subclasses set ``name``, ``info``, ``defaults``."""

    name: ClassVar[str] = "base"
    info: ClassVar[DefenseInfo]
    defaults: ClassVar[dict[str, object]] = {}
    renamed: ClassVar[dict[str, str]] = {}  # old parameter name -> its new name
    # its form over K stacked trainings (``stacked.py``): the base acts on messages only;
    # a defense with model hooks names its own, or None (its trainings run alone)
    stacked: ClassVar[type[StackedHook] | None] = StackedHook

    def __init__(
        self, strength: float | None = None, seed: int = 0, index: int = 0, **params: object
    ) -> None:
        self._refuse_renamed(params)
        party = params.pop("party", self.info.party)
        if party not in self.info.parties:
            raise ConfigError(
                f"defense {self.name!r}: party={party!r}; allowed: {', '.join(self.info.parties)}"
            )
        refuse_unknown(f"defense {self.name!r}", params, ["party", *self.defaults])
        self.party = str(party)
        # JSON-like values a defense reads with conversions (``float(self.params["clip"])``)
        self.params: dict[str, Any] = {**self.defaults, **params}
        self.strength = float(self.info.grid[0] if strength is None else strength)
        if not (self.info.low <= self.strength <= self.info.high):
            raise ConfigError(
                f"defense {self.name!r}: strength={self.strength!r}; allowed: "
                f"{self.info.low} <= strength <= {self.info.high}"
            )
        self.index = int(index)  # place in the trial's stack
        self.generator = torch.Generator().manual_seed(seed * 7919 + 104729 * (index + 1))
        self.applied: dict[str, int] = {}  # what it changed (message kind or hook) -> times
        self.validate()

    def _refuse_renamed(self, params: dict[str, object]) -> None:
        """ConfigError naming the new name for a parameter passed under its old one."""
        for old, new in self.renamed.items():
            if old in params:
                raise ConfigError(
                    f"defense {self.name!r}: parameter {old!r} was renamed to {new!r} "
                    f"(YAML 1.1 reads a bare `on` as the boolean true); write "
                    f"{new}: {params[old]}"
                )

    def validate(self) -> None:
        """Raise ConfigError for bad parameter values (subclasses with parameters)."""

    def choice(self, key: str, allowed: tuple[object, ...]) -> None:
        """ConfigError unless ``params[key]`` is one of ``allowed``."""
        if self.params[key] not in allowed:
            raise ConfigError(
                f"defense {self.name!r}: {key}={self.params[key]!r}; allowed: "
                + ", ".join(repr(a) for a in allowed)
            )

    # -- installation ---------------------------------------------------------------
    def attach(self, party: HookHost) -> None:
        """Join ``party``'s hook chain; subclasses that change the model also wire that."""
        party.hooks.append(self)
        if hasattr(party, "defenses"):
            party.defenses.append(self)

    # -- message hooks (identity by default) -----------------------------------------
    def on_send(self, party: HookHost, msg: Message) -> Message:
        return msg

    def on_receive(self, party: HookHost, msg: Message) -> Message:
        return msg

    # -- active-party hooks (None / unchanged by default) ----------------------------
    def loss_term(self, h_passive: list[torch.Tensor], y: torch.Tensor) -> torch.Tensor | None:
        return None

    def soft_targets(self, y: torch.Tensor) -> torch.Tensor | None:
        return None

    def gradients(
        self,
        grads: list[torch.Tensor],
        logits: torch.Tensor,
        h_passive: list[torch.Tensor],
        y: torch.Tensor,
    ) -> list[torch.Tensor]:
        return grads

    # -- application accounting -------------------------------------------------------
    def count(self, what: str) -> None:
        """Note one application: ``what`` (a message kind or a hook name) was changed."""
        self.applied[what] = self.applied.get(what, 0) + 1

    def dp_steps(self) -> int | None:
        """Releases this mechanism's privacy accounting counts (``privacy_spent``'s steps),
        or None for a defense that accounts none. Counted by the mechanism as it applies,
        so the record's epsilon never assumes a release it did not make."""
        return None

    def must_apply(self) -> bool:
        """A strength other than the neutral one must change something during training."""
        return self.info.neutral is None or self.strength != self.info.neutral

    def keeps_row_state(self) -> bool:
        """Whether it keeps state per training row of a scheduled batch across rounds (GS's
        residual): a kind whose messages are not per-row batches cannot host it."""
        return False

    def targets(self) -> tuple[str, ...] | None:
        """Message kinds this defense acts on, if it acts on messages only (else None)."""
        return None

    def idle_reason(self) -> str:
        """Why nothing was applied, in words, for the error of a training where it never was."""
        kinds = self.targets()
        if kinds is None:
            return "none of its hooks changed anything during training"
        return (
            f"no message of kind {' or '.join(repr(k) for k in kinds)} was sent by the "
            f"{self.party} party"
        )

    def inapplicable(self, sent: tuple[str, ...]) -> str | None:
        """Why this defense cannot act when its party sends only messages of kinds ``sent``
        (known at plan time), or None."""
        kinds = self.targets()
        if kinds is None or set(kinds) & set(sent):
            return None
        return (
            f"it acts on {' and '.join(repr(k) for k in kinds)} messages, but the "
            f"{self.party} party here sends only {', '.join(repr(k) for k in sent) or 'nothing'}"
        )

    # -- helpers for subclasses -------------------------------------------------------
    def noise(self, shape: tuple[int, ...], kind: str = "gaussian") -> torch.Tensor:
        """Unit noise from this defense's own stream: N(0, 1) or Laplace(0, 1)."""
        if kind == "gaussian":
            return torch.randn(shape, generator=self.generator)
        # Laplace by inverse CDF on u in (-1/2, 1/2): rand can return 0, whose image is -inf
        u = torch.rand(shape, generator=self.generator, dtype=torch.float64)
        u = u.clamp(1e-12, 1.0 - 1e-12) - 0.5
        return (-torch.sign(u) * torch.log1p(-2.0 * u.abs())).float()


def with_payload(msg: Message, array: np.ndarray) -> Message:
    """``msg`` carrying ``array`` (same kind, parties, batch) with its size recounted."""
    array = np.ascontiguousarray(array, dtype=np.asarray(msg.payload).dtype)
    return Message.of(msg.kind, msg.src, msg.dst, array, msg.batch)


def clip_rows(x: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Each row (one sample) scaled down to L2 norm <= ``max_norm``: (B, m) -> (B, m)."""
    norms = x.norm(dim=1, keepdim=True).clamp_min(1e-12)
    clipped: torch.Tensor = x * (max_norm / norms).clamp(max=1.0)
    return clipped


def is_training_gradient(msg: Message) -> bool:
    return msg.kind == "gradient"


def is_embedding(msg: Message) -> bool:
    """Embeddings a passive party sends: per-batch in training, whole splits at evaluation."""
    return msg.kind == "embedding" or msg.kind.endswith("_embedding")


def check_defense(cls: Any, name: str) -> Any:
    """The rules every defense obeys (``tests/test_defense_conformance.py``): a ``Defense``
    subclass named ``name`` whose ``DefenseInfo`` is consistent (its party among its
    parties, grid and neutral strength within [low, high], a quantity), whose parameter
    names YAML can write, which overrides at least one hook with the base's arguments and
    which builds at every grid strength and at its neutral one."""
    subclass(cls, Defense)
    named(cls.name, name)
    info = cls.info if isinstance(getattr(cls, "info", None), DefenseInfo) else None
    if info is None:
        raise Refused("its info is not a DefenseInfo")
    if info.party not in info.parties or not set(info.parties) <= set(PARTIES):
        raise Refused(
            f"its info.party {info.party!r} is not one of its info.parties {info.parties} "
            f"(each one of {', '.join(PARTIES)})"
        )
    if not info.grid:
        raise Refused("its info.grid is empty (give the strengths a sweep tries by default)")
    bounded = [("info.grid value", s) for s in info.grid]
    if info.neutral is not None:
        bounded.append(("info.neutral", info.neutral))
    for what, value in bounded:
        if not number(value) or not info.low <= value <= info.high:
            raise Refused(f"its {what} {value!r} lies outside [{info.low}, {info.high}]")
    if not info.quantity:
        raise Refused("its info.quantity is empty (say what the strength moves)")
    parameters(cls.defaults)
    hooks = [h for h in DEFENSE_HOOKS if overrides(cls, Defense, h)]
    if not hooks and not (cls.stacked is not None and cls.stacked.model):
        raise Refused(
            f"it is missing method on_send (or another hook: {', '.join(DEFENSE_HOOKS[1:])}, "
            "or a stacked form with model hooks); a defense that overrides none changes nothing"
        )
    for hook in hooks:
        same_call(cls, Defense, hook)
    model = [h for h in MODEL_HOOKS if h in hooks]
    if model and cls.stacked is StackedHook:
        raise Refused(
            f"it overrides {', '.join(model)} but keeps the message-only stacked form; set "
            "stacked = None (its trainings then run alone, through these hooks) or a "
            "StackedHook subclass (trainables/defenses/stacked.py)"
        )
    if {"on_send", "on_receive"} & set(hooks) and cls.stacked and not cls.stacked.messages:
        raise Refused(
            f"it acts on messages but its stacked form {cls.stacked.__name__} says "
            "messages = False (a stack would send around it)"
        )
    for strength in {*info.grid, *([info.neutral] if info.neutral is not None else [])}:
        builds(functools.partial(cls, strength=strength), f"at strength {strength}")
    return cls


# Registered last: its ``check`` is the function above
DEFENSES: ClassRegistry[Defense] = ClassRegistry(
    "defense", "vflsweep.defenses", "trainables.defenses", check=check_defense
)
