"""Compaction: fold single record files (and parts with dead or few rows) into new parts.

The steps are ordered so that a kill anywhere leaves a folder every reader reads exactly
once (``trainables/results/layout.py`` gives the rule): write the parts under temporary
names, fsync, rename; write the manifest; only then remove what was folded. Leftovers and
orphans of a killed compaction are removed by the next one. ``fault`` is asked at each of those
moments whether to die there (``VFLSWEEP_FAULT=kill_during_compaction:N``, tests only).
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sweep_engine.parts import fsync_dir, remove_files, save_manifest
from trainables.records import RECORD_SCHEMA
from trainables.results.layout import Layout, PartEntry, check_part, read_sources, scan

SMALL_PART_ROWS = 100_000  # a part below this is merged into the next compaction's part
MAX_PART_ROWS = 500_000  # a new part stops growing at the first training past this


def conform(table: pa.Table) -> pa.Table:
    """A table with exactly RECORD_SCHEMA and no metadata (older files may lack columns)."""
    if table.schema.equals(RECORD_SCHEMA, check_metadata=False):
        return table.replace_schema_metadata(None)
    columns = []
    for f in RECORD_SCHEMA:
        if f.name in table.column_names:
            columns.append(table.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(table.num_rows, f.type))
    return pa.table(columns, schema=RECORD_SCHEMA)


@dataclass
class Compaction:
    """What one ``compact`` did (printed by benchmarks, asserted by tests)."""

    folded: int = 0  # single files folded into parts
    skipped_bad: int = 0  # single files left in place because they fail their check
    parts_written: int = 0
    parts_retired: int = 0  # rewritten (dead or few rows) or fully dead
    removed_leftovers: int = 0
    removed_orphans: int = 0
    rows_written: int = 0
    seconds: float = 0.0


Loader = Callable[[str, Path], pa.Table | None]  # a single file's checked table, or None
Fault = Callable[[], bool]  # True: die at this point (tests only)


def compact(records_dir: Path, load_single: Loader, fault: Fault) -> Compaction:
    """Fold single files (and parts with dead rows or few rows) into new parts."""
    start = time.perf_counter()
    out = Compaction()
    layout = _prune(records_dir, out)
    units: list[tuple[list[str], pa.Table]] = []
    folded: list[Path] = []
    for tid, path in sorted(layout.singles.items()):
        table = load_single(tid, path)
        if table is None:
            out.skipped_bad += 1  # the CLI quarantines it; its training runs again
            continue
        units.append(([tid], conform(table)))
        folded.append(path)
    retire = _to_retire(layout.parts, bool(units))
    for name in retire:
        entry = layout.parts[name]
        if entry.live:
            rows = read_sources([], [(layout.part_path(name), entry)], None)
            units.append((list(entry.live), conform(rows)))
    if not units and not retire:
        out.seconds = time.perf_counter() - start
        return out
    written = {name: entry for name, entry in write_parts(records_dir, units, fault, out)}
    fsync_dir(records_dir)
    _die_if(fault)  # parts in place, manifest not yet: they are orphans
    kept = {n: e for n, e in layout.parts.items() if n not in retire}
    save_manifest(records_dir, {**kept, **written})
    _die_if(fault)  # manifest written, nothing removed: the folded files are leftovers
    doomed = folded + [layout.part_path(n) for n in retire]
    half = len(doomed) // 2
    remove_files(doomed[:half])
    _die_if(fault)  # half removed
    remove_files(doomed[half:])
    fsync_dir(records_dir)
    out.folded, out.parts_retired = len(folded), len(retire)
    out.seconds = time.perf_counter() - start
    return out


def _prune(records_dir: Path, out: Compaction) -> Layout:
    """Remove what no reader reads: orphan parts, and leftovers whose part checks out;
    drop manifest entries whose file is gone (quarantined by a killed driver)."""
    layout = scan(records_dir)
    missing = [n for n in layout.parts if not layout.part_path(n).exists()]
    if missing:
        save_manifest(records_dir, {n: e for n, e in layout.parts.items() if n not in missing})
        layout = scan(records_dir)
    remove_files(layout.orphans)
    out.removed_orphans = len(layout.orphans)
    good: dict[str, bool] = {}
    doomed = []
    for tid, path in layout.leftovers.items():
        name = layout.owner[tid]
        if name not in good:
            good[name] = check_part(layout.part_path(name), layout.parts[name]) is None
        if good[name]:  # a bad part keeps its leftovers: they may be the only good copy
            doomed.append(path)
    remove_files(doomed)
    out.removed_leftovers = len(doomed)
    return scan(records_dir) if out.removed_orphans or out.removed_leftovers else layout


def _to_retire(parts: dict[str, PartEntry], adding: bool) -> list[str]:
    """Parts to rewrite: those with dead rows; small ones when they can merge with
    something (new single files, or another small part)."""
    dead = [n for n, e in parts.items() if not e.complete]
    small = [n for n, e in parts.items() if e.complete and e.rows < SMALL_PART_ROWS]
    if adding or len(small) >= 2:
        return sorted(dead + small)
    return sorted(dead)


def _chunks(units: list[tuple[list[str], pa.Table]]) -> Iterator[list[tuple[list[str], pa.Table]]]:
    chunk: list[tuple[list[str], pa.Table]] = []
    rows = 0
    for unit in units:
        chunk.append(unit)
        rows += unit[1].num_rows
        if rows >= MAX_PART_ROWS:
            yield chunk
            chunk, rows = [], 0
    if chunk:
        yield chunk


def write_parts(
    records_dir: Path, units: list[tuple[list[str], pa.Table]], fault: Fault, out: Compaction
) -> Iterator[tuple[str, PartEntry]]:
    """Each chunk of whole trainings as one part: bytes built in memory (so the sha256 is
    of exactly what is written), then temporary file, fsync, rename. Not yet in the
    manifest: the caller fsyncs the folder and adds them (until then they are orphans)."""
    for chunk in _chunks(units):
        table = pa.concat_tables([t for _, t in chunk]).combine_chunks()
        live = tuple(tid for tids, _ in chunk for tid in tids)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, write_page_checksum=True, write_statistics=False)
        data = sink.getvalue().to_pybytes()
        name = f"part-{uuid.uuid4().hex}.parquet"
        tmp = records_dir / f".{name}.tmp"
        try:
            with open(tmp, "wb") as fh:
                if fault():  # half the part's bytes in its temporary file, then die
                    fh.write(data[: len(data) // 2])
                    fh.flush()
                    os.fsync(fh.fileno())
                    _die()
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, records_dir / name)
        finally:
            tmp.unlink(missing_ok=True)
        out.parts_written += 1
        out.rows_written += table.num_rows
        yield name, PartEntry(hashlib.sha256(data).hexdigest(), table.num_rows, len(live), live)


def _die_if(fault: Fault) -> None:
    if fault():
        _die()


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
