"""Every trial kind against every defense and attack: it hosts the pair or refuses it.

Why: the engine's promise is the cross product (any defense, attack and protocol with any
SSL variant). A pair a kind cannot host must be refused at plan time with a reason; the
refused pairs are written here by what each attack and defense declares (``REFUSED``), so
a refusal no declaration explains fails, and a new one is placed without an entry. A pair
that is hosted passes the checks NN trials pass: the defense acts (its application
count is on the record) and at its neutral strength trains exactly like no defense; the
attack gives a bounded AP through the common harness and Judge.
"""

from __future__ import annotations

import json
import math
from functools import cache

import pytest

from trainables.attacks import ATTACKS
from trainables.defenses import DEFENSES
from trainables.errors import ConfigError
from trainables.kinds import TRIAL_KINDS, kind_of
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.trial import run_trial

TINY_HSSL = {
    "pretrain_epochs": 1, "pretrain_batch": 64, "hidden": 16, "emb": 8, "proj": 16,
    "pred": 8, "moco_dim": 8, "queue": 64,
}  # fmt: skip
# One small spec per kind: breast_cancer (embedded, binary), 2 parties.
KIND_SPECS: dict[str, TrialSpec] = {
    "nn": TrialSpec.build(dataset="breast_cancer", epochs=2, batch_size=64, seed=2),
    "hssl": TrialSpec.build(
        dataset="breast_cancer", ssl_variant="hssl_simsiam", epochs=1, batch_size=64,
        aligned_ratio=0.6, n_labeled=120, seed=2, model_params=TINY_HSSL,
    ),
    "fedcvt": TrialSpec.build(
        dataset="breast_cancer", ssl_variant="fedcvt", epochs=1, batch_size=64,
        n_aligned=120, seed=2, model_params={"n_local": 100, "rep_dim": 8},
    ),
    "fedssl": TrialSpec.build(
        dataset="digits", ssl_variant="fedssl", n_parties=5, n_labeled=60, epochs=1,
        batch_size=16, seed=2,
        model_params={"n_support": 2, "n_query": 2, "local_steps": 1, "max_unlabeled": 100},
    ),
    "tree": TrialSpec.build(
        dataset="breast_cancer", model="xgboost", seed=2, model_params={"n_trees": 2},
    ),
    "paillier_lr": TrialSpec.build(
        dataset="breast_cancer", model="paillier_lr", epochs=1, seed=2,
        model_params={"encrypt": 0},
    ),
}  # fmt: skip

NN_ATTACKS = tuple(n for n in ATTACKS.names() if ATTACKS.get(n).family == "nn")
OTHER_ATTACKS = tuple(n for n in ATTACKS.names() if ATTACKS.get(n).family != "nn")  # trees
ALL_DEFENSES = tuple(DEFENSES.names())


def _declares(name: str, *flags: str) -> bool:
    """Whether attack ``name`` declares any of ``flags`` (``AttackInfo``)."""
    return any(getattr(ATTACKS.get(name).info, f) for f in flags)


def _outside_messages(name: str) -> bool:
    """Whether defense ``name`` at its default parameters acts past the messages (on the
    loss or the top model: ``targets`` is None) or keeps state per batch row."""
    d = DEFENSES.create(name)
    return d.targets() is None or d.keeps_row_state()  # type: ignore[attr-defined]


