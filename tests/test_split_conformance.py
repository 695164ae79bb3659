"""Every trial kind against every spec field that decides the split: changing the field
changes the data the kind trains on, or the kind refuses the changed spec at plan time.

Why: ``split_for`` (``trainables/data/split.py``) is the one place rows and columns are
divided. Kinds that once divided them themselves drifted apart (one ignored ``n_aligned``
and silently trained on ``aligned_ratio``'s rows). So this test reads what each kind
actually prepares for training (party inits, ``TreeData``, agents' rows), not
``split_for``'s output: a kind that stops using ``split_for`` or drops a field fails here.
No training and no Ray: preparing the parties is the observable (a few seconds in all).
``TABLE`` is the conformance table; a new kind or field must be added to it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import numpy as np
import pytest

from trainables.data import Dataset, load_dataset, split_for, vertibench_split
from trainables.data import split as split_module
from trainables.defenses.spec_defenses import SpecDefenses
from trainables.errors import ConfigError
from trainables.kinds import TRIAL_KINDS, kind_of
from trainables.spec import TrialSpec
from trainables.trial import check_names, incompatibility

TINY_HSSL = {"pretrain_epochs": 1, "pretrain_batch": 64, "hidden": 16, "emb": 8, "proj": 16,
             "pred": 8, "moco_dim": 8, "queue": 64}  # fmt: skip
# One small spec per kind, every split field live: no n_aligned (it would hide
# aligned_ratio), an aligned_ratio that leaves FedCVT its own unaligned rows.
BASES: dict[str, TrialSpec] = {
    "nn": TrialSpec.build(dataset="breast_cancer", aligned_ratio=0.8, seed=2),
    "hssl": TrialSpec.build(
        dataset="breast_cancer", ssl_variant="hssl_simsiam", aligned_ratio=0.8, n_labeled=120,
        seed=2, model_params=TINY_HSSL,
    ),
    "fedcvt": TrialSpec.build(
        dataset="breast_cancer", ssl_variant="fedcvt", aligned_ratio=0.4, seed=2,
        model_params={"n_local": 100, "rep_dim": 8},
    ),
    "fedssl": TrialSpec.build(
        dataset="digits", ssl_variant="fedssl", n_parties=5, n_labeled=60, seed=2,
        model_params={"n_support": 2, "n_query": 2, "local_steps": 1, "max_unlabeled": 100},
    ),
    "tree": TrialSpec.build(
        dataset="breast_cancer", model="xgboost", aligned_ratio=0.8, seed=2,
        model_params={"n_trees": 2},
    ),
    "paillier_lr": TrialSpec.build(
        dataset="breast_cancer", model="paillier_lr", aligned_ratio=0.8, seed=2,
        model_params={"encrypt": 0},
    ),
}  # fmt: skip
# The change made to each split field (breast_cancer has 455 training rows, 30 fields).
CHANGES: dict[str, dict[str, Any]] = {
    "aligned_ratio": {"aligned_ratio": 0.6},
    "n_aligned": {"n_aligned": 200},
    "n_labeled": {"n_labeled": 50},
    "seed": {"seed": 3},
    "split_scheme": {"split_scheme": "importance"},  # auto = blocks on tabular data
    "n_parties": {"n_parties": 3},
}
CH, REF = "changes", "refused"
# The conformance table. FedCVT has exactly two parties; FedSSL is horizontal (agents hold
# whole rows, dealt by label availability), so it has no column split and no overlap, and
# its n_parties is fixed by its agent counts.
TABLE: dict[str, dict[str, str]] = {
    "nn": dict.fromkeys(CHANGES, CH),
    "hssl": dict.fromkeys(CHANGES, CH),
    "fedcvt": {**dict.fromkeys(CHANGES, CH), "n_parties": REF},
    "fedssl": {**dict.fromkeys(CHANGES, REF), "n_labeled": CH, "seed": CH},
    "tree": dict.fromkeys(CHANGES, CH),
    "paillier_lr": dict.fromkeys(CHANGES, CH),
}


@cache
def _dataset(name: str) -> Dataset:
    return load_dataset(name)


def _nn(spec: TrialSpec, ds: Dataset) -> list[np.ndarray]:
    from trainables.vfl.training import prepare_parties

    inits = prepare_parties(spec, ds).inits
    labels = inits[-1].labels
    assert labels is not None
    return [*(i.X_train for i in inits), *(i.X_test for i in inits), labels.y_train]


def _hssl(spec: TrialSpec, ds: Dataset) -> list[np.ndarray]:
    from trainables.ssl.hssl.variants import prepare

    data = prepare(spec, ds)
    return [*(i.X_local for i in data.inits), *data.X_test, data.labeled, data.y_aligned]


def _fedcvt(spec: TrialSpec, ds: Dataset) -> list[np.ndarray]:
    from trainables.ssl import runner

    inits = runner.party_inits(spec, ds, runner.cvt_options(spec, True), SpecDefenses.compile(spec))
    labels = inits[1].labels
    assert labels is not None
    arrays = [a for i in inits for a in (i.X_ol, i.X_nl, i.X_test)]
    return [*arrays, labels.y_ol, labels.labeled_ol, labels.y_nl]


def _fedssl(spec: TrialSpec, ds: Dataset) -> list[np.ndarray]:
    from trainables.fedssl.agents import SupportInit
    from trainables.fedssl.trial import prepare

    agents = prepare(spec, ds).inits[:-1]  # the server's init is a model, not rows
    return [a for i in agents for a in ((i.x, i.y) if isinstance(i, SupportInit) else (i.x,))]


def _trees(spec: TrialSpec, ds: Dataset) -> list[np.ndarray]:
    from trainables.trees.common import tree_data

    data = tree_data(spec, ds)
    return [*data.X_train, *data.X_test, data.y_train]


def _paillier(spec: TrialSpec, ds: Dataset) -> list[np.ndarray]:
    from trainables.kinds.paillier_lr import lr_inits
    from trainables.trees.common import tree_data

    inits = lr_inits(spec, tree_data(spec, ds), False)
    y = inits[-1].y_train
    assert y is not None
    return [*(i.X_train for i in inits), y]


# What each kind's training is given, read from the kind's own preparation code.
SEEN: dict[str, Callable[[TrialSpec, Dataset], list[np.ndarray]]] = {
    "nn": _nn, "hssl": _hssl, "fedcvt": _fedcvt, "fedssl": _fedssl, "tree": _trees,
    "paillier_lr": _paillier,
}  # fmt: skip


def _fingerprint(arrays: list[np.ndarray]) -> list[tuple[tuple[int, ...], str]]:
    return [
        (a.shape, hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()) for a in arrays
    ]


def _refusal(spec: TrialSpec) -> str | None:
    """The plan-time answer: a ConfigError from the names check, else the kind's reason."""
    try:
        check_names(spec)
    except ConfigError as err:
        return str(err)
    return incompatibility(spec, None)


