"""Records on disk: one Parquet file per training, written once, atomically.

``<results>/<sweep>/records/<trial_id>.parquet`` is written under a hidden temporary name
and renamed into place, so a crash never leaves half a file and a re-run never adds a
training twice (the file name is the training's ``config_hash``). ``pyarrow.dataset``
skips names starting with ``.``, so readers never see a temporary file.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from trainables.records import RECORD_SCHEMA, Record, records_to_table


class RecordSink:
    def __init__(self, sweep_dir: Path) -> None:
        self.sweep_dir = sweep_dir
        self.records_dir = sweep_dir / "records"

    def path(self, trial_id: str) -> Path:
        return self.records_dir / f"{trial_id}.parquet"

    def write(self, trial_id: str, records: list[Record]) -> Path:
        """Write (or replace) the training's file atomically."""
        self.records_dir.mkdir(parents=True, exist_ok=True)
        final = self.path(trial_id)
        tmp = self.records_dir / f".{trial_id}.{uuid.uuid4().hex}.tmp"
        try:
            pq.write_table(records_to_table(records), tmp)
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        return final

    def statuses(self) -> dict[str, str]:
        """trial_id -> status of every training with a file ("ok" or "error")."""
        out: dict[str, str] = {}
        if not self.records_dir.is_dir():
            return out
        for path in self.records_dir.glob("*.parquet"):
            table = pq.read_table(path, columns=["status"])
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
        """All records of the sweep as one table with RECORD_SCHEMA."""
        if not self.records_dir.is_dir():
            return RECORD_SCHEMA.empty_table()
        return pads.dataset(self.records_dir, format="parquet", schema=RECORD_SCHEMA).to_table()
