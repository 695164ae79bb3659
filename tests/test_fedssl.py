"""FedSSL / FedSSL-DP (trainables/fedssl, kinds/fedssl.py): privacy accounting replayed
with Opacus, the budget stopping labeled access, agents holding only their own rows
(local and Ray), bad input naming its key, record fields, determinism."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from opacus.accountants import RDPAccountant

from sweep_engine import cli
from trainables.data import load_dataset
from trainables.errors import ConfigError
from trainables.fedssl.agents import QueryInit, ServerInit, SupportInit
from trainables.fedssl.protocol import run_rounds
from trainables.fedssl.trial import Evaluator, prepare, record_of
from trainables.kinds import kind_of
from trainables.spec import TrialSpec
from trainables.transport.open import open_parties
from trainables.transport.placement import LOCAL, Placement
from trainables.trial import run_trial

TINY = {"n_support": 2, "n_query": 2, "local_steps": 2, "max_unlabeled": 200}


def spec_of(variant: str, **over: Any) -> TrialSpec:
    params = {**TINY, **over.pop("model_params", {})}
    fields = dict(
        dataset="digits", ssl_variant=variant, n_parties=5, n_labeled=60, epochs=3,
        batch_size=16, lr=0.002, seed=3, model_params=params,
    )  # fmt: skip
    return TrialSpec.build(**{**fields, **over})


def test_epsilon_equals_an_independent_replay_of_opacus_rdp() -> None:
    spec = spec_of("fedssl_dp", model_params={"epsilon": 50.0})
    rec = run_trial(spec)[0]
    extra = json.loads(rec.extra)
    steps = extra["dp_steps"]
    assert sum(n for _, _, n in steps) == extra["dp_steps_taken"] > 0  # agents' own count
    replay = RDPAccountant()
    replay.history = [(float(s), float(q), int(n)) for s, q, n in steps]
    assert rec.epsilon == pytest.approx(replay.get_epsilon(1e-5), rel=1e-9)
    assert rec.epsilon == extra["epsilon_spent"] <= 50.0
    assert {s for s, _, _ in steps} == {2.0}  # the default noise multiplier
    assert all(q == pytest.approx(16 / 30) for _, q, _ in steps)  # 30 labeled rows each


def test_labeled_access_stops_at_the_budget() -> None:
    spec = spec_of("fedssl_dp", epochs=4, model_params={"epsilon": 6.0})
    rec = run_trial(spec)[0]
    extra = json.loads(rec.extra)
    stop = extra["dp_stop_round"]
    assert stop is not None and 0 < stop < 4  # some labeled rounds, then refused
    assert extra["labeled_access_rounds"] and max(extra["labeled_access_rounds"]) <= stop
    assert rec.epsilon is not None and rec.epsilon <= 6.0
    # one more admitted block would have crossed the budget
    s, q, n = extra["dp_steps"][0]
    replay = RDPAccountant()
    replay.history = [(s, q, n + 2 * TINY["local_steps"])]
    assert replay.get_epsilon(1e-5) > 6.0
    assert rec.rounds == 4  # query agents kept training


def _rows(inits: tuple[Any, ...]) -> list[tuple[str, int, np.ndarray]]:
    out = []
    for init in inits:
        if isinstance(init, SupportInit):
            out += [("x", init.party_id, init.x), ("y", init.party_id, init.y)]
        elif isinstance(init, QueryInit):
            out.append(("x", init.party_id, init.x))
    return out


def _found(arrays: dict[str, np.ndarray], target: np.ndarray) -> list[str]:
    flat = np.asarray(target, dtype=float).ravel()
    return [
        p for p, a in arrays.items()
        if a.size == flat.size and np.array_equal(np.asarray(a, dtype=float).ravel(), flat)
    ]  # fmt: skip


def _check_holdings(states: list[dict[str, np.ndarray]], inits: tuple[Any, ...]) -> None:
    owned = _rows(inits)
    for k, state in enumerate(states):
        assert state, k
        for what, owner, arr in owned:
            hits = _found(state, arr)
            if owner == k:
                assert hits, (k, what)  # the walk does find an agent's own rows
            else:
                assert hits == [], (k, what, owner, hits)
    assert isinstance(inits[-1], ServerInit)


def _walk(obj: Any, path: str, out: dict[str, np.ndarray], seen: set[int]) -> None:
    if obj is None or isinstance(obj, (type, str, bytes, int, float)) or id(obj) in seen:
        return
    if type(obj).__name__ == "module":
        return
    seen.add(id(obj))
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        out[path] = obj.detach().numpy() if isinstance(obj, torch.Tensor) else obj
        return
    items: Any = obj.items() if isinstance(obj, dict) else (
        enumerate(obj) if isinstance(obj, (list, tuple, set)) else vars(obj).items()
        if hasattr(obj, "__dict__") else ()
    )  # fmt: skip
    for key, value in items:
        _walk(value, f"{path}.{key}", out, seen)


@pytest.mark.parametrize("variant", ["fedssl_dp", "fedssl_pseudo"])
def test_local_agents_hold_only_their_own_rows(variant: str) -> None:
    spec = spec_of(variant, epochs=1, model_params={"epsilon": 50.0} if "dp" in variant else {})
    ds = load_dataset("digits")
    prepared = prepare(spec, ds)
    with open_parties(prepared.inits, LOCAL) as group:
        run_rounds(group, prepared.plan, Evaluator(ds))
        states = []
        for party in group.snapshot():
            found: dict[str, np.ndarray] = {}
            _walk(party, "party", found, set())
            states.append(found)
    _check_holdings(states, prepared.inits)


@pytest.mark.ray
def test_ray_actors_hold_only_their_own_rows(ray_session: None) -> None:
    import ray  # the test reads actor state; the engine's Ray code is ray_actors/

    spec = spec_of("fedssl_dp", epochs=1, model_params={"epsilon": 50.0})
    ds = load_dataset("digits")
    prepared = prepare(spec, ds)
    with open_parties(prepared.inits, Placement(transport="ray", cpu_per_party=0.4)) as group:
        result = run_rounds(group, prepared.plan, Evaluator(ds))
        states = ray.get([a.reachable_arrays.remote() for a in group.actors])  # type: ignore[attr-defined]
    _check_holdings(states, prepared.inits)
    assert result.rounds == 1 and result.comm_bytes > 0
    local = run_trial(spec)[0]
    assert record_of(spec, prepared, result).mp == local.mp  # same seed, either transport


@pytest.mark.parametrize(
    ("over", "key"),
    [
        ({"model_params": {"n_support": 0}}, "model_params.n_support"),
        ({"model_params": {"epsilon": 0}}, "model_params.epsilon"),
        ({"model_params": {"epsilon": -4}}, "model_params.epsilon"),
        ({"model_params": {"colour": 1}}, "model_params.colour"),
        ({"model_params": {"split": "dirichlet"}}, "model_params.split"),
        ({"n_parties": 7}, "n_parties"),
        ({"n_labeled": 1}, "n_labeled"),
    ],
)
def test_bad_input_is_a_config_error_naming_the_key(over: dict[str, Any], key: str) -> None:
    spec = spec_of("fedssl_dp", **over)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        kind_of(spec).check(spec)


def test_more_labels_than_rows_is_refused_naming_n_labeled() -> None:
    spec = spec_of("fedssl", n_labeled=5000)
    reason = kind_of(spec).incompatibility(spec, None)
    assert reason is not None and "n_labeled=5000" in reason
    with pytest.raises(ConfigError, match="n_labeled=5000"):
        run_trial(spec)


def test_a_bad_space_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    space = tmp_path / "bad_fedssl.yaml"
    space.write_text(
        "name: bad_fedssl\nbase: {dataset: digits, ssl_variant: fedssl_dp, n_parties: 9,\n"
        "  n_labeled: 100}\ngrid:\n  model_params.epsilon: [8, 0]\n"
    )
    code = cli.main(["--space", str(space), "--dry-run", "--results", str(tmp_path / "out")])
    assert code == 2
    assert "model_params.epsilon" in capsys.readouterr().err


def test_non_dp_variants_drop_an_epsilon_with_a_reason() -> None:
    spec = spec_of("fedssl", model_params={"epsilon": 8})
    kind_of(spec).check(spec)  # a valid value ...
    reason = kind_of(spec).incompatibility(spec, None)
    assert reason is not None and "ε = ∞" in reason  # ... that means nothing here


def test_records_have_the_fields_and_same_seed_same_record() -> None:
    spec = spec_of("fedssl", epochs=2)
    a, b = run_trial(spec)[0], run_trial(spec)[0]
    assert a.ssl_variant == "fedssl" and a.n_parties == 5 and a.n_labeled == 60
    assert a.rounds == 2 and a.comm_bytes > 0 and a.epsilon is None and a.mp is not None
    n_test = len(load_dataset("digits").y_test)  # the accuracy's rows: its sampling error
    assert a.mp_se == pytest.approx((a.mp * (1 - a.mp) / n_test) ** 0.5)
    extra = json.loads(a.extra)
    assert extra["rows_support"] == [30, 30] and extra["rows_query"] == [100, 100]
    assert len(extra["acc_by_round"]) == 2 and extra["acc_by_round"][-1] == round(a.mp, 4)
    strip = ("created_at", "train_seconds")
    assert {k: v for k, v in a.to_dict().items() if k not in strip} == {
        k: v for k, v in b.to_dict().items() if k not in strip
    }
    other = run_trial(spec.model_copy(update={"seed": 4}))[0]
    assert json.loads(other.extra)["acc_by_round"] != extra["acc_by_round"] or other.mp != a.mp


def test_supervised_baseline_never_trains_query_agents_and_sends_f_only() -> None:
    spec = spec_of("fedssl_supervised", epochs=2)
    ds = load_dataset("digits")
    prepared = prepare(spec, ds)
    with open_parties(prepared.inits, LOCAL) as group:
        result = run_rounds(group, prepared.plan, Evaluator(ds))
    assert [a["rounds"] for a in result.outputs["access"]] == [[0, 1], [0, 1], [], []]
    n_f = Evaluator(ds).n_f
    assert result.comm_bytes == 2 * 2 * 2 * 4 * n_f  # rounds x agents x (down + up) x float32


@pytest.mark.parametrize("variant", ["fedssl", "fedssl_dp"])
def test_warmup_rounds_train_the_support_agents_only(variant: str) -> None:
    over = {"warmup": 2, "epsilon": 50.0} if variant == "fedssl_dp" else {"warmup": 2}
    spec = spec_of(variant, epochs=3, model_params=over)
    ds = load_dataset("digits")
    prepared = prepare(spec, ds)
    with open_parties(prepared.inits, LOCAL) as group:
        result = run_rounds(group, prepared.plan, Evaluator(ds))
    assert [a["rounds"] for a in result.outputs["access"][:4]] == [[0, 1, 2]] * 2 + [[2]] * 2
    extra = json.loads(record_of(spec, prepared, result).extra)
    assert extra["warmup"] == 2 and extra["labeled_access_rounds"] == [0, 1, 2]


def test_a_threshold_no_row_reaches_leaves_the_query_agents_f_untouched() -> None:
    spec = spec_of("fedssl_pseudo", model_params={"threshold": 0.99})
    prepared = prepare(spec, load_dataset("digits"))
    agent = prepared.inits[2].build()  # a query agent; the initial F is ~uniform (< 0.99)
    server = prepared.inits[-1].build()
    out = agent.local_round(server.global_message(), 0)
    assert np.array_equal(out.payload, server.global_model)  # no pseudo-label kept, no step
    loose = prepare(spec_of("fedssl_pseudo"), load_dataset("digits")).inits
    moved = loose[2].build().local_round(loose[-1].build().global_message(), 0)
    assert not np.array_equal(moved.payload, server.global_model)  # threshold 0: it trains


def test_real_mix_input_is_the_row_itself_at_lambda_one() -> None:
    from trainables.fedssl.local import Ctx, gmix_step

    spec = spec_of("fedssl", model_params={"mix_input": "real", "alpha": 0.01})
    prepared = prepare(spec, load_dataset("digits"))
    agent = prepared.inits[0].build()  # a support agent
    seen: list[torch.Tensor] = []
    agent.models["F"].register_forward_hook(lambda _m, inp, _o: seen.append(inp[0].detach()))
    ctx = agent._ctx(0)
    assert isinstance(ctx, Ctx) and ctx.mix_real
    x, p = agent.x[:16], torch.nn.functional.one_hot(agent.y[:16], 10).float()
    lam = torch.as_tensor(np.random.default_rng([3, 0, 0, 7]).beta(0.01, 0.01, 16))
    gmix_step(agent.models, agent._optimizers(), x, p, ctx, None)
    ones = lam > 0.999  # Beta(0.01, 0.01): nearly every λ is 0 or 1
    assert ones.any() and torch.allclose(seen[0][ones], x[ones], atol=1e-2)


def test_rounds_to_target_is_the_first_round_reaching_it_and_training_is_unchanged() -> None:
    """The one round loop scores every round's global model; a target changes no training
    (the curve is the same) and ``rounds_to_target`` is its first round (1-based) at it."""
    plain = run_trial(spec_of("fedssl", epochs=4))[0]
    curve = json.loads(plain.extra)["acc_by_round"]
    assert plain.rounds_to_target is None and len(curve) == 4
    # reached, at the latest, by the second-best round (the curve is rounded to 4 places)
    target = sorted(curve)[-2] - 5e-5
    aimed = run_trial(spec_of("fedssl", epochs=4, target_mp=target))[0]
    assert json.loads(aimed.extra)["acc_by_round"] == curve and aimed.mp == plain.mp
    assert aimed.rounds_to_target == 1 + next(t for t, a in enumerate(curve) if a >= target)
