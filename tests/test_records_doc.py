"""docs/records.md is the records' contract: every column listed, and its example DuckDB
queries give the numbers ``vflsweep analyze`` prints, on a real sweep with an adapted
attack, a preset and ``procedure: vflair`` (issue 62). Real trainings, real Parquet files
written by the sink, DuckDB as a user's own client."""

from __future__ import annotations

import contextlib
import io
import math
import re
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from test_verified_reads import record

from sweep_engine.sink import RecordSink
from trainables.records import RECORD_SCHEMA
from trainables.trial import run_trial

DOC = Path(__file__).resolve().parents[1] / "docs" / "records.md"
SPACE = """name: rec
base: {dataset: breast_cancer, epochs: 3}
grid: {seed: [0, 1], procedure: [standard, vflair]}
attacks:
  - {name: pmc, preset: fast, adapt: {trials: 2}}
  - ns
"""


def queries() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", DOC.read_text(), flags=re.S)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The sweep's folder and ``vflsweep analyze``'s printed answer."""
    from analysis.cli import main as analyze

    root = tmp_path_factory.mktemp("records_doc")
    space = root / "rec.yaml"
    space.write_text(SPACE)
    sweep_dir = record(space, root / "results")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert analyze([str(sweep_dir), "--no-plots", "--no-mlflow"]) == 0
    return sweep_dir, out.getvalue()


def run(sql: str, sweep_dir: Path) -> pd.DataFrame:
    return duckdb.sql(sql.replace("results/rec", str(sweep_dir))).df()


def test_every_record_column_is_documented() -> None:
    table = DOC.read_text().split("## Columns")[1].split("## Example")[0]
    listed = set(re.findall(r"^\| `([a-z_]+)`(?:, `([a-z_]+)`)?", table, flags=re.M))
    names = {n for pair in listed for n in pair if n}
    assert names == set(RECORD_SCHEMA.names), set(RECORD_SCHEMA.names) ^ names


def test_the_docs_queries_give_the_printed_advantages(sweep: tuple[Path, str]) -> None:
    sweep_dir, printed = sweep
    per_attack, pairs, cells = (run(q, sweep_dir) for q in queries())
    labels = set(per_attack["attack_label"])
    assert {"pmc@fast", "pmc@fast+adapted"} <= labels, labels  # preset and adapted apart
    assert any(label.startswith("ns[") for label in labels), labels  # vflair's NS settings
    assert set(per_attack["procedure"]) == {"standard", "vflair"}
    assert set(per_attack["n_seeds"]) == {2}
    # the analysis' per-attack advantages (default settings) are the query's
    answer = pd.read_csv(sweep_dir / "report" / "answer_by_attack.csv")
    for row in answer.itertuples():
        procedure = str(row.scenario).removeprefix("procedure=")
        hit = per_attack[
            (per_attack["procedure"] == procedure) & (per_attack["attack_label"] == row.attack)
        ]
        assert len(hit) == 1 and math.isclose(hit["adv"].iloc[0], row.adv, abs_tol=1e-12)
        assert f"{row.adv:.3f}" in printed  # as the screen shows it
    # the adapted ones: the worst-case table's
    worst = pd.read_csv(sweep_dir / "report" / "worst_case_attacks.csv")
    for row in worst.itertuples():
        procedure = str(row.scenario).removeprefix("procedure=")
        hit = per_attack[
            (per_attack["procedure"] == procedure)
            & (per_attack["attack_label"] == f"{row.attack}+adapted")
        ]
        assert math.isclose(hit["adv"].iloc[0], row.adv_adapted, abs_tol=1e-12)
    assert len(pairs) == 4 and pairs["attack_label"].eq("pmc@fast").all()  # one per training
    mp = pd.read_csv(sweep_dir / "report" / "answer_cells.csv")
    for row in mp.itertuples():
        procedure = str(row.scenario).removeprefix("procedure=")
        hit = cells[cells["procedure"] == procedure]
        assert math.isclose(hit["mp"].iloc[0], row.mp, abs_tol=1e-12)


