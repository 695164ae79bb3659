"""Progress lines and the end-of-sweep summary in the sweep's terms: the axes that vary."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import pytest

from sweep_engine.progress import (
    axis_text,
    cell_text,
    open_commands,
    varying_axes,
    vflsweep_command,
)
from trainables.records import Record


def test_only_the_axes_that_vary_are_named() -> None:
    cells = [
        {"dataset": "digits", "defense": {"defense": "none"}, "seed": 0},
        {"dataset": "digits", "defense": {"defense": "gdp", "defense_param": 0.01}, "seed": 0},
        {"dataset": "digits", "defense": {"defense": "gdp", "defense_param": 0.01}, "seed": 2},
    ]
    axes = varying_axes(cells)
    assert axes == ["defense", "seed"]
    assert cell_text(cells[1], axes) == "defense=gdp@0.01 seed=0"
    assert cell_text(cells[0], axes) == "defense=none seed=0"


def test_mapping_values_read_as_their_leaves() -> None:
    bundle = {"protocol": "fedbcd", "protocol_params": {"q": 5}}
    assert axis_text("proto", bundle) == "protocol=fedbcd q=5"
    assert axis_text("defense", {"defense": "gs", "defense_param": 99.0}) == "defense=gs@99"
    assert axis_text("lr", 1e-4) == "lr=0.0001"
    assert axis_text("protocol_params.q", 5) == "protocol_params.q=5"


def test_open_commands_name_the_store_used() -> None:
    exe = vflsweep_command()
    assert exe == "vflsweep" or Path(exe).exists() or exe.endswith("-m sweep_engine.vflsweep")
    lines = open_commands("results/x", "sqlite:////abs/mlflow.db", explicit=False)
    assert lines == [f"report: {exe} analyze results/x", f"mlflow: {exe} ui --results results"]
    served = open_commands("results/x", "http://127.0.0.1:5000", explicit=True)
    assert served[0] == f"report: {exe} analyze results/x --mlflow-uri http://127.0.0.1:5000"
    assert served[1] == "mlflow: open http://127.0.0.1:5000 in a browser"
    other = open_commands("results/x", "sqlite:////elsewhere/m.db", explicit=True)
    assert other[1] == f"mlflow: {exe} ui --mlflow-uri sqlite:////elsewhere/m.db"


def at_chance(sweep_dir: Path) -> list[tuple[str, str]]:
    """(scenario, attack) at chance even undefended in a sweep's records, by the analysis'
    own rule (``answer.chance_table``)."""
    from analysis.answer import build_answer
    from analysis.load import table_to_frame
    from analysis.ranking import DEFAULT_WEIGHTS, ranking_table
    from analysis.report import prepare
    from sweep_engine.sink import RecordSink

    table = RecordSink(sweep_dir).read().drop_columns(["spec_json"])
    dcs = prepare(table_to_frame(table), 0.5)
    chance = build_answer(dcs, ranking_table(dcs, DEFAULT_WEIGHTS)).at_chance
    return list(zip(chance["scenario"].astype(str), chance["attack"].astype(str), strict=True))


@pytest.mark.ray
def test_defense_sweep_progress_lines_name_defense_and_strength(
    tmp_path: Path, ray_session: None, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    from sweep_engine.cli import main

    space = tmp_path / "gdpsweep.yaml"
    space.write_text(
        "name: gdpsweep\n"
        "base: {dataset: breast_cancer, epochs: 2, seed: 0}\n"
        "defenses: {gdp: [0.01, 0.1]}\n"
        "attacks: [ns]\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
    )
    results = tmp_path / "results"
    address = ray.get_runtime_context().gcs_address
    argv = ["--space", str(space), "--results", str(results), "--address", address]
    assert main([*argv, "--no-mlflow"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if re.match(r"\[\d+/3\] ", line)]
    assert len(lines) == 3, out
    named = sorted(re.search(r"defense=\S+", line).group(0) for line in lines)  # type: ignore[union-attr]
    assert named == ["defense=gdp@0.01", "defense=gdp@0.1", "defense=none"]
    # each AP beside its advantage over a no-information guess
    pattern = r" mp=0\.\d{4} ap: ns=\d\.\d\d \(adv \d\.\d\d\) "
    assert all(re.search(pattern, line) for line in lines), lines
    # the training's seconds and the attack's apart
    assert all(re.search(r" train \d+\.\ds, attack ns \d+\.\ds \(", line) for line in lines)
    assert not any("dataset=" in line or "seed=" in line for line in lines)  # fixed: not named
    assert len({line.split(" mp=")[0] for line in lines}) == 3
    summary = out.split("done: 3 trainings recorded")[1].splitlines()[1:]
    # one scenario, named by its dataset; the cells within it by what varies there
    # no validation rows (a grid's default): the MP range, no best chosen on test rows
    assert re.match(
        r"  breast_cancer: mean MP (0\.\d{4} to 0\.\d{4} over 3 cells \(test rows\); no best "
        r"named: no validation rows|0\.\d{4} in every cell: no best)",
        summary[0],
    ), summary[0]
    # NS's line follows the analysis' chance rule on these very records: 2 epochs may
    # leave it within the test set's error of chance, and then no defense is credited
    if at_chance(results / "gdpsweep"):
        assert re.fullmatch(
            r"  breast_cancer: ns was at chance even undefended \(advantage \d\.\d{4} over "
            r"1 seed\): no defense to credit",
            summary[1],
        ), summary
    else:
        assert re.match(
            r"  breast_cancer: lowest mean advantage of ns: \d\.\d{4} \(defended cell "
            r"defense=gdp@",
            summary[1],
        ), summary
    # the analysis' verdict: one seed, so no groups, said so
    assert "best chance-aware C-DCS" in summary[2] and "no groups" in summary[2], summary
    at = summary.index(f"  report: {vflsweep_command()} analyze {results / 'gdpsweep'}")
    assert summary[at + 1] == "  mlflow: off (--no-mlflow)"


@pytest.mark.ray
def test_a_two_dataset_sweep_summarizes_each_dataset_apart(
    tmp_path: Path, ray_session: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real sweep on breast_cancer and digits: a best-MP line per dataset (never digits'
    MP against breast_cancer's), NS only where it ran (binary-only: not on digits)."""
    import ray

    from sweep_engine.cli import main

    space = tmp_path / "twods.yaml"
    space.write_text(
        "name: twods\n"
        "base: {epochs: 2, seed: 0}\n"
        "grid: {dataset: [breast_cancer, digits]}\n"
        "defenses: {gdp: [0.1]}\n"
        "attacks: [ns]\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
    )
    address = ray.get_runtime_context().gcs_address
    argv = ["--space", str(space), "--results", str(tmp_path / "r"), "--address", address]
    assert main([*argv, "--no-mlflow"]) == 0
    out = capsys.readouterr().out
    summary = out.split("done: 4 trainings recorded")[1].splitlines()[1:]
    best = [line for line in summary if ": mean MP " in line]
    assert [line.split(": ")[0].strip() for line in best] == [
        "dataset=breast_cancer",
        "dataset=digits",
    ], summary
    assert all(re.search(r"over 2 cells \(test rows\); no best named", line) for line in best)
    ns = [line for line in summary if " of ns: " in line or "ns was at chance" in line]
    assert len(ns) == 1 and ns[0].startswith("  dataset=breast_cancer: "), summary


