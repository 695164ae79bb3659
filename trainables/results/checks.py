"""Checking record files, and reading only the good ones.

A file can go bad after it was written (a disk fault, a copy cut short, a hand edit).
Every single file carries Parquet page checksums and a digest of its content
(``DIGEST_KEY`` in its metadata, written by ``sweep_engine/sink.py``); ``check_file``
reads it whole and verifies them, its schema and its ``trial_id``. A part's sha256, row
count and trial_ids are in the manifest (``layout.check_part``). ``read_checked`` reads a
records folder skipping bad files with a warning that names each: what the analysis falls
back to when the fast reader (``layout.read_live``) meets a damaged file, and what the
engine reads before it syncs MLflow or prints its summary.

Why here and not in the sink: the analysis reads damaged folders too, and it must not
import the engine that writes them (``trainables/results/__init__.py``).
"""

from __future__ import annotations

import hashlib
import json
import warnings
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
    try:
        table = pq.read_table(path, page_checksum_verification=True)
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
    if ids != {path.stem}:
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


def read_checked(records_dir: Path, stacklevel: int = 2) -> pa.Table:
    """All valid records of the folder as one table with RECORD_SCHEMA.

    A bad file is skipped with a warning naming it (``python sweep.py`` on the same
    space moves it aside and re-runs its trainings). A file that vanishes while this
    reads (a compaction in the driver) makes it scan the folder again, once.
    ``stacklevel``: whose line the warning names, counted as ``warnings.warn`` does
    from this function (2: its caller).
    """
    for attempt in range(2):
        try:
            return _read_once(records_dir, last=attempt == 1, stacklevel=stacklevel + 2)
        except Vanished:
            continue
    raise AssertionError("unreachable")


def _read_once(records_dir: Path, last: bool, stacklevel: int) -> pa.Table:
    layout = scan(records_dir)
    singles: list[Path] = []
    good_parts: list[tuple[Path, PartEntry]] = []
    for path in sorted(layout.singles.values()):  # loops: a comprehension is a frame of
        if _ok(path, checked(path)[1], last, stacklevel):  # its own before Python 3.12
            singles.append(path)
    for path, entry in layout.part_files():
        if _ok(path, check_part(path, entry), last, stacklevel):
            good_parts.append((path, entry))
    try:
        return read_sources(singles, good_parts, None)
    except FileNotFoundError as err:
        if last:
            raise
        raise Vanished(err) from err


def _ok(path: Path, reason: str | None, last: bool, stacklevel: int) -> bool:
    """Whether to read ``path``; a file gone since the listing means scan again,
    unless this is the second scan (then it is skipped like a bad file)."""
    if reason is None:
        return True
    if not path.exists() and not last:
        raise Vanished(path)
    warnings.warn(f"skipping corrupt record file {path}: {reason}", stacklevel=stacklevel)
    return False
