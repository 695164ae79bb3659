"""Compaction of record files into parts: every training read exactly once in every state a
kill can leave, superseded records, checked parts, readers racing a compaction. Real
Parquet files; the kills are real SIGKILLs of a child process at the worst moments."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from analysis.load import read_records
from sweep_engine import compaction
from sweep_engine.parts import save_manifest
from sweep_engine.sink import RecordSink, records_table
from trainables.errors import ConfigError
from trainables.records import RECORD_SCHEMA, Record, records_to_table
from trainables.results import layout
from trainables.results.faults import FAULT_ENV

ROOT = Path(__file__).resolve().parents[1]
KEY = ["trial_id", "attack"]


def records(tid: str, n: int = 3, status: str = "ok", mp: float | None = 0.5) -> list[Record]:
    """A training's rows: its clean row and ``n - 1`` attack rows, some values null."""
    base = Record(
        config_hash=f"c-{tid}",
        dataset="digits",
        n_parties=2,
        partition="agg",
        protocol="fedsgd",
        protocol_params="{}",
        model="mlp2",
        ssl_variant="none",
        aligned_ratio=1.0,
        n_labeled=None,
        seed=7,
        mp=mp,
        rounds=3,
        comm_bytes=1234,
        train_seconds=0.25,
        spec_json=json.dumps({"tid": tid}),
        trial_id=tid,
        status=status,
        error="" if status == "ok" else "boom",
        created_at=datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=UTC),
    )
    attacks = [dataclasses.replace(base, attack=f"a{j}", ap=j / 10) for j in range(1, n)]
    return [base, *attacks]


def rows(table: pa.Table) -> list[tuple]:
    """The records as sorted (trial_id, attack, status, mp) tuples: duplicates show."""
    cols = ["trial_id", "attack", "status", "mp"]
    return sorted(tuple(r[c] for c in cols) for r in table.select(cols).to_pylist())


def expected(items: list[tuple[str, list[Record]]]) -> list[tuple]:
    return rows(records_to_table([r for _, recs in items for r in recs]))


def assert_exactly(sink: RecordSink, items: list[tuple[str, list[Record]]]) -> None:
    """Every reader sees each training's latest records once, and nothing else."""
    want = expected(items)
    assert rows(sink.read()) == want
    frame = read_records(sink.sweep_dir)
    assert rows(pa.Table.from_pandas(frame[["trial_id", "attack", "status", "mp"]])) == want
    ok = {tid for tid, recs in items if recs[0].status == "ok"}
    assert sink.done() == ok
    assert set(sink.statuses()) == {tid for tid, _ in items}


def assert_clean(sink: RecordSink, items: list[tuple[str, list[Record]]]) -> None:
    """After a compaction: parts and the manifest only, every row live, so even a plain
    Parquet reader of the folder sees each record once."""
    names = sorted(p.name for p in sink.records_dir.iterdir())
    assert names[0] == layout.MANIFEST and all(layout.PART_RE.fullmatch(n) for n in names[1:])
    assert rows(pads.dataset(sink.records_dir, format="parquet").to_table()) == expected(items)
    assert sink.bad_files() == {}
    assert_exactly(sink, items)


