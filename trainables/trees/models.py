"""The registered tree models: each turns (spec, party data, placement) into MP and bytes.

Paillier LR is its own trial kind (``trainables/kinds/paillier_lr.py``).
"""

from __future__ import annotations

import time

import numpy as np

from trainables.rounds import TrainResult
from trainables.spec import TrialSpec
from trainables.transport.open import open_parties
from trainables.transport.placement import Placement
from trainables.trees.builder import Wire
from trainables.trees.common import TreeData, encrypt_flag, model_params, register
from trainables.trees.crypto import KeyPair
from trainables.trees.forest import ForestParams, train_forest
from trainables.trees.leakage import reveals, tree_view, xgb_view
from trainables.trees.parties import TreeParty, TreePartyInit
from trainables.trees.secureboost import BoostParams, train_boost
from trainables.trees.session import TreeSession
from trainables.trees.xgb_federated import (
    XGBPartyInit,
    predicted_class,
    run_federated,
    xgb_params,
)


@register("xgboost", BoostParams)
def run_xgboost(spec: TrialSpec, data: TreeData, where: Placement, observe: bool) -> TrainResult:
    """xgboost's own federated column-split training; the active party is rank 0.

    ``observe``: train via ``xgb_tap`` so that party 0 (rank 1) returns the gradients rank
    0 broadcast to it (the same protocol and model, made visible).
    """
    model_params(spec, BoostParams)
    k = len(data.X_train)
    ranks = [k - 1, *range(k - 1)]  # rank r -> party: active first
    inits = [
        XGBPartyInit(
            p, r, data.X_train[p], data.X_test[p], data.y_train if r == 0 else None, tap=observe
        )
        for r, p in enumerate(ranks)
    ]
    params, rounds = xgb_params(dict(spec.model_params), data.n_classes, spec.seed)
    results = run_federated(inits, params, rounds, where)
    active = results[0]
    mp = float((predicted_class(np.asarray(active["pred"])) == data.y_test).mean())
    extra = {
        "labels_per_rank": [r["labels_here"] for r in results],
        "comm_bytes_measured": False,
        "n_trees": rounds,
        "gradient_tap": observe,
        "reveals": reveals("xgboost", False),
    }
    outputs = {}
    if observe:  # rank 1 is party 0
        outputs = {
            "view": xgb_view(0, data.n_classes, data.X_train[0], results[1]["received"]),
            "view_labels": data.y_train,
        }
    return TrainResult(mp, rounds, 0, float(active["seconds"]), extra=extra, outputs=outputs)


def _tree_run(spec: TrialSpec, data: TreeData, where: Placement, encrypted: bool, train,
              observe: bool) -> TrainResult:  # fmt: skip
    """Shared plumbing: keys, the active party's own TreeParty, passives behind a transport.

    ``observe``: passive party 0 logs what it is sent; its view is fetched after training.
    """
    k = len(data.X_train)
    n_bins = int(spec.model_params.get("n_bins", 32))
    inits = [TreePartyInit(p, data.X_train[p], data.X_test[p], n_bins,
                           keep_received=observe and p == 0) for p in range(k)]  # fmt: skip
    keys = KeyPair.generate(spec.key_length, encrypted)
    own = inits[-1].build()
    with open_parties(inits[:-1], where) as group:
        transport = group.transport(range(k - 1))
        session = TreeSession(own, Wire(transport), k - 1, keys)
        start = time.perf_counter()
        mp = train(session)
        seconds = time.perf_counter() - start
        stats = transport.stats
        log = group.call(0, TreeParty.received) if observe else None
    extra = {
        "encrypted": encrypted,
        "key_length": spec.key_length if encrypted else None,
        "ciphertext_bytes": keys.public.ciphertext_bytes,
        **keys.stats.as_dict(),
        "reveals": reveals(str(spec.model), encrypted),
    }
    outputs = {}
    if log is not None:  # observed
        outputs = {
            "view": tree_view(0, str(spec.model), data.n_classes, data.X_train[0], log),
            "view_labels": data.y_train,
        }
    return TrainResult(mp, stats.rounds, stats.comm_bytes, seconds, extra=extra, outputs=outputs)


@register("secureboost", BoostParams)
def run_secureboost(
    spec: TrialSpec, data: TreeData, where: Placement, observe: bool
) -> TrainResult:
    params = model_params(spec, BoostParams)

    def train(session: TreeSession) -> float:
        return train_boost(session, data.y_train, data.y_test, data.n_classes, params)[0]

    return _tree_run(spec, data, where, encrypt_flag(spec, True), train, observe)


def _forest(spec: TrialSpec, data: TreeData, where: Placement, default: bool,
            observe: bool) -> TrainResult:  # fmt: skip
    params = model_params(spec, ForestParams)

    def train(session: TreeSession) -> float:
        return train_forest(session, data.y_train, data.y_test, data.n_classes, params,
                            spec.seed)[0]  # fmt: skip

    return _tree_run(spec, data, where, encrypt_flag(spec, default), train, observe)


@register("rf", ForestParams)
def run_rf(spec: TrialSpec, data: TreeData, where: Placement, observe: bool) -> TrainResult:
    return _forest(spec, data, where, False, observe)


@register("secure_rf", ForestParams)
def run_secure_rf(spec: TrialSpec, data: TreeData, where: Placement, observe: bool) -> TrainResult:
    return _forest(spec, data, where, True, observe)
