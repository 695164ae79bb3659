"""FedCVT / FedMVT: pseudo-label rule, attention estimate, threat model, the Protocol's
counters, defenses / protocols / attacks composed with it, transports, sweep."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.dataset as pads
import pytest
import torch

from trainables.data import load_dataset, split_samples
from trainables.defenses.applied import DefenseNeverApplied
from trainables.defenses.spec_defenses import SpecDefenses
from trainables.errors import ConfigError
from trainables.hooks import MessageLog
from trainables.messages import Message
from trainables.spec import TrialSpec
from trainables.ssl.cvt_init import CvtPartyInit
from trainables.ssl.cvt_party import CvtParty
from trainables.ssl.cvt_rounds import CvtRounds
from trainables.ssl.fedcvt import (
    attention_estimate,
    balanced_pseudo_labels,
    label_prior,
    match_moments,
    pseudo_labels,
)
from trainables.ssl.runner import cvt_options, party_inits
from trainables.transport.open import open_parties
from trainables.transport.placement import LOCAL, Placement
from trainables.trial import attack_incompatibility, check_names, incompatibility, run_trial

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


def _imbalanced_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """20 rows, binary: 16 confident class-0 rows (the paper's rule takes all), 4 class-1
    rows of which only 1 clears every threshold and 2 more agree below them, 1 disagrees."""
    conf0 = torch.linspace(0.99, 0.84, 16)  # (16,) distinct: a strict confidence order
    p0 = torch.stack([conf0, 1 - conf0], dim=1)  # (16, 2)
    p1_fed = torch.tensor([[0.1, 0.9], [0.3, 0.7], [0.4, 0.6], [0.3, 0.7]])
    p1_pas = torch.tensor([[0.2, 0.8], [0.4, 0.6], [0.45, 0.55], [0.6, 0.4]])
    p_fed = torch.cat([p0, p1_fed])  # (20, 2)
    return p_fed, p_fed.clone(), torch.cat([p0, p1_pas])


def test_balanced_pseudo_labels_follow_the_prior() -> None:
    p_fed, p_act, p_pas = _imbalanced_batch()
    t = (0.8, 0.7, 0.7)
    prior = label_prior(torch.tensor([0] * 15 + [1] * 5), 2)  # B's labels: 25 % class 1
    assert prior.tolist() == [0.75, 0.25]
    keep, label = pseudo_labels(p_fed, p_act, p_pas, t)  # the paper's rule: 17 rows, 1/17
    assert int(keep.sum()) == 17 and label[keep].tolist().count(1) == 1
    # quota: the paper's 17 rows, class 0 cut to 3 (1 / 0.25 * 0.75), its most confident
    q_keep, q_label = balanced_pseudo_labels(p_fed, p_act, p_pas, t, prior, "quota")
    assert torch.equal(q_label, label) and q_keep.nonzero().flatten().tolist() == [0, 1, 2, 16]
    assert bool((q_keep <= keep).all())  # never a row the paper's rule refused
    # threshold: the paper's count 17, shares round(0.75 * 17) = 13 / round(0.25 * 17) = 4;
    # class 1 has only 3 agreeing rows (row 19 disagrees), its thresholds fall below 0.7
    t_keep, _ = balanced_pseudo_labels(p_fed, p_act, p_pas, t, prior, "threshold")
    assert t_keep.nonzero().flatten().tolist() == [*range(13), 16, 17, 18]
    share = [float(label[k].float().mean()) for k in (keep, q_keep, t_keep)]
    assert share[0] < share[2] < share[1] == 0.25  # both move toward the prior (0.25)


def test_balance_option_moves_a_trial_s_pseudo_labels_toward_b_s_prior() -> None:
    lab = _inits(_spec())[1].labels
    assert lab is not None
    b_prior = float(np.concatenate([lab.y_ol[lab.labeled_ol], lab.y_nl]).mean())  # class 1
    gaps = {}
    for mode in ("none", "quota", "threshold"):
        params = {**TINY["model_params"], "pseudo_balance": mode}  # type: ignore[dict-item]
        extra = json.loads(run_trial(_spec(epochs=4, model_params=params))[0].extra)
        assert extra["pseudo_balance"] == mode and extra["pseudo_last_epoch"] > 0
        gaps[mode] = abs(extra["pseudo_class_share"][1] - b_prior)
    assert gaps["quota"] < gaps["none"] / 2 and gaps["threshold"] < gaps["none"] / 2, gaps
    assert "pseudo_balance" not in json.loads(run_trial(_spec(ssl_variant="fedsplitnn"))[0].extra)


def test_match_moments_and_the_rescaled_trial() -> None:
    est = torch.tensor([[0.0, 5.0], [2.0, 5.0]], requires_grad=True)  # (2, 2); dim 1 constant
    ref = torch.tensor([[10.0, 1.0], [12.0, 1.0], [14.0, 4.0]])  # mean (12, 2), std (2, sqrt3)
    out = match_moments(est, ref)
    r2 = math.sqrt(2)  # est's dim-0 std: 12 + (est - 1) * 2 / sqrt2
    assert out[:, 0].tolist() == pytest.approx([12 - r2, 12 + r2])
    assert out[:, 1].tolist() == pytest.approx([2.0, 2.0])  # a constant dim: the mean only
    (out[:, 0] * torch.tensor([1.0, 3.0])).sum().backward()
    assert est.grad is not None and float(est.grad.abs().sum()) > 0  # trains the encoders
    plain = run_trial(_spec())[0]
    params = {**TINY["model_params"], "est_rescale": "moments"}  # type: ignore[dict-item]
    moments = run_trial(_spec(model_params=params))[0]
    extra, base = json.loads(moments.extra), json.loads(plain.extra)
    assert extra["est_rescale"] == "moments" and base["est_rescale"] == "none"
    assert 0 < base["est_a_std_ratio"] and extra["auc"] != base["auc"]  # trained otherwise
    assert moments.comm_bytes == plain.comm_bytes  # the same messages, other values


def test_bad_balance_value_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sweep_engine.cli import main

    with pytest.raises(ConfigError, match=r"pseudo_balance='quotas'.*allowed: none, quota, thr"):
        check_names(_spec(model_params={"pseudo_balance": "quotas"}))
    with pytest.raises(ConfigError, match=r"est_rescale='std'.*allowed: none, moments"):
        check_names(_spec(model_params={"est_rescale": "std"}))
    space = tmp_path / "bad.yaml"
    space.write_text(
        "name: bad\nbase: {dataset: breast_cancer, ssl_variant: fedcvt, n_aligned: 60,"
        " model_params: {pseudo_balance: classwise}}\n"
    )
    assert main(["--space", str(space), "--dry-run"]) == 2
    assert "pseudo_balance='classwise'" in capsys.readouterr().err


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


def _inits(spec: TrialSpec) -> tuple[CvtPartyInit, ...]:
    """Both parties keep a message log: everything that crosses the A/B boundary."""
    inits = party_inits(
        spec, load_dataset(spec.dataset), cvt_options(spec, True), SpecDefenses.compile(spec)
    )
    return tuple(dataclasses.replace(i, record=True) for i in inits)


def _logged(parties: list[Any]) -> list[Message]:
    log = next(h for h in parties[0].hooks if isinstance(h, MessageLog))
    return [*log.sent, *log.received]  # A's side of every message of the trial


def test_no_raw_features_cross_and_passive_holds_no_labels() -> None:
    from trainables.transport.ray_actors.actor import _walk_arrays

    spec = _spec()
    ds = load_dataset("breast_cancer")
    inits = _inits(spec)
    with open_parties(inits, LOCAL) as group:
        group.train(CvtRounds(semi=True), int(spec.epochs))  # type: ignore[arg-type]
        log = _logged(group.snapshot())
    assert inits[0].labels is None and inits[1].labels is not None
    mats = [m for init in inits for m in (init.X_ol, init.X_nl, init.X_test)]
    mats += [ds.X_train, ds.X_test]  # unscaled too
    kinds = {"representation", "embedding", "nl_embedding", "est_nl_embedding"}
    kinds |= {"est_ol_embedding", "test_embedding", "gradient"}
    assert log and {m.kind for m in log} == kinds
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
    assert type(passive) is CvtParty and not hasattr(passive, "y_train")  # no heads, labels


# Measured BEFORE FedCVT became a Protocol (commit e76a55c, ``train_cvt``), for _spec() with
# 2 epochs (4 rounds): rounds 4 and comm_bytes 22656 (fedcvt) / 7296 (fedsplitnn). Those
# byte counts missed most of the exchange: ``train_cvt`` passed A's tensors and B's
# gradients as lists, which the transport's counter (top-level ``Message`` arguments and
# results only) never saw; it counted only B's ``values`` and the test representations.
# Now every message that crosses is counted: the old count plus the missing parts, below.
BEFORE = {"fedcvt": (4, 22656), "fedsplitnn": (4, 7296)}


def test_rounds_and_bytes_are_what_crossed_the_boundary() -> None:
    rep = 60 * 16 * 4  # one (60, 2d=16) float32 matrix: overlap, batches and chunks are 60 rows
    for variant, (rounds, before) in BEFORE.items():
        rec = run_trial(_spec(ssl_variant=variant))[0]
        assert rec.rounds == rounds
        # fedcvt per round: 4 tensors up and their 4 gradients down (fedsplitnn: 1 and 1)
        missing = rounds * (8 if variant == "fedcvt" else 2) * rep
        assert (
            rec.comm_bytes == before + missing == {"fedcvt": 145536, "fedsplitnn": 38016}[variant]
        )
    # and the count is the log's: every training message once, plus the test reps once
    inits = _inits(_spec())
    with open_parties(inits, LOCAL) as group:
        result = group.train(CvtRounds(semi=True), 2)
        log = _logged(group.snapshot())
    assert result.comm_bytes == sum(m.nbytes for m in log) == 145536
    assert result.eval_bytes == 114 * 16 * 4  # the test representations (114 rows)


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


def test_message_defenses_act_on_fedcvt_and_the_rest_are_refused() -> None:
    plain = run_trial(_spec())[0]
    gdp = run_trial(_spec(defense="gdp", defense_param=0.1))[0]  # B's gradients, clipped+noised
    applied = json.loads(gdp.extra)["defense_applied"]
    assert applied == {"gdp": {"gradient": 4 * 4}}  # 4 gradients a round, 4 rounds
    assert gdp.mp != plain.mp and gdp.epsilon is not None and gdp.defense_party == "active"
    passive = run_trial(
        _spec(defense="ldp", defense_param=0.1, defense_params={"party": "passive"})
    )
    counts = json.loads(passive[0].extra)["defense_applied"]["ldp"]
    assert counts == {
        "embedding": 4, "nl_embedding": 4, "est_nl_embedding": 4, "est_ol_embedding": 4,
        "test_embedding": 1,
    }  # fmt: skip
    iso = run_trial(_spec(defense="iso", defense_param=1.0, defense_params={"target": "both"}))
    assert set(json.loads(iso[0].extra)["defense_applied"]["iso"]) == {"gradient", "representation"}
    for over, reason in (
        (dict(defense="mid", defense_param=1.0), "loss or top model"),
        (dict(defense="gper", defense_param=1.0), "loss or top model"),
        (dict(defense="gs", defense_param=99.0), "use residual: 0"),
        (dict(protocol="celu"), "not defined on FedCVT's exchange"),
        (dict(ssl_variant="fedsplitnn", defense="iso", defense_param=1.0,
              defense_params={"target": "representation"}), "sends only 'gradient'"),
    ):  # fmt: skip
        why = incompatibility(_spec(**over))
        assert why is not None and reason in why, (over, why)
    assert (
        incompatibility(_spec(defense="gs", defense_param=99.0, defense_params={"residual": 0}))
        is None
    )
    assert incompatibility(_spec(defense="gdp", defense_param=0.1)) is None
    # a non-neutral defense that acted nowhere fails the training instead of a false record
    with pytest.raises(DefenseNeverApplied, match="iso never applied"):
        run_trial(_spec(ssl_variant="fedsplitnn", defense="iso", defense_param=1.0,
                        defense_params={"target": "representation"}))  # fmt: skip


def test_fedbcd_and_codecs_act_on_the_exchange() -> None:
    plain = run_trial(_spec())[0]
    bcd = run_trial(_spec(protocol="fedbcd", protocol_params={"q": 3}))[0]
    assert bcd.rounds == plain.rounds and bcd.comm_bytes == plain.comm_bytes
    assert bcd.mp != plain.mp  # 3 local updates per exchange train differently
    quant = run_trial(_spec(protocol="quantize", protocol_params={"bits": 8}))[0]
    # 8-bit codes (+8 bytes scale/offset) for A's 4 tensors a round and its test reps;
    # B's values and gradients stay dense (``gradients: 0``)
    rep, codes = 60 * 16 * 4, 60 * 16 + 8
    test = 114 * 16 * 4
    assert quant.comm_bytes == 4 * (5 * rep + 4 * codes) + 114 * 16 + 8
    assert plain.comm_bytes == 4 * 9 * rep + test


def test_model_completion_and_tampering_attacks_run_through_the_harness() -> None:
    fast = {"preset": "fast", "epochs": 2}
    recs = run_trial(_spec(epochs=4), attacks=[("pmc", fast), ("mc", fast), ("mf", {})])
    clean, pmc, mc, mf = recs
    assert [r.attack for r in recs] == ["none", "pmc", "mc", "mf"]
    assert pmc.attacker_party == 0 and 0.6 < pmc.ap <= 1.0 and 0.5 < mc.ap <= 1.0
    assert pmc.mp == clean.mp  # the judge's f_AB over both encoders is the trial's MP
    assert json.loads(pmc.extra)["attack_label"] == "pmc@fast[epochs=2]"
    assert mf.ap >= 0.0 and "pseudo_total" in json.loads(mf.extra)
    amc = run_trial(_spec(epochs=4, train_attack="amc", train_attack_params=fast))
    assert [r.attack for r in amc] == ["amc"] and amc[0].mp != clean.mp  # training attacked
    assert attack_incompatibility(_spec(), "pmc") is None
    for name, what in [("dli", "reads per-row"), ("bli", "reads per-row"), ("ns", "reads"),
                       ("ds", "reads"), ("tbm", "reads"), ("grn", "reads per-row"),
                       ("lrb", "tampers with per-row messages")]:  # fmt: skip
        why = attack_incompatibility(_spec(), name)
        assert why is not None and what in why and "FedCVT's exchange has none" in why, name


@pytest.mark.ray
def test_local_and_ray_give_the_same_record(ray_session: None) -> None:
    spec = _spec(n_labeled=40, defense="gdp", defense_param=0.01)
    attacks = [("pmc", {"preset": "fast", "epochs": 1})]
    local = run_trial(spec, attacks=attacks)
    remote = run_trial(spec, Placement("ray", cpu_per_party=0.5), attacks=attacks)
    assert local[0].n_labeled == 40 and [r.attack for r in remote] == ["none", "pmc"]
    for a, b in zip(local, remote, strict=True):
        for field in ("mp", "ap", "rounds", "comm_bytes", "extra", "config_hash", "epsilon"):
            assert getattr(a, field) == getattr(b, field), field


@pytest.mark.ray
def test_passive_actor_holds_no_labels(ray_session: None) -> None:
    import ray

    inits = _inits(_spec())
    lab = inits[1].labels
    assert lab is not None
    with open_parties(inits, Placement("ray", cpu_per_party=0.5)) as group:
        group.train(CvtRounds(semi=True), 2)
        states = ray.get([a.reachable_arrays.remote() for a in group.actors])  # type: ignore[attr-defined]

    def holds(state: dict[str, np.ndarray], y: np.ndarray) -> bool:
        return any(a.shape == y.shape and np.array_equal(a, y) for a in state.values())

    assert holds(states[1], lab.y_ol) and holds(states[1], lab.y_test)  # the walk finds them
    assert any(".hooks." in p for p in states[0])  # A's message log was walked too
    for y in (lab.y_ol, lab.y_nl, lab.y_test):
        assert not holds(states[0], y)


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
