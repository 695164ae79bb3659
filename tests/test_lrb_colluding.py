"""LRB's colluding batch injection (``injection: colluding``, VFLAIR's procedure): two rows
appended to every batch at both parties, the last row's embedding and gradient moved at
the attacker only, the active party's help named in the record; the passive attacker
still holds no label. Real digits trainings, a few epochs."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from trainables.attacks.lrb_colluding import InjectionHook, epoch_draw
from trainables.data import load_dataset
from trainables.errors import ConfigError
from trainables.jobs import Job
from trainables.kinds.nn import NNKind
from trainables.messages import BatchRef
from trainables.spec import TrialSpec
from trainables.transport.placement import LOCAL
from trainables.trial import prepare_parties
from trainables.vfl.stacked_party import StackedParty

COLLUDING = {"target": 0, "injection": "colluding"}
TIMING = {"train_seconds": 0.0, "attack_seconds": 0.0, "created_at": None, "extra": ""}


def _spec(seed: int = 0, **fields: object) -> TrialSpec:
    return TrialSpec.build(
        dataset="digits", seed=seed, epochs=2, batch_size=128, train_attack="lrb",
        train_attack_params=COLLUDING, **fields,
    )  # fmt: skip


@pytest.fixture(scope="module")
def stacks() -> tuple[StackedParty, StackedParty, np.ndarray]:
    """The attacker's and the active party's stacks of one training, and the labels."""
    prepared = prepare_parties(_spec(), load_dataset("digits"))
    built = [StackedParty([init]) for init in prepared.inits]
    for stack in built:
        stack.stack([0])
    labels = prepared.inits[-1].labels
    assert labels is not None and prepared.inits[0].labels is None  # never at the attacker
    return built[0], built[1], labels.y_train


def test_both_parties_append_the_same_two_rows_and_the_active_one_labels_them(
    stacks: tuple[StackedParty, StackedParty, np.ndarray],
) -> None:
    passive, active, y = stacks
    (hook_p,), (hook_a,) = passive.members[0].hooks[:1], active.members[0].hooks[:1]
    assert isinstance(hook_p, InjectionHook) and isinstance(hook_a, InjectionHook)
    # the attacker holds no label: not its party, not its stack
    assert not hasattr(passive.members[0], "y_train") and not hasattr(passive, "y_train")
    n = len(y)
    p, t = len(hook_p.poison_rows), len(hook_p.target_rows)
    assert p == round(0.01 * n) and t == 10
    np.testing.assert_array_equal(hook_p.target_rows, np.arange(10))  # VFLAIR's code: first
    for epoch in (0, 1):
        ref = BatchRef(epoch, 0)
        rows_p, rows_a = passive.rows(ref), active.rows(ref)
        torch.testing.assert_close(rows_p, rows_a)
        i, j = epoch_draw(0, epoch, p, t)
        assert rows_p[0, -2:].tolist() == [n + i, n + p + j]
        # the active party: the poison sample's true label, the target row relabelled
        assert active.y_train[0, n + i] == int(y[hook_a.poison_rows[i]])
        assert active.y_train[0, n + p + j] == 0
        # the attacker's poison sample is triggered; the active party's half is its own row
        own = torch.from_numpy(active.members[0].X_train.numpy()[hook_a.poison_rows[i]])
        torch.testing.assert_close(active.X_train[0, n + i], own)
        assert not torch.equal(
            passive.X_train[0, n + i], passive.members[0].X_train[hook_p.poison_rows[i]]
        )


def test_the_attacker_sends_the_poison_embedding_and_steps_on_the_target_gradient(
    stacks: tuple[StackedParty, StackedParty, np.ndarray],
) -> None:
    passive, _, _ = stacks
    sent = passive.forward(BatchRef(0, 1))
    assert isinstance(sent, np.ndarray)
    _, h, _ = passive._pending  # type: ignore[misc]
    b = h.shape[1]
    np.testing.assert_array_equal(sent[0, -1], sent[0, -2])  # target slot: poison H
    assert not np.array_equal(h[0, -1].detach().numpy(), sent[0, -1])  # kept: its own H
    grad = torch.arange(b * h.shape[2], dtype=torch.float32).reshape(1, b, -1)
    moved = passive.stacked_hooks[0].on_gradient(passive, passive.rows(BatchRef(0, 1)), grad)
    torch.testing.assert_close(moved[0, -2], grad[0, -1])
    torch.testing.assert_close(moved[0, :-2], grad[0, :-2])


def test_stacked_trainings_equal_each_alone_and_say_colluding() -> None:
    data = load_dataset("digits")
    jobs = [Job(_spec(seed=s), ()) for s in (0, 1)]
    got = dict(NNKind().run_many(jobs, data, LOCAL))
    for i, job in enumerate(jobs):
        stacked = next(r for r in got[i] if r.attack == "lrb")  # type: ignore[union-attr]
        extra = json.loads(stacked.extra)
        assert extra["threat_model"] == "colluding" and extra["vectorized"] is True
        alone = next(r for r in NNKind().run(job.spec, data, LOCAL, ()) if r.attack == "lrb")
        bare = [dataclasses.replace(r, **TIMING) for r in (stacked, alone)]
        assert bare[0] == bare[1], i


def test_the_passive_swap_keeps_its_record_and_bad_choices_are_refused() -> None:
    from trainables.attacks import ATTACKS

    plain = ATTACKS.create("lrb", target=0)
    assert not plain.colludes() and "threat_model" not in plain.record_extra()
    with pytest.raises(ConfigError, match=r"injection='collude'.*'swap', 'colluding'"):
        ATTACKS.create("lrb", injection="collude")
    with pytest.raises(ConfigError, match="count"):
        ATTACKS.create("lrb", count="some")


def test_gs_residuals_follow_the_batches_rows_and_not_the_injected_ones() -> None:
    """GS keeps a residual per training row; the two rows put into every batch carry none,
    so a GS-defended training with the injection runs and GS acts on every gradient."""
    from trainables.trial import run_trial

    spec = _spec(defense="gs", defense_param=99.0)  # residual: 1, GS's default
    record = next(r for r in run_trial(spec) if r.attack == "lrb")
    assert record.status == "ok" and 0.0 <= record.ap <= 1.0
    # every training gradient of 2 epochs: ceil(1,437 rows / 128) = 12 batches each
    assert json.loads(record.extra)["defense_applied"] == {"gs": {"gradient": 24}}
