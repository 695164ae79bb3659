"""``rounds: first`` of DLI, NS and DS (VFLAIR reads its ``first_epoch_state``): the first
round's batch only. DLI takes each row's first negative gradient element, a seeded random
class where none is negative."""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from trainables.attacks import ATTACKS, chance
from trainables.attacks.harness import draw_aux, make_view, nn_view_of
from trainables.data import load_dataset
from trainables.defenses.base import with_payload
from trainables.messages import BatchRef
from trainables.spec import TrialSpec, procedure_params
from trainables.trial import prepare_parties, run_trial, train_local_parties


def test_first_round_reads_the_first_batch_by_its_first_negative_element() -> None:
    spec = TrialSpec.build(dataset="digits", seed=0, epochs=1)
    prepared = prepare_parties(spec, load_dataset("digits"), [("dli", {})])
    parties = train_local_parties(prepared, 1)[1]
    info = ATTACKS.get("dli").info
    aux = draw_aux(info, parties[-1].y_train.numpy(), parties[1].X_train.numpy(), 0)
    view = make_view(parties[0], info, aux, None, 0)
    grads = [m for m in view.received if m.kind == "gradient" and m.batch is not None]
    assert len(grads) > 1  # several rounds: only the first one is read
    first = grads[0]
    b, c = np.asarray(first.payload).shape
    crafted = np.full((b, c), 0.01, dtype=np.float32)  # no negative element: random class
    crafted[0, [3, 7]] = [-0.1, -0.9]  # the first negative wins, not the smallest
    view = dataclasses.replace(view, received=(with_payload(first, crafted), *grads[1:]))
    guess = ATTACKS.create("dli", rounds="first").run(view)
    assert np.array_equal(guess.rows, view.schedule.rows(first.batch))
    assert guess.labels is not None and guess.labels[0] == 3
    assert len(set(guess.labels[1:].tolist())) > 1  # the fallback draws classes, not one
    again = ATTACKS.create("dli", rounds="first").run(view)
    assert again.labels is not None and np.array_equal(again.labels, guess.labels)  # seeded
    # the default reads every row's last gradient, so it covers the whole training split
    last = ATTACKS.create("dli").run(view)
    assert len(last.rows) > len(guess.rows)


def test_first_round_survives_noise_that_breaks_the_last_rounds() -> None:
    # G-DP 1e-4: first-round gradients are ~1e-3 per element, the last ones near zero
    spec = TrialSpec.build(dataset="digits", seed=0, epochs=5, defense="gdp", defense_param=1e-4)
    records = run_trial(spec, attacks=[("dli", {}), ("dli", {"rounds": "first"})])
    ap = {json.loads(r.extra)["attack_label"]: r.ap for r in records if r.attack == "dli"}
    assert ap["dli[rounds=first]"] == 1.0
    assert ap["dli"] is not None and ap["dli"] < 0.99
    vflair = TrialSpec.build(dataset="digits", procedure="vflair")
    assert procedure_params(vflair, "dli", {}) == {"rounds": "first"}


def test_ns_and_ds_read_the_first_round_by_name() -> None:
    # G-DP 1e-4 on breast_cancer: DS on the first round's gradients still separates the
    # classes; on each row's last gradient (a trained model's, near zero) it does not
    spec = TrialSpec.build(dataset="breast_cancer", seed=0, defense="gdp", defense_param=1e-4)
    attacks = [(name, params) for name in ("ns", "ds") for params in ({}, {"rounds": "first"})]
    records = run_trial(spec, attacks=attacks)
    ap = {json.loads(r.extra)["attack_label"]: r.ap for r in records if r.attack in ("ns", "ds")}
    assert ap["ds[rounds=first]"] is not None and ap["ds[rounds=first]"] > 0.95
    assert ap["ds"] is not None and ap["ds"] < 0.7
    assert set(ap) == {"ns", "ns[rounds=first]", "ds", "ds[rounds=first]"}
    vflair = TrialSpec.build(dataset="breast_cancer", procedure="vflair")
    assert procedure_params(vflair, "ns", {}) == {"rounds": "first", "score": "vflair"}
    assert procedure_params(vflair, "ds", {}) == {
        "rounds": "first", "positive": "first_batch", "score": "vflair"
    }  # fmt: skip
    assert procedure_params(vflair, "ds", {"rounds": "last"})["rounds"] == "last"  # own wins