def test_a_training_cannot_repeat_an_attack_label(tmp_path: Path) -> None:
    import dataclasses

    from trainables.spec import TrialSpec

    spec = TrialSpec.build(dataset="breast_cancer", epochs=1)
    records = run_trial(spec, attacks=[("ns", {})])
    twice = [*records, dataclasses.replace(records[-1])]
    with pytest.raises(ValueError, match=r"attack label\(s\) \['ns'\] on two records"):
        RecordSink(tmp_path).write("t", twice)
    assert not (tmp_path / "records").exists() or not any((tmp_path / "records").iterdir())


def test_a_version_1_file_reads_through_the_migration(tmp_path: Path) -> None:
    """A file written before the label, preset, adapted and spec columns existed (schema
    version 1, digest and all) reads with them filled from ``extra`` and ``spec_json``."""
    import pyarrow.parquet as pq

    from sweep_engine.sink import _encode, _with_digest
    from trainables.records import records_to_table
    from trainables.results.checks import read_verified
    from trainables.results.migrate import NEW_COLUMNS
    from trainables.spec import TrialSpec

    spec = TrialSpec.build(dataset="breast_cancer", epochs=1)
    records = run_trial(spec, trial_id="v1", attacks=[("pmc", {"preset": "fast"})])
    v1 = records_to_table(records).drop_columns(list(NEW_COLUMNS))
    (tmp_path / "records").mkdir()
    path = tmp_path / "records" / "v1.parquet"
    path.write_bytes(_encode(_with_digest(v1.replace_schema_metadata(None))).to_pybytes())
    assert not set(NEW_COLUMNS) & set(pq.read_schema(path).names)
    verified = read_verified(tmp_path / "records")
    assert verified.damaged == {}
    rows = verified.table.to_pylist()
    assert [r["attack_label"] for r in rows] == ["none", "pmc@fast"]
    assert [r["attack_preset"] for r in rows] == [None, "fast"]
    assert [r["attack_adapted"] for r in rows] == [False, False]
    assert all(r["spec"]["epochs"] == 1 and r["spec"]["lr_decay"] == "none" for r in rows)


def test_an_lrb_row_from_before_its_twin_baseline_reads_with_an_unknown_baseline() -> None:
    """A folder resumed across the change to LRB's baseline (its trigger on an unattacked
    twin) holds rows whose ``ap_chance`` meant the backdoored model's own untriggered
    rows: they read as unknown, new rows and other attacks as written."""
    import dataclasses
    import json

    import pyarrow.compute as pc

    from trainables.records import records_to_table
    from trainables.results.migrate import OLD_BASELINE, migrate
    from trainables.spec import TrialSpec

    spec = TrialSpec.build(dataset="breast_cancer", epochs=2, train_attack="lrb",
                           train_attack_params={"test_ratio": 0.2})  # fmt: skip
    (new,) = run_trial(spec, trial_id="new")
    assert "scored_rows" in json.loads(new.extra) and not math.isnan(new.ap_chance)
    extra = {k: v for k, v in json.loads(new.extra).items() if k != "scored_rows"}
    old = dataclasses.replace(new, trial_id="old", extra=json.dumps(extra), ap_chance=0.0)
    (clean,) = run_trial(TrialSpec.build(dataset="breast_cancer", epochs=2), trial_id="clean")
    table = migrate(records_to_table([new, old, clean]))
    got = {r["trial_id"]: r for r in table.to_pylist()}
    assert all(got["old"][c] is None for c in OLD_BASELINE) and got["old"]["ap"] == old.ap
    assert got["new"]["ap_chance"] == new.ap_chance
    assert got["clean"]["mp"] == clean.mp
    assert pc.sum(pc.is_null(table.column("ap_chance"))).as_py() == 2  # old, and clean's own
