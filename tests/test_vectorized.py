"""Vectorized packs (``vfl/vectorized.py``, ``vfl/stacked_party.py``, ``stacked.py``): K
same-shape trainings as one stacked training give each training the records it gets
alone, on this process and on a real local Ray; what cannot stack runs unstacked."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest
import torch

from trainables.data import Dataset, load_dataset
from trainables.jobs import Job, Outcome
from trainables.kinds.nn import NNKind
from trainables.records import Record
from trainables.schedule import ONE_BY_ONE, STACKED
from trainables.spec import TrialSpec
from trainables.stacked import StackedOptimizer
from trainables.transport.open import open_parties
from trainables.transport.placement import LOCAL, Placement
from trainables.vfl.stacked_party import StackedParty, StackedPartyInit
from trainables.vfl.training import (
    attacks_of,
    prepare_parties,
    train_local_parties,
    train_prepared,
    train_stacked,
)
from trainables.vfl.vectorized import stack_key, stacks

WARM = Placement("ray", cpu_per_party=0.5, reuse_actors=True)
TIMING = {"train_seconds": 0.0, "attack_seconds": 0.0, "created_at": None, "extra": ""}
PMC = ("pmc", {"preset": "fast"})
DLI = ("dli", {})


def _job(seed: int, attacks: Sequence[tuple[str, dict]] = (), **fields: object) -> Job:
    base: dict[str, object] = {"dataset": "breast_cancer", "epochs": 3, "batch_size": 128}
    return Job(TrialSpec.build(**{**base, "seed": seed, **fields}), tuple(attacks))


def _pack() -> list[Job]:
    """Stackable groups (two or more trainings each): seeds, agg and split, SGD and Adam,
    FedSGD and FedBCD's Q steps, a target MP evaluated mid-training, different labeled
    rows, attacks reading the model (PMC) and the message log (DLI), a defense on the
    messages (G-DP: stacks with the undefended ones); and what must fall back: a lone
    shape, a training-time attack and a defense on the loss's gradients (GPer)."""
    return [
        _job(0), _job(1), _job(2, attacks=[DLI]),
        _job(0, partition="split"), _job(1, partition="split", attacks=[PMC]),
        _job(0, optimizer="sgd", lr=0.1), _job(1, optimizer="sgd", lr=0.1),
        _job(0, protocol="fedbcd"), _job(1, protocol="fedbcd", attacks=[DLI]),
        _job(0, epochs=4, target_mp=0.9), _job(1, epochs=4, target_mp=0.9),
        _job(0, n_labeled=200), _job(1, n_labeled=200),
        _job(0, defense="gdp", defense_param=0.1), _job(1, epochs=5),
        _job(2, train_attack="amc", train_attack_params={"preset": "fast"}),
        _job(3, defense="gper", defense_param=0.5),
    ]  # fmt: skip


def _bare(outcome: Outcome) -> list[Record] | tuple[type, str]:
    if isinstance(outcome, Exception):
        return type(outcome), str(outcome)
    return [dataclasses.replace(r, **TIMING) for r in outcome]  # type: ignore[arg-type]


def _vectorized(outcome: Outcome) -> bool:
    assert not isinstance(outcome, Exception), outcome
    return all(json.loads(r.extra or "{}").get("vectorized") is True for r in outcome)


@pytest.fixture(scope="module")
def data() -> Dataset:
    return load_dataset("breast_cancer")


def _compare(jobs: list[Job], data: Dataset, placement: Placement) -> dict[int, Outcome]:
    got = dict(NNKind().run_many(jobs, data, placement))
    assert sorted(got) == list(range(len(jobs))), "every job yields exactly once"
    for i, job in enumerate(jobs):
        alone = NNKind().run(job.spec, data, placement, job.attacks)
        assert _bare(got[i]) == _bare(alone), f"job {i}: {job.spec}"
    return got


