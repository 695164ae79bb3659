"""AMC, active model completion (Fu et al., USENIX Security 2022; VFLAIR's AMC).

The passive attacker trains with a malicious local optimizer that adaptively scales up
its own updates: each parameter element's update u_t (what the honest optimizer would
apply) is multiplied by clamp(1 + gamma * u_t / s_{t-1}, 1, 5), where s_{t-1} is the
previous scaled update (VFLAIR's MaliciousAdam, here wrapped around whichever optimizer
the party has). Directions that keep their sign are accelerated, so the attacker's bottom
learns faster and the joint model comes to rely more on it; its bottom then carries more
of the task, and the same completion as PMC (``completion.py``) infers test labels better.
gamma = 1 as VFLAIR (MaliciousAdam's default); preset ``strong``: gamma = 2, as Fu et
al.'s AMC code. On digits, seeds 0-9, AMC - PMC AP was +0.013 on average with gamma 1 and
+0.019 with gamma 2.
AP: accuracy of the inferred test labels; the record's MP is the MP under attack.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from trainables.attacks.base import AttackInfo, AuxData, Range
from trainables.attacks.pmc import PassiveModelCompletion
from trainables.defenses.stacked import StackedHook
from trainables.messages import Message

if TYPE_CHECKING:
    from trainables.roles import HookHost
    from trainables.vfl.stacked_party import StackedParty


class MaliciousOptimizer:
    """Wraps an optimizer; after each honest step, scales every update element by
    clamp(1 + gamma * u_t / (s_{t-1} + eps), min_ratio, max_ratio)."""

    def __init__(self, inner: Any, gamma: float, min_ratio: float, max_ratio: float) -> None:
        self.inner = inner
        self.gamma, self.min_ratio, self.max_ratio = gamma, min_ratio, max_ratio
        self.last: dict[int, torch.Tensor] = {}  # parameter index -> previous scaled update

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.inner.param_groups

    def params(self) -> list[torch.nn.Parameter]:
        return [p for group in self.inner.param_groups for p in group["params"]]

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        params = self.params()
        with torch.no_grad():
            before = [p.detach().clone() for p in params]
        loss = self.inner.step(closure)
        with torch.no_grad():
            for i, (p, old) in enumerate(zip(params, before, strict=True)):
                update = p - old  # the honest update of this step
                last = self.last.get(i)
                if last is not None:
                    ratio = 1.0 + self.gamma * update / (last + 1e-12)
                    update = update * ratio.clamp(self.min_ratio, self.max_ratio)
                    p.copy_(old + update)
                self.last[i] = update
        return loss

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()


class StackedMalicious(StackedHook):
    """AMC at a stacked attacker party: its optimizer wrapped as alone. The scaling is
    elementwise, so each training's slice moves as it would alone (one gamma per stack:
    the attack's parameters are part of the stack key)."""

    messages = False
    model = True

    def install(self, stack: StackedParty) -> None:
        stack.optimizer = self.members[0].wrap(stack.optimizer)


@dataclass(frozen=True)
class MaliciousScaling:
    """The attacker party's mark (a message hook that changes no message): which scaling
    its optimizer runs, so that a stacked party wraps its own optimizer the same way."""

    gamma: float
    min_ratio: float
    max_ratio: float
    stacked: ClassVar[type[StackedHook]] = StackedMalicious

    def wrap(self, inner: Any) -> MaliciousOptimizer:
        return MaliciousOptimizer(inner, self.gamma, self.min_ratio, self.max_ratio)

    def on_send(self, party: HookHost, msg: Message) -> Message:
        return msg

    def on_receive(self, party: HookHost, msg: Message) -> Message:
        return msg


class ActiveModelCompletion(PassiveModelCompletion):
    name = "amc"
    stacks = True  # its hooks' stacked form: StackedMalicious
    info = AttackInfo(type="LI", role="passive", training_time=True, aux_labels_per_class=4)
    defaults: ClassVar[dict[str, object]] = {
        **PassiveModelCompletion.defaults,
        "gamma_lr_scale_up": 1.0,  # VFLAIR (MaliciousAdam's default); Fu et al.'s code: 2
        "min_ratio": 1.0,
        "max_ratio": 5.0,
    }
    presets: ClassVar[dict[str, dict[str, object]]] = {
        **PassiveModelCompletion.presets,  # fast, converge
        "strong": {"gamma_lr_scale_up": 2.0},
    }

    # what its attacker may tune, one training per setting (``tuning_trained``): how far
    # its optimizer scales its own updates; the completion runs at its own setting
    search: ClassVar[dict[str, Range]] = {
        "gamma_lr_scale_up": Range(0.25, 4.0, log=True),
        "max_ratio": Range(2.0, 10.0),
    }

    def install(self, party: Any, aux: AuxData) -> None:
        scaling = MaliciousScaling(
            float(self.params["gamma_lr_scale_up"]),
            float(self.params["min_ratio"]),
            float(self.params["max_ratio"]),
        )
        party.hooks.append(scaling)  # an NN stack wraps its optimizer (``StackedMalicious``)
        if getattr(party, "optimizer", None) is not None:  # a party that steps its own (FedCVT)
            party.optimizer = scaling.wrap(party.optimizer)


ATTACK = ActiveModelCompletion
