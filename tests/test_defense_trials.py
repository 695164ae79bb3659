"""Defenses inside trials and sweeps: stacking, records, both transports, the space section."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sweep_engine.cli import main
from sweep_engine.plan import expand
from sweep_engine.space import load_space
from trainables.data import load_dataset
from trainables.errors import ConfigError
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement
from trainables.trial import prepare_parties, run_trial, train_local_parties


def _spec(**fields: object) -> TrialSpec:
    base: dict[str, object] = {"dataset": "digits", "epochs": 2, "batch_size": 128}
    return TrialSpec.build(**{**base, **fields})


def _received(spec: TrialSpec) -> list[np.ndarray]:
    prepared = prepare_parties(spec, load_dataset("digits"), [("dli", {})])
    _, parties = train_local_parties(prepared, 2)
    return [np.asarray(m.payload) for m in parties[0].hooks[0].received]


def test_stacked_defenses_apply_in_order_and_are_recorded() -> None:
    gdp_then_gs = _spec(defense="gdp", defense_param=0.01, stack=[{"name": "gs", "strength": 99}])
    gs_then_gdp = _spec(defense="gs", defense_param=99, stack=[{"name": "gdp", "strength": 0.01}])
    sparse = _received(gdp_then_gs)
    dense = _received(gs_then_gdp)
    assert all((g != 0).mean() <= 0.011 for g in sparse)  # GS last: 99 % zeros reach party 0
    assert all((g != 0).mean() > 0.9 for g in dense)  # G-DP last: noise fills the zeros
    (rec,) = run_trial(gdp_then_gs)
    assert (rec.defense, rec.defense_param, rec.defense_party) == ("gdp+gs", 0.01, "active+active")
    assert rec.epsilon is not None and rec.epsilon > 0


def test_two_output_decoders_cannot_stack() -> None:
    with pytest.raises(ConfigError, match="decode"):
        run_trial(_spec(defense="cae", stack=[{"name": "dcae"}]))


def test_a_passive_party_defense_noises_embeddings_at_every_passive_party() -> None:
    spec = _spec(n_parties=3, defense="gdp", defense_param=0.5, defense_params={"party": "passive"})
    prepared = prepare_parties(spec, load_dataset("digits"))
    assert [len(i.hooks) for i in prepared.inits] == [1, 1, 0]
    (rec,) = run_trial(spec)
    (clean,) = run_trial(_spec(n_parties=3))
    assert rec.defense_party == "passive" and rec.epsilon is None
    assert rec.mp != clean.mp


def test_defended_records_share_the_setting_hash_of_their_undefended_twin() -> None:
    a = run_trial(_spec(defense="mid", defense_param=1.0), attacks=[("dli", {})])
    b = run_trial(_spec(), attacks=[("dli", {})])
    assert {r.setting_hash for r in a} == {r.setting_hash for r in b}
    assert a[0].config_hash != b[0].config_hash


@pytest.mark.ray
@pytest.mark.parametrize("name", ["gdp", "mid", "cae"])
def test_defended_trial_gives_the_same_records_on_both_transports(
    ray_session: None, name: str
) -> None:
    spec = _spec(defense=name, defense_param=0.1 if name != "cae" else 0.5)
    local = run_trial(spec, attacks=[("dli", {})])
    remote = run_trial(spec, Placement("ray", 0.5), attacks=[("dli", {})])
    assert [(r.mp, r.ap, r.comm_bytes, r.epsilon) for r in local] == [
        (r.mp, r.ap, r.comm_bytes, r.epsilon) for r in remote
    ]


def _space(tmp_path: Path, defenses: str) -> Path:
    path = tmp_path / "d.yaml"
    path.write_text(
        "name: d\nbase: {dataset: breast_cancer, epochs: 2}\ngrid: {seed: [0, 1]}\n"
        f"defenses:\n{defenses}\nattacks: [ns]\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
    )
    return path


def test_defenses_section_expands_with_the_undefended_cell(tmp_path: Path) -> None:
    plan = expand(load_space(str(_space(tmp_path, "  gs: [95.0, 99.0]\n  mid: vflair"))))
    cells = {(t.spec.defense, t.spec.defense_param, t.spec.seed) for t in plan.trainings}
    assert ("none", None, 0) in cells and ("gs", 99.0, 1) in cells and ("mid", 1e4, 0) in cells
    assert plan.n_trainings == 2 * (1 + 2 + 9)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            "  nope: [1.0]",
            "defenses.nope[0]=1.0: defense='nope': unknown defense 'nope'; known: cae",
        ),
        (
            "  gs: [95.0, 150.0]",
            "defenses.gs[1]=150.0: defense_param=150.0: defense 'gs': strength",
        ),
        ("  gs: {strengths: [95.0], params: {party: passive}}", "party='passive'"),
    ],
)
def test_bad_defense_entries_name_their_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str, message: str
) -> None:
    path = _space(tmp_path, section)
    assert main(["--space", str(path), "--results", str(tmp_path / "r"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and message in err
    assert not (tmp_path / "r").exists()


def test_shipped_defense_spaces_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--space", "defenses", "--dry-run", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    # 42 defense cells x 3 seeds: digits 3 trainings each (shared + AMC + LRB), breast 1
    assert summary["trainings"] == 42 * 3 * 3 + 42 * 3
    assert summary["evaluations"] == 42 * 3 * 10 + 42 * 3 * 2
    assert main(["--space", "defense_pareto", "--dry-run", "--json"]) == 0
    pareto = json.loads(capsys.readouterr().out)
    assert pareto["search"] == {"cells": 3, "trials_per_cell": 24}


@pytest.mark.ray
def test_a_defense_sweep_records_each_cell_with_its_undefended_twin(
    ray_session: None, tmp_path: Path
) -> None:
    import pyarrow.dataset as pads

    path = _space(tmp_path, "  gs: [99.0]\n  gdp: [0.1]")
    results = tmp_path / "r"
    assert main(["--space", str(path), "--results", str(results)]) == 0
    rows = pads.dataset(results / "d" / "records", format="parquet").to_table().to_pylist()
    assert len(rows) == 3 * 2 * 2  # (none, gs, gdp) x 2 seeds x (clean + NS)
    by_cell = {(r["defense"], r["seed"], r["attack"]): r for r in rows}
    for seed in (0, 1):
        twins = {by_cell[(d, seed, "none")]["setting_hash"] for d in ("none", "gs", "gdp")}
        assert len(twins) == 1
        assert by_cell[("gdp", seed, "none")]["epsilon"] > 0
        assert by_cell[("gs", seed, "ns")]["defense_param"] == 99.0
