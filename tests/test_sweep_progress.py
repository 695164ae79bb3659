"""Progress lines and the end-of-sweep summary in the sweep's terms: the axes that vary."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sweep_engine.progress import axis_text, cell_text, open_commands, varying_axes


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
    lines = open_commands("results/x", "sqlite:////abs/mlflow.db", explicit=False)
    assert lines == [
        "report: python -m analysis results/x",
        "mlflow: mlflow ui --backend-store-uri sqlite:////abs/mlflow.db",
    ]
    served = open_commands("results/x", "http://127.0.0.1:5000", explicit=True)
    assert served[0] == "report: python -m analysis results/x --mlflow-uri http://127.0.0.1:5000"


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
    assert not any("dataset=" in line or "seed=" in line for line in lines)  # fixed: not named
    assert len({line.split(" mp=")[0] for line in lines}) == 3
    summary = out.split("done: 3 trainings recorded")[1].splitlines()[1:]
    assert re.match(r"  best mean MP: 0\.\d{4} over 1 seed\(s\) at defense=", summary[0])
    assert re.match(
        r"  lowest mean advantage of ns: \d\.\d{4} \(defended cell defense=gdp@", summary[1]
    )
    # the analysis' verdict: one seed, so no groups, said so
    assert "best chance-aware C-DCS" in summary[2] and "no groups" in summary[2], summary
    at = summary.index(f"  report: python -m analysis {results / 'gdpsweep'}")
    assert summary[at + 1] == "  mlflow: off (--no-mlflow)"
