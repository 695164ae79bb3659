"""The threat model, checked on real objects: a passive party's actor never holds labels;
an attack's ``PartyView`` reaches nothing of another party; Ray's token auth stays on."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from trainables.attacks import ATTACKS
from trainables.attacks.harness import attacker_index, draw_aux, make_view, peer_index
from trainables.attacks.judge import QueryModel
from trainables.data import load_dataset
from trainables.party import Party
from trainables.spec import TrialSpec
from trainables.trial import prepare_parties, train_local_parties, train_prepared

ROOT = Path(__file__).resolve().parents[1]
LABELISH = re.compile(r"(^|[._])(y|y_train|y_test|labels?|targets?)($|[._])", re.IGNORECASE)
SPEC = TrialSpec.build(dataset="breast_cancer", n_parties=3, epochs=3, seed=5)
# every attack the view must bound: one that reads messages, a model-completion one, the
# model-query one (GRN) and an active one with peer-feature aux (TBM)
ATTACK_NAMES = ("dli", "ns", "pmc", "nsb", "grn", "tbm")


def holds(arrays: dict[str, np.ndarray], target: np.ndarray) -> list[str]:
    """Paths of arrays whose values equal ``target`` (any dtype, any shape)."""
    flat = np.asarray(target).ravel()
    return [
        path
        for path, arr in arrays.items()
        if arr.size == flat.size and np.array_equal(np.asarray(arr).ravel().astype(float), flat)
    ]


def walk(obj: Any, path: str, found: dict[str, Any], seen: set[int]) -> None:
    """Every object reachable from ``obj`` through attributes, containers, closures."""
    if obj is None or isinstance(obj, (type, str, bytes, int, float, complex)) or id(obj) in seen:
        return
    if type(obj).__name__ == "module":
        return
    seen.add(id(obj))
    found[path] = obj
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        return
    if isinstance(obj, dict):
        items: Any = obj.items()
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = enumerate(obj)
    else:
        items = list(getattr(obj, "__dict__", {}).items())
        items += [(s, getattr(obj, s)) for s in getattr(obj, "__slots__", ()) if hasattr(obj, s)]
    for key, value in items:
        walk(value, f"{path}.{key}", found, seen)


def as_array(obj: Any) -> np.ndarray:
    return obj.detach().cpu().numpy() if isinstance(obj, torch.Tensor) else np.asarray(obj)


@pytest.mark.ray
def test_passive_party_actors_hold_no_labels_anywhere(ray_session: None) -> None:
    from trainables.transport.ray_actors import PartyResources, RayParties

    ds = load_dataset("breast_cancer")
    prepared = prepare_parties(SPEC, ds, [("dli", {})])  # party 0 keeps a message log
    y_train = prepared.inits[-1].labels.y_train  # type: ignore[union-attr]
    y_test = prepared.inits[-1].labels.y_test  # type: ignore[union-attr]
    assert all(init.labels is None for init in prepared.inits[:-1])
    with RayParties(prepared.inits, PartyResources(cpu=0.5)) as group:
        train_prepared(prepared, int(SPEC.epochs), group=group)  # type: ignore[arg-type]
        import ray

        states = ray.get([a.reachable_arrays.remote() for a in group.actors])
    active = states[-1]
    assert holds(active, y_train) and holds(active, y_test)  # the walk does find labels
    for k, state in enumerate(states[:-1]):
        assert len(state) > 10, sorted(state)  # features, weights, optimizer state, messages
        assert any(".hooks." in p for p in state) or k != 0  # party 0's message log walked
        assert holds(state, y_train) == [] and holds(state, y_test) == [], k
        assert [p for p in state if LABELISH.search(p)] == [], k


def trained_for(name: str) -> tuple[Any, list[Any], int, np.ndarray, Any]:
    """(info, trained parties, attacker index, y_train, the attacker's drawn aux)."""
    info = ATTACKS.get(name).info
    ds = load_dataset("breast_cancer")
    prepared = prepare_parties(SPEC, ds, [(name, {})])
    _, parties = train_local_parties(prepared, int(SPEC.epochs))  # type: ignore[arg-type]
    who = attacker_index(info, len(parties))
    y = parties[-1].y_train.cpu().numpy()
    aux = draw_aux(info, y, parties[peer_index(who)].X_train.cpu().numpy(), SPEC.seed)
    return info, parties, who, y, aux


@pytest.mark.parametrize("name", ATTACK_NAMES)
def test_an_attack_view_reaches_nothing_of_another_party(name: str) -> None:
    info, parties, who, y, aux = trained_for(name)
    query = QueryModel(parties) if info.query_model else None
    view = make_view(parties[who], info, aux, query, SPEC.seed)

    found: dict[str, Any] = {}
    walk(view, "view", found, set())
    assert not [p for p, o in found.items() if isinstance(o, Party)]  # no party object
    tensors = {p: o for p, o in found.items() if isinstance(o, (torch.Tensor, np.ndarray))}
    assert tensors  # the walk did reach its data
    for k, other in enumerate(parties):
        theirs = [other.X_train, other.X_test, *other.bottom.parameters()]
        for p, t in tensors.items():  # no memory shared with any party, own one included
            for mine in theirs:
                assert not np.shares_memory(as_array(t), as_array(mine)), (p, k)
        if k == who:
            continue
        arrays = {p: as_array(t) for p, t in tensors.items()}
        assert holds(arrays, as_array(other.X_train)) == [], k  # another party's features
        assert holds(arrays, as_array(other.X_test)) == [], k
        if query is None:  # only a released model (GRN's threat model) carries their weights
            for param in other.bottom.parameters():
                assert holds(arrays, as_array(param)) == [], k
    if info.role == "passive":
        assert view.y_train is None and view.top is None
        arrays = {p: as_array(t) for p, t in tensors.items()}
        assert holds(arrays, y) == [] and holds(arrays, parties[-1].y_test.cpu().numpy()) == []


def test_the_engine_never_turns_ray_token_auth_off() -> None:
    sources = [ROOT / "sweep.py", *ROOT.glob("sweep_engine/*.py"), *ROOT.glob("trainables/**/*.py")]
    setters = [p for p in sources if "RAY_AUTH_MODE" in p.read_text()]
    assert setters == []  # the engine leaves Ray's authentication setting to Ray and the user


@pytest.mark.ray
def test_a_sweeps_own_local_ray_has_token_auth_and_refuses_a_wrong_token(
    ray_session: None,
) -> None:
    import ray

    address = ray.get_runtime_context().gcs_address
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    probe = (
        "import os\nfrom sweep_engine.runner import start_ray\nstart_ray(None, 1)\n"
        "from ray._raylet import AuthenticationMode, get_authentication_mode\n"
        "print('MODE', os.environ.get('RAY_AUTH_MODE'),"
        " get_authentication_mode() == AuthenticationMode.TOKEN)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert "MODE token True" in out.stdout, out.stderr[-2000:]

    intruder = subprocess.Popen(
        [sys.executable, "-c", f"import ray; ray.init(address={address!r})"],
        cwd=ROOT,
        env={**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "not-the-token"},
        stderr=subprocess.PIPE,
        text=True,
    )
    assert intruder.stderr is not None
    # reads until the first refusal, or to the end if it got in (then it exits 0)
    refused = any("InvalidAuthToken" in line for line in intruder.stderr)
    intruder.kill()  # it would retry for a while before giving up
    intruder.wait(timeout=60)
    assert refused  # the cluster checks the token on every RPC


@pytest.mark.parametrize("name", [n for n in ATTACK_NAMES if ATTACKS.get(n).search])
def test_an_adaptive_attackers_tuning_reaches_no_test_row_and_no_label_it_lacks(
    name: str,
) -> None:
    """The tuner (``tuning.py``) runs the attack on ``holdout_view``'s view and scores it
    with its closure: the walk over both finds no party, no test row of any party (the
    judge's; the attacker's own included, since its tuning "test rows" are held-out aux
    rows), nothing of another party beyond the aux, and for a passive attacker no label
    beyond the aux labels it was granted."""
    from trainables.attacks.tuning import holdout_view

    info, parties, who, y, aux = trained_for(name)
    view = make_view(parties[who], info, aux, None, SPEC.seed)
    tuning, self_score, held = holdout_view(view, info, 0.5)
    assert held > 0
    found: dict[str, Any] = {}
    walk((tuning, [c.cell_contents for c in self_score.__closure__ or ()]), "tuner", found, set())
    assert not [p for p, o in found.items() if isinstance(o, Party)]
    arrays = {p: as_array(o) for p, o in found.items() if isinstance(o, (torch.Tensor, np.ndarray))}
    assert arrays
    for k, other in enumerate(parties):
        assert holds(arrays, as_array(other.X_test)) == [], k  # no judge's test rows
        for row in as_array(other.X_test):  # not even one row of them
            assert not any(
                a.ndim == 2 and a.shape[1] == row.shape[0] and (a == row).all(axis=1).any()
                for a in arrays.values()
            ), k
        if k != who:
            assert holds(arrays, as_array(other.X_train)) == [], k
    y_test = parties[-1].y_test.cpu().numpy()
    assert holds(arrays, y_test) == []
    if info.role == "passive":
        assert holds(arrays, y) == []
        granted = set(aux.label_rows.tolist())
        assert len(tuning.aux.label_rows) + held == len(granted)  # held-out rows: its own aux
