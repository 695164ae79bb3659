"""Issue 62: no number comes from a record file whose bytes changed after it was written.

pyarrow does not verify page checksums by default: one flipped bit in a data page decodes
without an error into another value (an MP of 0.956 read as 1.912). Every reader of
results (the analysis, ``status``, resume, ``vflsweep verify``, the MLflow sync) verifies
first; each names the damaged file and leaves its rows out. Real Parquet files written by
the sink, real trainings on the local transport.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sweep_engine.plan import expand
from sweep_engine.sink import RecordSink
from sweep_engine.space import load_space
from trainables.results.checks import check_file, read_verified
from trainables.trial import run_trial

SPACE = (
    "name: flip\nbase: {dataset: breast_cancer, epochs: 3}\ngrid: {seed: [0, 1, 2]}\n"
    "defenses: {gdp: [0.1]}\nattacks: [ns]\n"
)


def record(space_path: Path, results: Path) -> Path:
    """Every training of the space recorded in-process by the sink, with the manifest a run
    writes: the sweep folder a finished run leaves (without Ray)."""
    from sweep_engine.manifest import write_manifest

    plan = expand(load_space(str(space_path)))
    sink = RecordSink(results / plan.space.name)
    for t in plan.trainings:
        rows = run_trial(t.spec, sweep=plan.space.name, trial_id=t.trial_id, attacks=t.attacks)
        sink.write(t.trial_id, rows)
    write_manifest(sink.sweep_dir, plan)
    return sink.sweep_dir


def finished_sweep(tmp_path: Path) -> Path:
    space = tmp_path / "flip.yaml"
    space.write_text(SPACE)
    return record(space, tmp_path / "r")


def flip_silently(path: Path) -> tuple[float, float]:
    """Flip the lowest exponent bit of the file's first MP value inside a page, choosing an
    occurrence whose flip a plain read decodes without error into another MP; returns
    (MP before, MP a plain reader now sees)."""
    before = pq.read_table(path).column("mp").to_pylist()
    data = path.read_bytes()
    packed = struct.pack("<d", before[0])
    at = data.find(packed)
    while at != -1:
        changed = bytearray(data)
        changed[at + 6] ^= 0x10  # bit 52: the exponent's lowest bit, x2 or /2
        path.write_bytes(bytes(changed))
        try:
            after = pq.read_table(path).column("mp").to_pylist()
        except Exception:
            after = before
        if after != before:
            return before[0], next(a for a, b in zip(after, before, strict=True) if a != b)
        at = data.find(packed, at + 1)
    path.write_bytes(data)
    raise AssertionError("no byte of the MP value decodes silently when flipped")


def test_a_flipped_data_page_byte_is_named_by_every_reader_and_never_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from analysis.cli import main as analyze
    from sweep_engine.status import main as status
    from sweep_engine.verify import EXIT_DAMAGED
    from sweep_engine.verify import main as verify

    sweep_dir = finished_sweep(tmp_path)
    files = sorted((sweep_dir / "records").glob("*.parquet"))
    assert len(files) == 6
    damaged = files[0]
    mp, seen = flip_silently(damaged)
    assert seen != mp  # what a plain pyarrow (or DuckDB) read of the file now says
    assert check_file(damaged) is not None

    assert verify([str(sweep_dir)]) == EXIT_DAMAGED
    out = capsys.readouterr().out
    assert f"{damaged}: " in out and "1 file DAMAGED" in out, out
    assert verify([str(sweep_dir / "nowhere")]) == 2

    assert status([str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    assert f"damaged: {damaged}" in out and ": damaged" in out.splitlines()[0], out
    assert "6 planned, 5 done, 0 failed, 1 left" in out, out  # never "finished"

    report = tmp_path / "report"
    argv = [str(sweep_dir), "--no-mlflow", "--no-plots", "--out", str(report)]
    with pytest.warns(UserWarning, match="skipping corrupt record file"):
        assert analyze(argv) == 0
    out = capsys.readouterr().out
    head = out.splitlines()
    assert head[0] == "incomplete: 5 of 6 trainings (1 damaged file(s) not read, 1 not recorded)"
    assert head[1] == f"  damaged, not read: {damaged}: {check_file(damaged)}", head
    assert re.fullmatch(r"cells with fewer seeds .*: (none|gdp@0\.1) \(2 of 3\)", head[2]), head
    summary = json.loads((report / "summary.json").read_text())
    assert list(summary["damaged"]) == [str(damaged)]
    found = summary["completeness"]
    assert (found["planned"], found["recorded"], found["damaged"], found["complete"]) == (
        6, 5, 1, False,
    )  # fmt: skip
    assert f"**{head[0]}**" in (report / "index.md").read_text()
    dcs = pq.read_table(report / "dcs.parquet").to_pandas()
    assert damaged.stem not in set(dcs["trial_id"].astype(str))  # no row of it used
    assert seen not in set(dcs["mp"])

    with pytest.warns(UserWarning, match=str(damaged)):  # what MLflow's sync reads
        verified = read_verified(sweep_dir / "records")
    assert set(verified.damaged) == {damaged}
    assert damaged.stem not in set(verified.table.column("trial_id").to_pylist())
    assert RecordSink(sweep_dir).done() == {p.stem for p in files[1:]}  # resume's view
    # (resume itself: tests/test_reliability_records.py, with this same flip)

    damaged.unlink()  # once set aside (a re-run does it), the folder verifies clean
    assert verify([str(sweep_dir)]) == 0
    assert "verified: every page checksum and digest matches" in capsys.readouterr().out
    assert analyze(argv) == 0  # and the answer still says what it lacks
    assert capsys.readouterr().out.startswith("incomplete: 5 of 6 trainings (1 not recorded)\n")


def test_the_sink_reads_back_what_it_wrote_from_memory_and_a_file_changed_since_from_disk(
    tmp_path: Path,
) -> None:
    """``RecordSink.verified`` (the sweep's end: costs, MLflow, summary) equals a verified
    read of the folder; a file flipped after writing is read from disk, found damaged and
    left out, as every reader does, not taken from memory."""
    space = tmp_path / "flip.yaml"
    space.write_text(SPACE)
    plan = expand(load_space(str(space)))
    sink = RecordSink(tmp_path / "r" / plan.space.name)
    for t in plan.trainings:
        rows = run_trial(t.spec, sweep=plan.space.name, trial_id=t.trial_id, attacks=t.attacks)
        sink.write(t.trial_id, rows)
    disk = read_verified(sink.records_dir)
    mine = sink.verified()
    assert mine.table.num_rows == disk.table.num_rows > 0 and not mine.damaged
    key = ["trial_id", "attack"]
    assert mine.table.sort_by([(k, "ascending") for k in key]).equals(
        disk.table.sort_by([(k, "ascending") for k in key])
    )
    victim = sink.path(plan.trainings[0].trial_id)
    flip_silently(victim)
    with pytest.warns(UserWarning, match="skipping corrupt record file"):
        after = sink.verified()
    assert set(after.damaged) == {victim}
    assert plan.trainings[0].trial_id not in set(after.table.column("trial_id").to_pylist())
