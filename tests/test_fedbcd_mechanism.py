"""What a passive party receives under FedBCD and CELU-VFL, with MID and with every defense.

Issue 42, part 5 ("the MID x FedBCD effect explained"). FedBCD (Liu et al.; VFLAIR's
``FedBCD_p``): per exchange the active party computes dL/dH_k once and sends it, then takes
Q local steps on the stale passive embeddings; each passive party takes Q local steps that
reuse that one gradient. MID is a model hook at the active party (a bottleneck each
passive embedding passes before the global model), so it runs in every one of the active
party's Q forward passes, as in VFLAIR, whose active party calls ``give_gradient`` (the
aggregate through the MID layers) at every q. So MID's count is Q x rounds under FedBCD
against rounds under FedSGD, while the passive party still receives one gradient per
exchange and the bytes are FedSGD's: the count is forward passes that trained with the
bottleneck, not messages.

Why NS and DS fall to chance under FedBCD + MID (the adult test below; the whole story,
with numbers from ``benchmarks.fedbcd_defenses``, in docs/defenses.md): not because of
MID's Q applications, and not because the attack reads a different gradient (it reads the
one gradient of each exchange, through the bottleneck as it was then). The passive party's
Q steps on each stale gradient drive its side of the model into a state MID's bottleneck
cannot recover from: at lambda = 0.01 the bottleneck's code falls to its prior and carries
nothing about H; at lambda = 0 the embeddings grow until the decoder's ReLUs are all off
and the gradient is exactly 0. Either way the passive party is cut out of the model, and
a gradient that no longer depends on its labels is what NS and DS score.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.fedbcd_defenses import norm_scoring, one, spec_of, train_probed
from trainables.attacks import ATTACKS
from trainables.attacks.harness import draw_aux, make_view
from trainables.attacks.ns import last_gradients
from trainables.defenses import DEFENSES
from trainables.defenses.mid import StackedMID
from trainables.messages import Message
from trainables.party import Party
from trainables.spec import TrialSpec

Q = 5
# 455 breast_cancer training rows in batches of 128: 4 exchanges per epoch
BASE: dict[str, Any] = {"dataset": "breast_cancer", "batch_size": 128, "epochs": 2}


def _spec(protocol: str = "fedbcd", **fields: Any) -> TrialSpec:
    params = {"q": Q} if protocol in ("fedbcd", "celu") else {}
    return TrialSpec.build(**{**BASE, "protocol": protocol, "protocol_params": params, **fields})


def _mid_form(stack: Any) -> StackedMID:
    return next(h for h in stack.stacked_hooks if isinstance(h, StackedMID))


def _received(party: Party) -> list[Message]:
    log = party.log()
    assert log is not None, "the NS attack makes the passive party keep a message log"
    return [m for m in log.received if m.kind == "gradient"]


# -- FedBCD + MID: what is sent, how often, and which state it comes from ----------------
@pytest.mark.parametrize("protocol", ["fedsgd", "fedbcd"])
def test_one_gradient_per_exchange_and_q_local_steps_on_it(protocol: str) -> None:
    result, parties, probe, _ = train_probed(_spec(protocol, defense="mid", defense_param=0.01))
    passive, active = parties
    q = Q if protocol == "fedbcd" else 1
    rounds = result.rounds
    assert rounds == 2 * 4
    got = _received(passive)
    schedule = [ref for epoch in range(2) for ref in passive.schedule.refs(epoch)]
    assert [m.batch for m in got] == schedule  # one gradient per exchange, in order
    # every party stepped Q times per exchange: the passive one reusing the one gradient;
    # the active one's steps move its bottom, its top and MID's bottlenecks
    passive_stack, active_stack = probe.stacks  # type: ignore[attr-defined]
    assert passive_stack.optimizer.steps == active_stack.optimizer.steps == q * rounds
    stepped = {id(p) for p in active_stack.optimizer.params}
    assert {id(p) for p in _mid_form(active_stack).params} <= stepped
    assert {id(p) for p in active_stack.bottom.params} <= stepped
    # MID's count is those forward passes through the bottleneck, not messages
    assert active.defense_applied()[0]["counts"] == {"bottleneck": q * rounds}
    # FedSGD's bytes: per epoch every row's H (2 float32) up and its dL/dH down
    assert result.comm_bytes == 2 * 455 * 2 * 4 * 2


@pytest.mark.parametrize("lam", [0.0, 0.01])
def test_the_gradient_sent_is_the_exchange_gradient_through_the_bottleneck(lam: float) -> None:
    """Each gradient is d(CE + lambda KL)/dH through MID's bottleneck with MID's parameters
    as they were at the exchange (after Q steps per earlier exchange, before this one's),
    and it is exactly what NS reads as the row's gradient."""
    spec = _spec(defense="mid", defense_param=lam)
    result, parties, probe, _ = train_probed(spec)
    passive, active = parties
    assert probe.exchanges == result.rounds
    # recomputed from the exchange's state and noise draw, the objective's gradient is
    # the one that went out: nothing else is added to it and no local step changed it
    np.testing.assert_allclose(probe.sent[0], probe.total[0], rtol=1e-5, atol=1e-12)
    assert np.abs(probe.sent[0]).max() > 0
    if lam == 0.0:  # no KL term: the gradient is the label part alone
        assert not probe.defense[0].any()
    else:
        assert np.abs(probe.defense[0]).max() > 0
    info = ATTACKS.get("ns").info
    y = active.y_train.numpy()
    view = make_view(passive, info, draw_aux(info, y, active.X_train.numpy(), spec.seed), None, 0)
    rows, grads = last_gradients(view)
    np.testing.assert_array_equal(rows, np.arange(len(y)))
    np.testing.assert_allclose(grads, probe.sent[0], rtol=0, atol=0)


def test_each_gradient_leaves_before_its_exchanges_local_steps() -> None:
    result, _, probe, _ = train_probed(_spec(defense="mid", defense_param=0.01))
    assert probe.steps == [Q * t for t in range(result.rounds)]


# -- why NS and DS fall to chance: the passive party's side of the model collapses --------
@pytest.mark.slow
@pytest.mark.shared_data
def test_fedbcd_collapses_the_passive_side_through_the_passive_partys_local_steps(
    shared_data: Path,
) -> None:
    """Adult, VFLAIR's settings, MID lambda = 0.01, seed 0, the first 2 epochs (the
    collapse is there by then; NS reaches chance by epoch 50: docs/defenses.md).

    Under FedBCD the code MID's bottleneck passes on falls to its prior (mu ~ 0, sigma ~ 1)
    whatever H is, so the model no longer uses the passive party (its MP is the same with
    the passive embeddings replaced by their mean) and the gradient sent back shrinks over
    tenfold. With the same 5 MID passes per exchange but one passive step per gradient
    (``fedbcd-passive-q1``) nothing collapses: the passive party's Q steps on its one
    stale gradient cause it, not MID's Q applications at the active party."""
    if not (shared_data / "adult" / "adult.data").is_file():
        pytest.skip("needs shared/datasets/adult")
    runs = {}
    for variant in ("fedsgd", "fedbcd", "fedbcd-passive-q1"):
        spec, passive_steps = spec_of(variant, "adult", epochs=2, defense="mid", defense_param=0.01)
        runs[variant] = one(spec, passive_steps)
    sgd, bcd, active_q = runs["fedsgd"], runs["fedbcd"], runs["fedbcd-passive-q1"]
    assert bcd["applied"] == active_q["applied"] == {"mid": {"bottleneck": Q * bcd["rounds"]}}
    assert bcd["mid_mu"] < 0.05 and abs(bcd["mid_sigma"] - 1.0) < 0.03  # the prior
    assert sgd["mid_mu"] > 0.1 and active_q["mid_mu"] > 0.05
    assert abs(bcd["mp"] - bcd["mp_without_passive"]) <= 0.002  # the passive party is out
    for alive in (sgd, active_q):
        assert alive["mp"] - alive["mp_without_passive"] >= 0.02
    assert bcd["grad_norm"] < sgd["grad_norm"] / 10
    assert active_q["grad_norm"] > sgd["grad_norm"] / 3


def test_norm_scoring_of_a_part_is_ns_on_it() -> None:
    """The benchmark's per-part NS is the attack's rule: AUC of the row norms, advantage
    2|AUC - 0.5| (a flipped score informs as much)."""
    y = np.array([0, 0, 1, 1])
    grads = np.array([[0.1, 0.0], [0.2, 0.0], [0.3, 0.0], [0.4, 0.0]])
    assert norm_scoring(grads, y) == {"auc": 1.0, "advantage": 1.0}
    assert norm_scoring(grads[::-1].copy(), y) == {"auc": 0.0, "advantage": 1.0}


# -- every defense under FedBCD and CELU-VFL ---------------------------------------------
# What each count key counts, and so how often it must occur per exchange: a message hook
# changes each gradient sent (one per exchange and passive party), GPer the gradients
# before they are sent, dCor the loss term only where it has a gradient (the exchange; in
# a local step H_k is stale and the term a constant); MID's bottleneck and CAE's soft
# targets change every forward pass the active party trains on: Q per exchange (FedBCD's
# Q local steps; CELU's exchange step plus its Q - 1 cached steps).
PER_EXCHANGE = {"gradient", "gradients", "loss_term"}
PER_FORWARD = {"bottleneck", "soft_targets"}


def _first_gradients(spec: TrialSpec) -> tuple[int, dict[str, int], list[np.ndarray]]:
    result, parties, _, _ = train_probed(spec)
    got = _received(parties[0])
    schedule = [ref for epoch in range(int(spec.epochs)) for ref in parties[0].schedule.refs(epoch)]
    assert [m.batch for m in got] == schedule, "one gradient per exchange, in order"
    counts = parties[-1].defense_applied()[0]["counts"]
    return result.rounds, counts, [np.asarray(m.payload) for m in got]


@pytest.mark.parametrize("protocol", ["fedbcd", "celu"])
@pytest.mark.parametrize("name", DEFENSES.names())
def test_every_defense_applies_as_the_protocol_says(name: str, protocol: str) -> None:
    strength = max(DEFENSES.get(name).info.grid)
    fields = {"defense": name, "defense_param": strength, "epochs": 1}
    rounds, counts, got = _first_gradients(_spec(protocol, **fields))
    _, sgd_counts, sgd = _first_gradients(_spec("fedsgd", **fields))
    assert counts and set(counts) <= PER_EXCHANGE | PER_FORWARD, counts
    for what, n in counts.items():
        per = 1 if what in PER_EXCHANGE else Q
        assert n == per * rounds, (what, n)
        assert sgd_counts[what] == rounds  # FedSGD: one forward pass per exchange
    # the first exchange precedes every local step: the same defended gradient as FedSGD's;
    # from the second on, the Q local steps in between have changed what is sent
    np.testing.assert_array_equal(got[0], sgd[0])
    assert not np.array_equal(got[1], sgd[1])