def test_issue_42_summary_is_per_scenario_and_names_attacks_at_chance(tmp_path: Path) -> None:
    """adult and digits x FedSGD and FedBCD q=5 under MID: the best MP and each attack's
    lowest advantage within each scenario, never across datasets; PMC, at chance on adult
    even undefended (answer.chance_table's rule), is said to be, once, not credited to a
    defense."""
    import pyarrow as pa
    from test_analysis_figures import issue_42

    from analysis.answer import build_answer
    from analysis.load import table_to_frame
    from analysis.ranking import DEFAULT_WEIGHTS, ranking_table
    from analysis.report import prepare
    from sweep_engine.progress import grid_lines, record_lines
    from trainables.records import RECORD_SCHEMA

    plan, rows = issue_42(tmp_path)
    table = pa.Table.from_pylist(rows, schema=RECORD_SCHEMA)
    lines = record_lines(plan, table)
    scenarios = [
        f"dataset={d} protocol={p}" for d in ("adult", "digits") for p in ("fedsgd", "fedbcd")
    ]
    best = [line for line in lines if ": mean MP " in line]
    assert [line.split(": ")[0] for line in best] == scenarios
    # each scenario's own MP range, topped by its undefended MP (seed jitter: +0.002 on
    # average); no validation rows, so no best is chosen on these test MPs
    assert [line.split(" to ")[1][:6] for line in best] == ["0.8520", "0.8420", "0.9520", "0.9420"]
    assert all("no best named" in line for line in best), best

    dcs = prepare(table_to_frame(table.drop_columns(["spec_json"])), 0.5)
    chance = build_answer(dcs, ranking_table(dcs, DEFAULT_WEIGHTS)).at_chance
    assert sorted(zip(chance["scenario"], chance["attack"], strict=True)) == sorted(
        (s, "pmc") for s in scenarios[:2]
    )
    for scenario in scenarios:
        pmc = [line for line in lines if line.startswith(f"{scenario}: ") and "pmc" in line]
        assert len(pmc) == 1, (scenario, lines)
        if scenario.startswith("dataset=adult"):
            assert re.fullmatch(
                rf"{scenario}: pmc was at chance even undefended \(advantage 0\.0000±0\.\d{{4}} "
                r"over 3 seeds\): no defense to credit",
                pmc[0],
            )
        else:
            assert pmc[0].startswith(
                f"{scenario}: lowest mean advantage of pmc: 0.1520 (defended cell defense=mid@100,"
            )
    verdicts = [line.split(": ")[0] for line in lines if "chance-aware C-DCS" in line]
    assert verdicts == scenarios  # the analysis' verdict in each scenario's own block
    at = [i for i, line in enumerate(lines) if "chance-aware" in line]
    assert [lines[i - 4].split(": ")[0] for i in at[:2]] == scenarios[:2]

    # rows alone (no scenario columns): the planned specs name the same scenarios
    columns = ["trial_id", "attack", "status", "mp", "ap", "ap_advantage", "defense"]
    plain = grid_lines(plan, table.select(columns).to_pylist())
    assert [line.split(": ")[0] for line in plain if ": mean MP " in line] == scenarios


