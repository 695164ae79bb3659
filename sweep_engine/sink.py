"""Records on disk: one Parquet file per training (a batch of ``PART_AT`` or more: one part
file for the batch), written once, atomically, checked on read, and folded into part files
by ``compact`` so a million records are a few files, not 231k.

``<results>/<sweep>/records/<trial_id>.parquet`` is written under a hidden temporary name,
fsynced and renamed into place, so a crash never leaves half a file under a final name and
a re-run never adds a training twice (the file name is the training's id). ``pyarrow``
skips names starting with ``.`` or ``_``: readers never see a temporary file or the
manifest. ``write_many`` writes a pack's trainings so, with one directory fsync.

``compact`` (and ``maybe_compact(threshold)``, which the driver calls after writes) folds
single files into ``part-<hex>.parquet`` files listed in ``records/_parts.json``;
``trainables/results/layout.py`` says why every state a kill can leave is read exactly
once. Every reader here (``done``, ``statuses``, ``files``, ``bad_files``, ``read``) and
``analysis.load.read_records`` understand that layout; after ``compact`` returns, the folder
holds only live rows, so any Parquet reader of it sees each record once.

Each single file carries Parquet page checksums and a digest of its content, checked by
``trainables/results/checks.py`` (``check_file``). A bad file is never read as a result:
``quarantine_bad_files`` (run by the CLI before it decides what to resume) moves it to
``<sweep>/records_quarantine/`` — kept for inspection, never deleted — so its trainings
count as not done and run again; ``read`` skips it with a warning.

Fault injection (tests only, inert unless ``VFLSWEEP_FAULT`` is set) is
``trainables/results/faults.py``: ``kill_during_write`` cuts into ``write_many`` here,
``kill_during_compaction`` into ``compact``, ``disk_full`` into ``_write_durably``.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sweep_engine import compaction, parts
from sweep_engine.compaction import Compaction, conform
from sweep_engine.parts import fsync_dir, in_parallel
from trainables.records import RECORD_FIELDS, RECORD_SCHEMA, Record, spec_array
from trainables.results import faults
from trainables.results.checks import (
    DIGEST_KEY,
    Verified,
    checked,
    digest,
    read_checked,
    read_verified,
)
from trainables.results.layout import (
    PART_RE,
    check_part,
    is_part,
    load_manifest,
    scan,
    training_status,
)

QUARANTINE = "records_quarantine"
CACHE_ROWS = 200_000  # rows of recently written files kept for compaction to fold
# A batch of at least this many trainings is written as one part file, listed in the
# manifest at once (one Parquet encoding and one fsync instead of one per training: 2.4 ms
# a training in the driver for a stack of tiny ones); smaller batches as single files.
PART_AT = 64
# ``maybe_compact`` also compacts when this many part files exist: batches written as
# parts are small parts, which compaction merges.
PARTS_AT = 64


def _with_digest(table: pa.Table) -> pa.Table:
    """The table with its digest in the file's metadata: a changed byte anywhere that
    Parquet's page checksums do not cover (the footer: names, types, offsets) shows."""
    meta = {**(table.schema.metadata or {}), DIGEST_KEY: digest(table).encode()}
    return table.replace_schema_metadata(meta)


def records_table(records: list[Record]) -> pa.Table:
    """Records as one table with exactly RECORD_SCHEMA, built column by column: the same
    table as ``records_to_table`` (a test holds them equal), 20x cheaper for a pack."""
    columns = [
        pa.array([r.label if f.name == "attack_label" else getattr(r, f.name) for r in records],
                 type=f.type)
        for f in RECORD_FIELDS
    ]  # fmt: skip
    columns.append(spec_array([r.spec_json for r in records]))
    return pa.table(columns, schema=RECORD_SCHEMA)


