"""Records on disk: one Parquet file per training, written once, atomically, checked on read,
and folded into part files by ``compact`` so a million records are a few files, not 231k.

``<results>/<sweep>/records/<trial_id>.parquet`` is written under a hidden temporary name,
fsynced and renamed into place, so a crash never leaves half a file under a final name and
a re-run never adds a training twice (the file name is the training's id). ``pyarrow``
skips names starting with ``.`` or ``_``: readers never see a temporary file or the
manifest. ``write_many`` writes a pack's trainings so, with one directory fsync.

``compact`` (and ``maybe_compact(threshold)``, which the driver calls after writes) folds
single files into ``part-<hex>.parquet`` files listed in ``records/_parts.json``;
``sweep_engine/parts.py`` says why every state a kill can leave is read exactly once. Every
reader here (``done``, ``statuses``, ``files``, ``bad_files``, ``read``) and
``analysis.load.read_records`` understand that layout; after ``compact`` returns, the folder
holds only live rows, so any Parquet reader of it sees each record once.

A file can still go bad after it was written (a disk fault, a copy cut short, a hand
edit). Every single file carries Parquet page checksums and a digest of its content;
``check_file`` reads it whole and verifies them, its schema and its ``trial_id``. A part's
sha256, row count and trial_ids are in the manifest (``parts.check_part``). A bad file is
never read as a result: ``quarantine_bad_files`` (run by the CLI before it decides what to
resume) moves it to ``<sweep>/records_quarantine/`` — kept for inspection, never deleted —
so its trainings count as not done and run again; ``read`` skips it with a warning.

Fault injection (tests only, inert unless set): ``VFLSWEEP_FAULT=kill_during_write:N``
makes this process SIGKILL itself in the middle of its N-th record write, after half the
file's bytes reached the temporary file. ``kill_during_compaction:N`` kills it at the N-th
point a compaction passes, counted over the process: (1) half a part's bytes in its
temporary file (once per part written), (2) parts in place but no manifest, (3) manifest
written but nothing removed, (4) half the folded files removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
import uuid
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sweep_engine import compaction, parts
from sweep_engine.compaction import Compaction
from sweep_engine.parts import check_part, fsync_dir, in_parallel, read_sources, scan
from sweep_engine.parts import write_json_atomic as write_json_atomic  # its old home
from trainables.errors import ConfigError
from trainables.records import RECORD_SCHEMA, Record

FAULT_ENV = "VFLSWEEP_FAULT"
FAULTS = ("kill_during_write", "kill_during_compaction", "fail_training")  # last: grid.py
QUARANTINE = "records_quarantine"
# what resume and exactly-once rest on; other columns may be missing in files written by
# an older engine (readers fill them with nulls), which does not make a file corrupt.
# Such files carry no digest either: they are checked for readability only.
REQUIRED = ("trial_id", "config_hash", "status")
DIGEST_KEY = b"vflsweep.sha256"
CACHE_ROWS = 200_000  # rows of recently written files kept for compaction to fold

_counts = {name: 0 for name in FAULTS}  # record writes / compaction points of this process


def _fault() -> tuple[str, int] | None:
    """(fault, N) from ``VFLSWEEP_FAULT``; None when unset."""
    value = os.environ.get(FAULT_ENV, "")
    if not value:
        return None
    name, _, count = value.partition(":")
    if name not in FAULTS or not count.isdigit() or int(count) < 1:
        raise ConfigError(
            f"{FAULT_ENV}={value!r} is not valid; allowed: "
            + ", ".join(f"{f}:N (N >= 1)" for f in FAULTS)
            + ", or unset"
        )
    return name, int(count)


def fault_at(name: str) -> int | None:
    """N when ``VFLSWEEP_FAULT`` is ``name:N``, else None."""
    fault = _fault()
    return fault[1] if fault is not None and fault[0] == name else None


def _fault_now(name: str) -> bool:
    """Count one more ``name`` event; True when the fault says to die at this one."""
    _counts[name] += 1
    return _counts[name] == fault_at(name)


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


def _with_digest(table: pa.Table) -> pa.Table:
    """The table with its digest in the file's metadata: a changed byte anywhere that
    Parquet's page checksums do not cover (the footer: names, types, offsets) shows."""
    meta = {**(table.schema.metadata or {}), DIGEST_KEY: digest(table).encode()}
    return table.replace_schema_metadata(meta)