def test_a_scenario_of_one_cell_is_not_named_twice() -> None:
    """Issue 63: the smoke sweep's scenarios vary only the seed, and its summary said
    "(one cell: (one cell))"; the MP and attack lines say it once."""
    from types import SimpleNamespace

    from sweep_engine.progress import grid_lines

    plan = SimpleNamespace(
        trainings=[SimpleNamespace(trial_id=f"t{s}", cell={"seed": s}) for s in (0, 1)]
    )
    row = {"status": "ok", "val_mp": None, "ap": 0.6, "defense": "none"}
    rows = [
        {**row, "trial_id": f"t{s}", "attack": attack, "mp": 0.9 + s / 100, "ap_advantage": 0.1}
        for s in (0, 1)
        for attack in ("none", "ns")
    ]
    lines = grid_lines(plan, rows, scenarios={"t0": "protocol=fedsgd", "t1": "protocol=fedsgd"})
    assert lines == [
        "protocol=fedsgd: mean MP 0.9050 over 2 seeds (one cell)",
        "protocol=fedsgd: lowest mean advantage of ns: 0.1000 (the one cell, its MP 0.9050)",
    ]


def test_plural_says_one_pack_and_two_packs() -> None:
    from sweep_engine.words import duration, plural

    assert plural(1, "pack") == "1 pack" and plural(2, "pack") == "2 packs"
    assert plural(0, "training") == "0 trainings" and plural(1, "seed") == "1 seed"
    assert plural(3, "study") == "3 studies" and plural(1, "study") == "1 study"
    assert plural(2, "more study", "more studies") == "2 more studies"
    assert [duration(s) for s in (0.4, 42, 185, 7620)] == ["0s", "42s", "3m 05s", "2h 07m"]


def _record(attack: str, seconds: float, train: float = 0.5) -> Record:
    from trainables.spec import TrialSpec

    spec = TrialSpec.build(dataset="breast_cancer")
    clean = Record.clean(spec, 0, mp=0.9, rounds=1, comm_bytes=0, train_seconds=train)
    return dataclasses.replace(clean, attack=attack, attack_seconds=seconds)


