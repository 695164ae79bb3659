"""Party k of K same-shape NN trainings as one stacked party, and the rounds that drive them.

Why: trained one by one, every training runs its own forward, backward and optimizer
step, ~3.5 ms of Python per round for an MLP-2, and on actors its own round trips. A
``StackedParty`` holds the K bottoms (and, at the active party, the K tops) as stacked
parameters (``trainables/stacked.py``) and runs one batched forward, backward and
optimizer step per round for all K; a protocol's round (``Protocol.exchange``) calls
them, run by ``StackedRounds`` (``stacked_rounds.py``). A lone training is a stack of one.

What stays per training: its own rows (each training's ``BatchSchedule``, gathered as a
(K, B) index), its own data, init, learning rate and labels; its slice of every message
((K, B, C) payloads, one slice per training); its own counts (rounds and bytes exactly as
its one-at-a-time transport counts them: ``_Counts``), its message log when an attack
reads one (per-training ``Message`` objects, as ``MessageLog`` records them), and its
``Party`` objects, into which the trained weights are written back for the attack
harness. Only float summation order differs from training alone.

No Ray here: the actors host a ``StackedParty`` as they host any party (``PartyActor``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from trainables.defenses.stacked import Index, StackedHook, stacked_form
from trainables.hooks import MessageLog
from trainables.messages import BatchRef, Message
from trainables.party import ActiveParty, PartyInit, binary_auc, rows_of
from trainables.stacked import (
    StackedOptimizer,
    StackedSplitTop,
    agg_top,
    lr_scale,
    stack_modules,
)

# A stacked message: the (K, ...) array, or one ``Message`` per training where hooks act
Payload = np.ndarray | list[Message]


@dataclass(frozen=True)
class StackedPartyInit:
    """Party k of K trainings; ``build`` gives the ``StackedParty`` an actor hosts."""

    inits: tuple[PartyInit, ...]

    def build(self) -> StackedParty:
        return StackedParty(self.inits)


def on_messages(hook: object) -> bool:
    """Whether ``hook`` changes messages: a codec, a training-time attack, a defense whose
    stacked form says so (MID, dCor, GPer and CAE act on the model only); not a log."""
    if isinstance(hook, MessageLog):
        return False
    form = stacked_form(hook)
    return form is None or bool(form.messages)


def model_hooks(party: Any) -> list[Any]:
    """``party``'s hooks whose stacked form reaches past the messages (defenses with model
    hooks, CELU-VFL's workset), in stack order."""
    return [h for h in party.hooks if (f := stacked_form(h)) and f.model]


def model_form(hook: object) -> type[StackedHook]:
    """The stacked form of a hook ``model_hooks`` returned (each has one)."""
    form = stacked_form(hook)
    if form is None:
        raise TypeError(f"{type(hook).__name__} has no stacked form")
    return form