def _behaviour(kind: str, field: str) -> str:
    base = BASES[kind]
    changed = base.model_copy(update=CHANGES[field])
    assert getattr(base, field) != getattr(changed, field), (kind, field)
    if _refusal(changed) is not None:
        return REF
    ds = _dataset(base.dataset)
    before, after = (_fingerprint(SEEN[kind](s, ds)) for s in (base, changed))
    return CH if before != after else "ignored"


@pytest.fixture(scope="module")
def no_shap() -> Iterator[None]:
    """VertiBench's importance split draws its columns without the Shapley measurement;
    that measurement (seconds of SHAP) only goes to the records, not to the split, so a
    uniform stand-in keeps this file fast. Measured splits stay out of the shared memo."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vertibench_split, "field_importance", lambda ds: [1.0] * len(ds.feature_groups))
        mp.setattr(split_module, "_MEASURED", {})
        yield


def test_the_table_covers_every_kind_and_each_base_spec_runs() -> None:
    assert sorted(TABLE) == sorted(BASES) == sorted(SEEN) == TRIAL_KINDS.names()
    for kind, spec in BASES.items():
        assert kind_of(spec).name == kind
        assert _refusal(spec) is None, (kind, _refusal(spec))
        assert sorted(TABLE[kind]) == sorted(CHANGES)


@pytest.mark.usefixtures("no_shap")
def test_every_split_field_changes_what_each_kind_trains_on_or_is_refused() -> None:
    observed = {kind: {field: _behaviour(kind, field) for field in CHANGES} for kind in TABLE}
    width = max(map(len, CHANGES))
    print("\nkind         " + " ".join(f.ljust(width) for f in CHANGES))
    for kind, row in observed.items():
        print(kind.ljust(13) + " ".join(row[f].ljust(width) for f in CHANGES))
    assert observed == TABLE


@pytest.mark.parametrize("kind", ["nn", "hssl", "fedcvt", "tree", "paillier_lr"])
def test_each_vertical_kind_trains_on_split_for(kind: str) -> None:
    """The rows and columns a kind prepares are ``split_for``'s for its spec (FedCVT: with
    its two parties), not a division of its own."""
    spec = BASES[kind].model_copy(update={"n_aligned": 200, "n_labeled": 50})
    ds = _dataset(spec.dataset)
    split = split_for(spec, ds, 2 if kind == "fedcvt" else None)
    widths = [len(c) for c in split.columns]
    labeled = ds.y_train[split.rows.labeled]
    if kind in ("nn", "tree", "paillier_lr"):
        from trainables.trees.common import tree_data
        from trainables.vfl.training import prepare_parties

        if kind == "nn":
            inits = prepare_parties(spec, ds).inits
            assert [i.columns for i in inits] == [tuple(c.tolist()) for c in split.columns]
            assert inits[-1].labels is not None
            assert np.array_equal(inits[-1].labels.y_train, labeled)
        else:
            data = tree_data(spec, ds)
            assert [x.shape[1] for x in data.X_train] == widths
            assert all(
                np.array_equal(x, ds.X_test[:, c])
                for x, c in zip(data.X_test, split.columns, strict=True)
            )
            assert np.array_equal(data.y_train, labeled)
    elif kind == "hssl":
        from trainables.ssl.hssl.variants import prepare

        data = prepare(spec, ds)
        assert [c.tolist() for c in data.columns] == [c.tolist() for c in split.columns]
        assert np.array_equal(data.y_aligned[data.labeled], labeled)
        assert data.n_aligned == len(split.rows.aligned) == 200
    else:
        from trainables.ssl import runner

        inits = runner.party_inits(
            spec, ds, runner.cvt_options(spec, True), SpecDefenses.compile(spec)
        )
        assert [i.X_ol.shape[1] for i in inits] == widths
        assert inits[1].labels is not None
        assert np.array_equal(inits[1].labels.y_ol, ds.y_train[split.rows.aligned])
        assert np.array_equal(inits[1].labels.y_ol[inits[1].labels.labeled_ol], labeled)
