"""ISO: isotropic Gaussian noise scaled to the largest row (FedHSSL, after Li et al.).

On each outgoing matrix d (B, m) — gradients dL/dH_k at the active party, or exchanged
representations — ISO adds N(0, sigma^2 I) with sigma = lambda * max_i ||d_i||_2 / sqrt(m):
the noise norm per row is about lambda times the largest row norm, whatever the scale of
the gradients (which shrink as training converges). ``target`` picks what is noised:
``gradient`` (default), ``representation`` or ``both``.

Where each applies: FedHSSL's party 1 (active) noises what it exposes to the passive
party — its cross-party representations during SSL pretraining (``cssl_*``, ``gssl_*``,
``hssl_*`` variants) and its gradients during fine-tuning / split learning. In a plain
VFL trial (aggVFL, splitVFL) the active party sends gradients only, so
``target: representation`` has nothing to act on: the planner drops that cell
(``inapplicable``), and a training where it still never fired fails (``applied.py``).
``both`` noises whichever of the two the active party sends.

**FedHSSL's pretraining protection, ``lambda_p``** (λp, default 0: off). In FedHSSL party 1
"applies ISO to the output of its cross-party encoder and parameters of its local top
encoder" during pretraining, at λp 0.1–0.4 (its Tables VI and XI). ``lambda_p > 0`` does
exactly that: in pretraining, the active party's cross-party representations
(``representation``) and every parameter of the local top encoder it shares for
aggregation (``model_share``; each tensor as rows (out, in...) -> (out, m), a bias as one
row; batch-norm running statistics are buffers, not parameters, and are sent as they are)
get ISO at λp. The strength λ stays what ``target`` noises — by default the gradients of
fine-tuning (the paper's λf). So ``iso: {strengths: [0, 1, 5], params: {lambda_p: 0.4}}``
is Table XI's grid (λf with a fixed λp). A cell with ``lambda_p`` but no cross-party
pretraining and no aggregation (plain VFL, ``splitnn``, ``local_*``) is dropped at plan time,
as is ``target: representation`` with ``lambda_p`` (one message, two strengths).

The parameter was called ``on``; YAML 1.1 reads a bare ``on`` as the boolean true, so it
is ``target`` now and the old name is refused with the new one.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from trainables.defenses.base import Defense, DefenseInfo, with_payload
from trainables.errors import ConfigError
from trainables.messages import Message

if TYPE_CHECKING:
    from trainables.roles import HookHost

TARGETS = ("gradient", "representation", "both")
PRETRAINING = ("representation", "model_share")  # what lambda_p noises (FedHSSL pretraining)
BUFFERS = ("running_mean", "running_var", "num_batches_tracked")  # batch norm's, not weights


def iso_sigma(d: torch.Tensor, lam: float) -> float:
    """sigma = lambda * max_i ||d_i||_2 / sqrt(m) for d of shape (B, m)."""
    return lam * float(d.norm(dim=1).max()) / math.sqrt(d.shape[1])


class IsotropicNoise(Defense):
    name = "iso"
    defaults: ClassVar[dict[str, object]] = {"target": "gradient"}
    renamed: ClassVar[dict[str, str]] = {"on": "target", "true": "target", "True": "target"}
    info = DefenseInfo(
        party="active",
        grid=(0.1, 1.0, 5.0, 25.0),
        neutral=0.0,
        quantity="noise norm relative to the largest row norm (lambda)",
    )

    def __init__(
        self, strength: float | None = None, seed: int = 0, index: int = 0, **params: Any
    ) -> None:
        # ``lambda_p`` is optional and not in ``defaults``: a defense without it reads, and
        # is named in messages, as before it existed
        self._lambda_p = params.pop("lambda_p", 0.0)
        super().__init__(strength, seed, index, **params)
        if self.lambda_p > 0:
            self.params["lambda_p"] = self._lambda_p

    def validate(self) -> None:
        self.choice("target", TARGETS)
        lam_p = self._lambda_p
        if isinstance(lam_p, bool) or not isinstance(lam_p, int | float) or not lam_p >= 0:
            raise ConfigError(
                f"defense 'iso': lambda_p={lam_p!r}; allowed: a number >= 0 (FedHSSL's λp, "
                "0.1-0.4 in its Table VI; 0 leaves pretraining unprotected)"
            )
        if self.lambda_p > 0 and "representation" in self.own_targets():
            raise ConfigError(
                f"defense 'iso': target={self.params['target']!r} with lambda_p="
                f"{lam_p!r} would noise pretraining representations at two strengths; "
                "lambda_p already noises them (and the shared local top encoder): use "
                "target: gradient"
            )

    @property
    def lambda_p(self) -> float:
        return float(self._lambda_p)

    def must_apply(self) -> bool:
        """At λ = 0 it must still act when λp > 0 (pretraining protection only, Table VI)."""
        return super().must_apply() or self.lambda_p > 0

    def own_targets(self) -> tuple[str, ...]:
        """What the strength λ noises (``target``)."""
        target = self.params["target"]
        return ("gradient", "representation") if target == "both" else (str(target),)

    def targets(self) -> tuple[str, ...]:
        extra = PRETRAINING if self.lambda_p > 0 else ()
        return (*self.own_targets(), *extra)

    def inapplicable(self, sent: tuple[str, ...]) -> str | None:
        if self.lambda_p > 0 and not set(PRETRAINING) & set(sent):
            return (
                f"lambda_p={self.lambda_p:g} noises FedHSSL pretraining (the active party's "
                "cross-party representations and shared local top encoder), but this trial "
                "has no cross-party pretraining or aggregation; use an ssl_variant cssl_*, "
                "gssl_* or hssl_*, or leave lambda_p out"
            )
        why = super().inapplicable(sent)
        if why is None or "representation" not in self.targets():
            return why
        return why + (
            "; representations are exchanged in SSL pretraining (ssl_variant cssl_*, gssl_*,"
            " hssl_*); use target: gradient here"
        )

    def strength_for(self, kind: str) -> float:
        """λp for what pretraining sends (with ``lambda_p``), λ for ``target``, else 0."""
        if self.lambda_p > 0 and kind in PRETRAINING:
            return self.lambda_p
        return float(self.strength) if kind in self.own_targets() else 0.0

    def on_send(self, party: HookHost, msg: Message) -> Message:
        lam = self.strength_for(msg.kind)
        if lam == 0.0:
            return msg
        if msg.kind == "model_share":  # {name: array}: each parameter tensor noised alone
            state = {k: self.noised(v, lam) if self.is_weight(k, v) else v
                     for k, v in msg.payload.items()}  # fmt: skip
            if any(state[k] is not v for k, v in msg.payload.items()):
                self.count(msg.kind)
            return dataclasses.replace(msg, payload=state)
        d = np.array(msg.payload)
        out = self.noised(d, lam)
        if out is not d:  # an all-zero matrix gets no noise: nothing changed
            self.count(msg.kind)
        return with_payload(msg, out)

    @staticmethod
    def is_weight(key: str, value: np.ndarray) -> bool:
        """A floating-point parameter (not a batch-norm buffer)."""
        return np.issubdtype(np.asarray(value).dtype, np.floating) and not key.endswith(BUFFERS)

    def noised(self, array: np.ndarray, lam: float) -> np.ndarray:
        """``array`` + N(0, σ²), σ from its rows (B, m) (a vector is one row); the array
        itself when σ is 0."""
        d = torch.from_numpy(np.asarray(array))
        rows = d.reshape(1, -1) if d.dim() < 2 else d.reshape(d.shape[0], -1)  # (B, m)
        sigma = iso_sigma(rows, lam)
        if sigma == 0.0:
            return array
        return (d + sigma * self.noise(tuple(d.shape)).to(d.dtype)).numpy()


DEFENSE = IsotropicNoise