class StackedParty:
    """The same party of K trainings: built one by one (each exactly as ``Party`` builds
    it), then stacked over the slots that built (``stack``)."""

    def __init__(self, inits: Sequence[PartyInit]) -> None:
        self.parties: list[Any] = []
        self.errors: dict[int, BaseException] = {}
        for slot, init in enumerate(inits):
            try:
                self.parties.append(init.build())
            except Exception as err:  # the caller decides per slot
                self.parties.append(None)
                self.errors[slot] = err
        first = next((p for p in self.parties if p is not None), None)
        self.party_id = None if first is None else first.party_id  # PartyActor.where
        self.slots: list[int] = []

    def build_errors(self) -> dict[int, BaseException]:
        return dict(self.errors)

    # -- stacking ----------------------------------------------------------------------
    def stack(self, slots: Sequence[int]) -> bool:
        """Stack the parties of ``slots`` (every party of the pack stacks the same ones)."""
        self.slots = list(slots)
        ps = [self.parties[s] for s in self.slots]
        p0 = ps[0]
        self.device = p0.device
        self.config = p0.config
        self.active_id = p0.active_id
        self.is_active = isinstance(p0, ActiveParty)
        self.k = torch.arange(len(ps), device=self.device).unsqueeze(1)  # (K, 1)
        self.X_train = torch.stack([p.X_train for p in ps])  # (K, n, d)
        self.X_test = torch.stack([p.X_test for p in ps])  # (K, n_test, d)
        self.X_val = (
            None if p0.X_val is None else torch.stack([p.X_val for p in ps])
        )  # (K, n_val, d)
        self.members = ps
        self.logs = [next((h for h in p.hooks if isinstance(h, MessageLog)), None) for p in ps]
        # a hook on messages (not a log): every message goes through each training's stack
        self.hooked = any(on_messages(h) for p in ps for h in p.hooks)
        self.stacked_hooks: list[StackedHook] = []  # built in ``stack``
        seed = p0.config.seed * 1009 + self.config_party_id + 0x5EED  # a lone module's draws
        self.bottom = stack_modules([p.bottom for p in ps], self.device, seed)  # any model: K=1
        params = list(self.bottom.params)
        if self.is_active:
            self.y_train = torch.stack([p.y_train for p in ps])  # (K, n)
            self.y_test = torch.stack([p.y_test for p in ps])  # (K, n_test)
            self.y_val = None if p0.y_val is None else torch.stack([p.y_val for p in ps])
            self.top = (
                StackedSplitTop([p.top.base.fc for p in ps], self.device)
                if getattr(p0.top.base, "trainable", False)
                else None
            )
            params += [] if self.top is None else self.top.params
            self.losses = torch.full((len(ps),), float("nan"))
        # each model hook's stacked form over the K trainings' own hooks (the same classes
        # in the same order at every training: the stack key says so)
        self.stacked_hooks = [
            model_form(hs[0])(hs, self.device)
            for hs in zip(*(model_hooks(p) for p in ps), strict=True)
        ]
        params += [q for d in self.stacked_hooks for q in d.params]
        self.params = params  # every stacked parameter this party trains
        self.stepper = StackedOptimizer(self.config.optimizer, params, [p.config.lr for p in ps])
        self.optimizer: Any = self.stepper  # a hook may wrap it (AMC); ``stepper`` stays
        for hook in self.stacked_hooks:
            hook.install(self)  # AMC wraps the optimizer
        self._epoch = 0  # the epoch of the last forward (``keep_epochs``)
        self._pending: tuple[BatchRef, torch.Tensor, torch.Tensor] | None = None
        # the exchange the update steps on: rows, losses, passive H, own H
        self._stash: tuple[Any, ...] | None = None
        return True

    @torch.no_grad()
    def keep(self, index: Sequence[int]) -> None:
        """Go on with the trainings at ``index`` (positions in the stack) only: successive
        halving (``vfl/halving.py``) stopped the rest. Every stacked tensor keeps their
        slices, the optimizer their moments; an H computed for the next round (sent
        already: the active party cuts its copy) is computed again from the kept slices,
        so its graph reaches the kept parameters. Only a stack without model hooks is cut
        (their state is theirs to cut; the executor does not halve such stacks)."""
        assert not self.stacked_hooks, "successive halving cuts stacks without model hooks"
        idx = torch.tensor(list(index), device=self.device)
        self.slots = [self.slots[j] for j in index]
        self.members = [self.members[j] for j in index]
        self.logs = [self.logs[j] for j in index]
        self.k = torch.arange(len(index), device=self.device).unsqueeze(1)
        for name in ("X_train", "X_test", "X_val", "y_train", "y_test", "y_val"):
            if getattr(self, name, None) is not None:
                setattr(self, name, getattr(self, name)[idx])
        # (K, ...) every one, as new leaves (autograd keeps a leaf's shape for good), swapped
        # in wherever the old ones are held: the bottom, the top, the optimizer
        new = {id(p): p.detach()[idx].clone().requires_grad_() for p in self.params}
        owners = [self.params, self.bottom.params, self.optimizer.params]
        if self.is_active and self.top is not None:
            owners.append(self.top.params)
        for held in owners:
            held[:] = [new[id(p)] for p in held]
        self.optimizer.keep(index)
        if self.is_active:
            self.losses = self.losses[idx.cpu()]
        if self._pending is not None:
            ref, _, rows = self._pending
            rows = rows[idx]
            with torch.enable_grad():
                self._pending = (ref, self.bottom.forward(self.X_train[self.k, rows]), rows)

    def rows(self, ref: BatchRef) -> torch.Tensor:
        """(K, B) each training's row positions of ``ref`` (its own schedule)."""
        rows = np.stack([self.parties[s].schedule.rows(ref) for s in self.slots])
        out = torch.from_numpy(rows).to(self.device)
        for hook in self.stacked_hooks:  # a colluding attack adds rows to every batch
            out = hook.batch_rows(self, ref, out)
        return out

    def _log(
        self, sent: bool, kind: str, src: int, dst: int, payload: np.ndarray, ref: BatchRef | None
    ) -> None:
        """Training j's slice as the ``Message`` its one-at-a-time party would log."""
        for j, log in enumerate(self.logs):
            if log is not None:
                msg = Message.of(kind, src, dst, payload[j], ref)
                (log.sent if sent else log.received).append(msg)

    def _send(
        self, kind: str, src: int, dst: int, out: np.ndarray, ref: BatchRef | None
    ) -> Payload:
        """What leaves: the (K, ...) stack as is when no training hooks its messages, else
        each training's ``Message`` through its own party's hook chain (its defenses'
        own random streams and counts, its codecs' encodings, its log)."""
        if not self.hooked:
            self._log(True, kind, src, dst, out, ref)
            return out
        return [
            p.send_out(Message.of(kind, src, dst, out[j], ref)) for j, p in enumerate(self.members)
        ]

    def _receive(
        self, kind: str, src: int, dst: int, payload: Payload, ref: BatchRef | None
    ) -> np.ndarray:
        """What arrives, as the (K, ...) stack of what each training's hooks let in."""
        if isinstance(payload, np.ndarray) and not self.hooked:
            self._log(False, kind, src, dst, payload, ref)
            return payload
        msgs = (
            payload
            if isinstance(payload, list)
            else [Message.of(kind, src, dst, payload[j], ref) for j in range(len(self.members))]
        )
        return np.stack(
            [np.asarray(p.receive_in(m).payload) for p, m in zip(self.members, msgs, strict=True)]
        )

    # -- what every party does ---------------------------------------------------------
    def forward(self, ref: BatchRef) -> Payload:
        """H = G(X[rows]) : (K, B, C), kept with its graph until the gradient comes back."""
        if self.config.keep_epochs and ref.epoch != self._epoch:
            self._keep_epoch()  # every step of the epoch before has been applied
        self._epoch = ref.epoch
        rows = self.rows(ref)
        # this round's rates (a schedule's epoch factor): the steps on this batch follow it
        self.stepper.scale = lr_scale(self.config.lr_decay, ref.epoch)
        h = self.bottom.forward(self.X_train[self.k, rows])
        payload = h.detach().cpu().numpy()  # (K, B, C)
        for hook in self.stacked_hooks:  # a training-time attack may swap rows (LRB)
            h, payload = hook.on_forward(self, rows, h, payload)
        self._pending = (ref, h, rows)
        return self._send("embedding", self.config_party_id, self.active_id, payload, ref)

    @property
    def config_party_id(self) -> int:
        assert self.party_id is not None
        return int(self.party_id)

    def backward(self, grad: Payload, steps: int = 1) -> None:
        """Apply dL/dH (K, B, C) in ``steps`` updates: one, then Q-1 more with the same
        gradient on a fresh H (FedBCD)."""
        assert self._pending is not None, "a gradient without a forward"
        ref, h, rows = self._pending
        self._pending = None
        received = self._receive("gradient", self.active_id, self.config_party_id, grad, ref)
        g = torch.from_numpy(np.array(received, dtype=np.float32)).to(self.device)
        for hook in self.stacked_hooks:  # a colluding LRB moves a row's gradient
            g = hook.on_gradient(self, rows, g)
        h_sent = h.detach()
        for step in range(steps):
            if step > 0:
                h = self.bottom.forward(self.X_train[self.k, rows])
            self.optimizer.zero_grad()
            h.backward(g)
            self.optimizer.step()
        for hook in self.stacked_hooks:
            hook.after_backward(self, rows, h_sent, g)

    def passive_round(
        self, grad: Payload | None, ref: BatchRef | None, steps: int = 1
    ) -> Payload | None:
        """A passive stack's part of one round (``StackedPassives.send``): round t's gradient
        in (applied in ``steps`` updates by ``backward``), round t+1's H out (``forward``;
        None after the last)."""
        if grad is not None:
            self.backward(grad, steps)
        return None if ref is None else self.forward(ref)

    @torch.no_grad()
    def embed(self, split: str = "test") -> Payload:
        """H of every training's ``split`` rows (K, n, C), as sent for an evaluation."""
        h = self.bottom.forward(rows_of(self, split), training=False).cpu().numpy()  # (K, n, C)
        return self._send(f"{split}_embedding", self.config_party_id, self.active_id, h, None)

    # -- the active party --------------------------------------------------------------
    def logits(
        self, h: Sequence[torch.Tensor], training: bool = True, index: Index = None
    ) -> torch.Tensor:
        """(K, B, C) from P x (K, B, C): the passive H through the defenses' transforms
        (MID's bottlenecks), then the top (``DefendedTop.logits``); ``index``: of those
        trainings only (``StackedHook.at``)."""
        passive, own = list(h[:-1]), h[-1]
        for defense in self.stacked_hooks:
            passive = defense.transform(passive, training, index)
        h = [*passive, own]
        return agg_top(h) if self.top is None else self.top(h, index)

    def objective(
        self,
        logits: torch.Tensor,
        y: torch.Tensor,
        h_passive: Sequence[torch.Tensor],
        weights: torch.Tensor | None = None,
        index: Index = None,
    ) -> torch.Tensor:
        """(K,) each training's objective: mean cross-entropy
        over its batch on its labels or a defense's soft targets (each row weighted by
        ``weights`` (K, B) where given: CELU-VFL's cached steps), plus defenses' terms."""
        k, b, c = logits.shape
        soft = next(
            (t for d in self.stacked_hooks if (t := d.soft_targets(y, index)) is not None), None
        )
        if soft is None:
            ce = F.cross_entropy(logits.reshape(k * b, c), y.reshape(k * b), reduction="none")
            per_row = ce.view(k, b)
        else:  # (K, B, C) soft targets
            per_row = -(soft * torch.log_softmax(logits, dim=2)).sum(dim=2)
        losses = (per_row if weights is None else weights * per_row).mean(dim=1)
        for defense in self.stacked_hooks:
            term = defense.loss_terms(list(h_passive), y, index)
            if term is not None:
                losses = losses + term
        return losses

    def passive_gradients(self, ref: BatchRef, embeddings: Sequence[Payload]) -> list[Payload]:
        """Each training's loss and dL/dH_k per passive party (``ActiveParty``'s order)."""
        if self._pending is None or self._pending[0] != ref:
            self.forward(ref)
        assert self._pending is not None
        _, h_own, rows = self._pending
        self._pending = None
        h_passive = [
            torch.from_numpy(np.array(e, dtype=np.float32)).to(self.device).requires_grad_()
            for e in (
                self._receive("embedding", src, self.active_id, emb, ref)
                for src, emb in enumerate(embeddings)
            )
        ]  # (P-1) x (K, B, C)
        y = self.y_train[self.k, rows]  # (K, B)
        logits = self.logits([*h_passive, h_own])
        losses = self.objective(logits, y, h_passive)
        total = losses.sum()  # d(total)/d(slice k) = training k's own gradient
        grads = list(torch.autograd.grad(total, h_passive, retain_graph=True)) if h_passive else []
        for defense in self.stacked_hooks:
            grads = defense.gradients(grads, logits, h_passive, y)
        self._stash = (rows, losses, [h.detach() for h in h_passive], h_own.detach())
        return [
            self._send("gradient", self.active_id, dst, g.cpu().numpy(), ref)
            for dst, g in enumerate(grads)
        ]

    def update(self, steps: int = 1) -> None:
        """Own bottom and top in ``steps`` updates on this batch: one, then Q-1 FedBCD
        steps with the received H."""
        assert self._stash is not None
        rows, losses, h_passive, own = self._stash
        for step in range(steps):
            if step > 0:
                h_own = self.bottom.forward(self.X_train[self.k, rows])
                y = self.y_train[self.k, rows]
                losses = self.objective(self.logits([*h_passive, h_own]), y, h_passive)
            self.optimizer.zero_grad()
            losses.sum().backward(inputs=self.params)
            self.optimizer.step()
        self.losses = losses.detach().cpu()
        self._stash = None
        for hook in self.stacked_hooks:
            hook.after_update(self, rows, own, h_passive)

    @torch.no_grad()
    def evaluate(self, test_embeddings: Sequence[Payload], split: str = "test") -> list[float]:
        """Each training's MP on its ``split`` rows (``test``, or ``val``: its validation
        rows): accuracy, or AUC where ``config.metric`` says so."""
        h = [
            torch.from_numpy(np.array(e, dtype=np.float32)).to(self.device)
            for e in (
                self._receive(f"{split}_embedding", src, self.active_id, emb, None)
                for src, emb in enumerate(test_embeddings)
            )
        ]
        own = self.bottom.forward(rows_of(self, split), training=False)  # (K, n, C)
        logits = self.logits([*h, own], training=False)
        for defense in self.stacked_hooks:
            logits = defense.decode(logits)  # (K, n_test, C): what the model releases
        y = self.y_val if split == "val" else self.y_test  # (K, n)
        assert y is not None, "val rows are evaluated only where the trainings have them"
        if self.config.metric == "auc":
            return [binary_auc(logits[j], y[j]) for j in range(len(self.slots))]
        hits = (logits.argmax(dim=2) == y).double().mean(dim=1)
        return [float(v) for v in hits]

    # -- after training ----------------------------------------------------------------
    def defense_applied(self) -> list[Any]:
        return [None if p is None else p.defense_applied() for p in self.parties]

    def _keep_epoch(self) -> None:
        """Each training's weights now (an epoch's end), as its party's module states."""
        for party in self.parties_of(self.slots):
            states = {"bottom": copy.deepcopy(party.bottom.state_dict())}
            if self.is_active:
                states["top"] = copy.deepcopy(party.top.state_dict())
            party.epoch_states.append(states)

    def parties_of(self, slots: Sequence[int]) -> list[Any]:
        """The trained parties of ``slots``: stacked weights written back into each."""
        self.bottom.write_back([p.bottom for p in self.parties], self.slots)
        if self.is_active:
            if self.top is not None:
                self.top.mlp.write_back([p.top.base.fc for p in self.parties], self.slots)
            for defense in self.stacked_hooks:
                defense.write_back(self.slots)
            for j, s in enumerate(self.slots):
                self.parties[s].last_loss = float(self.losses[j])
        return [self.parties[s] for s in slots]