def _write_half_and_die(table: pa.Table, tmp: Path) -> None:
    """Leave a temporary file holding half of a real Parquet file, then die at once."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    data = sink.getvalue().to_pybytes()
    with open(tmp, "wb") as fh:
        fh.write(data[: len(data) // 2])
        fh.flush()
        os.fsync(fh.fileno())
    os.kill(os.getpid(), signal.SIGKILL)


def records_table(records: list[Record]) -> pa.Table:
    """Records as one table with exactly RECORD_SCHEMA, built column by column: the same
    table as ``records_to_table`` (a test holds them equal), 20x cheaper for a pack."""
    columns = [pa.array([getattr(r, f.name) for r in records], type=f.type) for f in RECORD_SCHEMA]
    return pa.table(columns, schema=RECORD_SCHEMA)


def _checked(path: Path) -> tuple[pa.Table | None, str | None]:
    """(table, None) for a valid record file, (None, why not) otherwise."""
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
    if parts.is_part(path):
        entry = parts.load_manifest(path.parent).get(path.name)
        return "not listed in the manifest" if entry is None else check_part(path, entry)
    return _checked(path)[1]


def _stat_key(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def _encode(table: pa.Table) -> pa.Buffer:
    """A record file's bytes: page checksums on, statistics off (a few rows each)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, write_page_checksum=True, write_statistics=False)
    return sink.getvalue()


def _write_durably(tmp: Path, data: pa.Buffer) -> None:
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


class _Vanished(Exception):
    """A file disappeared between listing and reading (a compaction ran meanwhile)."""