def test_seconds_text_shows_training_and_each_attack_apart() -> None:
    from sweep_engine.progress import seconds_text

    clean = _record("none", 0.0)
    assert seconds_text([clean]) == "train 0.5s"
    assert seconds_text([clean, _record("pmc", 11.94)]) == "train 0.5s, attack pmc 11.9s"
    both = [clean, _record("pmc", 11.9), _record("ns", 0.4)]
    assert seconds_text(both) == "train 0.5s, attacks 12.3s (pmc 11.9s, ns 0.4s)"


def test_eta_is_the_rate_so_far_times_what_is_left() -> None:
    from sweep_engine.heartbeat import eta_seconds, eta_text

    assert eta_seconds(60.0, 3, 6) == 120.0  # 20 s a training, 6 left
    assert eta_seconds(60.0, 0, 6) is None  # nothing done yet, no estimate handed in
    assert eta_seconds(60.0, 0, 6, estimate_s=300.0) == 300.0  # the plan's estimate
    assert eta_seconds(60.0, 8, 0) == 0.0
    assert eta_text(None, False) == "ETA: no estimate yet"
    assert eta_text(125.0, True) == "ETA ~2m 05s"
    assert eta_text(300.0, False) == "ETA ~5m 00s (the plan's estimate)"


def test_heartbeat_line_names_what_runs_for_how_long_done_left_and_eta() -> None:
    from sweep_engine.heartbeat import Tracker

    tracker = Tracker(5, recorded_before=1)
    assert tracker.planned == 6
    assert tracker.heartbeat_line(time.monotonic()).startswith(
        "[still running] 0s: starting Ray; 0 of 5 trainings done, 5 left; ETA: no estimate yet"
    )
    tracker.labels.update({"a": "seed=0", "b": "seed=1", "c": "seed=2"})
    tracker.set_phase("running")
    tracker.trial_started("t1", "pack", "pack a+2", ("a", "b", "c"))
    tracker.training_finished("a", ok=True)
    tracker.first_start = tracker.started - 10  # the pack started 10 s ago
    tracker.running["t1"].since = tracker.started - 10
    line = tracker.heartbeat_line(tracker.started + 0.2)
    assert "1 pack running for 10s (3 trainings, now: seed=1)" in line, line
    assert "1 of 5 trainings done, 4 left; ETA ~41s" in line, line  # 10.2 s a training
    snapshot = tracker.snapshot(tracker.started + 0.2)
    assert snapshot["running"] == [{"kind": "pack", "trainings": 3, "now": "seed=1", "for_s": 10.2}]
    assert (snapshot["done"], snapshot["left"], snapshot["eta_s"]) == (1, 4, 40.8)


@pytest.mark.ray
def test_heartbeat_fires_while_nothing_finishes(
    tmp_path: Path,
    ray_session: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a 1 s interval, a 2-training pack (its actors take seconds to start) gets
    heartbeat lines before its first training line; a 1-pack sweep says "1 pack"."""
    import ray

    from sweep_engine.cli import main
    from sweep_engine.heartbeat import HEARTBEAT_ENV

    monkeypatch.setenv(HEARTBEAT_ENV, "1")
    space = tmp_path / "beat.yaml"
    space.write_text(
        "name: beat\nbase: {dataset: breast_cancer, epochs: 5}\ngrid: {seed: [0, 1]}\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
    )
    address = ray.get_runtime_context().gcs_address
    argv = ["--space", str(space), "--results", str(tmp_path / "r"), "--address", address]
    assert main([*argv, "--no-mlflow"]) == 0
    out = capsys.readouterr().out
    assert "2 trainings in 1 pack (run.pack=auto)" in out, out
    beats = [line for line in out.splitlines() if line.startswith("[still running] ")]
    assert beats and out.index(beats[0]) < out.index("[1/2] "), out
    pattern = r"\[still running\] \d+s: .+; \d of 2 trainings done, \d left; ETA"
    assert all(re.match(pattern, line) for line in beats), beats
    assert any(
        "1 pack running for" in line and "(2 trainings, now: seed=" in line for line in beats
    )
    assert "done: 2 trainings recorded, 0 failed" in out