def child(sweep_dir: Path, code: str, fault: str | None) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with ``sink = RecordSink(sweep_dir)`` in a fresh process."""
    script = child_script(sweep_dir, code)
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    if fault:
        env[FAULT_ENV] = fault
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )


def superseding_state(sweep_dir: Path) -> list[tuple[str, list[Record]]]:
    """A compacted part, one of its trainings (an errored one) recorded again, and new
    single files: the next compaction passes every kill point, retiring the part."""
    sink = RecordSink(sweep_dir)
    first = [(f"t{i}", records(f"t{i}", status="error" if i == 2 else "ok")) for i in range(6)]
    sink.write_many(first)
    sink.compact()
    rerun = ("t2", records("t2", n=4, mp=0.75))
    news = [(f"u{i}", records(f"u{i}", n=1 + i % 3)) for i in range(4)]
    sink.write_many([rerun, *news])
    return [item for item in first if item[0] != "t2"] + [rerun, *news]


@pytest.mark.parametrize("point", [1, 2, 3, 4])
@pytest.mark.parametrize("existing_part", [False, True])
def test_killed_compaction_loses_and_duplicates_nothing(
    tmp_path: Path, point: int, existing_part: bool
) -> None:
    if existing_part:
        items = superseding_state(tmp_path)
    else:
        items = [(f"t{i}", records(f"t{i}", n=1 + i % 4)) for i in range(9)]
        RecordSink(tmp_path).write_many(items)
    proc = child(tmp_path, "sink.compact()", f"kill_during_compaction:{point}")
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    sink = RecordSink(tmp_path)
    on_disk = sorted(p.name for p in sink.records_dir.iterdir())
    if point == 1:  # half a part in a hidden temporary file, nothing else changed
        assert any(n.startswith(".part-") and n.endswith(".tmp") for n in on_disk)
    if point >= 3:  # the manifest names the new part; folded files are leftovers or gone
        assert layout.scan(sink.records_dir).singles == {}
    assert_exactly(sink, items)  # before any cleanup: readers already see each once
    assert sink.bad_files() == {}
    sink.clean_temporaries()
    result = sink.compact()
    assert result.skipped_bad == 0
    assert_clean(sink, items)


def test_compaction_point_count_is_exact(tmp_path: Path) -> None:
    """A fifth point does not exist in one compaction: the child lives, all is clean."""
    items = superseding_state(tmp_path)
    proc = child(tmp_path, "print(sink.compact().parts_retired)", "kill_during_compaction:5")
    assert proc.returncode == 0 and proc.stdout.strip() == "1", proc.stderr
    assert_clean(RecordSink(tmp_path), items)


def test_killed_batch_write_leaves_no_training_half_written(tmp_path: Path) -> None:
    items = [(f"t{i}", records(f"t{i}")) for i in range(5)]
    code = """
    from tests.test_sink_compaction import records
    sink.write_many([(f"t{i}", records(f"t{i}")) for i in range(5)])
    """
    proc = child(tmp_path, code, "kill_during_write:3")
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    sink = RecordSink(tmp_path)
    assert sink.files() == [] and sink.done() == set()  # the batch renames after its writes
    assert sink.clean_temporaries() == 1  # the half-written one; the rest were in memory
    sink.write_many(items)
    sink.compact()
    assert_clean(sink, items)


def test_rerun_supersedes_the_compacted_record(tmp_path: Path) -> None:
    sink = RecordSink(tmp_path)
    sink.write_many([("a", records("a")), ("b", records("b", status="error"))])
    sink.compact()
    assert sink.done() == {"a"}
    sink.write("b", records("b", n=2, mp=0.9))  # the errored training, run again
    entry = next(iter(layout.load_manifest(sink.records_dir).values()))
    assert entry.live == ("a",) and not entry.complete  # b's old rows are dead
    items = [("a", records("a")), ("b", records("b", n=2, mp=0.9))]
    assert_exactly(sink, items)
    sink.compact()
    assert_clean(sink, items)


def test_records_table_equals_records_to_table() -> None:
    recs = records("x", n=4, mp=None) + records("y", n=1, status="error")
    assert records_table(recs).equals(records_to_table(recs))


NEW_COLUMNS = ["ap_chance", "ap_advantage", "ap_advantage_se", "ap_collapse", "mp_se"]


def test_files_from_before_the_chance_columns_read_as_nulls(tmp_path: Path) -> None:
    """A file an older engine wrote (no baseline columns, no digest) is valid, reads with
    nulls there beside new files that carry values, and compacts without losing either."""
    sink = RecordSink(tmp_path)
    sink.records_dir.mkdir(parents=True, exist_ok=True)
    old = records_table(records("old")).drop_columns(NEW_COLUMNS).replace_schema_metadata(None)
    pq.write_table(old, sink.records_dir / "old.parquet")
    scored = [dataclasses.replace(r, ap_advantage=0.25, mp_se=0.01) for r in records("new")]
    sink.write("new", scored)
    assert sink.bad_files() == {}
    for _ in range(2):  # as single files, then folded into a part
        table = sink.read()
        assert table.schema.equals(RECORD_SCHEMA, check_metadata=False)
        by_trial = {t: table.filter(pc.equal(table["trial_id"], t)) for t in ("old", "new")}
        assert by_trial["old"].num_rows == by_trial["new"].num_rows == 3
        for name in NEW_COLUMNS:
            assert by_trial["old"][name].null_count == 3
        assert by_trial["new"]["mp_se"].to_pylist() == [0.01] * 3
        assert by_trial["new"]["ap_advantage"].to_pylist() == [0.25] * 3
        sink.compact()
    assert sink.done() == {"old", "new"}


def test_write_many_refuses_a_training_twice(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="twice"):
        RecordSink(tmp_path).write_many([("a", records("a")), ("a", records("a"))])


def test_maybe_compact_waits_for_the_threshold(tmp_path: Path) -> None:
    sink = RecordSink(tmp_path)
    items = [(f"t{i}", records(f"t{i}")) for i in range(5)]
    sink.write_many(items[:4])
    assert sink.maybe_compact(5) is None and len(sink.files()) == 4
    sink.write_many(items[4:])
    result = sink.maybe_compact(5)
    assert result is not None and result.folded == 5 and result.parts_written == 1
    assert_clean(sink, items)


def test_small_parts_merge_and_big_ones_stay(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(compaction, "SMALL_PART_ROWS", 10)
    sink = RecordSink(tmp_path)
    batches = [[(f"b{k}t{i}", records(f"b{k}t{i}")) for i in range(2)] for k in range(4)]
    for batch in batches:  # 6 rows per batch: the part after two batches is not small
        sink.write_many(batch)
        sink.compact()
    sizes = sorted(e.rows for e in layout.load_manifest(sink.records_dir).values())
    assert sizes == [12, 12]
    assert_clean(sink, [item for batch in batches for item in batch])


def damage_part(sink: RecordSink) -> Path:
    path = next(p for p in sink.files() if layout.is_part(p))
    data = path.read_bytes()
    path.write_bytes(data[:100] + bytes(b ^ 0xFF for b in data[100:108]) + data[108:])
    return path


def test_a_changed_part_is_found_quarantined_and_its_trainings_rerun(tmp_path: Path) -> None:
    sink = RecordSink(tmp_path)
    sink.write_many([("a", records("a")), ("b", records("b"))])
    sink.compact()
    sink.write("c", records("c"))
    path = damage_part(sink)
    assert "sha256" in sink.bad_files()[path]
    with pytest.warns(UserWarning, match="skipping corrupt record file"):
        assert rows(sink.read()) == expected([("c", records("c"))])
    moved = sink.quarantine_bad_files()
    assert len(moved) == 1 and next(iter(moved)).parent == sink.quarantine_dir
    assert layout.load_manifest(sink.records_dir) == {}
    assert sink.done() == {"c"}  # a and b run again


@pytest.mark.parametrize("edit", ["extra_trial", "rows", "missing_file"])
def test_part_not_matching_its_manifest_is_bad(tmp_path: Path, edit: str) -> None:
    sink = RecordSink(tmp_path)
    sink.write_many([("a", records("a")), ("b", records("b"))])
    sink.compact()
    manifest = layout.load_manifest(sink.records_dir)
    name, entry = next(iter(manifest.items()))
    if edit == "extra_trial":
        entry = dataclasses.replace(entry, live=(*entry.live, "ghost"), trials=3)
    elif edit == "rows":
        entry = dataclasses.replace(entry, rows=entry.rows + 1)
    else:
        (sink.records_dir / name).unlink()
    save_manifest(sink.records_dir, {name: entry})
    reason = sink.bad_files()[sink.records_dir / name]
    assert {"extra_trial": "trial_ids", "rows": "rows", "missing_file": "missing"}[edit] in reason
    sink.quarantine_bad_files()
    assert layout.load_manifest(sink.records_dir) == {} and sink.done() == set()


def test_a_corrupt_single_file_is_not_folded(tmp_path: Path) -> None:
    sink = RecordSink(tmp_path)
    sink.write_many([("a", records("a")), ("b", records("b"))])
    bad = sink.path("b")
    bad.write_bytes(bad.read_bytes()[:50])
    result = RecordSink(tmp_path).compact()  # a fresh sink: nothing cached, files checked
    assert result.folded == 1 and result.skipped_bad == 1 and bad.exists()
    assert list(sink.bad_files()) == [bad]


def test_an_unreadable_manifest_stops_readers(tmp_path: Path) -> None:
    sink = RecordSink(tmp_path)
    sink.write_many([("a", records("a"))])
    sink.compact()
    (sink.records_dir / layout.MANIFEST).write_text("{not json")
    with pytest.raises(ConfigError, match="unreadable manifest"):
        sink.done()
    with pytest.raises(ConfigError, match="unreadable manifest"):
        read_records(tmp_path)


def test_readers_racing_compactions_see_each_training_once(tmp_path: Path) -> None:
    """A child writes batches and compacts after each while this process reads: every
    read holds each training it shows complete and once, and never loses one."""
    sink = RecordSink(tmp_path)
    first = [(f"s{i:03d}", records(f"s{i:03d}", n=2)) for i in range(150)]
    sink.write_many(first)
    code = """
    from tests.test_sink_compaction import records
    for k in range(12):
        sink.write_many([(f"k{k}t{i}", records(f"k{k}t{i}", n=2)) for i in range(25)])
        sink.compact()
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", child_script(tmp_path, code)], cwd=ROOT, stderr=subprocess.PIPE
    )
    reads = 0
    while proc.poll() is None or reads < 3:
        table = read_records(tmp_path)[["trial_id", "attack"]]
        assert not table.duplicated().any()
        counts = table["trial_id"].astype(str).value_counts()
        assert (counts == 2).all() and {tid for tid, _ in first} <= set(counts.index)
        reads += 1
    assert proc.wait() == 0, proc.stderr.read() if proc.stderr else ""
    assert len(read_records(tmp_path)) == 2 * (150 + 12 * 25) and reads >= 3