def test_ds_first_batch_grant_draws_its_known_rows_from_the_first_batch() -> None:
    spec = TrialSpec.build(dataset="breast_cancer", seed=0, epochs=1, batch_size=64)
    prepared = prepare_parties(spec, load_dataset("breast_cancer"), [("ds", {})])
    parties = train_local_parties(prepared, 1)[1]
    view_of = nn_view_of(parties, 0)
    first = parties[0].schedule.rows(BatchRef(0, 0))  # (64,) the first round's rows
    granted = ATTACKS.create("ds", rounds="first", positive="first_batch")
    _, view = view_of(granted.view_info())
    assert len(view.aux.label_rows) == 2 and set(view.aux.label_rows) <= set(first.tolist())
    assert sorted(view.aux.labels.tolist()) == [0, 1]  # one known row per class
    _, plain = view_of(ATTACKS.create("ds").view_info())  # the default grant: any row
    y = parties[-1].y_train.numpy()
    expected = draw_aux(ATTACKS.get("ds").info, y, parties[1].X_train.numpy(), 0)
    assert np.array_equal(plain.aux.label_rows, expected.label_rows)
    # the positive read is the first batch's own: DS reads the first round itself
    guess = granted.run(view)
    assert np.array_equal(guess.rows, first)


def test_vflair_score_is_its_thresholded_accuracy_in_the_better_orientation() -> None:
    # VFLAIR tables NS as max(acc, 1 - acc) of min-max norms above 0.5, and DS as the acc
    # of a positive cosine: the untrained model that favours class 1 gives class 1 the
    # smaller norms, an AUC of 0 that VFLAIR reads as 1
    spec = TrialSpec.build(dataset="breast_cancer", seed=0, epochs=1, batch_size=64)
    prepared = prepare_parties(spec, load_dataset("breast_cancer"), [("ns", {})])
    parties = train_local_parties(prepared, 1)[1]
    y = parties[-1].y_train.numpy()
    info = ATTACKS.get("ds").info
    rows = parties[0].schedule.rows(BatchRef(0, 0))  # (64,) the first round's rows
    aux = draw_aux(info, y, parties[1].X_train.numpy(), 0, pool=rows)  # VFLAIR's grant
    view = make_view(parties[0], info, aux, None, 0)
    grads = [m for m in view.received if m.kind == "gradient" and m.batch is not None]
    p1 = np.where(y[rows] == 1, 0.7, 0.6)  # (64,) the untrained model favours class 1
    crafted = np.stack([(1 - p1) - (y[rows] == 0), p1 - (y[rows] == 1)], axis=1)  # p - onehot
    view = dataclasses.replace(view, received=(with_payload(grads[0], crafted), *grads[1:]))

    def ap(name: str, **params: str) -> float:
        guess = ATTACKS.create(name, rounds="first", **params).run(view)
        return chance.score_labels(guess, y, y).ap

    assert ap("ns") == 0.0  # AUC: class 1 has the smaller norms everywhere
    assert ap("ns", score="vflair") == 1.0  # the better orientation
    flat = dataclasses.replace(view, received=(with_payload(grads[0], crafted * 0 + 1), *grads[1:]))
    guess = ATTACKS.create("ns", rounds="first", score="vflair").run(flat)
    majority = max(y[rows].mean(), 1 - y[rows].mean())
    assert chance.score_labels(guess, y, y).ap == majority  # one class guessed: never < 0.5
    assert ap("ds", score="vflair") == 1.0 and ap("ds") == 1.0  # the cosine is +-1 here
    noisy = crafted + np.random.default_rng(0).normal(0, 0.3, crafted.shape)
    view = dataclasses.replace(view, received=(with_payload(grads[0], noisy), *grads[1:]))
    guess = ATTACKS.create("ds", rounds="first", score="vflair").run(view)
    known = view.aux.label_rows[view.aux.labels == 1][0]
    g_pos = noisy[np.flatnonzero(rows == known)[0]]  # (2,) the granted positive's gradient
    expected = ((noisy @ g_pos > 0).astype(int) == y[rows]).mean()  # by hand
    assert 0.5 < expected < 1.0  # the noise makes mistakes
    assert chance.score_labels(guess, y, y).ap == expected