# What each kind refuses, by what each attack and defense declares, so that a new one is
# placed by its declarations (the planner drops these cells with the kind's reason). Why,
# in short: FedCVT has no NN active party (loss / top-model defenses) and no scheduled
# per-row batch messages (message-reading or batch-tampering attacks, GS's per-row
# residual); FedHSSL exchanges representations, not per-class scores (DLI, BLI); FedSSL
# is horizontal FL with its own DP; trees and Paillier LR exchange statistics and
# ciphertexts, not NN messages. ``test_todays_refusals_by_name`` pins the result for the
# built-ins.
REFUSED_BY_KIND: dict[str, dict[str, tuple[str, ...]]] = {
    "nn": {"attack": OTHER_ATTACKS},
    "hssl": {"attack": (*OTHER_ATTACKS, *(n for n in NN_ATTACKS
                                          if _declares(n, "logit_embeddings")))},
    "fedcvt": {
        "attack": (*OTHER_ATTACKS, *(n for n in NN_ATTACKS if _declares(
            n, "needs_messages", "query_model", "tampers_batches"))),
        "defense": tuple(n for n in ALL_DEFENSES if _outside_messages(n)),
    },
    "fedssl": {"attack": (*NN_ATTACKS, *OTHER_ATTACKS), "defense": ALL_DEFENSES},
    "tree": {"attack": NN_ATTACKS, "defense": ALL_DEFENSES},
    "paillier_lr": {"attack": NN_ATTACKS, "defense": ALL_DEFENSES},
}  # fmt: skip
REFUSED: frozenset[tuple[str, str, str]] = frozenset(
    (kind, family, name)
    for kind, families in REFUSED_BY_KIND.items()
    for family, names in families.items()
    for name in names
)


def _strong(name: str) -> float:
    """A non-neutral strength of defense ``name`` (the strongest of its grid)."""
    info = DEFENSES.get(name).info
    grid = [s for s in info.grid if s != info.neutral]
    return float(max(grid))


def _with_defense(spec: TrialSpec, name: str, strength: float) -> TrialSpec:
    return spec.model_copy(update={"defense": name, "defense_param": strength})


def _defense_refusal(kind: str, name: str) -> str | None:
    spec = _with_defense(KIND_SPECS[kind], name, _strong(name))
    k = kind_of(spec)
    try:
        k.check(spec)
        return k.incompatibility(spec, None)
    except ConfigError as err:  # a ConfigError at check time is a refusal with its reason
        return str(err)


def _attack_refusal(kind: str, name: str) -> str | None:
    spec = KIND_SPECS[kind]
    return kind_of(spec).attack_incompatibility(spec, name)


def _pairs() -> dict[tuple[str, str, str], str | None]:
    out: dict[tuple[str, str, str], str | None] = {}
    for kind in KIND_SPECS:
        for name in DEFENSES.names():
            out[(kind, "defense", name)] = _defense_refusal(kind, name)
        for name in ATTACKS.names():
            out[(kind, "attack", name)] = _attack_refusal(kind, name)
    return out


def test_every_kind_has_a_spec_here_and_takes_it() -> None:
    assert sorted(KIND_SPECS) == TRIAL_KINDS.names()
    for name, spec in KIND_SPECS.items():
        assert kind_of(spec).name == name


def test_todays_refusals_by_name() -> None:
    """The declarations above, on the built-ins: what FedCVT and FedHSSL host today."""
    fedcvt = REFUSED_BY_KIND["fedcvt"]
    hosted = {n for n in NN_ATTACKS if n not in fedcvt["attack"]}
    assert {"pmc", "mc", "amc", "nsb", "mf"} <= hosted
    assert {"bli", "dli", "ds", "grn", "lrb", "ns", "tbm"} <= set(fedcvt["attack"])
    assert {"cae", "dcae", "dcor", "gper", "gs", "mid"} <= set(fedcvt["defense"])
    assert {"gdp", "ldp", "iso"}.isdisjoint(fedcvt["defense"])
    assert {"bli", "dli"} <= set(REFUSED_BY_KIND["hssl"]["attack"])


def test_refused_pairs_are_exactly_the_listed_ones_and_each_says_why() -> None:
    pairs = _pairs()
    refused = {p for p, why in pairs.items() if why is not None}
    assert refused - REFUSED == set(), "newly refused pairs: list them in REFUSED"
    assert REFUSED - refused == set(), "pairs now hosted: remove them from REFUSED"
    for pair in refused:
        why = pairs[pair]
        assert why and len(why) > 20, f"{pair}: a refusal must say why, got {why!r}"