def test_vectorized_records_equal_one_at_a_time_in_process(data: Dataset) -> None:
    jobs = _pack()
    got = _compare(jobs, data, LOCAL)
    stacked = [i for i in range(len(jobs)) if _vectorized(got[i])]
    assert stacked == list(range(14)), "every group of two or more stacks, nothing else"
    assert [r.attack for r in got[2]] == ["none", "dli"]  # type: ignore[union-attr]
    assert got[9][0].rounds_to_target is not None  # type: ignore[index,union-attr]


@pytest.mark.ray
def test_vectorized_records_equal_one_at_a_time_on_warm_actors(
    ray_session: None, data: Dataset
) -> None:
    jobs = _pack()[:14]
    got = _compare(jobs, data, WARM)
    assert all(_vectorized(got[i]) for i in range(len(jobs)))


def test_turned_off_nothing_stacks(data: Dataset) -> None:
    jobs = [_job(0), _job(1)]
    got = dict(NNKind().run_many(jobs, data, LOCAL, ONE_BY_ONE))
    assert not any(json.loads(r.extra or "{}").get("vectorized") for o in got.values() for r in o)  # type: ignore[union-attr]


def _trained(jobs: list[Job], data: Dataset) -> tuple[list[list], list[list]]:
    """Each job's trained parties: stacked, and alone."""
    ready = [prepare_parties(job.spec, data, attacks_of(job.spec, [PMC])) for job in jobs]
    out = train_stacked(ready, int(jobs[0].spec.epochs), LOCAL, [True] * len(jobs))  # type: ignore[arg-type]
    assert all(err is None for _, err in out), out
    stacked = [t.parties for t, _ in out]  # type: ignore[union-attr]
    alone = [
        train_local_parties(prepare_parties(j.spec, data), int(j.spec.epochs))[1] for j in jobs
    ]  # type: ignore[arg-type]
    return stacked, alone


def _max_gap(a: list, b: list) -> float:
    gap = 0.0
    for pa, pb in zip(a, b, strict=True):
        for x, y in zip(pa.trainable_parameters(), pb.trainable_parameters(), strict=True):
            gap = max(gap, float((x - y).detach().abs().max()))
    return gap


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_weights_within_1e_5_even_with_a_learning_rate_per_training(
    data: Dataset, optimizer: str
) -> None:
    """Different learning rates in one stack take the vector-rate path of the optimizer."""
    jobs = [
        _job(s, partition="split", optimizer=optimizer, lr=lr, epochs=5)
        for s, lr in enumerate((0.01, 0.03, 0.1))
    ]
    stacked, alone = _trained(jobs, data)
    gaps = [_max_gap(s, a) for s, a in zip(stacked, alone, strict=True)]
    assert max(gaps) < 1e-5, gaps
    moved = _max_gap(alone[0], alone[1])
    assert moved > 1e-2  # the trainings really differ


def test_stacked_adam_with_one_rate_is_torch_adam_element_for_element() -> None:
    torch.manual_seed(0)
    w = torch.randn(4, 3, 5)
    stacked = w.clone().requires_grad_()
    alone = [w[k].clone().requires_grad_() for k in range(4)]
    opt = StackedOptimizer("adam", [stacked], [0.01] * 4)
    ref = [torch.optim.Adam([p], lr=0.01) for p in alone]
    for _ in range(5):
        g = torch.randn(4, 3, 5)
        stacked.grad = g.clone()
        opt.step()
        for k in range(4):
            alone[k].grad = g[k].clone()
            ref[k].step()
    assert all(torch.equal(stacked[k].detach(), alone[k].detach()) for k in range(4))


def test_a_passive_stack_holds_no_label_of_any_training(data: Dataset) -> None:
    inits = [prepare_parties(_job(s).spec, data).inits for s in range(3)]
    stacks = [StackedPartyInit(tuple(i[k] for i in inits)) for k in range(2)]
    with open_parties(stacks, LOCAL) as group:
        group.call_all(StackedParty.stack, [0, 1, 2])
        passive, active = group.snapshot()  # type: ignore[misc]
        assert isinstance(passive, StackedParty) and not passive.is_active
        assert not hasattr(passive, "y_train") and not hasattr(passive, "y_test")
        assert all(not hasattr(p, "y_train") for p in passive.parties)
        assert active.y_train.shape[0] == 3


