"""Checking record files, and reading only the good ones.

A file can go bad after it was written (a disk fault, a copy cut short, a hand edit).
Every single file carries Parquet page checksums and a digest of its content
(``DIGEST_KEY`` in its metadata, written by ``sweep_engine/sink.py``); ``check_file``
reads it whole and verifies them, its schema and its ``trial_id``. A part's sha256, row
count and trial_ids are in the manifest (``layout.check_part``). ``read_verified`` reads a
records folder verifying every file and skipping bad ones with a warning that names each:
what the analysis, ``status``, resume and the MLflow sync read (``vflsweep verify`` reports
it). ``layout.read_live`` reads unchecked and is not used for results.

Why here and not in the sink: the analysis reads damaged folders too, and it must not
import the engine that writes them (``trainables/results/__init__.py``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from trainables.records import RECORD_SCHEMA
from trainables.results.layout import (
    PartEntry,
    check_part,
    is_part,
    load_manifest,
    read_sources,
    scan,
)
from trainables.results.migrate import migrate

# what resume and exactly-once rest on; other columns may be missing in files written by
# an older engine (readers fill them with nulls), which does not make a file corrupt.
# Such files carry no digest either: they are checked for readability only.
REQUIRED = ("trial_id", "config_hash", "status")
DIGEST_KEY = b"vflsweep.sha256"


def digest(table: pa.Table) -> str:
    """sha256 of a table's column names, types and values (metadata left out).

    Over Python values, not Arrow buffers: buffer layout (padding, validity bitmaps) may
    differ between the table written and the same table read back. Record files are a few
    rows, so this costs microseconds.
    """
    blob = json.dumps([_types(table.schema), table.to_pylist()], default=str, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _types(schema: pa.Schema) -> list[str]:
    """``name:type`` of each column; formatting Arrow types costs more than hashing a
    record file's rows, and every record file has RECORD_SCHEMA."""
    if schema.equals(RECORD_SCHEMA, check_metadata=False):
        return _RECORD_TYPES
    return [f"{f.name}:{f.type}" for f in schema]


_RECORD_TYPES = [f"{f.name}:{f.type}" for f in RECORD_SCHEMA]


def checked(path: Path) -> tuple[pa.Table | None, str | None]:
    """(table, None) for a valid single record file, (None, why not) otherwise."""
    try:  # ParquetFile, not read_table: no dataset discovery per file (~0.6 ms of ~3)
        with pq.ParquetFile(path, page_checksum_verification=True) as parquet:
            table = parquet.read()
        stored = (table.schema.metadata or {}).get(DIGEST_KEY)
        actual = digest(table).encode()
    except Exception as err:  # a damaged footer can fail anywhere in the decoding
        return None, f"unreadable Parquet ({type(err).__name__}: {str(err)[:200]})"
    if stored is not None and stored != actual:  # None: written before digests existed
        return None, "content does not match its digest (bytes changed after writing)"
    missing = [c for c in REQUIRED if c not in table.column_names]
    if missing:
        return None, f"missing columns {missing}"
    if table.num_rows == 0:
        return None, "no rows"
    ids = set(table.column("trial_id").to_pylist())
    # the sink names a file by its training: one of its files under another name is a copy
    # (it would count a training twice). A file without a digest was not written by this
    # engine's sink (a hand-made or older records file) and may hold many trainings.
    if stored is not None and ids != {path.stem}:
        return None, f"trial_id {sorted(map(str, ids))} does not match the file name {path.stem!r}"
    return table, None


def check_file(path: Path) -> str | None:
    """Why ``path`` is not a valid record file (truncated, corrupt, wrong schema), or None.

    Reads every page with checksum verification: a footer that parses is not enough,
    since a flipped byte inside a data page leaves the footer intact. A part file is
    checked against the manifest beside it.
    """
    if is_part(path):
        entry = load_manifest(path.parent).get(path.name)
        return "not listed in the manifest" if entry is None else check_part(path, entry)
    return checked(path)[1]


class Vanished(Exception):
    """A file disappeared between listing and reading (a compaction ran meanwhile)."""


@dataclass(frozen=True)
class Verified:
    """The live records of a folder whose every byte was verified, and the files that were
    not read because they failed (path -> why): nothing in ``table`` comes from those."""

    table: pa.Table
    damaged: dict[Path, str]
    files: int  # record files looked at, damaged ones included


