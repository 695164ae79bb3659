"""The records folder's layout: single files, part files, and the manifest joining them.

``records/<trial_id>.parquet`` holds one training (``RecordSink.write``);
``records/part-<32 hex>.parquet`` holds many (written by ``compact``, or by ``write_many``
for a batch of ``sink.PART_AT`` trainings or more: a compaction without single files);
``records/_parts.json`` (the manifest) names, for each part, its sha256, row count and the
trial_ids *live* in it. Parquet readers skip names starting with ``_`` or ``.``.

One rule makes every state readable: **the manifest wins.** A trial_id live in a part is
read from that part only; a single file is read only when its trial_id is live in no part.
A compaction writes its parts, then the manifest, then removes what it folded, so a kill
anywhere loses and duplicates nothing: before the manifest the new parts are *orphans*
nobody reads; after it the folded single files are *leftovers* nobody reads; the next
compaction removes both. A training recorded again after it was compacted (an errored one
re-run) is first dropped from the manifest, then written as a single file: its old row in
the part is *dead*, skipped by readers and dropped when the part is next rewritten.

Readers list the folder first and load the manifest second: single files are removed only
after the manifest holding them is durable, so one missing from the listing is live in the
manifest read after it. A file can still vanish between listing and reading (a compaction
retiring it while an analysis reads): readers then scan again, once.

This module is the read side, shared by the engine and the analysis; the writers are the
engine's: ``sweep_engine/sink.py`` (single files), ``sweep_engine/compaction.py`` (parts)
and ``sweep_engine/parts.py`` (the manifest).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from trainables.errors import ConfigError
from trainables.records import RECORD_SCHEMA

MANIFEST = "_parts.json"
FORMAT = 1
PART_RE = re.compile(r"part-[0-9a-f]{32}\.parquet")


@dataclass(frozen=True)
class PartEntry:
    """What the manifest knows of one part file."""

    sha256: str  # of the whole file: any changed byte, footer included, shows
    rows: int
    trials: int  # trainings the file holds, live or dead
    live: tuple[str, ...]

    @property
    def complete(self) -> bool:
        """Every row of the file is live (nothing superseded since it was written)."""
        return len(self.live) == self.trials

    def to_json(self) -> dict[str, object]:
        return {"sha256": self.sha256, "rows": self.rows, "trials": self.trials, "live": self.live}

    @classmethod
    def from_json(cls, obj: dict) -> PartEntry:
        return cls(str(obj["sha256"]), int(obj["rows"]), int(obj["trials"]), tuple(obj["live"]))


def is_part(path: Path) -> bool:
    return PART_RE.fullmatch(path.name) is not None


def load_manifest(records_dir: Path) -> dict[str, PartEntry]:
    """part file name -> entry; empty when no compaction ever ran.

    An unreadable manifest stops everything: without it no reader can tell which copy of a
    training is live, and guessing could count a training twice.
    """
    path = records_dir / MANIFEST
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: unreadable manifest of part files ({err})") from err
    if obj.get("format") != FORMAT:
        raise ConfigError(f"{path}: manifest format {obj.get('format')!r}, expected {FORMAT}")
    return {name: PartEntry.from_json(e) for name, e in obj["parts"].items()}


@dataclass(frozen=True)
class Layout:
    """One consistent view of the records folder (listed first, manifest second)."""

    records_dir: Path
    parts: dict[str, PartEntry]  # the manifest
    singles: dict[str, Path]  # trial_id -> single file, for trial_ids live in no part
    leftovers: dict[str, Path]  # single files whose trial_id a part holds: never read
    orphans: list[Path]  # part files the manifest does not list: never read
    owner: dict[str, str] = field(repr=False)  # trial_id -> part name, for live trial_ids

    def part_path(self, name: str) -> Path:
        return self.records_dir / name

    def part_files(self) -> list[tuple[Path, PartEntry]]:
        return [(self.part_path(n), e) for n, e in sorted(self.parts.items())]


def scan(records_dir: Path) -> Layout:
    """List the folder, then load the manifest (the order matters, see the module doc)."""
    names = sorted(os.listdir(records_dir)) if records_dir.is_dir() else []
    parts = load_manifest(records_dir)
    owner = {tid: name for name, entry in parts.items() for tid in entry.live}
    singles, leftovers, orphans = {}, {}, []
    for name in names:
        if name.startswith((".", "_")) or not name.endswith(".parquet"):
            continue
        path = records_dir / name
        if PART_RE.fullmatch(name):
            if name not in parts:
                orphans.append(path)
        elif path.stem in owner:
            leftovers[path.stem] = path
        else:
            singles[path.stem] = path
    return Layout(records_dir, parts, singles, leftovers, orphans, owner)


def read_sources(
    singles: list[Path], parts: list[tuple[Path, PartEntry]], columns: list[str] | None
) -> pa.Table:
    """The live rows of these files as one table with (the chosen columns of) RECORD_SCHEMA."""
    wanted = list(columns or RECORD_SCHEMA.names)
    whole = [str(p) for p in singles] + [str(p) for p, e in parts if e.complete]
    tables = []
    if whole:
        dataset = pads.dataset(whole, format="parquet", schema=RECORD_SCHEMA)
        tables.append(dataset.to_table(columns=wanted))
    for path, entry in parts:
        if not entry.complete:  # drop the rows of trainings recorded again since
            dataset = pads.dataset(str(path), format="parquet", schema=RECORD_SCHEMA)
            live = pads.field("trial_id").isin(list(entry.live))
            tables.append(dataset.to_table(columns=wanted, filter=live))
    if not tables:
        return RECORD_SCHEMA.empty_table().select(wanted)
    return pa.concat_tables(tables)


def read_live(records_dir: Path, columns: list[str] | None = None) -> pa.Table:
    """Every live record of the folder, unchecked (fast); scans again once if a file
    vanished under the reader (a compaction running meanwhile)."""
    for attempt in range(2):
        layout = scan(records_dir)
        try:
            return read_sources(list(layout.singles.values()), layout.part_files(), columns)
        except FileNotFoundError:
            if attempt:
                raise
    raise AssertionError("unreachable")


def training_status(statuses: set[str]) -> str:
    """A training's status from its rows': ``ok``, ``stopped`` (early stopping: one row),
    or ``error`` (any row not ok)."""
    if statuses in ({"ok"}, {"stopped"}):
        return next(iter(statuses))
    return "error"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_part(path: Path, entry: PartEntry) -> str | None:
    """Why a part file is not what the manifest says (missing, changed bytes, schema,
    trial_ids), or None. The sha256 covers every byte, so Parquet page checksums add
    nothing here; the columns read then prove the manifest's trial_ids are in the file."""
    try:
        if file_sha256(path) != entry.sha256:
            return "content does not match the manifest's sha256 (bytes changed after writing)"
        table = pq.read_table(path, columns=["trial_id", "config_hash", "status"])
    except FileNotFoundError:
        return "listed in the manifest but missing"
    except Exception as err:  # a damaged file can fail anywhere in the decoding
        return f"unreadable Parquet ({type(err).__name__}: {str(err)[:200]})"
    if table.num_rows != entry.rows:
        return f"{table.num_rows} rows, the manifest says {entry.rows}"
    ids = set(pc.unique(table.column("trial_id")).to_pylist())
    if len(ids) != entry.trials or not ids.issuperset(entry.live):
        return f"its {len(ids)} trial_ids do not match the manifest's {entry.trials}"
    return None
