"""Records on disk: one Parquet file per training, written once, atomically, checked on read.

``<results>/<sweep>/records/<trial_id>.parquet`` is written under a hidden temporary name,
fsynced and renamed into place, so a crash never leaves half a file under a final name and
a re-run never adds a training twice (the file name is the training's id). ``pyarrow``
skips names starting with ``.``, so readers never see a temporary file.

A file can still go bad after it was written (a disk fault, a copy cut short, a hand
edit). Every file carries Parquet page checksums; ``check_file`` reads it whole and
verifies them, its schema and its ``trial_id``. A bad file is never read as a result:
``quarantine_bad_files`` (run by the CLI before it decides what to resume) moves it to
``<sweep>/records_quarantine/`` — kept for inspection, never deleted — so its training
counts as not done and runs again; ``read`` skips it with a warning naming its path.

Fault injection (tests only, inert unless set): ``VFLSWEEP_FAULT=kill_during_write:N``
makes this process SIGKILL itself in the middle of its N-th record write, after half the
file's bytes reached the temporary file — the worst moment for a crash.
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
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from trainables.errors import ConfigError
from trainables.records import RECORD_SCHEMA, Record, records_to_table

FAULT_ENV = "VFLSWEEP_FAULT"
FAULTS = ("kill_during_write",)
QUARANTINE = "records_quarantine"
# what resume and exactly-once rest on; other columns may be missing in files written by
# an older engine (readers fill them with nulls), which does not make a file corrupt.
# Such files carry no digest either: they are checked for readability only.
REQUIRED = ("trial_id", "config_hash", "status")
DIGEST_KEY = b"vflsweep.sha256"

_writes = 0  # record files this process has written (what the fault counts)


def _fault_at() -> int | None:
    """The write number at which to die, from ``VFLSWEEP_FAULT``; None when unset."""
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
    return int(count)


def digest(table: pa.Table) -> str:
    """sha256 of a table's column names, types and values (metadata left out).

    Over Python values, not Arrow buffers: buffer layout (padding, validity bitmaps) may
    differ between the table written and the same table read back. Record files are a few
    rows, so this costs microseconds.
    """
    types = [f"{f.name}:{f.type}" for f in table.schema]
    blob = json.dumps([types, table.to_pylist()], default=str, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


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


def check_file(path: Path) -> str | None:
    """Why ``path`` is not a valid record file (truncated, corrupt, wrong schema), or None.

    Reads every page with checksum verification: a footer that parses is not enough,
    since a flipped byte inside a data page leaves the footer intact.
    """
    try:
        table = pq.read_table(path, page_checksum_verification=True)
        stored = (table.schema.metadata or {}).get(DIGEST_KEY)
        actual = digest(table).encode()
    except Exception as err:  # a damaged footer can fail anywhere in the decoding
        return f"unreadable Parquet ({type(err).__name__}: {str(err)[:200]})"
    if stored is not None and stored != actual:  # None: written before digests existed
        return "content does not match its digest (bytes changed after writing)"
    missing = [c for c in REQUIRED if c not in table.column_names]
    if missing:
        return f"missing columns {missing}"
    if table.num_rows == 0:
        return "no rows"
    ids = set(table.column("trial_id").to_pylist())
    if ids != {path.stem}:
        return f"trial_id {sorted(map(str, ids))} does not match the file name {path.stem!r}"
    return None


class RecordSink:
    def __init__(self, sweep_dir: Path) -> None:
        self.sweep_dir = sweep_dir
        self.records_dir = sweep_dir / "records"
        self.quarantine_dir = sweep_dir / QUARANTINE
        _fault_at()  # a malformed VFLSWEEP_FAULT fails here, before anything runs

    def path(self, trial_id: str) -> Path:
        return self.records_dir / f"{trial_id}.parquet"

    def write(self, trial_id: str, records: list[Record]) -> Path:
        """Write (or replace) the training's file atomically."""
        global _writes
        self.records_dir.mkdir(parents=True, exist_ok=True)
        final = self.path(trial_id)
        tmp = self.records_dir / f".{trial_id}.{uuid.uuid4().hex}.tmp"
        table = records_to_table(records)
        _writes += 1
        if _writes == _fault_at():
            _write_half_and_die(table, tmp)
        try:
            pq.write_table(
                _with_digest(table), tmp, write_page_checksum=True, write_statistics=False
            )
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, final)
            _fsync_dir(self.records_dir)
        finally:
            tmp.unlink(missing_ok=True)
        return final

    def files(self) -> list[Path]:
        if not self.records_dir.is_dir():
            return []
        return sorted(self.records_dir.glob("[!.]*.parquet"))

    def bad_files(self) -> dict[Path, str]:
        """Every record file that fails ``check_file``, with the reason."""
        out = {}
        for path in self.files():
            reason = check_file(path)
            if reason is not None:
                out[path] = reason
        return out

    def quarantine_bad_files(self) -> dict[Path, str]:
        """Move bad record files aside (never delete them); returns new path -> reason.

        Their trainings then count as not done and run again. Each is reported on stderr.
        """
        moved: dict[Path, str] = {}
        for path, reason in self.bad_files().items():
            self.quarantine_dir.mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y%m%d-%H%M%S")
            target = self.quarantine_dir / f"{path.stem}.{stamp}.{uuid.uuid4().hex[:6]}.parquet"
            os.replace(path, target)
            print(
                f"warning: corrupt record file {path}: {reason}; moved to {target}; "
                "its training will run again",
                file=sys.stderr,
                flush=True,
            )
            moved[target] = reason
        return moved

    def statuses(self) -> dict[str, str]:
        """trial_id -> status of every training with a valid file ("ok" or "error")."""
        out: dict[str, str] = {}
        for path in self.files():
            try:
                table = pq.read_table(path, columns=["status"])
            except (OSError, pa.ArrowException):
                continue  # a bad file is not a finished training
            statuses = set(table.column("status").to_pylist())
            out[path.stem] = "ok" if statuses == {"ok"} else "error"
        return out

    def done(self) -> set[str]:
        """Trainings that finished; an errored training is retried by the next run."""
        return {tid for tid, status in self.statuses().items() if status == "ok"}

    def clean_temporaries(self) -> int:
        """Remove temporary files a killed driver left behind; they never hold a result."""
        removed = 0
        if self.records_dir.is_dir():
            for tmp in self.records_dir.glob(".*.tmp"):
                tmp.unlink(missing_ok=True)
                removed += 1
        return removed

    def read(self) -> pa.Table:
        """All valid records of the sweep as one table with RECORD_SCHEMA.

        A bad file is skipped with a warning naming it (``python sweep.py`` on the same
        space moves it aside and re-runs its training).
        """
        good = []
        for path in self.files():
            reason = check_file(path)
            if reason is not None:
                warnings.warn(f"skipping corrupt record file {path}: {reason}", stacklevel=2)
                continue
            good.append(str(path))
        if not good:
            return RECORD_SCHEMA.empty_table()
        return pads.dataset(good, format="parquet", schema=RECORD_SCHEMA).to_table()


def _fsync_dir(path: Path) -> None:
    """Make a rename durable: a power cut must not bring the old directory entry back."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, obj: object) -> Path:
    """Write ``obj`` as JSON to ``path`` through a temporary name and a rename, so a reader
    sees the old file or the whole new one, never half of it (manifests, study summaries)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "w") as fh:
            json.dump(obj, fh, indent=2, default=str)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