Known = Callable[[str, Path], "pa.Table | None"]  # (trial_id, its single file) -> its table


def read_verified(
    records_dir: Path,
    columns: list[str] | None = None,
    stacklevel: int = 2,
    known: Known | None = None,
) -> Verified:
    """Every live record of the folder, each file verified before its rows are used.

    A single file is read whole with its page checksums verified and its digest compared
    (``checked``); a part file's sha256 is compared with the manifest's (``check_part``)
    before it is read. Parquet readers verify neither by default: one flipped byte in a data
    page decodes without an error into a different number. A bad file is skipped with a
    warning naming it and returned in ``damaged`` (``python sweep.py`` on the same space
    moves it aside and re-runs its trainings). A file that vanishes while this reads (a
    compaction in the driver) makes it scan the folder again, once. ``stacklevel``: whose
    line the warning names, counted as ``warnings.warn`` does from this function.
    ``known``: the table of a single file the caller wrote and verified itself, when that
    file is unchanged since (``RecordSink.verified``), else None: that file is not read.
    """
    for attempt in range(2):
        try:
            return _read_once(records_dir, columns, attempt == 1, stacklevel + 2, known)
        except Vanished:
            continue
    raise AssertionError("unreachable")


def read_checked(records_dir: Path, stacklevel: int = 2) -> pa.Table:
    """All valid records of the folder as one table with RECORD_SCHEMA (``read_verified``)."""
    return read_verified(records_dir, stacklevel=stacklevel + 1).table


def _read_once(
    records_dir: Path, columns: list[str] | None, last: bool, stacklevel: int, known: Known | None
) -> Verified:
    layout = scan(records_dir)
    wanted = list(columns or RECORD_SCHEMA.names)
    tables: list[pa.Table] = []
    damaged: dict[Path, str] = {}
    for path in sorted(layout.singles.values()):  # loops: a comprehension is a frame of
        table = known(path.stem, path) if known is not None else None  # its own before 3.12
        table, reason = (table, None) if table is not None else checked(path)
        if _ok(path, reason, last, stacklevel, damaged):
            assert table is not None
            tables.append(conform(table, wanted))
    good_parts: list[tuple[Path, PartEntry]] = []
    for path, entry in layout.part_files():
        if _ok(path, check_part(path, entry), last, stacklevel, damaged):
            good_parts.append((path, entry))
    try:
        tables.append(read_sources([], good_parts, wanted))
    except FileNotFoundError as err:
        if last:
            raise
        raise Vanished(err) from err
    files = len(layout.singles) + len(layout.parts)
    return Verified(migrate(pa.concat_tables(tables)), damaged, files)


def conform(table: pa.Table, columns: list[str]) -> pa.Table:
    """``table`` with exactly ``columns`` of RECORD_SCHEMA, in its types and order; a column
    an older engine did not write is null (as ``pyarrow.dataset`` fills it).

    A file this engine wrote has those columns in those types already: it is only
    selected (a cast per column of ~110 was 1.6 ms a file, half of reading it)."""
    if set(columns) <= set(table.column_names):
        picked = table.select(columns).replace_schema_metadata(None)
        if picked.schema.equals(_conformed(tuple(columns))):
            return picked
    arrays = []
    for name in columns:
        kind = RECORD_SCHEMA.field(name).type
        if name in table.column_names:
            arrays.append(table.column(name).cast(kind))
        else:
            arrays.append(pa.nulls(table.num_rows, kind))
    return pa.table(arrays, names=columns)


@functools.cache
def _conformed(columns: tuple[str, ...]) -> pa.Schema:
    """The schema ``conform`` gives ``columns``: RECORD_SCHEMA's types, nullable fields."""
    return pa.schema([pa.field(name, RECORD_SCHEMA.field(name).type) for name in columns])


def _ok(
    path: Path, reason: str | None, last: bool, stacklevel: int, damaged: dict[Path, str]
) -> bool:
    """Whether to read ``path``; a file gone since the listing means scan again,
    unless this is the second scan (then it is skipped like a bad file)."""
    if reason is None:
        return True
    if not path.exists() and not last:
        raise Vanished(path)
    damaged[path] = reason
    warnings.warn(f"skipping corrupt record file {path}: {reason}", stacklevel=stacklevel)
    return False