def test_what_cannot_stack_has_no_key(data: Dataset) -> None:
    plain = _job(0).spec
    assert stack_key(plain, prepare_parties(plain, data)) is not None
    assert stacks(plain, [DLI, PMC])
    assert stacks(_job(0, protocol="celu").spec, ())
    assert stacks(plain, [("amc", {"preset": "fast"})])  # training-time attacks that say so
    a, b = _job(0).spec, _job(0, epochs=5).spec
    assert stack_key(a, prepare_parties(a, data)) != stack_key(b, prepare_parties(b, data))


def _key(data: Dataset, **fields: object) -> tuple | None:
    spec = _job(0, **fields).spec
    assert stacks(spec, ())
    return stack_key(spec, prepare_parties(spec, data))


def test_model_defenses_stack_with_their_own_kind_at_any_strength(data: Dataset) -> None:
    """A defense with model hooks keys its stack by name and parameters, not strength; a
    message-only one stacks with undefended trainings."""
    plain = _key(data)
    mid = _key(data, defense="mid", defense_param=0.1)
    assert mid is not None and mid != plain
    assert _key(data, defense="mid", defense_param=1.0) == mid
    assert _key(data, defense="mid", defense_param=1.0, defense_params={"code": 8}) != mid
    assert _key(data, defense="dcor", defense_param=0.1) not in (plain, mid)
    assert _key(data, defense="gdp", defense_param=0.1) == plain
    celu = _key(data, protocol="celu")
    assert celu not in (plain, _key(data, protocol="celu", protocol_params={"xi": 0.8}))


def _loss_term(self: object, h_passive: list, y: object) -> None:
    """A plugin defense's loss term (it declares no stacked form of its own)."""
    return None


def test_a_defense_with_model_hooks_must_declare_its_stacked_form() -> None:
    from trainables.defenses.base import Defense, DefenseInfo, check_defense
    from trainables.plugins import Refused

    info = DefenseInfo(party="active", grid=(0.1,), neutral=0.0, quantity="q")
    bare = type("Bare", (Defense,), {"name": "bare", "info": info, "loss_term": _loss_term})
    with pytest.raises(Refused, match="stacked = None"):
        check_defense(bare, "bare")
    alone = type("Alone", (bare,), {"stacked": None})
    assert check_defense(alone, "bare") is alone


@pytest.mark.parametrize(
    ("defense", "strengths"),
    [("mid", (0.0, 1.0, 0.01)), ("dcor", (0.0, 0.3, 0.01)), ("gper", (0.0, 1.0, 0.1)),
     ("cae", (0.0, 0.5, 1.0)), ("dcae", (0.0, 0.5, 1.0))],
)  # fmt: skip
def test_a_stack_of_model_defenses_at_mixed_strengths_gives_each_its_records(
    data: Dataset, defense: str, strengths: tuple[float, ...]
) -> None:
    """Three trainings of one defense at three strengths (0 among them) stack, FedBCD's Q
    local steps and CELU-VFL's cached steps included, and each record equals the
    training's alone."""
    jobs = [
        _job(i, epochs=2, defense=defense, defense_param=s, protocol=p, attacks=[DLI])
        for i, s in enumerate(strengths)
        for p in ("fedsgd", "fedbcd", "celu")
    ]
    got = _compare(jobs, data, LOCAL)
    assert all(_vectorized(got[i]) for i in range(len(jobs)))


