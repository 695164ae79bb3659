"""VFLAIR's training procedure as named options (``lr_decay``, ``shuffle``): each one does
what VFLAIR's trainer does, leaves the default training untouched, stacks, and is refused
at plan time by the kinds that do not follow it."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from analysis.load import scenario_labels, table_to_frame
from sweep_engine.plan import expand
from sweep_engine.space import load_space
from trainables.data import load_dataset
from trainables.jobs import Job
from trainables.kinds.nn import NNKind
from trainables.messages import BatchSchedule
from trainables.records import Record, records_to_table
from trainables.spec import TrialSpec
from trainables.stacked import StackedOptimizer, lr_scale
from trainables.transport.placement import LOCAL
from trainables.trial import incompatibility, prepare_parties, run_trial, train_prepared
from trainables.vfl.training import attacks_of

TIMING = {"train_seconds": 0.0, "attack_seconds": 0.0, "created_at": None, "extra": ""}


def _spec(**fields: object) -> TrialSpec:
    base: dict[str, object] = {"dataset": "breast_cancer", "epochs": 3, "batch_size": 128}
    return TrialSpec.build(**{**base, **fields})


def test_unshuffled_batches_are_the_rows_in_order_every_epoch() -> None:
    fixed = BatchSchedule(10, 4, seed=3, shuffle=False)
    for epoch in (0, 1):
        got = [fixed.rows(ref).tolist() for ref in fixed.refs(epoch)]
        assert got == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    shuffled = BatchSchedule(10, 4, seed=3)
    assert np.concatenate([shuffled.rows(r) for r in shuffled.refs(0)]).tolist() != list(range(10))


def test_the_decayed_rate_is_lr_over_sqrt_of_the_epoch() -> None:
    assert [lr_scale("inv_sqrt", e) for e in (0, 1, 3)] == [1.0, 1 / math.sqrt(2), 0.5]
    assert lr_scale("none", 7) == 1.0
    p = torch.zeros(3, requires_grad=True)
    opt = StackedOptimizer("sgd", [p], [0.1])
    opt.scale = lr_scale("inv_sqrt", 3)
    p.grad = torch.ones(3)
    opt.step()
    torch.testing.assert_close(p.detach(), torch.full((3,), -0.05))


def test_defaults_keep_every_hash_and_the_options_change_it() -> None:
    plain = _spec()
    assert _spec(lr_decay="none", shuffle=True).config_hash == plain.config_hash
    assert _spec(lr_decay="inv_sqrt").config_hash != plain.config_hash
    assert _spec(shuffle=False).config_hash != plain.config_hash


def _weights(spec: TrialSpec) -> torch.Tensor:
    trained = train_prepared(prepare_parties(spec, load_dataset(spec.dataset)), int(spec.epochs))  # type: ignore[arg-type]
    return torch.cat([p.detach().flatten() for p in trained.parties[0].bottom.parameters()])


def test_decay_leaves_the_first_epoch_alone_and_slows_the_later_ones() -> None:
    one, one_decayed = _weights(_spec(epochs=1)), _weights(_spec(epochs=1, lr_decay="inv_sqrt"))
    assert torch.equal(one, one_decayed)  # epoch 0 trains at lr itself
    start = _weights(_spec(epochs=1, lr=1e-12))  # (almost) the initial weights
    plain = _weights(_spec(epochs=3, optimizer="sgd", lr=0.1))
    decayed = _weights(_spec(epochs=3, optimizer="sgd", lr=0.1, lr_decay="inv_sqrt"))
    assert not torch.equal(plain, decayed)
    assert (decayed - start).norm() < (plain - start).norm()  # smaller steps after epoch 0


def test_options_stack_and_each_record_equals_the_training_alone() -> None:
    data = load_dataset("breast_cancer")
    jobs = [
        Job(_spec(seed=s, lr_decay="inv_sqrt", shuffle=False, **extra), ())
        for s in (0, 1)
        for extra in ({}, {"protocol": "fedbcd"})
    ]
    got = dict(NNKind().run_many(jobs, data, LOCAL))
    for i, job in enumerate(jobs):
        stacked = got[i][0]  # type: ignore[index]
        assert '"vectorized": true' in stacked.extra  # type: ignore[union-attr]
        (alone,) = NNKind().run(job.spec, data, LOCAL, ())
        bare = [dataclasses.replace(r, **TIMING) for r in (stacked, alone)]  # type: ignore[arg-type]
        assert bare[0] == bare[1], i
    (shuffled,) = NNKind().run(_spec(seed=0, lr_decay="inv_sqrt"), data, LOCAL, ())
    assert shuffled.spec_json != got[0][0].spec_json  # type: ignore[index,union-attr]


def test_kinds_that_do_not_follow_them_refuse_them_at_plan_time() -> None:
    for field, value in (("lr_decay", "inv_sqrt"), ("shuffle", False), ("weight_init", "vflair")):
        tree = TrialSpec.build(dataset="breast_cancer", model="xgboost", **{field: value})
        reason = incompatibility(tree)
        assert reason is not None and field in reason and "only plain NN VFL" in reason
    assert incompatibility(_spec(lr_decay="inv_sqrt", shuffle=False)) is None


def test_the_vflair_procedure_sets_each_option_and_leaves_explicit_ones(
    tmp_path: Path,
) -> None:
    vflair = _spec(procedure="vflair")
    assert (vflair.lr_decay, vflair.shuffle, vflair.weight_init) == ("vflair", False, "vflair")
    alone = _spec(lr_decay="vflair", shuffle=False, weight_init="vflair")
    assert vflair.config_hash != alone.config_hash
    assert _spec(procedure="standard").config_hash == _spec().config_hash
    own = _spec(procedure="vflair", shuffle=True, train_attack="lrb",
                train_attack_params={"count": "other"})  # fmt: skip
    assert own.shuffle is True and own.lr_decay == "vflair"
    assert own.train_attack_params == {"injection": "colluding", "count": "other", "over": "epochs"}
    dcor = _spec(procedure="vflair", defense="dcor", defense_param=0.3)
    assert dcor.defense_params == {"distances": "vflair"}
    gs = _spec(procedure="vflair", defense="gs", defense_param=99.0)
    assert gs.defense_params == {"carry": "position"}
    evaluated = attacks_of(vflair, [("mf", {}), ("nsb", {"mp": "clean"}), ("bli", {})])
    assert evaluated == [
        ("mf", {"mp": "tampered"}), ("nsb", {"mp": "clean", "over": "epochs"}), ("bli", {})
    ]  # fmt: skip
    assert attacks_of(_spec(), [("mf", {})]) == [("mf", {})]
    tree = TrialSpec.build(dataset="breast_cancer", model="xgboost", procedure="vflair")
    assert "procedure='vflair'" in str(incompatibility(tree))
    # the planner's training of a training-time attack gets the procedure's parameters
    space = tmp_path / "v.yaml"
    space.write_text(
        "name: v\nbase: {dataset: digits, epochs: 2, procedure: vflair}\n"
        "grid: {seed: [0]}\nattacks: [lrb, bli]\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
    )
    trainings = expand(load_space(str(space))).trainings
    lrb = next(t.spec for t in trainings if t.spec.train_attack == "lrb")
    assert lrb.train_attack_params == {"injection": "colluding", "count": "all", "over": "epochs"}
    assert all(t.spec.procedure == "vflair" and not t.spec.shuffle for t in trainings)


@pytest.mark.parametrize(
    ("name", "params"),
    [("nsb", {"mp": "tampered"}), ("lrb", {"injection": "colluding", "count": "all"})],
)
def test_scores_over_epochs_are_the_means_of_each_epochs_model(
    name: str, params: dict[str, object]
) -> None:
    """``over: epochs`` (VFLAIR's backdoor reports): AP and MP are the means of the
    scores of the model after epoch 1 and after epoch 2, each as a training that stops
    there scores it."""
    data = load_dataset("digits")

    def scored(epochs: int, over: str) -> Record:
        fields: dict[str, object] = {"dataset": "digits", "epochs": epochs, "batch_size": 128}
        given = {**params, "over": over, **({"target": 0} if name == "lrb" else {})}
        if name == "lrb":
            spec = TrialSpec.build(**fields, train_attack="lrb", train_attack_params=given)
            records = NNKind().run(spec, data, LOCAL, ())
        else:
            records = NNKind().run(TrialSpec.build(**fields), data, LOCAL, ((name, given),))
        return next(r for r in records if r.attack == name)

    mean = scored(2, "epochs")
    first, last = scored(1, "final"), scored(2, "final")
    assert json.loads(mean.extra)["scored_epochs"] == 2
    assert mean.ap == pytest.approx((first.ap + last.ap) / 2, abs=1e-12)
    assert mean.mp == pytest.approx((first.mp + last.mp) / 2, abs=1e-12)
    assert (first.ap, first.mp) != (last.ap, last.mp)  # two different models were judged


def test_analysis_keeps_the_procedures_apart() -> None:
    records = [
        r
        for procedure in ("standard", "vflair")
        for r in run_trial(_spec(procedure=procedure, epochs=1), attacks=[("bli", {})])
    ]
    frame = table_to_frame(records_to_table(records))
    assert list(frame["procedure"].astype(str).unique()) == ["standard", "vflair"]
    labels = scenario_labels(frame).astype(str)
    assert set(labels) == {"procedure=standard", "procedure=vflair"}
    standard = table_to_frame(records_to_table(records[: len(records) // 2]))
    assert "procedure" not in standard.columns  # only frames holding VFLAIR's get it
