"""A defense that never acts is never recorded as acting; no parameter name is a YAML bool.

ISO with ``target: representation`` in a plain VFL trial (the active party sends only
gradients) is the real case: the planner drops it, and run directly it fails the training
with ``defense iso never applied: ...`` on both transports. Every other defense's counts
come back in the record's ``extra``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sweep_engine.cli import main
from sweep_engine.plan import expand
from sweep_engine.space import load_space
from trainables.defenses import DEFENSES
from trainables.defenses.applied import DefenseNeverApplied
from trainables.errors import ConfigError
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement
from trainables.trial import incompatibility, run_trial

REPRESENTATION = {"target": "representation"}
NEVER = "defense iso never applied: no message of kind 'representation' was sent by the active"


def _spec(**fields: object) -> TrialSpec:
    base: dict[str, object] = {"dataset": "breast_cancer", "epochs": 1, "batch_size": 128}
    return TrialSpec.build(**{**base, **fields})


def _applied(record: object) -> dict[str, dict[str, int]]:
    return json.loads(record.extra)["defense_applied"]  # type: ignore[attr-defined]


def _space(tmp_path: Path, params: str) -> Path:
    path = tmp_path / "iso.yaml"
    path.write_text(
        "name: iso\nbase: {dataset: breast_cancer, epochs: 1}\n"
        "grid: {partition: [agg, split]}\n"
        f"defenses:\n  iso: {{strengths: [25.0], params: {params}}}\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
    )
    return path


def test_iso_on_representation_in_plain_vfl_is_dropped_by_the_planner(tmp_path: Path) -> None:
    space = load_space(str(_space(tmp_path, "{target: representation}")))
    assert space.defense_axes()["iso"].params == REPRESENTATION  # bare `target` loads as is
    plan = expand(space)
    assert {(t.spec.defense, t.spec.partition) for t in plan.trainings} == {
        ("none", "agg"),
        ("none", "split"),
    }
    assert len(plan.dropped) == 2
    for dropped in plan.dropped:
        assert dropped.reason.startswith("defense iso (target=representation) would never apply")
        assert "sends only 'gradient'" in dropped.reason
    gradient = expand(load_space(str(_space(tmp_path, "{target: gradient}"))))
    assert {t.spec.defense for t in gradient.trainings} == {"none", "iso"}
    assert not gradient.dropped


def test_the_old_name_on_is_refused_with_the_new_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _space(tmp_path, "{'on': representation}")
    assert main(["--space", str(path), "--results", str(tmp_path / "r"), "--dry-run"]) == 2
    assert "'on' was renamed to 'target'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="'on' was renamed to 'target'"):
        DEFENSES.create("iso", strength=1.0, on="both")


def test_a_defense_that_never_fires_fails_the_training() -> None:
    spec = _spec(defense="iso", defense_param=25.0, defense_params=REPRESENTATION)
    with pytest.raises(DefenseNeverApplied) as caught:
        run_trial(spec)  # run directly, past the planner
    assert str(caught.value).startswith(NEVER)
    assert not isinstance(caught.value, ConfigError)  # a failed training, not bad input


def test_a_stacked_defense_that_never_fires_is_named() -> None:
    stack = [{"name": "iso", "strength": 25.0, "params": REPRESENTATION}]
    spec = _spec(defense="gs", defense_param=99.0, stack=stack)
    assert (incompatibility(spec) or "").startswith("defense iso (target=representation)")
    with pytest.raises(DefenseNeverApplied, match=NEVER):
        run_trial(spec)
    (rec,) = run_trial(_spec(defense="gdp", defense_param=0.01, stack=[{"name": "gs"}]))
    applied = _applied(rec)
    assert set(applied) == {"gdp", "gs"} and applied["gdp"] == applied["gs"] == {"gradient": 4}


def test_a_neutral_strength_that_never_fires_runs_like_no_defense() -> None:
    spec = _spec(defense="iso", defense_param=0.0, defense_params=REPRESENTATION)
    assert incompatibility(spec) is None
    (rec,) = run_trial(spec)
    (clean,) = run_trial(_spec())
    assert rec.mp == clean.mp and rec.defense_param == 0.0
    assert _applied(rec) == {"iso": {}}


@pytest.mark.parametrize("name", DEFENSES.names())
def test_every_defense_counts_what_it_changed(name: str) -> None:
    (rec,) = run_trial(_spec(defense=name, defense_param=max(DEFENSES.get(name).info.grid)))
    counts = _applied(rec)[name]
    assert counts and all(n > 0 for n in counts.values()), counts


def test_a_passive_party_defense_counts_at_every_passive_party() -> None:
    spec = _spec(n_parties=3, defense="gdp", defense_param=0.1, defense_params={"party": "passive"})
    (rec,) = run_trial(spec)
    # 4 training batches + 1 test embedding per epoch, at each of the 2 passive parties
    assert _applied(rec) == {"gdp": {"embedding": 8, "test_embedding": 2}}


def test_gdp_counts_its_releases_per_recipient_and_epsilon_follows_them() -> None:
    """The record's epsilon is worked out from the releases the mechanism counted: with two
    passive parties each gets one noised gradient per round (4 batches), so 4 releases
    per recipient, not 8 (and not the trial's idea of its rounds)."""
    from trainables.defenses.accounting import gaussian_epsilon
    from trainables.defenses.applied import merge
    from trainables.messages import Message

    gdp = DEFENSES.create("gdp", strength=0.1)
    grad = np.ones((4, 2), dtype=np.float32)
    for dst in (0, 1, 0, 1, 0):
        gdp.on_send(None, Message.of("gradient", 2, dst, grad, None))  # type: ignore[arg-type]
    gdp.on_send(None, Message.of("test_embedding", 2, 0, grad, None))  # type: ignore[arg-type]
    assert gdp.released == {0: 3, 1: 2} and gdp.dp_steps() == 3
    passive = DEFENSES.create("gdp", strength=0.1, party="passive")
    assert passive.dp_steps() is None  # the passive mechanism accounts nothing
    report = {"index": 0, "name": "gdp", "must_apply": True, "reason": "", "counts": {}}
    two = merge(
        [[{**report, "dp_steps": 3}], [{**report, "dp_steps": None}], [{**report, "dp_steps": 2}]]
    )
    assert two[0].dp_steps == 5  # sequential trainings' releases add up (FedHSSL's lr pick)

    (rec,) = run_trial(_spec(n_parties=3, defense="gdp", defense_param=0.1))
    assert _applied(rec) == {"gdp": {"gradient": 8}}  # 4 rounds x 2 passive parties
    assert rec.rounds == 4 and rec.epsilon == gaussian_epsilon(0.1 / 0.2, 128 / 455, 4)


@pytest.mark.ray
def test_counts_come_back_from_ray_actors(ray_session: None) -> None:
    spec = _spec(defense="iso", defense_param=5.0)
    (local,) = run_trial(spec)
    (remote,) = run_trial(spec, Placement("ray", 0.5))
    assert _applied(remote) == _applied(local) == {"iso": {"gradient": 4}}
    never = _spec(defense="iso", defense_param=25.0, defense_params=REPRESENTATION)
    with pytest.raises(DefenseNeverApplied, match=NEVER):
        run_trial(never, Placement("ray", 0.5))


# -- SSL variants: ISO on representations needs cross-party pretraining ---------------
def _hssl(variant: str, target: str, lam: float = 1.0) -> TrialSpec:
    tiny = {"pretrain_epochs": 1, "pretrain_batch": 128, "hidden": 16, "emb": 8, "proj": 16,
            "pred": 8}  # fmt: skip
    return TrialSpec.build(
        dataset="breast_cancer", ssl_variant=variant, aligned_ratio=0.5, n_labeled=60,
        epochs=1, batch_size=32, model_params=tiny, defense="iso", defense_param=lam,
        defense_params={"target": target},
    )  # fmt: skip


def test_hssl_iso_on_representation_needs_cross_party_pretraining() -> None:
    for variant in ("splitnn", "local_simsiam"):
        reason = incompatibility(_hssl(variant, "representation")) or ""
        assert "no cross-party pretraining" in reason and variant in reason
    assert incompatibility(_hssl("cssl_simsiam", "representation")) is None
    assert incompatibility(_hssl("splitnn", "both")) is None
    with pytest.raises(DefenseNeverApplied, match=NEVER):
        run_trial(_hssl("splitnn", "representation"))
    (rec,) = run_trial(_hssl("cssl_simsiam", "both"))
    extra = json.loads(rec.extra)
    assert extra["iso_target"] == "both"
    assert set(extra["defense_applied"]["iso"]) == {"representation", "gradient"}


# -- YAML 1.1 reads these bare words as booleans: no parameter may be named one -------
YAML_BOOLS = set(
    "y Y yes Yes YES n N no No NO true True TRUE false False FALSE on On ON off Off OFF".split()
)


def _parameter_names() -> dict[str, set[str]]:
    """Every named parameter a space can set, by where it comes from."""
    import dataclasses

    from trainables.attacks import ATTACKS
    from trainables.data import DATASETS
    from trainables.protocols import CODECS, PROTOCOLS
    from trainables.ssl.hssl.variants import OPTIONS
    from trainables.ssl.runner import CvtOptions
    from trainables.trees.common import FLAGS, PARAMS

    names: dict[str, set[str]] = {
        "trial spec": set(TrialSpec.model_fields),
        "ssl options (hssl)": set(OPTIONS),
        "ssl options (fedcvt)": {f.name for f in dataclasses.fields(CvtOptions)},
        "tree flags": {*FLAGS, "encrypt"},
    }
    for name in DEFENSES.names():
        names[f"defense {name}"] = {"party", *DEFENSES.get(name).defaults}
    for name in ATTACKS.names():
        names[f"attack {name}"] = set(ATTACKS.get(name).defaults)
    for family, registry in (("protocol", PROTOCOLS), ("codec", CODECS)):
        for name in registry.names():
            names[f"{family} {name}"] = set(getattr(registry.get(name), "defaults", {}))
    for name, classes in PARAMS.items():
        names[f"tree model {name}"] = {f.name for c in classes for f in dataclasses.fields(c)}
    for name in DATASETS.names():  # a loader lists what it takes when given a wrong name
        with pytest.raises(ConfigError) as caught:
            DATASETS.get(name)(None, zz_probe=1)
        allowed = str(caught.value).rsplit("allowed: ", 1)[1]
        names[f"dataset {name}"] = set() if allowed == "none" else set(allowed.split(", "))
    return names


def test_no_parameter_name_is_a_yaml_boolean() -> None:
    names = _parameter_names()
    assert "target" in names["defense iso"] and "n_samples" in names["dataset synthetic"]
    clashes = {where: sorted(ns & YAML_BOOLS) for where, ns in names.items() if ns & YAML_BOOLS}
    assert not clashes, f"YAML 1.1 reads these parameter names as booleans: {clashes}"