@cache
def _records(kind: str, defense: str | None = None, strength: float | None = None,
             attacks: tuple[str, ...] = ()) -> tuple[Record, ...]:  # fmt: skip
    spec = KIND_SPECS[kind]
    if defense is not None:
        spec = _with_defense(spec, defense, strength)  # type: ignore[arg-type]
    return tuple(run_trial(spec, attacks=[(a, {"preset": "fast"} if a in _FAST else {})
                                           for a in attacks]))  # fmt: skip


_FAST = {n for n in ATTACKS.names() if "fast" in getattr(ATTACKS.get(n), "presets", {})}
NEURAL_SSL = ("hssl", "fedcvt")


def _hosted(family: str) -> list[tuple[str, str]]:
    return [
        (kind, name)
        for (kind, fam, name), why in _pairs().items()
        if fam == family and why is None and kind in NEURAL_SSL
    ]


@pytest.mark.parametrize(("kind", "name"), _hosted("defense"))
def test_hosted_defense_acts_and_is_recorded(kind: str, name: str) -> None:
    (clean,) = _records(kind, name, _strong(name))
    applied = json.loads(clean.extra)["defense_applied"]
    assert clean.defense == name and clean.defense_param == _strong(name)
    assert sum(applied[name].values()) > 0, applied  # {name: {what changed: times}}
    neutral = DEFENSES.get(name).info.neutral
    if neutral is not None:
        (same,) = _records(kind, name, float(neutral))
        (plain,) = _records(kind)
        assert (same.mp, same.rounds, same.comm_bytes) == (plain.mp, plain.rounds, plain.comm_bytes)


@pytest.mark.parametrize("kind", NEURAL_SSL)
def test_hosted_attacks_score_through_the_judge(kind: str) -> None:
    names = tuple(n for k, n in _hosted("attack") if k == kind
                  and not ATTACKS.get(n).info.training_time)  # fmt: skip
    assert names, f"{kind} hosts no inference-time attack"
    records = _records(kind, attacks=names)
    got = {r.attack: r for r in records[1:]}
    assert set(names) <= set(got)
    for name in names:
        r = got[name]
        assert r.ap is not None and (math.isnan(r.ap) or 0.0 <= r.ap <= 1.0), (name, r.ap)
        assert r.attacker_party in (0, KIND_SPECS[kind].n_parties - 1)
        # scored against its no-information baseline (trainables/attacks/chance.py)
        assert r.ap_chance is not None and r.ap_advantage is not None, name
        assert math.isnan(r.ap) or 0.0 <= r.ap_advantage <= 1.0, (name, r.ap_advantage)
        assert r.mp_se is not None and r.mp_se >= 0.0, name
    clean = records[0]
    assert clean.attack == "none" and clean.mp_se is not None and clean.mp_se >= 0.0


@pytest.mark.parametrize(
    ("kind", "name"),
    [(k, n) for k, n in _hosted("attack") if ATTACKS.get(n).info.training_time],
)
def test_hosted_training_time_attacks_get_their_own_training(kind: str, name: str) -> None:
    params = {"preset": "fast"} if name in _FAST else {}
    spec = KIND_SPECS[kind].model_copy(update={"train_attack": name, "train_attack_params": params})
    (record,) = run_trial(spec)  # only the attack's record: its MP is the MP under attack
    assert record.attack == name and record.ap is not None and 0.0 <= record.ap <= 1.0
    assert record.mp is not None and 0.0 <= record.mp <= 1.0


def test_ray_is_imported_only_by_the_actor_module() -> None:
    """Ray lives in one thin actor package (Flower's idea: the actor, its pool, one
    trial's group); every kind reaches it through ``open_parties``. An importer outside
    would bring back a kind's own "local or Ray?"."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "trainables"
    importers = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            if any(n == "ray" or n.startswith("ray.") for n in names):
                importers.add(path.relative_to(root.parent).as_posix())
    assert importers == {
        "trainables/transport/ray_actors/actor.py",
        "trainables/transport/ray_actors/pool.py",
        "trainables/transport/ray_actors/parties.py",
        "trainables/transport/ray_actors/pickling.py",
        "trainables/transport/ray_actors/wire.py",
    }