class RecordSink:
    def __init__(self, sweep_dir: Path) -> None:
        self.sweep_dir = sweep_dir
        self.records_dir = sweep_dir / "records"
        self.quarantine_dir = sweep_dir / QUARANTINE
        self._manifest = parts.ManifestView(self.records_dir)
        # trial_id -> (table, stat of its file) of files this sink wrote, so compaction
        # folds them without reading them back; a changed stat means read and check.
        self._written: dict[str, tuple[pa.Table, tuple[int, int, int]]] = {}
        self._cached_rows = 0
        _fault()  # a malformed VFLSWEEP_FAULT fails here, before anything runs

    def path(self, trial_id: str) -> Path:
        return self.records_dir / f"{trial_id}.parquet"

    def write(self, trial_id: str, records: list[Record]) -> Path:
        """Write (or replace) the training's file atomically."""
        return self.write_many([(trial_id, records)])[0]

    def write_many(self, items: list[tuple[str, list[Record]]]) -> list[Path]:
        """Write (or replace) several trainings' files: each atomically, all durable when
        this returns. A training already compacted is first dropped from the manifest,
        so its new file supersedes its old rows (one manifest write for the batch)."""
        ids = [tid for tid, _ in items]
        if len(set(ids)) != len(ids):
            raise ValueError(f"a training appears twice in one batch: {sorted(ids)}")
        if not items:
            return []
        self.records_dir.mkdir(parents=True, exist_ok=True)
        parts.drop_from_manifest(self.records_dir, set(ids), self._manifest)
        batch = records_table([r for _, records in items for r in records])
        staged: list[tuple[str, Path, pa.Table, pa.Buffer]] = []
        offset = 0
        try:
            for tid, records in items:  # encode here; create, write and fsync in parallel
                table = batch.slice(offset, len(records))
                offset += len(records)
                tmp = self.records_dir / f".{tid}.{uuid.uuid4().hex}.tmp"
                if _fault_now("kill_during_write"):
                    _write_half_and_die(table, tmp)
                staged.append((tid, tmp, table, _encode(_with_digest(table))))
            in_parallel(_write_durably, [(tmp, data) for _, tmp, _, data in staged])
            for tid, tmp, table, _ in staged:
                os.replace(tmp, self.path(tid))
                self._remember(tid, table)
            fsync_dir(self.records_dir)
        finally:
            for _, tmp, _, _ in staged:
                tmp.unlink(missing_ok=True)
        return [self.path(tid) for tid in ids]

    def _remember(self, trial_id: str, table: pa.Table) -> None:
        old = self._written.pop(trial_id, None)
        self._cached_rows -= old[0].num_rows if old else 0
        self._written[trial_id] = (table, _stat_key(self.path(trial_id)))
        self._cached_rows += table.num_rows
        while self._cached_rows > CACHE_ROWS:  # oldest first; those are read back instead
            dropped, _ = self._written.pop(next(iter(self._written)))
            self._cached_rows -= dropped.num_rows

    def _load_single(self, trial_id: str, path: Path) -> pa.Table | None:
        """A single file's table for compaction: from memory if this sink wrote exactly
        that file, else read and checked (None when bad: it stays for quarantine)."""
        hit = self._written.pop(trial_id, None)
        if hit is not None:
            self._cached_rows -= hit[0].num_rows
            if _stat_key(path) == hit[1]:
                return hit[0]
        return _checked(path)[0]

    def compact(self) -> Compaction:
        """Fold every finished single file into part files (``sweep_engine/compaction.py``)."""
        return compaction.compact(
            self.records_dir, self._load_single, lambda: _fault_now("kill_during_compaction")
        )

    def maybe_compact(self, threshold: int) -> Compaction | None:
        """``compact`` when at least ``threshold`` single files exist (a cheap listing)."""
        if not self.records_dir.is_dir():
            return None
        with os.scandir(self.records_dir) as entries:
            n = sum(
                1
                for e in entries
                if e.name.endswith(".parquet")
                and not e.name.startswith((".", "_"))
                and not parts.PART_RE.fullmatch(e.name)
            )
        return self.compact() if n >= threshold else None

    def files(self) -> list[Path]:
        """The record files readers read: single files of trainings in no part, then the
        parts the manifest lists (leftovers and orphans of a killed compaction are not)."""
        layout = scan(self.records_dir)
        return sorted(layout.singles.values()) + [p for p, _ in layout.part_files()]

    def bad_files(self) -> dict[Path, str]:
        """Every record file that fails its check (``check_file``, ``check_part``)."""
        layout = scan(self.records_dir)
        out = {}
        for path in sorted(layout.singles.values()):
            reason = _checked(path)[1]
            if reason is not None:
                out[path] = reason
        for path, entry in layout.part_files():
            reason = check_part(path, entry)
            if reason is not None:
                out[path] = reason
        return out

    def quarantine_bad_files(self) -> dict[Path, str]:
        """Move bad record files aside (never delete them); returns new path -> reason.

        Their trainings then count as not done and run again. Each is reported on stderr.
        A bad part leaves the manifest after it was moved (a kill between leaves a
        manifest entry without a file, which readers skip and ``compact`` drops).
        """
        moved: dict[Path, str] = {}
        gone: set[str] = set()
        for path, reason in self.bad_files().items():
            self.quarantine_dir.mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y%m%d-%H%M%S")
            target = self.quarantine_dir / f"{path.stem}.{stamp}.{uuid.uuid4().hex[:6]}.parquet"
            if parts.is_part(path):
                gone.add(path.name)
            if path.exists():
                os.replace(path, target)
                moved[target] = reason
            print(
                f"warning: corrupt record file {path}: {reason}; moved to {target}; "
                "its trainings will run again",
                file=sys.stderr,
                flush=True,
            )
        if gone:
            manifest = parts.load_manifest(self.records_dir)
            parts.save_manifest(
                self.records_dir, {n: e for n, e in manifest.items() if n not in gone}
            )
        return moved

    def statuses(self) -> dict[str, str]:
        """trial_id -> status of every training with a valid file ("ok" or "error")."""
        for attempt in range(2):
            layout = scan(self.records_dir)
            present = [(p, e) for p, e in layout.part_files() if p.exists()]
            try:
                out = parts.part_statuses(present)
                out.update(self._single_statuses(layout.singles))
            except (_Vanished, FileNotFoundError):
                if attempt:
                    raise
                continue
            return out
        raise AssertionError("unreachable")

    @staticmethod
    def _single_statuses(singles: dict[str, Path]) -> dict[str, str]:
        out: dict[str, str] = {}
        for tid, path in singles.items():
            try:
                table = pq.read_table(path, columns=["status"])
            except (OSError, pa.ArrowException) as err:
                if isinstance(err, FileNotFoundError):
                    raise _Vanished(path) from err
                continue  # a bad file is not a finished training
            statuses = set(table.column("status").to_pylist())
            out[tid] = "ok" if statuses == {"ok"} else "error"
        return out

    def done(self) -> set[str]:
        """Trainings that finished; an errored training is retried by the next run."""
        return {tid for tid, status in self.statuses().items() if status == "ok"}

    def clean_temporaries(self) -> int:
        """Remove what a killed driver left that never holds a result: temporary files,
        and part files no manifest lists (their rows are still where they came from)."""
        removed = 0
        if self.records_dir.is_dir():
            for tmp in self.records_dir.glob(".*.tmp"):
                tmp.unlink(missing_ok=True)
                removed += 1
            for orphan in scan(self.records_dir).orphans:
                orphan.unlink(missing_ok=True)
                removed += 1
        return removed

    def read(self) -> pa.Table:
        """All valid records of the sweep as one table with RECORD_SCHEMA.

        A bad file is skipped with a warning naming it (``python sweep.py`` on the same
        space moves it aside and re-runs its trainings). A file that vanishes while this
        reads (a compaction in the driver) makes it scan the folder again, once.
        """
        for attempt in range(2):
            try:
                return self._read_checked(last=attempt == 1)
            except _Vanished:
                continue
        raise AssertionError("unreachable")

    def _read_checked(self, last: bool) -> pa.Table:
        layout = scan(self.records_dir)
        singles = [p for p in sorted(layout.singles.values()) if self._ok(p, _checked(p)[1], last)]
        good_parts = [(p, e) for p, e in layout.part_files() if self._ok(p, check_part(p, e), last)]
        try:
            return read_sources(singles, good_parts, None)
        except FileNotFoundError as err:
            if last:
                raise
            raise _Vanished(err) from err

    @staticmethod
    def _ok(path: Path, reason: str | None, last: bool) -> bool:
        """Whether to read ``path``; a file gone since the listing means scan again,
        unless this is the second scan (then it is skipped like a bad file)."""
        if reason is None:
            return True
        if not path.exists() and not last:
            raise _Vanished(path)
        warnings.warn(f"skipping corrupt record file {path}: {reason}", stacklevel=4)
        return False