def child_script(sweep_dir: Path, code: str) -> str:
    head = "from pathlib import Path\nfrom sweep_engine.sink import RecordSink\n"
    return head + f"sink = RecordSink(Path({str(sweep_dir)!r}))\n" + textwrap.dedent(code)


def compact_once_after(functions: list, sweep_dir: Path) -> tuple[list, list]:
    """These functions, the first call of any of them followed by a whole compaction of
    ``sweep_dir`` (in another sink, as the driver would): the worst interleaving for a
    reader that called it."""
    fired: list = []

    def wrap(function):
        def wrapped(*args, **kwargs):
            out = function(*args, **kwargs)
            if not fired:
                fired.append(None)  # the compaction itself lists and scans
                fired[0] = RecordSink(sweep_dir).compact()
            return out

        return wrapped

    return [wrap(f) for f in functions], fired


def test_reader_whose_listing_a_compaction_overtakes_loses_nothing(
    tmp_path: Path, monkeypatch
) -> None:
    """A compaction between the reader's listing and its manifest load (in whichever
    order the reader does them): listing first means the manifest holds what vanished."""
    items = [(f"t{i}", records(f"t{i}")) for i in range(6)]
    RecordSink(tmp_path).write_many(items)
    (listdir, load), fired = compact_once_after([os.listdir, layout.load_manifest], tmp_path)
    monkeypatch.setattr(layout.os, "listdir", listdir)
    monkeypatch.setattr(layout, "load_manifest", load)
    assert rows(layout.read_live(tmp_path / "records")) == expected(items)
    assert fired and fired[0].folded == 6