def test_one_passive_round_per_round_for_the_whole_stack(data: Dataset) -> None:
    """Every passive stack is called once per round (plus the last gradient and one
    evaluation), however many trainings it holds."""
    jobs = [_job(s, epochs=2) for s in range(5)]
    calls: list[str] = []
    original = StackedParty.passive_round

    @functools.wraps(original)  # the call names the method: ``passive_round``
    def counted(self: StackedParty, grad: np.ndarray | None, ref: object, steps: int) -> object:
        calls.append("passive_round")
        return original(self, grad, ref, steps)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(StackedParty, "passive_round", counted)
        got = dict(NNKind().run_many(jobs, data, LOCAL))
    rounds = got[0][0].rounds  # type: ignore[index,union-attr]
    assert len(calls) == rounds + 1


def _conformance() -> list[tuple[str, str]]:
    from trainables.defenses import DEFENSES
    from trainables.protocols import PROTOCOLS

    return [(d, p) for d in ("none", *DEFENSES) for p in PROTOCOLS]


@pytest.mark.parametrize(("defense", "protocol"), _conformance())
def test_every_defense_and_protocol_gives_the_same_records_stacked_or_not(
    data: Dataset, defense: str, protocol: str
) -> None:
    """Conformance: a pack of two seeds (one attacked through the message log) both ways.
    Where the pair stacks, the records say so; where it cannot, it runs unstacked."""
    from trainables.defenses import DEFENSES

    fields: dict[str, object] = {"protocol": protocol, "epochs": 2}
    if defense != "none":
        grid = DEFENSES.get(defense).info.grid
        fields.update(defense=defense, defense_param=grid[len(grid) // 2])
    jobs = [_job(0, **fields), _job(1, attacks=[DLI], **fields)]
    off = dict(NNKind().run_many(jobs, data, LOCAL, ONE_BY_ONE))
    on = dict(NNKind().run_many(jobs, data, LOCAL))
    assert [_bare(on[i]) for i in range(2)] == [_bare(off[i]) for i in range(2)]
    spec = jobs[0].spec
    stacked = stacks(spec, jobs[1].attacks) and stack_key(spec, prepare_parties(spec, data))
    declared = defense == "none" or DEFENSES.get(defense).stacked is not None
    assert bool(stacked) == declared
    assert declared  # every shipped defense and protocol stacks
    if not isinstance(on[0], Exception):
        assert _vectorized(on[0]) == bool(stacked) and _vectorized(on[1]) == bool(stacked)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the blind run is for CPU machines")
def test_the_gpu_check_runs_blind_without_cuda(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks import gpu_check

    monkeypatch.setattr("sys.argv", ["gpu_check"])
    gpu_check.main()
    assert json.loads(capsys.readouterr().out) == {"cuda": False}


def test_a_celu_stack_takes_each_trainings_cached_steps(data: Dataset) -> None:
    """Each training's workset draws its own entries (batches of 114 and 113 rows: the
    stack groups each cached step by size): the weights every cached step saw, per
    training and party, equal those of the training alone."""
    jobs = [_job(s, epochs=2, protocol="celu", lr=0.01 * (s + 1)) for s in range(3)]
    stacked, alone = _trained(jobs, data)

    def seen(parties: list) -> list[list[float]]:
        return [
            next(h.weights_seen for h in p.hooks if hasattr(h, "weights_seen")) for p in parties
        ]

    for got, want in zip(stacked, alone, strict=True):
        assert [len(w) for w in seen(got)] == [len(w) for w in seen(want)]
        assert len(seen(got)[0]) == 4 * 2 * 4  # q - 1 = 4 cached steps a round, 4 rounds an epoch
        assert np.allclose(seen(got), seen(want), atol=1e-6)


@pytest.mark.parametrize(
    ("attack", "params"), [("lrb", {"preset": "strong"}), ("amc", {"preset": "fast"})]
)
def test_training_time_attacks_stack_with_each_trainings_own_tampering(
    data: Dataset, attack: str, params: dict
) -> None:
    """LRB (each training's own target rows and poison samples; FedBCD's clean local
    steps) and AMC (the stack's optimizer scaled elementwise) give each training the
    records it gets alone, the attack's AP included."""
    jobs = [
        _job(s, epochs=2, train_attack=attack, train_attack_params=params, protocol=p)
        for s in range(3)
        for p in ("fedsgd", "fedbcd")
    ]
    got = _compare(jobs, data, LOCAL)
    assert all(_vectorized(got[i]) for i in range(len(jobs)))
    assert {r.attack for i in range(len(jobs)) for r in got[i]} >= {attack}  # type: ignore[union-attr]


def _dropout_bottom(in_dim: int, out_dim: int, hidden: Sequence[int]) -> torch.nn.Module:
    """A bottom that is not a Linear-ReLU stack: dropout makes train and eval modes differ."""
    return torch.nn.Sequential(
        torch.nn.Linear(in_dim, 16), torch.nn.ReLU(), torch.nn.Dropout(0.5),
        torch.nn.Linear(16, out_dim),
    )  # fmt: skip


@pytest.fixture
def dropout_model() -> Iterator[str]:
    from trainables.models import BOTTOMS

    BOTTOMS.register("dropout_mlp", _dropout_bottom)
    yield "dropout_mlp"
    del BOTTOMS._entries["dropout_mlp"]


def test_a_bottom_that_is_not_an_mlp_trains_alone_through_the_stack_in_its_modes(
    data: Dataset, dropout_model: str
) -> None:
    """A plugin model trains as a stack of one (``ModuleStack``): two such trainings in one
    pack do not stack together, each trains in train mode and is scored in eval mode (the
    record's MP is the trained parties' deterministic test accuracy)."""
    jobs = [_job(s, model=dropout_model, epochs=2) for s in (0, 1)]
    got = dict(NNKind().run_many(jobs, data, LOCAL))
    assert not any(_vectorized(got[i]) for i in (0, 1))
    prepared = prepare_parties(jobs[0].spec, data)
    trained = train_prepared(prepared, 2)
    passive, active = trained.parties
    with torch.no_grad():
        for p in trained.parties:
            p.bottom.eval()
        logits = active.top([passive.bottom(passive.X_test), active.bottom(active.X_test)])
        mp = float((logits.argmax(dim=1) == active.y_test).double().mean())
    assert got[0][0].mp == trained.result.mp == mp  # type: ignore[index,union-attr]
    assert any(isinstance(m, torch.nn.Dropout) for m in passive.bottom.modules())


def _square_term(self: Any, h_passive: list, y: torch.Tensor) -> torch.Tensor | None:
    """A plugin defense's loss term: strength * mean |H_k|^2 (it declares no stacked form)."""
    if self.strength == 0.0 or not h_passive:
        return None
    self.count("loss_term")
    return self.strength * sum(h.pow(2).sum(dim=1).mean() for h in h_passive)


@pytest.fixture
def plugin_defense() -> Iterator[str]:
    from trainables.defenses.base import DEFENSES, Defense, DefenseInfo, check_defense

    info = DefenseInfo(party="active", grid=(1.0,), neutral=0.0, quantity="weight of |H|^2")
    cls = type(
        "Shrink",
        (Defense,),
        {"name": "shrink", "info": info, "loss_term": _square_term, "stacked": None},
    )
    DEFENSES.register("shrink", check_defense(cls, "shrink"))
    yield "shrink"
    del DEFENSES._entries["shrink"]


def test_a_defense_without_a_stacked_form_trains_alone_through_its_own_hooks(
    data: Dataset, plugin_defense: str
) -> None:
    """``stacked = None``: each training a stack of one (``LoopedDefense``) whose loss
    carries the defense's own term, counted, and at its neutral strength equal to no
    defense."""
    jobs = [_job(s, defense=plugin_defense, defense_param=1.0, epochs=2) for s in (0, 1)]
    jobs += [_job(0, defense=plugin_defense, defense_param=0.0, epochs=2), _job(0, epochs=2)]
    got = dict(NNKind().run_many(jobs, data, LOCAL))
    assert not any(_vectorized(got[i]) for i in range(3))
    applied = [json.loads(got[i][0].extra).get("defense_applied") for i in (0, 2, 3)]  # type: ignore[index,union-attr]
    rounds = got[0][0].rounds  # type: ignore[index,union-attr]
    assert applied == [{"shrink": {"loss_term": rounds}}, {"shrink": {}}, None]
    weights = []
    for job in (jobs[0], jobs[2], jobs[3]):  # on, at its neutral strength, no defense
        passive = train_prepared(prepare_parties(job.spec, data), 2).parties[0]
        weights.append(torch.cat([p.detach().flatten() for p in passive.bottom.parameters()]))
    on, off, plain = weights
    assert not torch.equal(on, plain) and torch.equal(off, plain)


def test_a_packs_first_stack_is_small_so_its_records_come_first(
    data: Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without successive halving, a pack's first stack holds at most ``FIRST_STACK``
    trainings: their records are yielded before the rest of the pack trains, and every
    training's records are those of one whole stack."""
    from trainables.vfl import vectorized

    jobs = [_job(seed) for seed in range(5)]
    whole = dict(NNKind().run_many(jobs, data, LOCAL))
    sizes: list[int] = []
    real = vectorized.train_stacked

    def spy(ready: Sequence[Any], *args: Any, **kw: Any) -> Any:
        sizes.append(len(ready))
        return real(ready, *args, **kw)

    monkeypatch.setattr(vectorized, "train_stacked", spy)
    monkeypatch.setattr(vectorized, "FIRST_STACK", 2)
    order = [i for i, _ in NNKind().run_many(jobs, data, LOCAL)]
    assert sizes == [2, 3] and sorted(order[:2]) == [0, 1]
    split = dict(NNKind().run_many(jobs, data, LOCAL))
    assert all(_bare(split[i]) == _bare(whole[i]) for i in range(5))
    assert all(_vectorized(split[i]) for i in range(5))


def test_stack_done_comes_after_a_stacks_outcomes_before_the_next_trains(
    data: Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Schedule.stack_done`` is called once a stack's outcomes were all taken and before
    the next stack trains: a pack sends a stack's records then (``pack_trial._Outbox``),
    not after the next stack. Stacks of 2 and 3 here; the base kind calls it per training."""
    from trainables.kinds.base import TrialKind
    from trainables.vfl import vectorized

    events: list[str] = []
    real = vectorized.train_stacked

    def spy(ready: Sequence[Any], *args: Any, **kw: Any) -> Any:
        events.append(f"train {len(ready)}")
        return real(ready, *args, **kw)

    monkeypatch.setattr(vectorized, "train_stacked", spy)
    monkeypatch.setattr(vectorized, "FIRST_STACK", 2)
    told = dataclasses.replace(STACKED, stack_done=lambda: events.append("done"))
    for _ in NNKind().run_many([_job(seed) for seed in range(5)], data, LOCAL, told):
        events.append("outcome")
    first, second = ["train 2", *["outcome"] * 2, "done"], ["train 3", *["outcome"] * 3, "done"]
    assert events == first + second
    events.clear()
    for _ in TrialKind.run_many(NNKind(), [_job(seed) for seed in range(2)], data, LOCAL, told):
        events.append("outcome")
    assert events == ["train 1", "outcome", "done", "train 1", "outcome", "done"]


def test_stacks_stay_under_stack_bytes_and_the_first_under_first_stack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``_chunks`` cuts a group where the next training's data would pass ``STACK_BYTES``
    (a running sum of what the stack holds), and the first stack at ``first`` trainings."""
    from types import SimpleNamespace

    from trainables.vfl import vectorized

    monkeypatch.setattr(vectorized, "STACK_BYTES", 250)
    group: Any = [SimpleNamespace(nbytes=b) for b in (100, 100, 100, 40, 10, 300, 100)]
    sizes = [[c.nbytes for c in chunk] for chunk in vectorized._chunks(group)]
    assert sizes == [[100, 100], [100, 40, 10], [300], [100]]
    sizes = [[c.nbytes for c in chunk] for chunk in vectorized._chunks(group, first=1)]
    assert sizes == [[100], [100, 100, 40, 10], [300], [100]]  # 250: not past it
