"""FedCVT / FedMVT: pseudo-label rule, attention estimate, threat model, transports, sweep."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.dataset as pads
import pytest
import torch

from trainables.data import load_dataset, split_samples
from trainables.errors import ConfigError
from trainables.messages import Message
from trainables.spec import TrialSpec
from trainables.ssl.cvt_party import CvtParty
from trainables.ssl.fedcvt import attention_estimate, pseudo_labels
from trainables.ssl.runner import cvt_options, party_inits, run_cvt_trial
from trainables.transport.placement import Placement
from trainables.trial import check_names, run_trial

TINY = {
    "dataset": "breast_cancer", "n_aligned": 60, "epochs": 2, "batch_size": 64,
    "model": "mlp2", "hidden": (16,), "model_params": {"rep_dim": 8, "n_local": 120},
}  # fmt: skip


def _spec(**over: object) -> TrialSpec:
    return TrialSpec.build(**{"ssl_variant": "fedcvt", **TINY, **over})


def test_pseudo_labels_need_agreement_and_every_threshold() -> None:
    # rows: 0 agree & confident; 1 fed just below 0.8; 2 passive disagrees; 3 active 0.69;
    # 4 exactly at the thresholds (kept: thresholds are inclusive)
    p_fed = torch.tensor([[0.05, 0.9, 0.05], [0.2, 0.79, 0.01], [0.0, 0.95, 0.05],
                          [0.9, 0.1, 0.0], [0.1, 0.1, 0.8]])  # fmt: skip
    p_act = torch.tensor([[0.1, 0.8, 0.1], [0.0, 0.99, 0.01], [0.0, 0.9, 0.1],
                          [0.69, 0.3, 0.01], [0.2, 0.1, 0.7]])  # fmt: skip
    p_pas = torch.tensor([[0.0, 0.75, 0.25], [0.0, 0.9, 0.1], [0.9, 0.05, 0.05],
                          [0.95, 0.05, 0.0], [0.3, 0.0, 0.7]])  # fmt: skip
    keep, label = pseudo_labels(p_fed, p_act, p_pas, (0.8, 0.7, 0.7))
    assert keep.tolist() == [True, False, False, False, True]
    assert label[keep].tolist() == [1, 2]


def test_attention_estimate_matches_hand_computation() -> None:
    query = torch.tensor([[1.0, 0.0]])  # (1, 2)
    keys = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # (2, 2) own reps of the overlap
    values = torch.tensor([[10.0], [20.0]])  # (2, 1) the other party's reps of the overlap
    # scores = q.k / (sqrt(2) * 0.5) = [sqrt(2), 0]; w0 = e^sqrt2 / (e^sqrt2 + 1) = 0.80443
    w0 = math.exp(math.sqrt(2)) / (math.exp(math.sqrt(2)) + 1)
    est = attention_estimate(query, keys, values, temperature=0.5)
    assert est.item() == pytest.approx(10 * w0 + 20 * (1 - w0), abs=1e-5)
    assert est.item() == pytest.approx(11.9557, abs=1e-3)
    # sharpening: T=0.5 weights are the T=1 weights squared and renormalised
    p = torch.softmax(torch.tensor([1 / math.sqrt(2), 0.0]), dim=0)
    sharp = p**2 / (p**2).sum()
    assert est.item() == pytest.approx(float(sharp @ values[:, 0]), abs=1e-5)
    # leave-one-out: overlap row 0 may not look itself up, so only row 1 remains
    loo = attention_estimate(query, keys, values, 0.5, exclude_self=torch.tensor([0]))
    assert loo.item() == pytest.approx(20.0)


def _contains_row(payload: np.ndarray, X: np.ndarray) -> bool:
    """Whether any row of X (its nonzero values, >= 3 of them) shows up inside payload."""
    seen = set(np.round(np.asarray(payload, dtype=np.float64).ravel(), 5).tolist())
    for row in np.round(X.astype(np.float64), 5):
        nz = row[row != 0]
        if len(nz) >= 3 and all(v in seen for v in nz.tolist()):
            return True
    return False


def test_no_raw_features_cross_and_passive_holds_no_labels() -> None:
    from trainables.transport.ray_actors import _walk_arrays

    spec = _spec()
    ds = load_dataset("breast_cancer")
    log: list[Message] = []
    run_cvt_trial(spec, ds, True, log=log)
    inits = party_inits(spec, ds, cvt_options(spec, True))
    assert inits[0].labels is None and inits[1].labels is not None
    mats = [m for init in inits for m in (init.X_ol, init.X_nl, init.X_test)]
    mats += [ds.X_train, ds.X_test]  # unscaled too
    kinds = {"values", "reps_ol", "reps_nl", "est_nl", "est_ol", "test_reps"}
    kinds |= {"grad_" + k for k in kinds}
    assert log and {m.kind for m in log} <= kinds
    for msg in log:
        assert msg.payload.shape[1] == 2 * 8  # representations (2d wide), never features
        assert not any(_contains_row(msg.payload, X) for X in mats), msg.kind
    # the detector is not blind: a message carrying one feature row is caught
    leak = np.zeros((4, 16), dtype=np.float32)
    leak[1, : inits[0].X_ol.shape[1]] = inits[0].X_ol[3]
    assert _contains_row(leak, inits[0].X_ol)
    # the passive party holds nothing equal to any label vector, however deep
    passive = inits[0].build()
    held: dict[str, np.ndarray] = {}
    _walk_arrays(vars(passive), "passive", held, set())
    lab = inits[1].labels
    assert lab is not None and held
    for y in (lab.y_ol, lab.y_nl, lab.y_test, lab.labeled_ol):
        assert not any(a.shape == y.shape and np.array_equal(a, y) for a in held.values())
    assert type(passive) is CvtParty  # no heads, no labels


def test_fedcvt_records_pseudo_labels_and_baseline_shares_steps() -> None:
    rec = run_trial(_spec(epochs=4))[0]
    extra = json.loads(rec.extra)
    assert rec.ssl_variant == "fedcvt" and rec.rounds == 4 * 2 and rec.comm_bytes > 0
    assert extra["n_aligned"] == 60 and extra["n_local_a"] == 120 == extra["n_local_b"]
    assert extra["pseudo_total"] > 0 and 0.0 <= extra["pseudo_last_epoch_acc"] <= 1.0
    assert rec.mp > 0.8 and extra["auc"] > 0.8
    base = run_trial(_spec(epochs=4, ssl_variant="fedsplitnn"))[0]
    assert base.rounds == rec.rounds and "pseudo_total" not in json.loads(base.extra)
    assert base.comm_bytes < rec.comm_bytes  # only the overlap batch crosses
    alias = run_trial(_spec(epochs=4, ssl_variant="fedmvt"))[0]
    assert alias.mp == rec.mp


def test_bad_specs_fail_with_the_allowed_values() -> None:
    with pytest.raises(ConfigError, match="unknown ssl_variant='fedxyz'; allowed: none, ") as err:
        check_names(_spec(ssl_variant="fedxyz"))
    assert {"fedcvt", "fedmvt", "fedsplitnn"} <= set(str(err.value).split(": ")[-1].split(", "))
    with pytest.raises(ConfigError, match=r"temprature.*allowed: rep_dim, temperature"):
        check_names(_spec(model_params={"temprature": 0.5}))
    with pytest.raises(ConfigError, match="n_parties=2"):
        check_names(_spec(n_parties=3))
    split = split_samples(100, n_labeled=10, seed=1, n_aligned=25)
    assert len(split.aligned) == 25 and len(split.labeled) == 10 and len(split.unaligned) == 75
    with pytest.raises(ConfigError, match="n_aligned=101"):
        split_samples(100, n_aligned=101)


@pytest.mark.ray
def test_local_and_ray_give_the_same_record(ray_session: None) -> None:
    spec = _spec(n_labeled=40)
    local = run_trial(spec)[0]
    remote = run_trial(spec, Placement("ray"))[0]
    assert local.n_labeled == 40
    for field in ("mp", "rounds", "comm_bytes", "extra", "config_hash"):
        assert getattr(local, field) == getattr(remote, field), field


@pytest.mark.ray
def test_tiny_ssl_space_runs_through_the_cli(tmp_path: Path, ray_session: None) -> None:
    from sweep_engine.cli import main

    space = tmp_path / "tiny_ssl.yaml"
    space.write_text(
        "name: tiny_ssl\n"
        "base: {dataset: breast_cancer, n_parties: 2, epochs: 2, batch_size: 64, model: mlp2,"
        " hidden: [16], model_params: {rep_dim: 8, n_local: 120}}\n"
        "grid:\n  ssl_variant: [fedcvt, fedsplitnn]\n  n_aligned: [60]\n"
        "resources: {cpu_per_party: 1, cpu_per_trial: 0}\nrun: {max_concurrent_trials: 1}\n"
    )
    results = tmp_path / "results"
    assert main(["--space", str(space), "--results", str(results), "--no-mlflow"]) == 0
    rows = pads.dataset(results / "tiny_ssl" / "records").to_table().to_pylist()
    assert sorted(r["ssl_variant"] for r in rows) == ["fedcvt", "fedsplitnn"]
    assert all(r["status"] == "ok" and r["mp"] > 0.6 for r in rows)
    cvt = next(r for r in rows if r["ssl_variant"] == "fedcvt")
    assert json.loads(cvt["extra"])["pseudo_total"] > 0