@pytest.mark.parametrize("retired", ["singles", "part"])
def test_reader_whose_files_vanish_scans_again(tmp_path: Path, monkeypatch, retired: str) -> None:
    """Scanned, then a compaction removed the files it was about to read (single files
    folded, or a small part merged): the reader scans again and sees each training once."""
    sink = RecordSink(tmp_path)
    items = [(f"t{i}", records(f"t{i}")) for i in range(6)]
    sink.write_many(items[:3])
    if retired == "part":
        sink.compact()
    sink.write_many(items[3:])
    (scan,), fired = compact_once_after([layout.scan], tmp_path)
    monkeypatch.setattr(layout, "scan", scan)
    assert rows(layout.read_live(tmp_path / "records")) == expected(items)
    assert fired and fired[0].parts_retired == (1 if retired == "part" else 0)


def test_a_big_batch_is_one_part_and_supersedes_like_a_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of ``PART_AT`` trainings or more is written as one part, listed at once: no
    single files, each training read once by every reader. A training of it recorded
    before (an errored one, as a single file or in a part) is read from the new part only,
    and compaction then leaves the folder clean."""
    from sweep_engine import sink as sink_module

    monkeypatch.setattr(sink_module, "PART_AT", 4)
    sink = RecordSink(tmp_path)
    old = [("e1", records("e1", status="error")), ("e2", records("e2", status="error"))]
    sink.write_many(old[:1])  # e1: a single file
    sink.write_many([*old[1:], ("x", records("x"))])
    sink.compact()  # e2: in a part
    sink.write("e1", records("e1", status="error"))  # and a single file again
    again = [(t, records(t, n=2, mp=0.9)) for t in ("e1", "e2")]
    batch = [*again, *[(f"b{i}", records(f"b{i}", n=1 + i % 3)) for i in range(3)]]
    paths = sink.write_many(batch)
    assert len(set(paths)) == 1 and layout.PART_RE.fullmatch(paths[0].name)
    entry = layout.load_manifest(sink.records_dir)[paths[0].name]
    assert entry.live == tuple(t for t, _ in batch) and entry.complete
    items = [("x", records("x")), *batch]
    assert_exactly(sink, items)
    assert (sink.records_dir / "e1.parquet").exists()  # a leftover: nobody reads it
    sink.compact()
    assert_clean(sink, items)


def test_killed_part_write_records_nothing_of_its_batch(tmp_path: Path) -> None:
    """A kill while a big batch's part is written leaves half a part in a temporary file
    and the manifest as it was: none of the batch is recorded, and writing it again works."""
    from sweep_engine.sink import PART_AT

    items = [(f"t{i}", records(f"t{i}", n=1 + i % 3)) for i in range(PART_AT)]
    code = f"""
    from tests.test_sink_compaction import records
    sink.write_many([(f"t{{i}}", records(f"t{{i}}", n=1 + i % 3)) for i in range({PART_AT})])
    """
    proc = child(tmp_path, code, "kill_during_write:1")
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    sink = RecordSink(tmp_path)
    assert sink.files() == [] and sink.done() == set()
    assert sink.clean_temporaries() == 1  # the half-written part
    sink.write_many(items)
    assert_exactly(sink, items)


def test_maybe_compact_merges_parts_once_there_are_parts_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sweep_engine import sink as sink_module

    monkeypatch.setattr(sink_module, "PART_AT", 2)
    monkeypatch.setattr(sink_module, "PARTS_AT", 3)
    sink = RecordSink(tmp_path)
    items: list[tuple[str, list[Record]]] = []
    for k in range(3):
        batch = [(f"p{k}{i}", records(f"p{k}{i}")) for i in range(2)]
        items += batch
        sink.write_many(batch)
        result = sink.maybe_compact(threshold=1000)
        assert (result is None) == (k < 2)  # the third part makes three
    assert len(layout.load_manifest(sink.records_dir)) == 1
    assert_clean(sink, items)