def _stat_key(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def _encode(table: pa.Table) -> pa.Buffer:
    """A record file's bytes: page checksums on, statistics off (a few rows each)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, write_page_checksum=True, write_statistics=False)
    return sink.getvalue()


def _kill_during_write() -> bool:
    return faults.fault_now("kill_during_write")  # tests only


def _write_durably(tmp: Path, data: pa.Buffer) -> None:
    """Write and fsync ``tmp``. A failed write (a full disk: ``ENOSPC``) names no file by
    itself; the error raised here names ``tmp``, so the driver's one ``error:`` line can."""
    try:
        if faults.fault_from("disk_full"):
            faults.write_half_and_fail(data.to_pybytes(), tmp)
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as err:
        if err.filename is not None:
            raise
        raise OSError(err.errno, err.strerror, str(tmp)) from err


class RecordSink:
    """One sweep's ``records/`` folder: the engine's only writer of it, and the readers the
    driver resumes from (which trainings finished, which files are bad)."""

    def __init__(self, sweep_dir: Path) -> None:
        self.sweep_dir = sweep_dir
        self.records_dir = sweep_dir / "records"
        self.quarantine_dir = sweep_dir / QUARANTINE
        self._manifest = parts.ManifestView(self.records_dir)
        # trial_id -> (table, stat of its file) of files this sink wrote, so compaction
        # folds them without reading them back; a changed stat means read and check.
        self._written: dict[str, tuple[pa.Table, tuple[int, int, int]]] = {}
        self._cached_rows = 0
        faults.check()  # a malformed VFLSWEEP_FAULT fails here, before anything runs

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
        for tid, records in items:  # (training, attack label) is what a reader groups on
            labels = [r.label for r in records]
            twice = sorted({x for x in labels if labels.count(x) > 1})
            if twice:
                raise ValueError(f"training {tid}: attack label(s) {twice} on two records")
        if not items:
            return []
        self.records_dir.mkdir(parents=True, exist_ok=True)
        parts.drop_from_manifest(self.records_dir, set(ids), self._manifest)
        batch = records_table([r for _, records in items for r in records])
        if len(items) >= PART_AT:
            return self._write_part(ids, batch)
        staged: list[tuple[str, Path, pa.Table, pa.Buffer]] = []
        offset = 0
        try:
            for tid, records in items:  # encode here; create, write and fsync in parallel
                table = batch.slice(offset, len(records))
                offset += len(records)
                tmp = self.records_dir / f".{tid}.{uuid.uuid4().hex}.tmp"
                if faults.fault_now("kill_during_write"):
                    faults.write_half_and_die(table, tmp)
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

    def _write_part(self, ids: list[str], batch: pa.Table) -> list[Path]:
        """The batch as one part, then the manifest with it: what ``compact`` does with
        single files, without them. A kill before the manifest leaves an orphan nobody
        reads (its trainings run again); after it, the trainings are recorded. A single
        file of one of them (an errored training run again) is then a leftover."""
        ((name, entry),) = compaction.write_parts(
            self.records_dir, [(ids, conform(batch))], _kill_during_write, Compaction()
        )
        fsync_dir(self.records_dir)
        manifest = load_manifest(self.records_dir)
        parts.save_manifest(self.records_dir, {**manifest, name: entry})
        return [self.records_dir / name] * len(ids)

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
        return checked(path)[0]

    def compact(self) -> Compaction:
        """Fold every finished single file into part files (``sweep_engine/compaction.py``)."""
        return compaction.compact(
            self.records_dir, self._load_single, lambda: faults.fault_now("kill_during_compaction")
        )

    def maybe_compact(self, threshold: int) -> Compaction | None:
        """``compact`` when at least ``threshold`` single files or ``PARTS_AT`` part files
        exist (a cheap listing)."""
        if not self.records_dir.is_dir():
            return None
        singles = n_parts = 0
        with os.scandir(self.records_dir) as entries:
            for e in entries:
                if not e.name.endswith(".parquet") or e.name.startswith((".", "_")):
                    continue
                if PART_RE.fullmatch(e.name):
                    n_parts += 1
                else:
                    singles += 1
        return self.compact() if singles >= threshold or n_parts >= PARTS_AT else None

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
            reason = checked(path)[1]
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
            if is_part(path):
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
            manifest = load_manifest(self.records_dir)
            parts.save_manifest(
                self.records_dir, {n: e for n, e in manifest.items() if n not in gone}
            )
        return moved

    def statuses(self) -> dict[str, str]:
        """trial_id -> status of every training with a verified file ("ok", "stopped" or
        "error"); a damaged file's trainings have none (``verified_statuses``)."""
        return self.verified_statuses()[0]

    def verified_statuses(self) -> tuple[dict[str, str], dict[Path, str]]:
        """(trial_id -> status, damaged file -> why) from a verified read of every file
        (``read_verified``): a file that fails its checksums finished nothing."""
        with warnings.catch_warnings():  # the caller names the damaged files
            warnings.simplefilter("ignore")
            verified = read_verified(self.records_dir, ["trial_id", "status"])
        ids = verified.table.column("trial_id").to_pylist()
        rows = verified.table.column("status").to_pylist()
        seen: dict[str, set[str]] = {}
        for tid, status in zip(ids, rows, strict=True):
            seen.setdefault(tid, set()).add(status)
        return {tid: training_status(s) for tid, s in seen.items()}, verified.damaged

    def done(self) -> set[str]:
        """Trainings that finished (stopped early included); an errored training is
        retried by the next run."""
        return {tid for tid, status in self.statuses().items() if status in ("ok", "stopped")}

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

    def verified(self, stacklevel: int = 2) -> Verified:
        """Every record of the sweep as ``read_verified`` gives it, with a file this sink
        wrote and that is unchanged since (same inode, size and modification time, as
        compaction checks) taken from memory instead of read back: after a sweep of 500
        tiny trainings that read was ~1 s. A file changed since is read and checked."""
        return read_verified(self.records_dir, stacklevel=stacklevel + 1, known=self._known)

    def _known(self, trial_id: str, path: Path) -> pa.Table | None:
        hit = self._written.get(trial_id)
        return hit[0] if hit is not None and _stat_key(path) == hit[1] else None

    def read(self) -> pa.Table:
        """All valid records of the sweep as one table with RECORD_SCHEMA; a bad file is
        skipped with a warning naming it (``trainables/results/checks.read_checked``)."""
        return read_checked(self.records_dir, stacklevel=3)
