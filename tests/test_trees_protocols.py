"""SecureBoost, random forest and Paillier LR: lossless encryption, bytes, labels, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trainables.data import load_dataset
from trainables.errors import ConfigError
from trainables.kinds import kind_of
from trainables.spec import TrialSpec
from trainables.transport import LocalTransport
from trainables.transport.open import open_parties
from trainables.transport.placement import LOCAL
from trainables.trees import TREE_MODELS, run_tree_trial
from trainables.trees.builder import Wire
from trainables.trees.common import tree_data
from trainables.trees.crypto import KeyPair, Packer
from trainables.trees.forest import ForestParams, train_forest
from trainables.trees.paillier_lr import KeyHolderInit, LRPartyInit, PaillierLR
from trainables.trees.parties import TreePartyInit
from trainables.trees.secureboost import BoostParams, train_boost
from trainables.trees.session import TreeSession
from trainables.trial import check_names, run_trial


def _session(spec: TrialSpec, encrypted: bool, rows: int) -> tuple[TreeSession, object]:
    data = tree_data(spec, load_dataset(spec.dataset))
    inits = [TreePartyInit(p, x[:rows], t, 16) for p, (x, t) in
             enumerate(zip(data.X_train, data.X_test, strict=True))]  # fmt: skip
    keys = KeyPair.generate(512, encrypted)
    passives = LocalTransport([i.build() for i in inits[:-1]])  # type: ignore[misc]
    return TreeSession(inits[-1].build(), Wire(passives), len(inits) - 1, keys), data


@pytest.mark.parametrize("model", ["boost", "forest"])
def test_encryption_is_lossless_same_trees_same_mp(model: str) -> None:
    spec = TrialSpec.build(dataset="breast_cancer", n_parties=3, seed=1)
    out = {}
    for encrypted in (False, True):
        session, data = _session(spec, encrypted, 120)
        y = data.y_train[:120]  # type: ignore[attr-defined]
        if model == "boost":
            params = BoostParams(n_trees=2, max_depth=3)
            res = train_boost(session, y, data.y_test, 2, params)  # type: ignore[attr-defined]
        else:
            params = ForestParams(n_trees=2, max_depth=3)  # type: ignore[assignment]
            res = train_forest(session, y, data.y_test, 2, params, seed=1)  # type: ignore
        out[encrypted] = (res, session)
    (mp0, trees0, score0), s0 = out[False]
    (mp1, trees1, score1), s1 = out[True]
    assert [t.structure() for t in trees0] == [t.structure() for t in trees1]
    assert any(owner >= 0 for t in trees1 for owner, *_ in t.structure())  # passives split too
    assert mp0 == mp1 and np.array_equal(score0, score1)
    assert s1.keys.stats.n_encrypted > 0 and s0.keys.stats.n_encrypted == 0
    # ciphertexts are counted at their serialized size: 2 * 512 bits each
    assert s1.transport.stats.comm_bytes > 5 * s0.transport.stats.comm_bytes


def test_passive_tree_party_holds_no_labels_and_sees_only_ciphertexts() -> None:
    spec = TrialSpec.build(dataset="breast_cancer")
    session, data = _session(spec, True, 80)
    y = data.y_train[:80]  # type: ignore[attr-defined]
    train_boost(session, y, data.y_test, 2, BoostParams(n_trees=1, max_depth=2))  # type: ignore
    passive = session.transport.peers[0]
    arrays = [v for v in vars(passive).values() if isinstance(v, np.ndarray)]
    assert all(not np.array_equal(a.ravel()[:80], y) for a in arrays if a.size >= 80)
    n2 = session.keys.public.n**2
    stats = [c for chunk in passive.packed for c in chunk if c is not None]
    assert stats and all(1 < int(c) < n2 and int(c).bit_length() > 600 for c in stats)


def test_packer_roundtrip_and_sum() -> None:
    packer = Packer(3, 20, 50)  # two slots per int -> two ints per row
    rows = [[1, 2, 3], [4, 5, 6]]
    packed = packer.pack(rows)
    assert packer.n_ints == 2 and len(packed) == 2
    assert packer.unpack([sum(chunk) for chunk in packed]) == [5, 7, 9]


def test_paillier_lr_matches_its_plaintext_protocol() -> None:
    spec = TrialSpec.build(dataset="breast_cancer")
    data = tree_data(spec, load_dataset("breast_cancer"))
    logits = {}
    for encrypted in (False, True):
        inits = []
        last = len(data.X_train) - 1
        for p, (x, t) in enumerate(zip(data.X_train, data.X_test, strict=True)):
            lo, hi = x.min(0), np.maximum(x.max(0) - x.min(0), 1e-9)
            x, t = (x[:96] - lo) / hi, (t - lo) / hi
            labels = {"y_train": data.y_train[:96], "y_test": data.y_test} if p == last else {}
            inits.append(LRPartyInit(p, x.astype(float), t.astype(float), 1, 32, 0.5, 0,
                                     **labels))  # fmt: skip
        holder = KeyHolderInit(512, encrypted)
        with open_parties([*inits[:-1], holder, inits[-1]], LOCAL) as group:
            logits[encrypted] = group.train(PaillierLR(), 2)
    plain, enc = logits[False], logits[True]
    np.testing.assert_allclose(enc.outputs["test_logits"], plain.outputs["test_logits"], atol=1e-3)
    assert enc.mp == plain.mp and enc.rounds == plain.rounds == 6
    assert enc.extra["n_decrypted"] > 0 and enc.comm_bytes > 10 * plain.comm_bytes


def test_registry_matches_trial_dispatch_and_bad_params_fail() -> None:
    assert set(TREE_MODELS.names()) == {"xgboost", "secureboost", "rf", "secure_rf"}
    for name in [*TREE_MODELS.names(), "paillier_lr"]:  # the kind registry dispatches each
        kind = kind_of(TrialSpec.build(dataset="breast_cancer", model=name)).name
        assert kind == ("paillier_lr" if name == "paillier_lr" else "tree")
    bad = TrialSpec.build(dataset="breast_cancer", model="secureboost", model_params={"depth": 3})
    with pytest.raises(ConfigError, match=r"allowed: .*max_depth"):
        check_names(bad)
    with pytest.raises(ConfigError, match="encrypt"):
        check_names(bad.model_copy(update={"model_params": {"encrypt": 2}}))
    with pytest.raises(ConfigError, match="NN-VFL"):
        check_names(TrialSpec.build(dataset="breast_cancer", model="rf", defense="gs"))


def test_rf_trial_record_through_run_trial() -> None:
    spec = TrialSpec.build(dataset="breast_cancer", model="secure_rf", key_length=512,
                           model_params={"n_trees": 1, "max_depth": 2})  # fmt: skip
    (rec,) = run_trial(spec)
    extra = json.loads(rec.extra)
    assert rec.model == "secure_rf" and 0.8 < rec.mp <= 1.0
    assert extra["encrypted"] and extra["key_length"] == 512 and rec.rounds == 3
    assert rec.comm_bytes > 0 and run_tree_trial(spec)[0].mp == rec.mp
    with pytest.raises(ConfigError, match="per-bin sums"):  # a tree's messages, named
        run_tree_trial(spec.model_copy(update={"defense": "gs"}))
